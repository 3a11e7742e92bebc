// External weights: the writer lays the initializers out as a safetensors file (header, then the
// data by decreasing element size, as the reference writer does) and points each TensorProto at
// its absolute byte range; the reader resolves and confines the path, checks every number against
// the tensor and the safetensors header, and only then reads the bytes.
#include "kiln/onnx/external_data.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>

#include "kiln/core/tensor.h"
#include "kiln/io/safetensors.h"

namespace kiln::onnx::detail {
namespace fs = std::filesystem;
namespace {

struct EType {
  DType dtype;
  const char* st;  // safetensors' name
};

bool etype_of(int32_t t, EType& out) {
  switch (t) {
    case ::onnx::TensorProto::FLOAT:
      out = {Float32, "F32"};
      return true;
    case ::onnx::TensorProto::DOUBLE:
      out = {Float64, "F64"};
      return true;
    case ::onnx::TensorProto::INT64:
      out = {Int64, "I64"};
      return true;
    case ::onnx::TensorProto::INT32:
      out = {Int32, "I32"};
      return true;
    case ::onnx::TensorProto::BOOL:
      out = {Bool, "BOOL"};
      return true;
    case ::onnx::TensorProto::FLOAT16:
      out = {Float16, "F16"};
      return true;
    case ::onnx::TensorProto::BFLOAT16:
      out = {BF16, "BF16"};
      return true;
    case ::onnx::TensorProto::INT8:
      out = {Int8, "I8"};
      return true;
    case ::onnx::TensorProto::UINT8:
      out = {UInt8, "U8"};
      return true;
    case ::onnx::TensorProto::INT16:
      out = {Int16, "I16"};
      return true;
    default:
      return false;
  }
}

void json_escape(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// A relative path with no ".." component and no root: what a location or a file option may be.
bool confined_name(const std::string& s) {
  if (s.empty() || s.find('\0') != std::string::npos) return false;
  const fs::path p(s);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

fs::path model_dir(const std::string& model_path) {
  fs::path d = fs::path(model_path).parent_path();
  return d.empty() ? fs::path(".") : d;
}

uint64_t parse_u64(const char* op, const std::string& what, const std::string& v) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    fail(op, what, ": '", v, "' is not a byte count");
  return std::stoull(v);
}

// One external file as read once for all the initializers that point into it.
struct ExtFile {
  fs::path path;
  uint64_t size = 0;
  bool safetensors = false;
  uint64_t data_start = 0;  // 8 + header length, for safetensors
  std::map<std::string, Tensor> entries;
};

// An initializer the writer moves out: where its bytes start in the data section.
struct OutItem {
  ::onnx::TensorProto* p;
  EType et;
  uint64_t begin = 0;
};

std::vector<OutItem> external_candidates(::onnx::GraphProto& g, int64_t min_bytes) {
  std::vector<OutItem> items;
  for (auto& init : *g.mutable_initializer()) {
    EType et{};
    if (!init.has_raw_data() || !etype_of(init.data_type(), et)) continue;
    if (static_cast<int64_t>(init.raw_data().size()) < min_bytes) continue;
    if (init.name().empty() || init.name() == "__metadata__") continue;
    items.push_back({&init, et, 0});
  }
  return items;
}

// Data by decreasing element size (stable), so each tensor starts at a multiple of its element
// size (readers that map the file into typed arrays need that); the header keeps graph order.
// Sets each item's begin and returns the order the data is written in.
std::vector<size_t> lay_out_by_element_size(std::vector<OutItem>& items) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(items[a].et.dtype) > dtype_size(items[b].et.dtype);
  });
  uint64_t off = 0;
  for (size_t i : order) {
    items[i].begin = off;
    off += items[i].p->raw_data().size();
  }
  return order;
}

// The safetensors JSON header, padded to a multiple of 8 as the reference writer does.
std::string safetensors_header(const std::vector<OutItem>& items) {
  std::string header = "{";
  for (const auto& it : items) {
    if (header.size() > 1) header += ",";
    json_escape(header, it.p->name());
    header += str_cat(":{\"dtype\":\"", it.et.st, "\",\"shape\":[");
    for (int k = 0; k < it.p->dims_size(); ++k) header += str_cat(k ? "," : "", it.p->dims(k));
    header +=
        str_cat("],\"data_offsets\":[", it.begin, ",", it.begin + it.p->raw_data().size(), "]}");
  }
  header += "}";
  while (header.size() % 8 != 0) header.push_back(' ');
  return header;
}

