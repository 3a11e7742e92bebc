// safetensors reader and writer. The JSON header is parsed by a small strict parser for the
// subset the format uses (objects, arrays, strings with escapes, integers), so a malformed or
// hostile header is rejected with a message instead of being half-understood.
#include "kiln/io/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "kiln/io/file.h"

namespace kiln::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

constexpr uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit
constexpr int kMaxDepth = 16;                // the format nests 3 deep; stops stack exhaustion

// ---- JSON subset ---------------------------------------------------------------------------

struct Json {
  enum Kind { Object, Array, String, Int } kind = Int;
  std::string str;
  int64_t num = 0;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
  // Out of line: clang (16) instantiates the members' destructors at the closing brace, where
  // pair<string, Json> is still incomplete (the fuzz targets build this file with clang).
  Json();
  ~Json();
  Json(const Json&);
  Json(Json&&) noexcept;
  Json& operator=(const Json&);
  Json& operator=(Json&&) noexcept;
  const char* kind_name() const {
    static const char* names[] = {"an object", "an array", "a string", "an integer"};
    return names[kind];
  }
};
Json::Json() = default;
Json::~Json() = default;
Json::Json(const Json&) = default;
Json::Json(Json&&) noexcept = default;
Json& Json::operator=(const Json&) = default;
Json& Json::operator=(Json&&) noexcept = default;

class JsonParser {
 public:
  JsonParser(const std::string& path, const char* s, size_t n) : path_(path), s_(s), n_(n) {}

  Json parse_document() {
    skip_ws();
    if (peek() != '{') error("the header must be a JSON object");
    Json v = value(0);
    skip_ws();  // the reference writer pads the header with spaces
    if (i_ != n_) error("unexpected data after the JSON object");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail("load_safetensors", "'", path_, "': malformed JSON header at byte ", i_, ": ", what);
  }
  char peek() const { return i_ < n_ ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip_ws();
    if (i_ >= n_) error(str_cat("expected '", c, "' but the header ended"));
    if (s_[i_] != c) error(str_cat("expected '", c, "', found '", s_[i_], "'"));
    ++i_;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) error("nested too deeply");
    skip_ws();
    if (i_ >= n_) error("expected a value but the header ended");
    char c = s_[i_];
    Json v;
    if (c == '{') {
      v.kind = Json::Object;
      ++i_;
      skip_ws();
      if (peek() == '}') {
        ++i_;
        return v;
      }
      for (;;) {
        skip_ws();
        if (i_ >= n_) error("the header ended inside an object");
        if (peek() != '"') error("expected a string key");
        std::string key = string();
        for (const auto& kv : v.obj)
          if (kv.first == key) error(str_cat("duplicate key \"", key, "\""));
        expect(':');
        v.obj.emplace_back(std::move(key), value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++i_;
      skip_ws();
      if (peek() == ']') {
        ++i_;
        return v;
      }
      for (;;) {
        v.arr.push_back(value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.str = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Int;
      v.num = integer();
      return v;
    }
    error(str_cat("unexpected character '", c,
                  "' (only objects, arrays, strings and integers "
                  "appear in a safetensors header)"));
  }

  int64_t integer() {
    bool neg = peek() == '-';
    if (neg) ++i_;
    if (!(peek() >= '0' && peek() <= '9')) error("expected digits");
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      uint64_t d = static_cast<uint64_t>(s_[i_++] - '0');
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - d) / 10)
        error("integer out of range");
      v = v * 10 + d;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E') error("expected an integer");
    return neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  }

  unsigned hex4() {
    if (n_ - i_ < 4) error("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        error("bad hex digit in \\u escape");
    }
    return v;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= n_) error("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character inside a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ >= n_) error("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // high surrogate: a low one must follow
            if (n_ - i_ < 2 || s_[i_] != '\\' || s_[i_ + 1] != 'u') error("unpaired surrogate");
            i_ += 2;
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) error("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            error("unpaired surrogate");
          }
          put_utf8(out, cp);
          break;
        }
        default:
          error(str_cat("bad escape '\\", e, "'"));
      }
    }
  }

  const std::string& path_;
  const char* s_;
  size_t n_;
  size_t i_ = 0;
};

void json_escape(std::string& out, const std::string& s) {
  out.push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
}

// ---- dtypes ------------------------------------------------------------------------------

