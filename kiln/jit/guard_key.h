// Guard keys of the JIT (engine.h): what a compiled version assumes about its arguments
// (kinds, dtypes, requires_grad, shapes with -1 for dynamic dims, constant scalar values), the
// check of a call against them, and the relaxation of a shape guard into a dynamic dim.
#pragma once
#include <string>
#include <vector>

#include "kiln/jit/arg.h"

namespace kiln::detail::jit_engine {

// Per argument: what the guard compares. dims of -1 are wildcards (dynamic).
struct ArgKey {
  Arg::Kind kind;
  std::vector<DType> dtypes;
  std::vector<bool> grads;
  std::vector<Shape> shapes;
  double value = 0;  // scalar/bool constants
  bool runtime = false;
  /// The autocast scope of the call (the dtype's code; -1: off), the same in every argument:
  /// a trace under autocast holds its casts.
  int autocast = -1;
  /// Per tensor: the dims mark_dynamic / mark_static set (TensorImpl's bits). Not guards: they
  /// decide which dims a new version makes dynamic.
  std::vector<uint32_t> dynamic_marks, static_marks;
};
using Key = std::vector<ArgKey>;
/// `k` with the dims its tensors are marked dynamic made dynamic (-1).
Key with_marked_dims(Key k);

/// The key of a call's arguments; `runtime` lists the scalar arguments passed as values.
Key key_of(const std::vector<Arg>& args, const std::vector<int>& runtime);
/// Empty when `k` (a call's key) satisfies guard `g`; otherwise the first failing guard.
std::string mismatch(const Key& g, const Key& k);
/// Whether g and k differ only in dims (same kinds, dtypes, ranks, grads, scalar values); then
/// *dyn is g with those dims made dynamic (-1).
bool only_dims_differ(const Key& g, const Key& k, Key* dyn);
/// One line per key for explain() and the recompile log.
std::string key_str(const Key& k);
/// Whether the key has a dynamic dim.
bool has_dynamic_dims(const Key& k);
/// Whether a tensor of the key requires grad (under grad mode).
bool any_grad(const Key& k);
/// The call's tensors in the order a trace makes its placeholders: per tensor, per list
/// element, an undefined one per runtime scalar of `key`.
std::vector<Tensor> flat_tensors(const std::vector<Arg>& args, const Key& key);

}  // namespace kiln::detail::jit_engine
