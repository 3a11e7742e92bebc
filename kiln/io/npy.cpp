// .npy parsing and writing, .npz writing: the header dict is read with a small strict parser
// (only the three keys numpy writes), sizes are checked before allocation, and the zip writer
// stores entries with their CRC-32 (zlib) as numpy.savez does. uint16/32/64 are widened on
// reading and narrowed, checked, on writing.
#include "kiln/io/npy.h"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "kiln/io/file.h"

namespace kiln::io {
namespace {

constexpr char kRead[] = "read_npy";

struct Header {
  DType dtype = Float32;
  Shape shape;
  NpyUnsigned source = NpyUnsigned::None;  // the file's dtype, when dtype is its widened form
  size_t file_esz = 0;                     // bytes per element in the file
};

// The widened dtype and the file's element size of NumPy's uint16/32/64.
DType widened_dtype(NpyUnsigned u) { return u == NpyUnsigned::U16 ? Int32 : Int64; }
size_t unsigned_size(NpyUnsigned u) {
  return u == NpyUnsigned::U16 ? 2 : u == NpyUnsigned::U32 ? 4 : 8;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
Header parse_header(const std::string& h, const std::string& what, bool widen) {
  Header out;
  auto find_value = [&](const char* key) -> size_t {
    const std::string k = std::string("'") + key + "'";
    size_t p = h.find(k);
    if (p == std::string::npos) fail(kRead, what, ": header has no ", k);
    p = h.find(':', p + k.size());
    if (p == std::string::npos) fail(kRead, what, ": header entry ", k, " has no value");
    ++p;
    while (p < h.size() && h[p] == ' ') ++p;
    return p;
  };
  size_t p = find_value("descr");
  if (p >= h.size() || h[p] != '\'') fail(kRead, what, ": descr is not a string");
  size_t e = h.find('\'', p + 1);
  if (e == std::string::npos) fail(kRead, what, ": unterminated descr");
  const std::string descr = h.substr(p + 1, e - p - 1);
  if (descr == "<f4")
    out.dtype = Float32;
  else if (descr == "<f8")
    out.dtype = Float64;
  else if (descr == "<i8")
    out.dtype = Int64;
  else if (descr == "<i4")
    out.dtype = Int32;
  else if (descr == "|b1")
    out.dtype = Bool;
  else if (descr == "<f2")
    out.dtype = Float16;
  else if (descr == "<i2")
    out.dtype = Int16;
  else if (descr == "|i1")
    out.dtype = Int8;
  else if (descr == "|u1")
    out.dtype = UInt8;
  else if (widen && (descr == "<u2" || descr == "<u4" || descr == "<u8"))
    out.source = descr == "<u2"   ? NpyUnsigned::U16
                 : descr == "<u4" ? NpyUnsigned::U32
                                  : NpyUnsigned::U64;
  else
    fail(kRead, what, ": dtype '", descr, "' is not supported (<f4, <f8, <f2, <i8, <i4, <i2, |i1, ",
         widen ? "|u1, <u2, <u4, <u8, |b1)" : "|u1, |b1)");
  if (out.source != NpyUnsigned::None) out.dtype = widened_dtype(out.source);
  out.file_esz =
      out.source != NpyUnsigned::None ? unsigned_size(out.source) : dtype_size(out.dtype);
  p = find_value("fortran_order");
  if (h.compare(p, 5, "False") != 0)
    fail(kRead, what, ": Fortran-ordered arrays are not supported");
  p = find_value("shape");
  if (p >= h.size() || h[p] != '(') fail(kRead, what, ": shape is not a tuple");
  e = h.find(')', p);
  if (e == std::string::npos) fail(kRead, what, ": unterminated shape");
  std::string dims = h.substr(p + 1, e - p - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    int64_t v = 0;
    size_t digits = 0;
    while (i < dims.size() && dims[i] >= '0' && dims[i] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail(kRead, what, ": dim too large");
      v = v * 10 + (dims[i] - '0');
      ++i, ++digits;
    }
    if (digits == 0) fail(kRead, what, ": bad shape '", dims, "'");
    out.shape.push_back(v);
    if (out.shape.size() > 64) fail(kRead, what, ": more than 64 dims");
  }
  return out;
}

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Little-endian unsigned values of `esz` bytes into int32 (uint16) or int64 (uint32, uint64's
// bits as they are).
void widen_into(Tensor& t, const unsigned char* src, int64_t n, size_t esz) {
  for (int64_t k = 0; k < n; ++k) {
    uint64_t v = 0;
    std::memcpy(&v, src + static_cast<size_t>(k) * esz, esz);  // the host is little-endian
    if (t.dtype() == Int32)
      static_cast<int32_t*>(t.raw_data())[k] = static_cast<int32_t>(v);
    else
      static_cast<int64_t*>(t.raw_data())[k] = static_cast<int64_t>(v);
  }
}

Tensor parse_impl(const void* data, size_t size, const std::string& what, bool widen,
                  NpyUnsigned* source) {
  const auto* b = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(b, "\x93NUMPY", 6) != 0) fail(kRead, what, ": not a .npy file");
  const int major = b[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = b[8] | (size_t(b[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail(kRead, what, ": truncated header");
    hlen = b[8] | (size_t(b[9]) << 8) | (size_t(b[10]) << 16) | (size_t(b[11]) << 24);
    start = 12;
  } else {
    fail(kRead, what, ": format version ", major, " is not supported (1-3)");
  }
  if (hlen > size - start) fail(kRead, what, ": header of ", hlen, " bytes past the file's end");
  Header h = parse_header(std::string(reinterpret_cast<const char*>(b + start), hlen), what, widen);
  const int64_t n = h.shape.numel();  // raises past 2^63
  const size_t avail = size - start - hlen;
  const size_t esz = h.file_esz;
  if (static_cast<uint64_t>(n) > avail / esz || static_cast<size_t>(n) * esz != avail)
    fail(kRead, what, ": shape ", h.shape, " of ",
         h.source != NpyUnsigned::None ? npy_unsigned_name(h.source) : dtype_name(h.dtype),
         " needs ", static_cast<double>(n) * static_cast<double>(esz), " bytes, the file holds ",
         avail);
  if (source) *source = h.source;
  Tensor t = empty(h.shape, h.dtype);
  if (h.source != NpyUnsigned::None)
    widen_into(t, b + start + hlen, n, esz);
  else if (n > 0)
    std::memcpy(t.raw_data(), b + start + hlen, avail);
  if (h.dtype == Bool) {
    auto* p = static_cast<uint8_t*>(t.raw_data());
    for (int64_t k = 0; k < n; ++k) p[k] = p[k] != 0;
  }
  return t;
}

// A .npy image from its descr, shape and data.
std::string npy_image(const char* descr, const Shape& shape_of, const void* data, size_t bytes) {
  std::string shape = "(";
  for (int64_t d : shape_of) shape += std::to_string(d) + ", ";
  if (shape_of.rank() > 1) shape.resize(shape.size() - 2);
  if (shape_of.rank() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string dict =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Data starts at a multiple of 64 bytes, the header ends with a newline (numpy's layout).
  const size_t total = ((10 + dict.size() + 1 + 63) / 64) * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  put_le(out, dict.size(), 2);
  out += dict;
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

}  // namespace

const char* npy_unsigned_name(NpyUnsigned u) {
  switch (u) {
    case NpyUnsigned::U16:
      return "uint16";
    case NpyUnsigned::U32:
      return "uint32";
    case NpyUnsigned::U64:
      return "uint64";
    case NpyUnsigned::None:
      break;
  }
  return "";
}

Tensor parse_npy(const void* data, size_t size, const std::string& what) {
  return parse_impl(data, size, what, false, nullptr);
}

Tensor parse_npy_widened(const void* data, size_t size, const std::string& what,
                         NpyUnsigned* source) {
  return parse_impl(data, size, what, true, source);
}

Tensor read_npy(const std::string& path) {
  const MappedFile bytes(path, kRead);
  return parse_npy(bytes.data(), bytes.size(), path);
}

Tensor read_npy_widened(const std::string& path, NpyUnsigned* source) {
  const MappedFile bytes(path, kRead);
  return parse_npy_widened(bytes.data(), bytes.size(), path, source);
}

std::string npy_bytes(const Tensor& t) {
  if (!t.is_concrete()) fail("write_npy", "the tensor is not concrete");
  Tensor c = t.is_contiguous() ? t : t.clone();
  const char* descr = "";
  switch (c.dtype()) {
    case Float32:
      descr = "<f4";
      break;
    case Float64:
      descr = "<f8";
      break;
    case Int64:
      descr = "<i8";
      break;
    case Int32:
      descr = "<i4";
      break;
    case Bool:
      descr = "|b1";
      break;
    case Float16:
      descr = "<f2";
      break;
    case Int16:
      descr = "<i2";
      break;
    case Int8:
      descr = "|i1";
      break;
    case UInt8:
      descr = "|u1";
      break;
    case DType::BFloat16:
      fail("write_npy", "bfloat16 has no NumPy dtype (shape ", c.shape(),
           "); cast it to float32 first");
  }
  return npy_image(descr, c.shape(), c.raw_data(),
                   static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
}

std::string npy_bytes_unsigned(const Tensor& t, NpyUnsigned as, const std::string& what) {
  if (as == NpyUnsigned::None) return npy_bytes(t);
  if (!t.is_concrete()) fail("write_npy", what, ": the tensor is not concrete");
  if (!is_integral(t.dtype()) || t.dtype() == Bool)
    fail("write_npy", what, ": is ", dtype_name(t.dtype()), "; a ", npy_unsigned_name(as),
         " array is held as an integer tensor");
  const size_t esz = unsigned_size(as);
  const uint64_t max = as == NpyUnsigned::U16 ? 0xFFFF : as == NpyUnsigned::U32 ? 0xFFFFFFFF : 0;
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  std::string raw(v.size() * esz, '\0');
  for (size_t k = 0; k < v.size(); ++k) {
    if (max && (v[k] < 0 || static_cast<uint64_t>(v[k]) > max))
      fail("write_npy", what, ": element ", k, " is ", v[k], ", outside ", npy_unsigned_name(as));
    const uint64_t bits = static_cast<uint64_t>(v[k]);
    std::memcpy(raw.data() + k * esz, &bits, esz);  // .npy '<' data is little-endian, as the host
  }
  const char* descr = as == NpyUnsigned::U16 ? "<u2" : as == NpyUnsigned::U32 ? "<u4" : "<u8";
  return npy_image(descr, t.shape(), raw.data(), raw.size());
}

void write_npy(const std::string& path, const Tensor& t) {
  const std::string b = npy_bytes(t);
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(b.data(), static_cast<std::streamsize>(b.size())))
    fail("write_npy", "cannot write '", path, "'");
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& ts,
               const std::vector<NpyUnsigned>& as) {
  if (!as.empty() && as.size() != ts.size())
    fail("write_npz", "one unsigned dtype per tensor: ", as.size(), " for ", ts.size());
  std::string out, central;
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto& [name, t] = ts[i];
    const std::string file = name + ".npy";
    const std::string data = as.empty() ? npy_bytes(t) : npy_bytes_unsigned(t, as[i], name);
    if (data.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      fail("write_npz", "'", name, "' is too large for a zip without zip64");
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const auto offset = static_cast<uint32_t>(out.size());
    auto header = [&](std::string& s, bool central_dir) {
      put_le(s, central_dir ? 0x02014b50u : 0x04034b50u, 4);
      if (central_dir) put_le(s, 20, 2);  // version made by
      put_le(s, 20, 2);                   // version needed
      put_le(s, 0, 2);                    // flags
      put_le(s, 0, 2);                    // stored
      put_le(s, 0, 2);                    // time
      put_le(s, 0x21, 2);                 // date: 1980-01-01
      put_le(s, crc, 4);
      put_le(s, data.size(), 4);
      put_le(s, data.size(), 4);
      put_le(s, file.size(), 2);
      put_le(s, 0, 2);  // extra
      if (central_dir) {
        put_le(s, 0, 2);  // comment
        put_le(s, 0, 2);  // disk
        put_le(s, 0, 2);  // internal attrs
        put_le(s, 0, 4);  // external attrs
        put_le(s, offset, 4);
      }
      s += file;
    };
    header(out, false);
    out += data;
    header(central, true);
  }
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put_le(out, 0x06054b50u, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, ts.size(), 2);
  put_le(out, ts.size(), 2);
  put_le(out, central.size(), 4);
  put_le(out, cd_offset, 4);
  put_le(out, 0, 2);
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(out.data(), static_cast<std::streamsize>(out.size())))
    fail("write_npz", "cannot write '", path, "'");
}

}  // namespace kiln::io