const char* st_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Int64:
      return "I64";
    case DType::Int32:
      return "I32";
    case DType::Bool:
      return "BOOL";
    case DType::Float16:
      return "F16";
    case DType::BFloat16:
      return "BF16";
    case DType::Int8:
      return "I8";
    case DType::UInt8:
      return "U8";
    case DType::Int16:
      return "I16";
  }
  return "?";
}

bool st_dtype(const std::string& s, DType& out) {
  for (int c = 0; c < kNumDTypes; ++c) {
    const DType t = static_cast<DType>(c);
    if (s == st_name(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

}  // namespace

// ---- save --------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const char* op = "save_safetensors";
  std::set<std::string> seen;
  std::vector<Tensor> data;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      json_escape(header, k);
      header += ":";
      json_escape(header, v);
    }
    header += "}";
  }
  for (const auto& [name, t0] : tensors) {
    if (name == "__metadata__") fail(op, "'", path, "': \"__metadata__\" is reserved");
    if (!seen.insert(name).second) fail(op, "'", path, "': duplicate tensor name \"", name, "\"");
    if (!t0.defined() || !t0.is_concrete())
      fail(op, "'", path, "': tensor \"", name, "\" must be a concrete tensor");
    data.push_back(t0.is_contiguous() ? t0 : raw_contiguous_copy(t0));
  }
  // The data goes in order of decreasing element size (stable), as the reference writer does,
  // so every tensor starts at a multiple of its element size (readers that map the file
  // straight into typed arrays need that); the header keeps the caller's order.
  std::vector<size_t> data_order(data.size());
  for (size_t i = 0; i < data.size(); ++i) data_order[i] = i;
  std::stable_sort(data_order.begin(), data_order.end(), [&](size_t a, size_t b) {
    return data[a].element_size() > data[b].element_size();
  });
  std::vector<uint64_t> begin(data.size());
  uint64_t offset = 0;
  for (size_t i : data_order) {
    begin[i] = offset;
    offset += static_cast<uint64_t>(data[i].numel()) * data[i].element_size();
  }
  for (size_t i = 0; i < data.size(); ++i) {
    const Tensor& t = data[i];
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (header.size() > 1) header += ",";
    json_escape(header, tensors[i].first);
    header += str_cat(":{\"dtype\":\"", st_name(t.dtype()), "\",\"shape\":[");
    for (int64_t d = 0; d < t.dim(); ++d) header += str_cat(d ? "," : "", t.shape()[d]);
    header += str_cat("],\"data_offsets\":[", begin[i], ",", begin[i] + nbytes, "]}");
  }
  header += "}";
  while (header.size() % 8 != 0) header.push_back(' ');

  const std::string tmp = str_cat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(op, "cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = true;
  unsigned char len[8];
  for (int k = 0; k < 8; ++k)
    len[k] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * k));
  ok = ok && std::fwrite(len, 1, 8, f) == 8;
  ok = ok && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (size_t i : data_order) {
    const Tensor& t = data[i];
    const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
    if (nbytes) ok = ok && std::fwrite(t.raw_data(), 1, nbytes, f) == nbytes;
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail(op, "writing '", tmp, "' failed: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail(op, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
}

// ---- load --------------------------------------------------------------------------------

namespace {

// The header's length, from the file's first 8 bytes (little-endian), checked against the file.
uint64_t header_length(const char* op, const std::string& path, const MappedFile& buf) {
  const uint64_t size = buf.size();
  if (size < 8)
    fail(op, "'", path, "' is truncated: ", size, " bytes, but the header length alone takes 8");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<unsigned char>(buf.data()[k]);
  if (n == 0 || n > kMaxHeader)
    fail(op, "'", path, "': bad header length ", n, " (must be 1..", kMaxHeader, ")");
  if (n > size - 8)
    fail(op, "'", path, "' is truncated or has a bad header length: the header claims ", n,
         " bytes but only ", size - 8, " follow");
  return n;
}

void read_metadata(const char* op, const std::string& path, const Json& v,
                   std::map<std::string, std::string>& metadata) {
  if (v.kind != Json::Object) fail(op, "'", path, "': __metadata__ must be an object");
  for (const auto& [k, mv] : v.obj) {
    if (mv.kind != Json::String)
      fail(op, "'", path, "': __metadata__ value \"", k, "\" must be a string, got ",
           mv.kind_name());
    metadata[k] = mv.str;
  }
}

// One tensor's header entry {dtype, shape, data_offsets}, checked: a known dtype, a shape whose
// bytes are exactly its data's, inside a data section of data_size bytes.
Entry parse_entry(const char* op, const std::string& path, const std::string& name, const Json& v,
                  uint64_t data_size) {
  auto bad = [&](const auto&... what) {
    fail(op, "'", path, "': tensor \"", name, "\": ", what...);
  };
  if (v.kind != Json::Object) bad("entry must be an object, got ", v.kind_name());
  const Json *dt = nullptr, *shape = nullptr, *offs = nullptr;
  for (const auto& [k, fv] : v.obj) {
    if (k == "dtype")
      dt = &fv;
    else if (k == "shape")
      shape = &fv;
    else if (k == "data_offsets")
      offs = &fv;
    else
      bad("unknown field \"", k, "\"");
  }
  if (!dt || !shape || !offs) bad("needs dtype, shape and data_offsets");
  Entry e{name, Float32, {}, 0, 0};
  if (dt->kind != Json::String) bad("dtype must be a string");
  if (!st_dtype(dt->str, e.dtype))
    bad("unsupported dtype \"", dt->str,
        "\" (Kiln reads F32, F64, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  if (shape->kind != Json::Array) bad("shape must be an array");
  uint64_t numel = 1;
  for (const Json& d : shape->arr) {
    if (d.kind != Json::Int || d.num < 0) bad("shape entries must be non-negative integers");
    // Overflow-safe: a product past the file size is already wrong.
    if (d.num != 0 && numel > (uint64_t(1) << 62) / static_cast<uint64_t>(d.num))
      bad("shape is too large");
    numel *= static_cast<uint64_t>(d.num);
    e.shape.push_back(d.num);
  }
  if (offs->kind != Json::Array || offs->arr.size() != 2 || offs->arr[0].kind != Json::Int ||
      offs->arr[1].kind != Json::Int || offs->arr[0].num < 0 || offs->arr[1].num < 0)
    bad("data_offsets must be two non-negative integers [begin, end]");
  e.begin = static_cast<uint64_t>(offs->arr[0].num);
  e.end = static_cast<uint64_t>(offs->arr[1].num);
  if (e.end < e.begin) bad("data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end > data_size)
    bad("data_offsets [", e.begin, ", ", e.end, "] run past the data section (", data_size,
        " bytes; is the file truncated?)");
  // numel <= 2^62 but numel * 8 can pass 2^64 and wrap to a small count.
  if (numel > (uint64_t(1) << 62) / dtype_size(e.dtype)) bad("shape ", e.shape, " is too large");
  const uint64_t need = numel * dtype_size(e.dtype);
  if (e.end - e.begin != need)
    bad("shape ", e.shape, " of ", dt->str, " needs ", need, " bytes but data_offsets [", e.begin,
        ", ", e.end, "] hold ", e.end - e.begin);
  return e;
}

// No two tensors' data may share bytes.
void check_no_overlap(const char* op, const std::string& path, const std::vector<Entry>& entries) {
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      fail(op, "'", path, "': tensors \"", by_offset[i - 1]->name, "\" [", by_offset[i - 1]->begin,
           ", ", by_offset[i - 1]->end, ") and \"", by_offset[i]->name, "\" [", by_offset[i]->begin,
           ", ", by_offset[i]->end, ") overlap");
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  const char* op = "load_safetensors";
  // MappedFile refuses what is not a regular file: a directory, /dev/zero, a FIFO.
  const MappedFile buf(path, op);
  const uint64_t n = header_length(op, path, buf);
  Json root = JsonParser(path, buf.data() + 8, n).parse_document();
  const uint64_t data_size = buf.size() - 8 - n;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : root.obj) {
    if (name == "__metadata__")
      read_metadata(op, path, v, out.metadata);
    else
      entries.push_back(parse_entry(op, path, name, v, data_size));
  }
  check_no_overlap(op, path, entries);
  const char* base = buf.data() + 8 + n;
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), base + e.begin, e.end - e.begin);
    if (e.dtype == Bool) {  // any other byte would be an invalid C++ bool
      auto* p = static_cast<unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

NamedTensors load_safetensors(const std::string& path) { return read_safetensors(path).tensors; }

}  // namespace kiln::io