// Written to a temporary name and renamed, so a failed write never leaves a half file under the
// name the model points at.
void write_safetensors_file(const fs::path& target, const std::string& header,
                            const std::vector<OutItem>& items, const std::vector<size_t>& order,
                            const char* op) {
  const std::string tmp = str_cat(target.string(), ".tmp.", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) fail(op, "cannot create '", tmp, "'");
    unsigned char len[8];
    for (int k = 0; k < 8; ++k)
      len[k] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * k));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (size_t i : order) {
      const std::string& raw = items[i].p->raw_data();
      f.write(raw.data(), static_cast<std::streamsize>(raw.size()));
    }
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      fail(op, "writing '", tmp, "' failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail(op, "cannot rename '", tmp, "' to '", target.string(), "': ", ec.message());
  }
}

void point_at_file(std::vector<OutItem>& items, const std::string& file, uint64_t data_start) {
  for (auto& it : items) {
    const uint64_t n = it.p->raw_data().size();
    it.p->clear_raw_data();
    it.p->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* k, const std::string& v) {
      auto* e = it.p->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", file);
    add("offset", std::to_string(data_start + it.begin));
    add("length", std::to_string(n));
  }
}

// The external files a model points into, each opened, confined and (for safetensors) parsed
// once however many initializers it holds.
class ExtFiles {
 public:
  ExtFiles(const std::string& model_path, const char* op) : dir_(model_dir(model_path)), op_(op) {}

  ExtFile& open(const std::string& loc, const std::string& what) {
    auto it = files_.find(loc);
    if (it != files_.end()) return *it->second;
    if (!confined_name(loc))
      fail(op_, what, ": external data location '", loc,
           "' must be a relative path inside the model's directory (no absolute path, no '..')");
    auto f = std::make_unique<ExtFile>();
    f->path = dir_ / loc;
    check_inside_dir(*f, loc, what);
    std::error_code ec;
    f->size = fs::file_size(f->path, ec);
    if (ec) fail(op_, what, ": cannot read the size of '", f->path.string(), "'");
    if (f->path.extension().string() == ".safetensors") read_header(*f, loc, what);
    return *files_.emplace(loc, std::move(f)).first->second;
  }

 private:
  // confined_name rules out '..', but a symlink (or a link in the path) may still lead out of
  // the directory: compare the canonical paths.
  void check_inside_dir(const ExtFile& f, const std::string& loc, const std::string& what) const {
    std::error_code ec;
    const auto st = fs::status(f.path, ec);
    if (ec || !fs::exists(st))
      fail(op_, what, ": external data file '", f.path.string(), "' does not exist");
    if (!fs::is_regular_file(st))
      fail(op_, what, ": external data '", f.path.string(), "' is not a regular file");
    const fs::path cdir = fs::canonical(dir_, ec);
    const fs::path cfile = ec ? fs::path() : fs::canonical(f.path, ec);
    if (ec) fail(op_, what, ": cannot resolve '", f.path.string(), "': ", ec.message());
    auto [a, b] = std::mismatch(cdir.begin(), cdir.end(), cfile.begin(), cfile.end());
    if (a != cdir.end())
      fail(op_, what, ": external data '", loc, "' resolves to '", cfile.string(),
           "', outside the model's directory '", cdir.string(), "'");
  }

  void read_header(ExtFile& f, const std::string& loc, const std::string& what) const {
    f.safetensors = true;
    // read_safetensors checks the header against the file (offsets inside the data
    // section, sizes, no overlap) and allocates no more than the file's size.
    io::SafetensorsFile sf;
    try {
      sf = io::read_safetensors(f.path.string());
    } catch (const Error& e) {
      fail(op_, what, ": external data file '", loc,
           "' is not a valid safetensors file: ", e.what());
    }
    std::ifstream in(f.path, std::ios::binary);
    unsigned char len[8];
    if (!in.read(reinterpret_cast<char*>(len), 8)) fail(op_, what, ": cannot read '", loc, "'");
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = (n << 8) | len[k];
    f.data_start = 8 + n;  // read_safetensors has checked n against the file size
    for (auto& [name, t] : sf.tensors) f.entries.emplace(name, std::move(t));
  }

  fs::path dir_;
  const char* op_;
  std::map<std::string, std::unique_ptr<ExtFile>> files_;
};

// What an initializer's external_data entries say, and what its type and dims need.
struct ExtRef {
  std::string loc;
  uint64_t off = 0, len = 0;
  bool has_len = false;
  EType et{};
  Shape shape;
  uint64_t need = 0;  // bytes the dtype and shape take
};

