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

}  // namespace

void write_external_data(::onnx::ModelProto& m, const std::string& model_path,
                         const std::string& file, int64_t min_bytes, const char* op) {
  if (!confined_name(file))
    fail(op, "external data file '", file, "' must be a relative path without '..'");
  struct Item {
    ::onnx::TensorProto* p;
    EType et;
    uint64_t begin = 0;
  };
  std::vector<Item> items;
  auto* g = m.mutable_graph();
  for (auto& init : *g->mutable_initializer()) {
    EType et{};
    if (!init.has_raw_data() || !etype_of(init.data_type(), et)) continue;
    if (static_cast<int64_t>(init.raw_data().size()) < min_bytes) continue;
    if (init.name().empty() || init.name() == "__metadata__") continue;
    items.push_back({&init, et, 0});
  }
  // Data by decreasing element size (stable), so each tensor starts at a multiple of its element
  // size (readers that map the file into typed arrays need that); the header keeps graph order.
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
  const uint64_t data_start = 8 + header.size();

  const fs::path target = model_dir(model_path) / file;
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

void read_external_data(::onnx::ModelProto& m, const std::string& model_path, const char* op) {
  std::map<std::string, std::unique_ptr<ExtFile>> files;
  auto open = [&](const std::string& loc, const std::string& what) -> ExtFile& {
    auto it = files.find(loc);
    if (it != files.end()) return *it->second;
    if (!confined_name(loc))
      fail(op, what, ": external data location '", loc,
           "' must be a relative path inside the model's directory (no absolute path, no '..')");
    const fs::path dir = model_dir(model_path);
    auto f = std::make_unique<ExtFile>();
    f->path = dir / loc;
    std::error_code ec;
    const auto st = fs::status(f->path, ec);
    if (ec || !fs::exists(st))
      fail(op, what, ": external data file '", f->path.string(), "' does not exist");
    if (!fs::is_regular_file(st))
      fail(op, what, ": external data '", f->path.string(), "' is not a regular file");
    // A symlink (or a link in the path) may still lead out of the directory.
    const fs::path cdir = fs::canonical(dir, ec);
    const fs::path cfile = ec ? fs::path() : fs::canonical(f->path, ec);
    if (ec) fail(op, what, ": cannot resolve '", f->path.string(), "': ", ec.message());
    auto [a, b] = std::mismatch(cdir.begin(), cdir.end(), cfile.begin(), cfile.end());
    if (a != cdir.end())
      fail(op, what, ": external data '", loc, "' resolves to '", cfile.string(),
           "', outside the model's directory '", cdir.string(), "'");
    f->size = fs::file_size(f->path, ec);
    if (ec) fail(op, what, ": cannot read the size of '", f->path.string(), "'");
    const std::string ext = f->path.extension().string();
    if (ext == ".safetensors") {
      f->safetensors = true;
      // read_safetensors checks the header against the file (offsets inside the data
      // section, sizes, no overlap) and allocates no more than the file's size.
      io::SafetensorsFile sf;
      try {
        sf = io::read_safetensors(f->path.string());
      } catch (const Error& e) {
        fail(op, what, ": external data file '", loc,
             "' is not a valid safetensors file: ", e.what());
      }
      std::ifstream in(f->path, std::ios::binary);
      unsigned char len[8];
      if (!in.read(reinterpret_cast<char*>(len), 8)) fail(op, what, ": cannot read '", loc, "'");
      uint64_t n = 0;
      for (int k = 7; k >= 0; --k) n = (n << 8) | len[k];
      f->data_start = 8 + n;  // read_safetensors has checked n against the file size
      for (auto& [name, t] : sf.tensors) f->entries.emplace(name, std::move(t));
    }
    return *files.emplace(loc, std::move(f)).first->second;
  };

  for (auto& p : *m.mutable_graph()->mutable_initializer()) {
    if (p.data_location() != ::onnx::TensorProto::EXTERNAL) continue;
    const std::string what = str_cat("initializer '", p.name(), "'");
    if (model_path.empty())
      fail(op, what, " has external data; load the model from its file, not from bytes");
    std::string loc;
    bool has_off = false, has_len = false;
    uint64_t off = 0, len = 0;
    for (const auto& e : p.external_data()) {
      if (e.key() == "location")
        loc = e.value();
      else if (e.key() == "offset")
        off = parse_u64(op, what + " offset", e.value()), has_off = true;
      else if (e.key() == "length")
        len = parse_u64(op, what + " length", e.value()), has_len = true;
      else if (e.key() != "checksum")
        fail(op, what, ": unknown external data key '", e.key(), "'");
    }
    (void)has_off;
    EType et{};
    if (!etype_of(p.data_type(), et))
      fail(op, what, ": element type ", p.data_type(),
           " is not one Kiln reads from external data (float, double, int64, int32, bool)");
    uint64_t numel = 1;
    Shape shape;
    for (int64_t d : p.dims()) {
      if (d < 0) fail(op, what, ": negative dim ", d);
      if (d != 0 && numel > (uint64_t(1) << 62) / static_cast<uint64_t>(d))
        fail(op, what, ": element count overflows");
      numel *= static_cast<uint64_t>(d);
      shape.push_back(d);
    }
    if (numel > (uint64_t(1) << 62) / dtype_size(et.dtype)) fail(op, what, ": too large");
    const uint64_t need = numel * dtype_size(et.dtype);
    ExtFile& f = open(loc, what);
    if (!has_len) len = need;
    if (len != need)
      fail(op, what, ": external length ", len, " but ", dtype_name(et.dtype), shape, " needs ",
           need, " bytes");
    if (off > f.size || len > f.size - off)
      fail(op, what, ": bytes [", off, ", ", off + len, ") run past the end of '", loc, "' (",
           f.size, " bytes; truncated?)");
    const Tensor* entry = nullptr;
    if (f.safetensors) {
      auto it = f.entries.find(p.name());
      if (it == f.entries.end())
        fail(op, what, ": '", loc, "' has no tensor of that name in its header");
      entry = &it->second;
      if (entry->dtype() != et.dtype || entry->shape() != shape)
        fail(op, what, ": the model says ", dtype_name(et.dtype), shape, ", the header of '", loc,
             "' says ", dtype_name(entry->dtype()), entry->shape());
      if (off < f.data_start)
        fail(op, what, ": offset ", off, " lies in the header of '", loc, "' (data starts at ",
             f.data_start, ")");
    }
    std::string raw(static_cast<size_t>(len), '\0');
    {
      std::ifstream in(f.path, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(off));
      if (!in || !in.read(raw.data(), static_cast<std::streamsize>(len)))
        fail(op, what, ": cannot read bytes [", off, ", ", off + len, ") of '", loc, "'");
    }
    if (et.dtype == Bool)  // any other byte would be an invalid C++ bool
      for (auto& c : raw) c = c != 0;
    if (entry && len && std::memcmp(raw.data(), entry->raw_data(), static_cast<size_t>(len)) != 0)
      fail(op, what, ": offset ", off, " does not point at the bytes the header of '", loc,
           "' gives that tensor");
    p.clear_external_data();
    p.set_data_location(::onnx::TensorProto::DEFAULT);
    p.set_raw_data(std::move(raw));
  }
}

}  // namespace kiln::onnx::detail
