// Saved jitted functions: the writer takes the compiled version a call would replay from the jit
// engine (Engine::traced_version), writes its traced graph as a saved graph and its guard key as
// one metadata line per argument; the loader parses those lines strictly, checks them against
// the graph's inputs, and checks each call against them before feeding the Session.
#include "kiln/onnx/saved_jit.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "kiln/graph/node.h"
#include "kiln/io/file.h"
#include "kiln/jit/guard_key.h"
#include "kiln/jit/version.h"
#include "kiln/onnx/external_data.h"
#include "kiln/onnx/onnx_internal.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx {
namespace je = ::kiln::detail::jit_engine;
namespace {

constexpr char kSave[] = "save_jit";
constexpr char kLoad[] = "load_jit";
constexpr char kGuardsKey[] = "kiln.jit.guards";
constexpr char kNameKey[] = "kiln.jit.name";
// A guard line longer than this, or more arguments or dims, is not from save_jit: refused
// before anything is sized from it.
constexpr size_t kMaxArgs = 4096;
constexpr size_t kMaxListLen = 1 << 16;
constexpr int64_t kMaxRank = 64;

const DType kDTypes[] = {Float32, Float64, Int64, Int32, Bool};

std::string shape_token(const Shape& s) {
  std::string r = "[";
  for (int64_t d = 0; d < s.rank(); ++d) r += str_cat(d ? "," : "", s[d]);
  return r + "]";
}

std::string double_token(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // round-trips every double
  return buf;
}

je::TracedVersion traced(const je::Engine& e, const detail::JitArgs& args) {
  je::TracedVersion tv = e.traced_version(args);
  if (!tv.refusal.empty()) fail(kSave, "'", tv.name, "': ", tv.refusal);
  return tv;
}

// One line per argument: "tensor <dtype> [dims] <placeholder>", "list <n>" then n times
// "<dtype> [dims] <placeholder>", "scalar <value>", "bool <0|1>", "runtime_scalar <placeholder>",
// "runtime_bool <placeholder>". Dynamic dims are -1.
std::string guards_text(const je::TracedVersion& tv) {
  std::ostringstream os;
  size_t p = 0;
  auto ph = [&]() -> std::string {
    if (p >= tv.placeholders.size()) fail(kSave, "internal: fewer placeholders than arguments");
    return tv.graph.node_of(tv.placeholders[p++], kSave)->name;
  };
  for (const auto& a : tv.key) {
    switch (a.kind) {
      case je::Arg::kTensor:
        os << "tensor " << dtype_name(a.dtypes.at(0)) << " " << shape_token(a.shapes.at(0)) << " "
           << ph();
        break;
      case je::Arg::kTensorList:
        os << "list " << a.shapes.size();
        for (size_t t = 0; t < a.shapes.size(); ++t)
          os << " " << dtype_name(a.dtypes[t]) << " " << shape_token(a.shapes[t]) << " " << ph();
        break;
      case je::Arg::kScalar:
      case je::Arg::kBool: {
        const bool b = a.kind == je::Arg::kBool;
        if (a.runtime)
          os << (b ? "runtime_bool " : "runtime_scalar ") << ph();
        else
          os << (b ? "bool " : "scalar ") << double_token(a.value);
        break;
      }
    }
    os << "\n";
  }
  if (p != tv.placeholders.size()) fail(kSave, "internal: more placeholders than arguments");
  return os.str();
}

kiln::onnx::NamedTensors named_outputs(const je::TracedVersion& tv) {
  kiln::onnx::NamedTensors outs;
  for (size_t k = 0; k < tv.outputs.size(); ++k)
    outs.emplace_back(str_cat("out", k), tv.outputs[k]);
  return outs;
}

}  // namespace

namespace detail {

namespace {
::onnx::ModelProto jit_model(const je::Engine& e, const JitArgs& args) {
  const je::TracedVersion tv = traced(e, args);
  ::onnx::ModelProto m = saved_graph_model(tv.graph, named_outputs(tv), nullptr);
  auto* md = m.add_metadata_props();
  md->set_key(kGuardsKey);
  md->set_value(guards_text(tv));
  md = m.add_metadata_props();
  md->set_key(kNameKey);
  md->set_value(tv.name);
  return m;
}
}  // namespace

std::string save_jit_version_bytes(const je::Engine& e, const JitArgs& args) {
  ::onnx::ModelProto m = jit_model(e, args);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) fail(kSave, "the model does not serialize (over 2 GiB?)");
  return bytes;
}

