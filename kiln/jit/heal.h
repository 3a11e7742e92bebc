// Healing graph breaks (JitOptions::heal_breaks): a trace tree whose every guard is a bool read
// traced both ways, down to its leaves, joined into one graph in which each guard is cond() on
// the predicate (Switch on what the branches read, Merge on their results). Internal to the JIT
// engine.
#pragma once
#include <string>

#include "kiln/jit/version.h"

namespace kiln::detail::jit_engine {

struct HealResult {
  bool healed = false;  // the tree is one graph now; v.healed names its breaks
  std::string refused;  // why a healable tree stays a tree (cond refused its branches)
  int pieces = 0;       // pieces added to the engine's count
};

/// Replaces `v`'s trace tree by one graph compiled as a trace without breaks is (trace_tree.h),
/// with the compiled backward (save_activations as JitOptions says) when the tree waits under
/// autograd (v.grad_tree). Leaves the tree as it is when a guard is not a bool traced both ways
/// (nothing to say) or cond refuses the branches, results that differ in dtype or rank
/// (HealResult::refused).
HealResult heal(Version& v, bool save_activations);

}  // namespace kiln::detail::jit_engine
