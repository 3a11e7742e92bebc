// The reduced dtypes (float16, bfloat16, int8, uint8, int16): conversions bit for bit, PyTorch's
// promotion, casts between every pair, and ops without a native kernel computed in float32 /
// int32 by the dispatcher (eager, Session and jit give one result).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kiln/io/npy.h"
#include "kiln/io/safetensors.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

float f_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const DType kAll[] = {Float32, Float64, Int64, Int32, Bool, Float16, BF16, Int8, UInt8, Int16};

}  // namespace

TEST(DTypeInfo, SizesNamesAndStableCodes) {
  EXPECT_EQ(static_cast<int>(Float32), 0);
  EXPECT_EQ(static_cast<int>(Bool), 4);
  EXPECT_EQ(static_cast<int>(Float16), 5);
  EXPECT_EQ(static_cast<int>(BF16), 6);
  EXPECT_EQ(static_cast<int>(Int8), 7);
  EXPECT_EQ(static_cast<int>(UInt8), 8);
  EXPECT_EQ(static_cast<int>(Int16), 9);
  EXPECT_EQ(dtype_size(Float16), 2u);
  EXPECT_EQ(dtype_size(BF16), 2u);
  EXPECT_EQ(dtype_size(Int8), 1u);
  EXPECT_EQ(dtype_size(UInt8), 1u);
  EXPECT_EQ(dtype_size(Int16), 2u);
  EXPECT_STREQ(dtype_name(BF16), "bfloat16");
  EXPECT_STREQ(dtype_name(Float16), "float16");
  EXPECT_STREQ(dtype_name(UInt8), "uint8");
  EXPECT_TRUE(is_floating(BF16));
  EXPECT_TRUE(is_integral(UInt8));
  EXPECT_FALSE(is_integral(Bool));
}

// Every bit pattern widens to float and narrows back to itself (NaNs stay NaN).
TEST(HalfConversion, EveryBFloat16PatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    BFloat16 h(static_cast<uint16_t>(b), from_bits);
    float f = h;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    ASSERT_EQ(u, b << 16) << b;  // widening is exact: the top half of the float
    BFloat16 back(f);
    if (std::isnan(f))
      ASSERT_TRUE(std::isnan(static_cast<float>(back))) << b;
    else
      ASSERT_EQ(back.x, b) << b;
  }
}

TEST(HalfConversion, EveryFloat16PatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h(static_cast<uint16_t>(b), from_bits);
    float f = h;
    float s = half_bits::half_to_float_scalar(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(s)) << b;
      ASSERT_TRUE(std::isnan(static_cast<float>(Half(f)))) << b;
      ASSERT_TRUE(
          std::isnan(static_cast<float>(Half(half_bits::float_to_half_scalar(f), from_bits))))
          << b;
      continue;
    }
    ASSERT_EQ(f, s) << b;  // the F16C path and the scalar fallback agree
    ASSERT_EQ(Half(f).x, b) << b;
    ASSERT_EQ(half_bits::float_to_half_scalar(f), b) << b;
  }
}

// The scalar fallback rounds as the hardware does on random floats of every magnitude.
TEST(HalfConversion, ScalarNarrowingMatchesHardware) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    float f = f_of_bits(static_cast<uint32_t>(rng()));
    uint16_t hw = Half(f).x, sw = half_bits::float_to_half_scalar(f);
    if (std::isnan(f))
      ASSERT_TRUE((sw & 0x7c00) == 0x7c00 && (sw & 0x3ff) != 0) << f;
    else
      ASSERT_EQ(hw, sw) << f;
  }
}

TEST(HalfConversion, RoundsToNearestEvenAndOverflowsToInf) {
  // bfloat16 keeps 8 mantissa bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  EXPECT_EQ(BFloat16(-0.0f).x, 0x8000);
  // float16: 10 mantissa bits.
  EXPECT_EQ(static_cast<float>(Half(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(static_cast<float>(Half(65504.0f)), 65504.0f);
  EXPECT_EQ(static_cast<float>(Half(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(65520.0f))));
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(-1e10f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::nanf("")))));
  // Subnormals: 2^-24 is the smallest; half of it ties to zero (even), a bit more rounds up.
  EXPECT_EQ(Half(std::ldexp(1.0f, -24)).x, 1);
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).x, 0);
  EXPECT_EQ(Half(std::ldexp(1.5f, -25)).x, 1);
  EXPECT_EQ(Half(3 * std::ldexp(1.0f, -25)).x, 2);  // 1.5 quanta: tie to even 2
}

