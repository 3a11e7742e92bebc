// The collective family's graph op: all_reduce as a value (out = reduction of x over every
// process), so that static graphs and jitted training steps can hold a collective. The transport
// is installed from above (kiln/dist, over MPI); without it the world is one process and the op
// is a copy. Internal: users call kiln::dist::all_reduce (kiln/dist/dist.h).
#pragma once
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::detail {

/// Reduces `buf` (concrete, contiguous, owned by the caller) in place across processes; `op` is
/// "sum" or "mean". Runs on the thread executing the op, blocking until the result is there.
using CollectiveHook = void (*)(Tensor& buf, const std::string& op);
/// Installs the transport (kiln/dist does, at init); returns the previous hook.
CollectiveHook set_collective_hook(CollectiveHook h);

/// out = the sum (or mean) of x over every process. Side effect: the op is never folded, merged,
/// pruned or reordered against other side effects by the passes (kSideEffect), and every process
/// must run the same collectives in the same order. Gradient: the same reduction of the output's
/// gradient (the adjoint of a sum over processes). Integer and bool tensors take "sum" only.
Tensor all_reduce_value(const Tensor& x, const std::string& op = "sum");

}  // namespace kiln::detail
