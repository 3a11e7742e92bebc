// IDX reader: magic (0, 0, type, ndims), big-endian dims, then the data.
#include "kiln/io/idx.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

namespace kiln::io {
namespace {

std::vector<unsigned char> read_all(const std::string& path) {
  // A device such as /dev/zero never ends, and gzread of a directory reports "corrupt".
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail("read_idx", "'", path, "' is not a regular file",
         std::filesystem::is_directory(st) ? " (it is a directory)" : "");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail("read_idx", "cannot open '", path, "'");
  std::vector<unsigned char> buf;
  unsigned char chunk[1 << 16];
  for (;;) {
    int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      fail("read_idx", "'", path, "' is corrupt: ", msg);
    }
    if (n == 0) break;
    try {
      buf.insert(buf.end(), chunk, chunk + n);
    } catch (const std::bad_alloc&) {  // a gzip that inflates past memory
      gzclose(f);
      fail("read_idx", "'", path, "' decompresses to more than memory can hold (", buf.size(),
           " bytes read)");
    }
  }
  gzclose(f);
  return buf;
}

}  // namespace

Tensor read_idx(const std::string& path, bool raw) {
  std::vector<unsigned char> b = read_all(path);
  if (b.size() < 4 || b[0] != 0 || b[1] != 0)
    fail("read_idx", "'", path, "' is not an IDX file (bad magic)");
  if (b[2] != 0x08)
    fail("read_idx", "'", path, "': only unsigned-byte IDX data is supported, type 0x", std::hex,
         int(b[2]));
  int nd = b[3];
  if (nd < 1 || nd > 4) fail("read_idx", "'", path, "': unsupported number of dims ", nd);
  if (b.size() < 4 + 4 * static_cast<size_t>(nd))
    fail("read_idx", "'", path, "' is truncated in its header");
  Shape shape;
  size_t off = 4;
  // The element count is formed with an overflow check: four 32-bit dims can exceed 2^63, and
  // the file has to hold that many bytes anyway.
  uint64_t n_bytes = 1;
  bool too_big = false;
  for (int d = 0; d < nd; ++d, off += 4) {
    const int64_t dim = (int64_t(b[off]) << 24) | (int64_t(b[off + 1]) << 16) |
                        (int64_t(b[off + 2]) << 8) | int64_t(b[off + 3]);
    shape.push_back(dim);
    too_big = too_big || __builtin_mul_overflow(n_bytes, static_cast<uint64_t>(dim), &n_bytes);
  }
  if (too_big || n_bytes != b.size() - off)
    fail("read_idx", "'", path, "' is truncated or has trailing data: header says shape ", shape,
         " (", too_big ? std::string("over 2^64") : std::to_string(n_bytes), " bytes), file has ",
         b.size() - off);
  const int64_t n = static_cast<int64_t>(n_bytes);
  // Row length as the product of the other dims: n / rows would divide by zero for 0 rows, and
  // then nothing above has bounded the product.
  int64_t row = 1;
  for (int d = 1; d < nd; ++d)
    if (__builtin_mul_overflow(row, shape[d], &row))
      fail("read_idx", "'", path, "': shape ", shape, " is too large");
  const unsigned char* p = b.data() + off;
  if (raw || nd == 1) {
    Tensor t = empty(shape, Int64);
    int64_t* q = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) q[i] = p[i];
    return t;
  }
  Shape flat{shape[0], row};
  Tensor t = empty(flat, Float32);
  float* q = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<float>(p[i]) / 255.0f;
  return t;
}

FashionMnist load_fashion_mnist(const std::string& dir) {
  FashionMnist d;
  d.train_images = read_idx(dir + "/train-images-idx3-ubyte.gz");
  d.train_labels = read_idx(dir + "/train-labels-idx1-ubyte.gz");
  d.test_images = read_idx(dir + "/t10k-images-idx3-ubyte.gz");
  d.test_labels = read_idx(dir + "/t10k-labels-idx1-ubyte.gz");
  return d;
}

}  // namespace kiln::io