void save_jit_version(const std::string& path, const je::Engine& e, const JitArgs& args,
                      const SaveOptions& opts) {
  ::onnx::ModelProto m = jit_model(e, args);
  write_model(m, path, opts, kSave);
}

void export_jit_version(const std::string& path, const je::Engine& e, const JitArgs& args,
                        const SaveOptions& opts) {
  const je::TracedVersion tv = traced(e, args);
  export_onnx(path, tv.graph, named_outputs(tv), nullptr, opts);
}

}  // namespace detail

// ---- loading ---------------------------------------------------------------------------------

struct LoadedJit::Guards {
  je::Key key;
  std::vector<std::vector<std::string>> ph;  // per argument, its placeholders' names
  std::vector<int> runtime;                  // positions of runtime scalars
};

LoadedJit::LoadedJit() = default;
LoadedJit::LoadedJit(LoadedJit&&) noexcept = default;
LoadedJit& LoadedJit::operator=(LoadedJit&&) noexcept = default;
LoadedJit::~LoadedJit() = default;

namespace {

// One line of guards_text: one argument's kind and what it guards. Every token is checked and
// sizes are bounded before use, since the text comes from a file.
class GuardLine {
 public:
  GuardLine(const std::string& line, const std::string& what, size_t i)
      : in_(line), what_(what), i_(i) {}

  // The argument's key and its placeholders' names; a runtime scalar marks itself in `runtime`.
  void parse(je::ArgKey& ak, std::vector<std::string>& names, std::vector<int>& runtime) {
    const std::string kind = word("an argument kind");
    if (kind == "tensor" || kind == "list") {
      ak.kind = kind == "tensor" ? je::Arg::kTensor : je::Arg::kTensorList;
      const size_t n = kind == "list" ? list_length() : 1;
      for (size_t t = 0; t < n; ++t) {
        ak.dtypes.push_back(dtype());
        ak.shapes.push_back(shape());
        ak.grads.push_back(false);
        names.push_back(word("a placeholder name"));
      }
    } else if (kind == "scalar" || kind == "bool") {
      ak.kind = kind == "bool" ? je::Arg::kBool : je::Arg::kScalar;
      const std::string w = word("a value");
      char* end = nullptr;
      ak.value = std::strtod(w.c_str(), &end);
      if (*end) bad("bad value '", w, "'");
    } else if (kind == "runtime_scalar" || kind == "runtime_bool") {
      ak.kind = kind == "runtime_bool" ? je::Arg::kBool : je::Arg::kScalar;
      ak.runtime = true;
      names.push_back(word("a placeholder name"));
      runtime.push_back(static_cast<int>(i_));
    } else {
      bad("unknown argument kind '", kind, "'");
    }
    std::string extra;
    if (in_ >> extra) bad("unexpected '", extra, "'");
  }

 private:
  [[noreturn]] void bad(const auto&... why) {
    fail(kLoad, what_, ": guard of argument ", i_, ": ", why...);
  }

  std::string word(const char* expect) {
    std::string w;
    if (!(in_ >> w) || w.size() > 256) bad("expected ", expect);
    return w;
  }

  size_t list_length() {
    const std::string w = word("a list length");
    char* end = nullptr;
    const unsigned long long v = std::strtoull(w.c_str(), &end, 10);
    if (w.empty() || *end || w[0] == '-' || v > kMaxListLen) bad("bad list length '", w, "'");
    return static_cast<size_t>(v);
  }

  DType dtype() {
    const std::string w = word("a dtype");
    for (DType d : kDTypes)
      if (w == dtype_name(d)) return d;
    bad("unknown dtype '", w, "'");
  }

  Shape shape() {
    const std::string w = word("a shape");
    if (w.size() < 2 || w.front() != '[' || w.back() != ']') bad("bad shape '", w, "'");
    Shape s;
    std::string body = w.substr(1, w.size() - 2);
    if (body.empty()) return s;
    std::istringstream ds(body);
    std::string d;
    while (std::getline(ds, d, ',')) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end || errno || v < -1 || v > (int64_t(1) << 40))
        bad("bad dim '", d, "' in shape '", w, "'");
      if (s.rank() >= kMaxRank) bad("rank above ", kMaxRank);
      s.push_back(v);
    }
    return s;
  }

  std::istringstream in_;
  const std::string& what_;
  size_t i_;
};

// Parses guards_text's lines, one argument each.
void parse_guards(const std::string& text, const std::string& what, je::Key& key,
                  std::vector<std::vector<std::string>>& ph, std::vector<int>& runtime) {
  std::istringstream lines(text);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    if (i >= kMaxArgs) fail(kLoad, what, ": more than ", kMaxArgs, " arguments");
    je::ArgKey ak;
    std::vector<std::string> names;
    GuardLine(line, what, i).parse(ak, names, runtime);
    key.push_back(std::move(ak));
    ph.push_back(std::move(names));
  }
}

}  // namespace