TEST(DTypePromotion, PyTorchTable) {
  EXPECT_EQ(promote(UInt8, Int8), Int16);
  EXPECT_EQ(promote(Int8, UInt8), Int16);
  EXPECT_EQ(promote(UInt8, Int16), Int16);
  EXPECT_EQ(promote(Int8, Int32), Int32);
  EXPECT_EQ(promote(UInt8, Int64), Int64);
  EXPECT_EQ(promote(Bool, UInt8), UInt8);
  EXPECT_EQ(promote(Float16, BF16), Float32);
  EXPECT_EQ(promote(Float16, Float32), Float32);
  EXPECT_EQ(promote(BF16, Float64), Float64);
  EXPECT_EQ(promote(Int64, Float16), Float16);
  EXPECT_EQ(promote(UInt8, BF16), BF16);
  EXPECT_EQ(promote(Bool, Float16), Float16);
  for (DType a : kAll)
    for (DType b : kAll) EXPECT_EQ(promote(a, b), promote(b, a)) << a << " " << b;
}

// torch.result_type: tensors with dims decide within a category; a 0-d tensor or a host scalar
// only lifts the category (int -> float), never the width; true division gives a float; integer
// sums give int64. The C++ operators follow it, so C++ and Python compute the same dtypes.
TEST(DTypePromotion, ResultTypeByPriority) {
  const Tensor i32 = zeros({3}, Int32), f16 = zeros({3}, Float16), b = zeros({3}, Bool);
  const Tensor f64_0d = scalar_tensor(1, Float64), i64_0d = scalar_tensor(1, Int64);
  EXPECT_EQ(result_type(i32, Scalar(2)), Int32);
  EXPECT_EQ(result_type(i32, Scalar(2.0)), Float32);
  EXPECT_EQ(result_type(b, Scalar(true)), Bool);
  EXPECT_EQ(result_type(b, Scalar(2)), Int64);
  EXPECT_EQ(result_type(f16, Scalar(2.0)), Float16);
  EXPECT_EQ(result_type(i32, i64_0d), Int32);
  EXPECT_EQ(result_type(i32, f64_0d), Float64);
  EXPECT_EQ(result_type(f16, f64_0d), Float16);
  EXPECT_EQ(result_type(i64_0d, f64_0d), Float64);
  EXPECT_EQ(result_type(scalar_tensor(1, Int32), Scalar(2)), Int32);
  EXPECT_EQ(ResultType().add(Scalar(2)).add(Scalar(true)).dtype(), Int64);
  EXPECT_EQ(ResultType().dtype(Int16), Int16);

  EXPECT_EQ((i32 + 2).dtype(), Int32);
  EXPECT_EQ((i32 + 2.0).dtype(), Float32);
  EXPECT_EQ((i32 / 2).dtype(), Float32);
  EXPECT_EQ((i32 / i32).dtype(), Float32);
  EXPECT_EQ((b + true).dtype(), Bool);
  EXPECT_EQ(pow(i32, 2).dtype(), Int32);
  EXPECT_EQ(sum(i32).dtype(), Int64);
  EXPECT_EQ(cumsum(b, 0).dtype(), Int64);
  EXPECT_EQ(cat({i32, f16}).dtype(), Float16);
  const Tensor q =
      div(tensor(std::vector<double>{7, -7}).to(Int64), scalar_tensor(2, Int64), "floor");
  EXPECT_EQ(q.dtype(), Int64);
  EXPECT_EQ(q.to_vector<int64_t>(), (std::vector<int64_t>{3, -4}));
  EXPECT_THROW(b - b, Error);
  // int32 sums past 2^31 do not wrap.
  EXPECT_EQ(sum(full({3}, 1 << 30, Int32)).item<int64_t>(), int64_t(3) << 30);
}

// cast between every pair agrees with going through float64 on values every dtype holds.
TEST(DTypeCast, EveryPair) {
  const std::vector<double> v = {0, 1, 2, 3, 7, 100, 0, 1};
  for (DType a : kAll)
    for (DType b : kAll) {
      Tensor x = tensor(v).to(a);
      Tensor y = x.to(b);
      ASSERT_EQ(y.dtype(), b);
      std::vector<double> got = y.to(Float64).to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) {
        double want = (a == Bool || b == Bool) ? (v[i] != 0) : v[i];
        ASSERT_EQ(got[i], want) << a << " -> " << b << " at " << i;
      }
    }
}

