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

}  // namespace