LoadedJit load_jit_bytes(const void* data, size_t size, const std::string& what) {
  ::onnx::ModelProto m = detail::parse_model(data, size, what, kLoad);
  detail::check_version(m, what);
  detail::read_external_data(m, "", kLoad);
  return detail::load_jit_model(m, what);
}

LoadedJit load_jit(const std::string& path) {
  const io::MappedFile bytes(path, kLoad);
  ::onnx::ModelProto m = detail::parse_model(bytes.data(), bytes.size(), path, kLoad);
  detail::check_version(m, path);
  detail::read_external_data(m, path, kLoad);
  return detail::load_jit_model(m, path);
}

LoadedJit detail::load_jit_model(const ::onnx::ModelProto& m, const std::string& what) {
  const std::string* guards = nullptr;
  LoadedJit lj;
  for (const auto& p : m.metadata_props()) {
    if (p.key() == kGuardsKey) guards = &p.value();
    if (p.key() == kNameKey) lj.name_ = p.value().substr(0, 256);
  }
  if (!guards) fail(kLoad, what, ": no jit guards (", kGuardsKey, "); not written by save_jit");
  lj.guards_ = std::make_unique<LoadedJit::Guards>();
  parse_guards(*guards, what, lj.guards_->key, lj.guards_->ph, lj.guards_->runtime);
  lj.g_ = detail::load_graph_model(m, what);
  // Each placeholder the graph kept must be what its guard says (dtype and shape).
  for (size_t i = 0; i < lj.guards_->key.size(); ++i) {
    const je::ArgKey& ak = lj.guards_->key[i];
    for (size_t t = 0; t < lj.guards_->ph[i].size(); ++t) {
      const std::string& name = lj.guards_->ph[i][t];
      for (const auto& [n, ph] : lj.g_.inputs) {
        if (n != name) continue;
        const DType dt = ak.runtime ? Float32 : ak.dtypes[t];
        const Shape s = ak.runtime ? Shape{} : ak.shapes[t];
        if (ph.dtype() != dt || ph.shape() != s)
          fail(kLoad, what, ": input '", name, "' is ", ph.dtype(), ph.shape(),
               " but the guard of argument ", i, " says ", dt, s);
      }
    }
  }
  for (const auto& [n, ph] : lj.g_.inputs) {
    bool known = false;
    for (const auto& names : lj.guards_->ph)
      for (const auto& x : names) known = known || x == n;
    if (!known) fail(kLoad, what, ": input '", n, "' belongs to no argument");
  }
  return lj;
}

std::string LoadedJit::guards() const { return je::key_str(guards_->key); }

std::vector<Tensor> LoadedJit::run(const detail::JitArgs& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const bool undef = (args[i].kind == je::Arg::kTensor && !args[i].t.defined());
    bool undef_el = false;
    for (const auto& t : args[i].ts) undef_el = undef_el || !t.defined();
    if (undef || undef_el) fail(kLoad, "'", name_, "': argument ", i, " is an undefined tensor");
  }
  je::Key k = je::key_of(args, guards_->runtime);
  for (auto& a : k)  // the loaded function is for inference: requires_grad is no guard
    for (size_t t = 0; t < a.grads.size(); ++t) a.grads[t] = false;
  const std::string why = je::mismatch(guards_->key, k);
  if (!why.empty())
    fail(kLoad, "'", name_, "': guard failed: ", why, " (the saved version takes ",
         je::key_str(guards_->key), ")");
  FeedDict feeds;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<Tensor> vals;
    if (args[i].kind == je::Arg::kTensor) vals.push_back(args[i].t);
    if (args[i].kind == je::Arg::kTensorList) vals = args[i].ts;
    if (guards_->key[i].runtime) vals.push_back(scalar_tensor(args[i].v, Float32));
    for (size_t t = 0; t < vals.size() && t < guards_->ph[i].size(); ++t)
      for (const auto& [n, ph] : g_.inputs)
        if (n == guards_->ph[i][t]) feeds.emplace_back(ph, vals[t]);
  }
  if (!sess_) sess_ = std::make_unique<Session>(g_.graph);
  std::vector<Tensor> fetches;
  for (const auto& [n, t] : g_.outputs) fetches.push_back(t);
  return sess_->run(fetches, feeds);
}

}  // namespace kiln::onnx