TEST(DTypeCast, RoundsToNearestEvenFromFloat64) {
  Tensor x = tensor(std::vector<double>{1.0 + std::ldexp(1.0, -11), 0.1, 1e6});
  Tensor h = x.to(Float16);
  auto hv = h.to(Float64).to_vector<double>();
  EXPECT_EQ(hv[0], 1.0);
  EXPECT_EQ(hv[1], static_cast<double>(static_cast<float>(Half(0.1f))));
  EXPECT_TRUE(std::isinf(hv[2]));
  // Narrow integers wrap as PyTorch's casts do.
  Tensor i = tensor(std::vector<int64_t>{255, 256, 300, -1}).to(Int8);
  EXPECT_EQ(i.to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 44, -1}));
  Tensor u = tensor(std::vector<int64_t>{-1, 256, 300}).to(UInt8);
  EXPECT_EQ(u.to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{255, 0, 44}));
}

// Ops without a float16 kernel run in float32 and round once, as PyTorch's CPU kernels do.
TEST(DTypeCompute, HalfOpsComputeInFloat32) {
  Tensor a = tensor(std::vector<float>{1.0f, 2.5f, -3.0f, 1000.0f}).to(Float16);
  Tensor b = tensor(std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}).to(Float16);
  Tensor s = a + b;
  EXPECT_EQ(s.dtype(), Float16);
  auto av = a.to(Float32).to_vector<float>(), bv = b.to(Float32).to_vector<float>();
  auto sv = s.to(Float32).to_vector<float>();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(sv[i], static_cast<float>(Half(av[i] + bv[i])));
  Tensor e = exp(b.to(BF16));
  EXPECT_EQ(e.dtype(), BF16);
  auto ev = e.to(Float32).to_vector<float>();
  auto bb = b.to(BF16).to(Float32).to_vector<float>();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(ev[i], static_cast<float>(BFloat16(std::exp(bb[i]))));
  EXPECT_EQ((a + b.to(BF16)).dtype(), Float32);
  EXPECT_EQ((a + tensor(std::vector<int64_t>{1, 2, 3, 4})).dtype(), Float16);
  EXPECT_EQ(sum(a).dtype(), Float16);
  EXPECT_EQ(matmul(a.reshape({2, 2}), a.reshape({2, 2})).dtype(), Float16);
  EXPECT_EQ(lt(a, b).dtype(), Bool);
}

TEST(DTypeCompute, NarrowIntegersWrap) {
  Tensor a = tensor(std::vector<int64_t>{100, -128, 127, 5}).to(Int8);
  Tensor s = a + a;
  EXPECT_EQ(s.dtype(), Int8);
  EXPECT_EQ(s.to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{-56, 0, -2, 10}));
  // An integer scalar keeps int8 and wraps (torch: int8 + 300 is int8); a float one gives float32.
  EXPECT_EQ((a * 3).to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{44, -128, 125, 15}));
  EXPECT_EQ((a + 300).to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{-112, -84, -85, 49}));
  EXPECT_EQ((a * 3.0).dtype(), Float32);
  Tensor u = tensor(std::vector<int64_t>{200, 0}).to(UInt8);
  EXPECT_EQ((u + u).to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{144, 0}));
  EXPECT_EQ((u - 1).to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{199, 255}));
  EXPECT_EQ((u + a.slice(0, 0, 2)).dtype(), Int16);
  // Division with rounding_mode "trunc" divides as integers, wrapping -128 / -1 (true division
  // gives float32, as torch).
  Tensor q = div(a, tensor(std::vector<int64_t>{3, -1, 2, -2}).to(Int8), "trunc");
  EXPECT_EQ(q.dtype(), Int8);
  EXPECT_EQ(q.to(Int64).to_vector<int64_t>(), (std::vector<int64_t>{33, -128, 63, -2}));
}