ExtRef parse_ref(const ::onnx::TensorProto& p, const std::string& what, const char* op) {
  ExtRef r;
  for (const auto& e : p.external_data()) {
    if (e.key() == "location")
      r.loc = e.value();
    else if (e.key() == "offset")
      r.off = parse_u64(op, what + " offset", e.value());
    else if (e.key() == "length")
      r.len = parse_u64(op, what + " length", e.value()), r.has_len = true;
    else if (e.key() != "checksum")
      fail(op, what, ": unknown external data key '", e.key(), "'");
  }
  if (!etype_of(p.data_type(), r.et))
    fail(op, what, ": element type ", p.data_type(),
         " is not one Kiln reads from external data (float, double, int64, int32, bool)");
  // Counted with overflow checks before anything is allocated from them.
  uint64_t numel = 1;
  for (int64_t d : p.dims()) {
    if (d < 0) fail(op, what, ": negative dim ", d);
    if (d != 0 && numel > (uint64_t(1) << 62) / static_cast<uint64_t>(d))
      fail(op, what, ": element count overflows");
    numel *= static_cast<uint64_t>(d);
    r.shape.push_back(d);
  }
  if (numel > (uint64_t(1) << 62) / dtype_size(r.et.dtype)) fail(op, what, ": too large");
  r.need = numel * dtype_size(r.et.dtype);
  return r;
}

// The safetensors header's own entry for the tensor, which must agree with the model; null for
// a plain file.
const Tensor* header_entry(const ExtFile& f, const ::onnx::TensorProto& p, const ExtRef& r,
                           const std::string& what, const char* op) {
  if (!f.safetensors) return nullptr;
  auto it = f.entries.find(p.name());
  if (it == f.entries.end())
    fail(op, what, ": '", r.loc, "' has no tensor of that name in its header");
  const Tensor* entry = &it->second;
  if (entry->dtype() != r.et.dtype || entry->shape() != r.shape)
    fail(op, what, ": the model says ", dtype_name(r.et.dtype), r.shape, ", the header of '", r.loc,
         "' says ", dtype_name(entry->dtype()), entry->shape());
  if (r.off < f.data_start)
    fail(op, what, ": offset ", r.off, " lies in the header of '", r.loc, "' (data starts at ",
         f.data_start, ")");
  return entry;
}

std::string read_bytes(const ExtFile& f, const ExtRef& r, const std::string& what, const char* op) {
  std::string raw(static_cast<size_t>(r.len), '\0');
  std::ifstream in(f.path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(r.off));
  if (!in || !in.read(raw.data(), static_cast<std::streamsize>(r.len)))
    fail(op, what, ": cannot read bytes [", r.off, ", ", r.off + r.len, ") of '", r.loc, "'");
  return raw;
}

}  // namespace

void write_external_data(::onnx::ModelProto& m, const std::string& model_path,
                         const std::string& file, int64_t min_bytes, const char* op) {
  if (!confined_name(file))
    fail(op, "external data file '", file, "' must be a relative path without '..'");
  std::vector<OutItem> items = external_candidates(*m.mutable_graph(), min_bytes);
  const std::vector<size_t> order = lay_out_by_element_size(items);
  const std::string header = safetensors_header(items);
  write_safetensors_file(model_dir(model_path) / file, header, items, order, op);
  point_at_file(items, file, 8 + header.size());
}

void read_external_data(::onnx::ModelProto& m, const std::string& model_path, const char* op) {
  ExtFiles files(model_path, op);
  for (auto& p : *m.mutable_graph()->mutable_initializer()) {
    if (p.data_location() != ::onnx::TensorProto::EXTERNAL) continue;
    const std::string what = str_cat("initializer '", p.name(), "'");
    if (model_path.empty())
      fail(op, what, " has external data; load the model from its file, not from bytes");
    ExtRef r = parse_ref(p, what, op);
    ExtFile& f = files.open(r.loc, what);
    if (!r.has_len) r.len = r.need;
    if (r.len != r.need)
      fail(op, what, ": external length ", r.len, " but ", dtype_name(r.et.dtype), r.shape,
           " needs ", r.need, " bytes");
    if (r.off > f.size || r.len > f.size - r.off)
      fail(op, what, ": bytes [", r.off, ", ", r.off + r.len, ") run past the end of '", r.loc,
           "' (", f.size, " bytes; truncated?)");
    const Tensor* entry = header_entry(f, p, r, what, op);
    std::string raw = read_bytes(f, r, what, op);
    if (r.et.dtype == Bool)  // any other byte would be an invalid C++ bool
      for (auto& c : raw) c = c != 0;
    // The header's bytes are what the offset must point at, not merely a same-sized range.
    if (entry && r.len &&
        std::memcmp(raw.data(), entry->raw_data(), static_cast<size_t>(r.len)) != 0)
      fail(op, what, ": offset ", r.off, " does not point at the bytes the header of '", r.loc,
           "' gives that tensor");
    p.clear_external_data();
    p.set_data_location(::onnx::TensorProto::DEFAULT);
    p.set_raw_data(std::move(raw));
  }
}

}  // namespace kiln::onnx::detail
