// Runs every OpSample: forward vs the float64 reference (in float64 and float32), gradcheck on
// contiguous, non-contiguous and (where the sample broadcasts) broadcast layouts, and fails
// when a registered op has no sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "samples/op_samples.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

std::vector<Tensor> to32(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const auto& t : in) out.push_back(t.dtype() == Float64 ? t.to(Float32) : t);
  return out;
}

// Stores each chosen input transposed in memory and transposes it back: same values,
// non-contiguous strides.
std::vector<Tensor> noncontig(const OpSample& s, const std::vector<Tensor>& in) {
  std::vector<Tensor> out = in;
  for (size_t k = 0; k < in.size(); ++k) {
    bool chosen = s.noncontig_inputs.empty()
                      ? (is_floating(in[k].dtype()) && in[k].dim() >= 2)
                      : std::find(s.noncontig_inputs.begin(), s.noncontig_inputs.end(),
                                  static_cast<int>(k)) != s.noncontig_inputs.end();
    if (!chosen || in[k].dim() < 2) continue;
    Tensor t = in[k].transpose(-1, -2).contiguous().transpose(-1, -2);
    out[k] = t;
  }
  return out;
}

std::string compare(const Tensor& got, const Tensor& want, double tol) {
  if (got.shape() != want.shape())
    return "shape " + got.shape().str() + " vs reference " + want.shape().str();
  auto g = got.to_vector<double>();
  auto w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    double err = std::fabs(g[i] - w[i]);
    if (!(err <= tol * (1 + std::fabs(w[i]))))
      return "element " + std::to_string(i) + ": got " + std::to_string(g[i]) + ", reference " +
             std::to_string(w[i]);
  }
  return "";
}

class OpSampleTest : public ::testing::TestWithParam<size_t> {};

TEST_P(OpSampleTest, ForwardFloat64) {
  const OpSample& s = sample_registry()[GetParam()];
  auto in = s.inputs();
  Tensor out = s.run(in);
  if (s.reference) {
    EXPECT_EQ(compare(out, s.reference(in), 1e-10), "");
  }
  if (s.check) {
    EXPECT_EQ(s.check(in, out), "");
  }
}

TEST_P(OpSampleTest, ForwardFloat32) {
  const OpSample& s = sample_registry()[GetParam()];
  auto in = s.inputs();
  Tensor out = s.run(to32(in));
  if (is_floating(out.dtype())) {
    EXPECT_EQ(out.dtype(), Float32);
  }
  if (s.reference) {
    EXPECT_EQ(compare(out, s.reference(in), s.tol32), "");
  }
  if (s.check) {
    EXPECT_EQ(s.check(to32(in), out), "");
  }
}

TEST_P(OpSampleTest, NonContiguousForward) {
  const OpSample& s = sample_registry()[GetParam()];
  auto in = s.inputs();
  auto nc = noncontig(s, in);
  Tensor a = s.run(in), b = s.run(nc);
  if (s.reference) {
    EXPECT_EQ(compare(b, s.reference(in), 1e-10), "");
  } else {
    EXPECT_EQ(a.shape(), b.shape());
  }
}

