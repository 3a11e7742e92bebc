// Shape guards: host code that compares symbolic sizes (`if (T > 64)`, `assert T <= block`)
// reads a value that depends on the inputs only through their sizes. Instead of a graph break,
// the JIT keeps that comparison's small subgraph as a guard of the version, checked on each
// call's argument shapes before it replays (docs/design.md section 7). Internal.
#pragma once
#include <string>
#include <vector>

#include "kiln/passes/passes.h"

namespace kiln::detail::jit_engine {

struct ShapeGuard {
  Program prog;            // the read value's subgraph; prog.fetches[0] is the value
  std::vector<int> feeds;  // per placeholder of prog, in node order: its argument position
  Tensor expected;         // the value the trace read
  std::string what, where, text;
};

/// Whether `v` depends on its graph's inputs only through their sizes: sym_size of
/// placeholders, constants and integer or bool scalar arithmetic over them.
bool shape_only(ValueRef v);
/// The guard for a host read of `v` that gave `value`; `placeholders` are the trace's, in the
/// order the call's tensors are flattened.
ShapeGuard make_shape_guard(const GraphImpl& g, ValueRef v, const Tensor& value,
                            const std::vector<Tensor>& placeholders, const std::string& what,
                            const std::string& where);
/// The guard's value for a call whose tensors, flattened as the placeholders were, are `flat`.
Tensor eval_shape_guard(const ShapeGuard& sg, const std::vector<Tensor>& flat);
/// Whether the call satisfies the guard.
bool shape_guard_holds(const ShapeGuard& sg, const std::vector<Tensor>& flat);
/// The first of `guards` the call fails, as the recompile's reason; "" when it satisfies all.
std::string failed_shape_guard(const std::vector<ShapeGuard>& guards,
                               const std::vector<Tensor>& flat);

}  // namespace kiln::detail::jit_engine
