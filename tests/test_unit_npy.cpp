// .npy reading and writing (kiln/io/npy.h): round trips of every dtype, numpy's own layout, and
// truncated, oversized and malformed files refused with kiln::Error.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/io/npy.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

TEST(Npy, RoundTripsEveryDtype) {
  manual_seed(1);
  for (Tensor t : {randn({2, 3}), cast(randn({4}), Float64), randint(-5, 5, {3, 1, 2}),
                   cast(randint(-5, 5, {5}), Int32), gt(randn({2, 2}), 0.0), scalar_tensor(3.5),
                   randn({0, 3}), transpose(randn({3, 2}), 0, 1)}) {
    const std::string b = io::npy_bytes(t);
    EXPECT_EQ((10 + b[8] + (b[9] << 8)) % 64, 0) << "data starts on a 64-byte boundary";
    Tensor r = io::parse_npy(b.data(), b.size());
    ASSERT_EQ(r.dtype(), t.dtype());
    ASSERT_EQ(r.shape(), t.shape());
    EXPECT_EQ(r.to_vector<double>(), t.to_vector<double>());
  }
}

TEST(Npy, ReadsNumpysHeader) {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  h.append(64 - (10 + h.size() + 1) % 64, ' ');
  h += '\n';
  std::string b("\x93NUMPY\x01\x00", 8);
  b += static_cast<char>(h.size());
  b += '\0';
  b += h;
  float v[2] = {1.5f, -2.f};
  b.append(reinterpret_cast<const char*>(v), sizeof v);
  Tensor t = io::parse_npy(b.data(), b.size());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.f}));
}

TEST(Npy, RefusesBadFiles) {
  const std::string b = io::npy_bytes(randn({3, 4}));
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_THROW(io::parse_npy(b.data(), n), Error) << "prefix " << n;
  std::string longer = b + "x";
  EXPECT_THROW(io::parse_npy(longer.data(), longer.size()), Error);
  for (const char* bad : {"'<f2'", "'>f4'", "'<u1'"}) {
    std::string c = b;
    c.replace(c.find("'<f4'"), 5, bad);
    EXPECT_THROW(io::parse_npy(c.data(), c.size()), Error) << bad;
  }
  std::string fortran = b;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_THROW(io::parse_npy(fortran.data(), fortran.size()), Error);
  // A shape far larger than the data: refused before any allocation.
  std::string huge = b;
  huge.replace(huge.find("(3, 4)"), 6, "(9999999999, 99999)");
  try {
    io::parse_npy(huge.data(), huge.size());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[read_npy]", 0), 0u) << e.what();
  }
}

// uint16/32/64 (kiln-run's ONNX inputs of those types): widened on reading, narrowed back and
// checked on writing; parse_npy itself still refuses them.
TEST(Npy, UnsignedWidenedAndNarrowed) {
  using io::NpyUnsigned;
  const Tensor v =
      tensor(std::vector<int64_t>{0, 1, 65535, 4000000000, -1}, {5});  // -1: uint64's max
  struct Case {
    NpyUnsigned u;
    Tensor t;
    DType held;
  };
  for (const Case& c :
       {Case{NpyUnsigned::U16, cast(slice(v, 0, 0, 3), Int32), Int32},
        Case{NpyUnsigned::U32, slice(v, 0, 0, 4), Int64}, Case{NpyUnsigned::U64, v, Int64}}) {
    const std::string b = io::npy_bytes_unsigned(c.t, c.u, "x");
    EXPECT_THROW(io::parse_npy(b.data(), b.size()), Error) << io::npy_unsigned_name(c.u);
    NpyUnsigned source = NpyUnsigned::None;
    Tensor r = io::parse_npy_widened(b.data(), b.size(), "x", &source);
    EXPECT_EQ(source, c.u);
    ASSERT_EQ(r.dtype(), c.held);
    EXPECT_EQ(r.to_vector<int64_t>(), c.t.to_vector<int64_t>()) << io::npy_unsigned_name(c.u);
  }
  // A value that does not fit the narrower dtype is refused, naming the element.
  try {
    io::npy_bytes_unsigned(v, NpyUnsigned::U32, "y");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[write_npy] y: element 4 is -1, outside uint32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(io::npy_bytes_unsigned(randn({2}), NpyUnsigned::U16, "z"), Error);
  NpyUnsigned source = NpyUnsigned::U16;
  const std::string f = io::npy_bytes(randn({2}));
  EXPECT_EQ(io::parse_npy_widened(f.data(), f.size(), "f", &source).dtype(), Float32);
  EXPECT_EQ(source, NpyUnsigned::None);
}

}  // namespace