// A graph and a jitted function give what eager gives on reduced dtypes.
TEST(DTypeCompute, SessionAndJitAgreeWithEager) {
  Tensor x = tensor(std::vector<float>{0.1f, -2.0f, 3.3f, 7.7f}).to(BF16);
  auto f = [](const Tensor& t) { return relu(t * t - 1.0) + t; };
  Tensor want = f(x);
  EXPECT_EQ(want.dtype(), BF16);
  Graph g;
  Tensor p = g.placeholder("x", BF16, {4});
  Tensor y = f(p);
  Session sess(g);
  Tensor got = sess.run(y, {{p, x}});
  EXPECT_EQ(got.dtype(), BF16);
  EXPECT_EQ(got.to(Float32).to_vector<float>(), want.to(Float32).to_vector<float>());
  auto j = jit(f);
  for (int i = 0; i < 3; ++i) {
    Tensor r = j(x);
    EXPECT_EQ(r.dtype(), BF16);
    EXPECT_EQ(r.to(Float32).to_vector<float>(), want.to(Float32).to_vector<float>());
  }
}

TEST(DTypeCompute, FactoriesAndViews) {
  EXPECT_EQ(zeros({3}, Float16).to(Float32).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(ones({2}, BF16).to(Float32).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(full({2}, 0.1, Float16).to(Float32).to_vector<float>()[0],
            static_cast<float>(Half(0.1f)));
  EXPECT_EQ(arange(0, 4, 1, Int8).to(Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(randn({16}, BF16).dtype(), BF16);
  EXPECT_THROW(full({1}, 300, Int8), Error);
  EXPECT_THROW(full({1}, 1e6, Float16), Error);
  Tensor m = arange(0, 6, 1, Float32).reshape({2, 3}).to(Float16);
  Tensor t = m.transpose(0, 1).contiguous();
  EXPECT_EQ(t.dtype(), Float16);
  EXPECT_EQ(t.to(Float32).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor c = cat({m, m}, 0);
  EXPECT_EQ(c.shape(), Shape({4, 3}));
  EXPECT_EQ(c.dtype(), Float16);
  EXPECT_EQ(m.select(1, 2).to(Float32).to_vector<float>(), (std::vector<float>{2, 5}));
}

TEST(DTypeAutograd, HalfLeafGetsItsOwnDtypeGradient) {
  Tensor w = tensor(std::vector<float>{0.5f, -1.0f, 2.0f}).to(BF16).requires_grad_();
  Tensor loss = sum(w * w);
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), BF16);
  EXPECT_EQ(w.grad().to(Float32).to_vector<float>(), (std::vector<float>{1.0f, -2.0f, 4.0f}));
  Tensor v = tensor(std::vector<float>{0.5f, 3.0f}).requires_grad_();
  Tensor h = v.to(Float16);
  sum(h * h).backward();
  EXPECT_EQ(v.grad().dtype(), Float32);
  EXPECT_EQ(v.grad().to_vector<float>(), (std::vector<float>{1.0f, 6.0f}));
}

TEST(DTypeIO, NpyRoundTripsAndRefusesBFloat16) {
  for (DType dt : {Float16, Int8, UInt8, Int16}) {
    Tensor t = tensor(std::vector<double>{1, 2, 3, 100, 0, 7}, {2, 3}).to(dt);
    const std::string b = io::npy_bytes(t);
    Tensor r = io::parse_npy(b.data(), b.size());
    ASSERT_EQ(r.dtype(), dt);
    ASSERT_EQ(r.shape(), t.shape());
    EXPECT_EQ(r.to_vector<double>(), t.to_vector<double>());
    Tensor tt = t.transpose(0, 1);  // a strided view is written in its logical order
    const std::string bt = io::npy_bytes(tt);
    EXPECT_EQ(io::parse_npy(bt.data(), bt.size()).to_vector<double>(), tt.to_vector<double>());
  }
  try {
    io::npy_bytes(ones({2}, BF16));
    FAIL() << "bfloat16 written to .npy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos) << e.what();
  }
}

TEST(DTypeIO, SafetensorsRoundTripsEveryDtype) {
  io::NamedTensors ts;
  for (DType dt : kAll)
    ts.emplace_back(dtype_name(dt), tensor(std::vector<double>{1, 0, 3, 100}).to(dt));
  const std::string path = ::testing::TempDir() + "kiln_dtypes.safetensors";
  io::save_safetensors(path, ts);
  io::NamedTensors back = io::load_safetensors(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.size(), ts.size());
  for (const auto& [name, t] : ts) {
    bool found = false;
    for (const auto& [n2, r] : back)
      if (n2 == name) {
        found = true;
        EXPECT_EQ(r.dtype(), t.dtype()) << name;
        EXPECT_EQ(r.to_vector<double>(), t.to_vector<double>()) << name;
      }
    EXPECT_TRUE(found) << name;
  }
}
