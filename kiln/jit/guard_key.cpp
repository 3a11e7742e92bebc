// Guard keys of the JIT: building a call's key, checking it against a compiled version's
// guards (naming the first that fails, for explain() and the recompile log), and widening a
// static dim into a dynamic one.
#include "kiln/jit/guard_key.h"

#include <algorithm>
#include <sstream>

#include "kiln/autograd/autograd.h"
#include "kiln/dispatch/autocast.h"

using namespace kiln::detail;

namespace kiln::detail::jit_engine {

Key key_of(const std::vector<Arg>& args, const std::vector<int>& runtime) {
  Key k;
  const int ac = autocast_enabled() ? static_cast<int>(autocast_dtype()) : -1;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    ArgKey ak;
    ak.kind = a.kind;
    ak.autocast = ac;
    auto add = [&](const Tensor& t) {
      if (!t.defined()) fail("jit", "argument ", i, " is an undefined tensor");
      ak.dtypes.push_back(t.dtype());
      ak.grads.push_back(t.requires_grad() && grad_mode_enabled());
      ak.shapes.push_back(t.shape());
      ak.dynamic_marks.push_back(t.impl()->dynamic_marks);
      ak.static_marks.push_back(t.impl()->static_marks);
    };
    if (a.kind == Arg::kTensor) add(a.t);
    if (a.kind == Arg::kTensorList)
      for (const auto& t : a.ts) add(t);
    if (a.kind == Arg::kScalar || a.kind == Arg::kBool) {
      ak.runtime = std::find(runtime.begin(), runtime.end(), static_cast<int>(i)) != runtime.end();
      if (!ak.runtime) ak.value = a.v;
    }
    k.push_back(std::move(ak));
  }
  return k;
}

namespace {
std::string autocast_str(int ac) {
  return ac < 0 ? std::string("off") : str_cat("on (", dtype_name(static_cast<DType>(ac)), ")");
}
}  // namespace

// Empty string when `k` (actual) satisfies `g` (guard); otherwise the first failing guard.
std::string mismatch(const Key& g, const Key& k) {
  if (!g.empty() && !k.empty() && g[0].autocast != k[0].autocast)
    return str_cat("autocast: expected ", autocast_str(g[0].autocast), ", got ",
                   autocast_str(k[0].autocast));
  if (g.size() != k.size()) return "number of arguments";
  for (size_t i = 0; i < g.size(); ++i) {
    const ArgKey &a = g[i], &b = k[i];
    if (a.kind != b.kind) return str_cat("arg ", i, ": kind changed");
    if (a.shapes.size() != b.shapes.size())
      return str_cat("arg ", i, ": list length: expected ", a.shapes.size(), ", got ",
                     b.shapes.size());
    for (size_t t = 0; t < a.shapes.size(); ++t) {
      auto at = [&] {  // built only when a guard fails
        return a.shapes.size() > 1 || a.kind == Arg::kTensorList ? str_cat("arg ", i, "[", t, "]")
                                                                 : str_cat("arg ", i);
      };
      if (a.dtypes[t] != b.dtypes[t])
        return str_cat(at(), " dtype: expected ", a.dtypes[t], ", got ", b.dtypes[t]);
      if (a.grads[t] != b.grads[t])
        return str_cat(at(), " requires_grad: expected ", a.grads[t] ? "true" : "false", ", got ",
                       b.grads[t] ? "true" : "false");
      if (a.shapes[t].rank() != b.shapes[t].rank())
        return str_cat(at(), " rank: expected ", a.shapes[t].rank(), ", got ", b.shapes[t].rank());
      for (int64_t d = 0; d < a.shapes[t].rank(); ++d)
        if (a.shapes[t][d] >= 0 && a.shapes[t][d] != b.shapes[t][d])
          return str_cat(at(), " dim ", d, ": expected ", a.shapes[t][d], ", got ", b.shapes[t][d]);
    }
    if (!a.runtime && (a.kind == Arg::kScalar || a.kind == Arg::kBool) && a.value != b.value)
      return str_cat("arg ", i, " value: expected ", a.value, ", got ", b.value);
  }
  return "";
}

// Whether g and k differ only in dims (same kinds, dtypes, ranks, grads, scalar values).
bool only_dims_differ(const Key& g, const Key& k, Key* dyn) {
  if (g.size() != k.size()) return false;
  Key out = g;
  bool any = false;
  for (size_t i = 0; i < g.size(); ++i) {
    const ArgKey &a = g[i], &b = k[i];
    if (a.kind != b.kind || a.shapes.size() != b.shapes.size() || a.value != b.value ||
        a.autocast != b.autocast)
      return false;
    for (size_t t = 0; t < a.shapes.size(); ++t) {
      if (a.dtypes[t] != b.dtypes[t] || a.grads[t] != b.grads[t] ||
          a.shapes[t].rank() != b.shapes[t].rank())
        return false;
      for (int64_t d = 0; d < a.shapes[t].rank(); ++d)
        if (a.shapes[t][d] != b.shapes[t][d]) {
          // A dim marked static (mark_static) gets a version per size instead.
          if (d < 32 && t < b.static_marks.size() && (b.static_marks[t] >> d & 1u)) return false;
          out[i].shapes[t][d] = -1;
          any = true;
        }
    }
  }
  *dyn = out;
  return any;
}

Key with_marked_dims(Key k) {
  for (auto& a : k)
    for (size_t t = 0; t < a.shapes.size() && t < a.dynamic_marks.size(); ++t)
      for (int64_t d = 0; d < a.shapes[t].rank() && d < 32; ++d)
        if (a.dynamic_marks[t] >> d & 1u) a.shapes[t][d] = -1;
  return k;
}

std::string key_str(const Key& k) {
  std::ostringstream os;
  if (!k.empty() && k[0].autocast >= 0) os << "autocast " << autocast_str(k[0].autocast) << "; ";
  for (size_t i = 0; i < k.size(); ++i) {
    if (i) os << "; ";
    os << "arg" << i << " ";
    const ArgKey& a = k[i];
    if (a.kind == Arg::kScalar || a.kind == Arg::kBool) {
      if (a.runtime)
        os << "runtime scalar";
      else
        os << "== " << a.value;
      continue;
    }
    if (a.kind == Arg::kTensorList) os << "list[" << a.shapes.size() << "] ";
    for (size_t t = 0; t < a.shapes.size(); ++t)
      os << (t ? ", " : "") << dtype_name(a.dtypes[t]) << a.shapes[t]
         << (a.grads[t] ? " requires_grad" : "");
  }
  return os.str();
}

bool has_dynamic_dims(const Key& k) {
  for (const auto& a : k)
    for (const auto& s : a.shapes)
      if (!s.is_static()) return true;
  return false;
}

bool any_grad(const Key& k) {
  for (const auto& a : k)
    for (bool g : a.grads)
      if (g) return true;
  return false;
}

std::vector<Tensor> flat_tensors(const std::vector<Arg>& args, const Key& key) {
  std::vector<Tensor> flat;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == Arg::kTensor)
      flat.push_back(args[i].t);
    else if (args[i].kind == Arg::kTensorList)
      flat.insert(flat.end(), args[i].ts.begin(), args[i].ts.end());
    else if (i < key.size() && key[i].runtime)
      flat.push_back(Tensor());
  }
  return flat;
}

}  // namespace kiln::detail::jit_engine
