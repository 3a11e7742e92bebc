// Hooks that backward() calls as leaf gradients become final: what data-parallel training
// (kiln/dist) needs to start a bucket's all-reduce while the rest of backward still runs, as
// PyTorch's post-accumulate-grad hooks do for DDP. Internal (kiln::detail).
#pragma once
#include <functional>
#include <memory>

#include "kiln/core/tensor.h"

namespace kiln::detail {

/// Called by backward() (not by grad(), which accumulates nothing), on the thread running it.
struct GradReadyHooks {
  /// Before the first gradient of a backward pass is computed.
  std::function<void()> begin;
  /// When a leaf's .grad() holds its final value for this pass: every edge of the pass that
  /// reaches the leaf has delivered (a leaf used twice fires once, after both contributions).
  std::function<void(const std::shared_ptr<TensorImpl>& leaf)> leaf_ready;
  /// After the last node ran (also when backward raised: `ok` is false then).
  std::function<void(bool ok)> end;
};

/// Registers hooks for every later backward() in the process; returns an id for removal.
/// Without hooks the engine does no extra work (one relaxed atomic load per backward).
int add_grad_ready_hooks(GradReadyHooks hooks);
void remove_grad_ready_hooks(int id);

}  // namespace kiln::detail
