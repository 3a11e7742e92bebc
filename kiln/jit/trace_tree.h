// The trace tree of a compiled version (version.h's TreeNode): a trace's graph laid out as steps
// over the version's slot table, one piece per graph break, inserted into the tree beside the
// paths already traced. Internal to the JIT engine.
#pragma once
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/node.h"
#include "kiln/jit/version.h"

namespace kiln::detail::jit_engine {

/// A graph break of a trace: the value host code read (`v`, which gave `value`), where the
/// piece it ends stops in the graph (`cut`, a node count), and what read it where.
struct BreakRec {
  ValueRef v;
  Tensor value;
  int cut = 0;
  std::string what, where;
};

/// Lays out a trace without graph breaks as `v`'s one piece: the passes optimize it (const_fold,
/// CSE, DCE), each intermediate is freed after its last use, and a trace without side effects
/// or control flow also replays through a Session (Version::fwd_session). Keeps the trace as
/// traced for save_jit. Returns the pieces added (one).
int add_single(Version& v, Graph& g, const std::vector<Tensor>& phs,
               const std::vector<Tensor>& outs);

/// Cuts a trace at its `breaks` into pieces (each keeping the nodes its outputs, guard values
/// and side effects need) and inserts them into `v`'s trace tree, sharing the prefix already
/// there. Returns the pieces added.
int add_path(Version& v, Graph& g, const std::vector<BreakRec>& breaks,
             const std::vector<Tensor>& phs, const std::vector<Tensor>& outs);

/// Whether a guard value equals a branch's (dtype, shape and values).
bool same_value(const Tensor& a, const Tensor& b);
/// A guard value as explain() and the logs print it: a number, or the tensor's shape.
std::string value_str(const Tensor& t);

}  // namespace kiln::detail::jit_engine
