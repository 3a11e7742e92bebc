// Algebraic simplification and transpose folding: rewrites that remove work without changing a
// single result bit (x + 0 aside, which turns -0 into +0 in the original and keeps -0 here).
// Both passes forward uses of a node to an equal value and leave the dead node to dce.
#pragma once
#include "kiln/graph/node.h"
#include "kiln/passes/passes.h"

namespace kiln::detail {

/// Rewrites every use of `from` (node inputs and fetches) into `to`; returns how many uses
/// changed. `to` must be defined before every user of `from` (true when it is an input of
/// `from`'s node or precedes it), so the node list stays in topological order.
int replace_all_uses(Program& p, ValueRef from, ValueRef to);

/// Pass "simplify": x*1, 1*x, x/1, x+0, 0+x, x-0, neg(neg(x)), cast to the same dtype,
/// contiguous (clone) of a freshly computed value, expand to the same shape, reshape to the
/// same shape and reshape chains, transpose/permute chains (composed into one permute, or
/// dropped when they cancel). A rewrite applies only when shapes and dtypes prove it exact:
/// a constant 1 or 0 must not broadcast the other operand to a larger shape or dtype. Copies
/// whose output is fetched, and copies of values that alias variables, are kept (a fetch is a
/// fresh tensor; a variable may be assigned later in the same run). Returns rewrites made.
int simplify(Program& p);

/// Pass "transpose_fold": matmul takes row- or column-major operands as GEMM flags, so a
/// contiguous copy (clone) of a transposed/permuted value that only feeds matmuls is dropped and
/// the matmuls read the view; transpose/permute chains feeding a matmul that cancel are
/// dropped. Returns operands rewired.
int fold_transposes(Program& p);

}  // namespace kiln::detail