TEST_P(OpSampleTest, Gradcheck) {
  const OpSample& s = sample_registry()[GetParam()];
  if (!s.differentiable) GTEST_SKIP() << "not differentiable";
  auto in = s.inputs();
  auto r = gradcheck([&](const std::vector<Tensor>& xs) { return s.run(xs); }, in, 1e-6, s.gc_atol,
                     s.gc_rtol);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST_P(OpSampleTest, GradcheckNonContiguous) {
  const OpSample& s = sample_registry()[GetParam()];
  if (!s.differentiable) GTEST_SKIP() << "not differentiable";
  auto in = s.inputs();
  // The layout is rebuilt inside fn so that gradcheck's float64 copies keep the strides.
  auto r = gradcheck(
      [&](const std::vector<Tensor>& xs) {
        auto nc = noncontig(s, xs);
        for (size_t k = 0; k < nc.size(); ++k)
          if (xs[k].dim() >= 2 && is_floating(xs[k].dtype()) && !nc[k].is_same(xs[k])) {
            EXPECT_FALSE(nc[k].is_contiguous());
          }
        return s.run(nc);
      },
      in, 1e-6, s.gc_atol, s.gc_rtol);
  EXPECT_TRUE(r.ok) << r.message;
}

// Broadcast layout: for elementwise ops, each floating input of rank >= 1 is replaced by its first
// slice along dim 0, expanded back inside fn (stride 0), so every op reads a broadcast view and
// its gradient must sum over the broadcast dim.
TEST_P(OpSampleTest, GradcheckBroadcastLayout) {
  const OpSample& s = sample_registry()[GetParam()];
  const OpDef* op = OpRegistry::get().find(s.ops[0]);
  if (!s.differentiable || !op || !op->has(kElementwise)) {
    GTEST_SKIP() << "not a differentiable elementwise op (broadcast cases are samples)";
  }
  auto in = s.inputs();
  std::vector<Shape> full_shapes;
  std::vector<Tensor> small = in;
  bool any = false;
  for (size_t k = 0; k < in.size(); ++k) {
    full_shapes.push_back(in[k].shape());
    if (is_floating(in[k].dtype()) && in[k].dim() >= 1 && in[k].size(0) > 1) {
      small[k] = in[k].narrow(0, 0, 1).contiguous();
      any = true;
    }
  }
  if (!any) GTEST_SKIP() << "no input with a leading dim to broadcast";
  auto r = gradcheck(
      [&](const std::vector<Tensor>& xs) {
        std::vector<Tensor> b = xs;
        for (size_t k = 0; k < xs.size(); ++k)
          if (xs[k].shape() != full_shapes[k]) {
            b[k] = xs[k].expand(full_shapes[k]);
            EXPECT_EQ(b[k].stride(0), 0);
          }
        return s.run(b);
      },
      small, 1e-6, s.gc_atol, s.gc_rtol);
  EXPECT_TRUE(r.ok) << r.message;
}

std::string sample_name(const ::testing::TestParamInfo<size_t>& info) {
  const OpSample& s = sample_registry()[info.param];
  std::string n = s.ops[0] + "_" + s.name + "_" + std::to_string(info.param);
  for (auto& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::vector<size_t> all_samples() {
  std::vector<size_t> v;
  for (size_t i = 0; i < sample_registry().size(); ++i) v.push_back(i);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpSampleTest, ::testing::ValuesIn(all_samples()), sample_name);

TEST(Registry, EveryOpHasASample) {
  std::set<std::string> covered;
  for (const auto& s : sample_registry())
    for (const auto& o : s.ops) covered.insert(o);
  std::vector<std::string> missing;
  for (const OpDef* d : OpRegistry::get().all())
    if (!covered.count(d->name)) missing.push_back(d->name);
  std::string m;
  for (auto& x : missing) m += x + " ";
  EXPECT_TRUE(missing.empty()) << "ops without a test sample: " << m;
}

TEST(Registry, SamplesNameRegisteredOps) {
  for (const auto& s : sample_registry())
    for (const auto& o : s.ops)
      EXPECT_NE(OpRegistry::get().find(o), nullptr) << "sample names unknown op " << o;
}

TEST(Registry, DifferentiableSamplesCoverBroadcast) {
  // Every binary elementwise op has a broadcast case among its samples.
  std::set<std::string> bc;
  for (const auto& s : sample_registry())
    if (s.name.find("broadcast") != std::string::npos)
      for (const auto& o : s.ops) bc.insert(o);
  for (const OpDef* d : OpRegistry::get().all())
    if (d->has(kElementwise) && d->num_inputs >= 2 && d->grad) {
      EXPECT_TRUE(bc.count(d->name)) << d->name << " has no broadcast sample";
    }
}

}  // namespace
