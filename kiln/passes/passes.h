// Graph -> graph passes. Each works on a private copy (a Program) that a Session or the JIT
// owns, is tested alone, and can be switched off with KILN_DISABLE_PASSES=cse,const_fold,...
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/graph/node.h"

namespace kiln::detail {

/// A graph pruned to what some fetches need, plus which values are fetched. Nodes stay in
/// topological order.
struct Program {
  std::shared_ptr<GraphImpl> graph = std::make_shared<GraphImpl>();
  std::vector<ValueRef> fetches;
};

/// Copies the nodes `fetches` depend on into a new Program (placeholders and variables keep
/// their names; constants keep their values).
Program prune(const GraphImpl& g, const std::vector<ValueRef>& fetches);
/// Merges nodes with the same op, attributes and inputs (not random or side-effecting ones).
int cse(Program& p);
/// Evaluates op nodes whose inputs are all constants (not random, not side-effecting) and
/// replaces them with constants. Skips results larger than `max_elems`.
int const_fold(Program& p, int64_t max_elems = 1 << 20);
/// Removes nodes no fetch depends on.
int dce(Program& p);
/// Elementwise fusion: groups of elementwise ops over one static shape become `fused` nodes
/// (kiln/ops/fused.h). Returns the number of groups made.
int fuse_elementwise(Program& p, int max_inputs = 32);
/// Pass "matmul_sum": a sum (add tree) of three or more 2-D matmuls with a short inner dim
/// becomes one matmul of the concatenated operands (backpropagation through time's per-step
/// weight gradients). Returns the number of sums merged.
int merge_matmul_sums(Program& p);
/// Pass "addmm": add(x, P), add(P, x) and sub(x, P) with P a single-use 2-D matmul, optionally
/// scaled by a constant (mul or neg), become one addmm that accumulates the product onto x in
/// its GEMM (an SGD update p - lr * grad of a weight). Returns the number of sums rewritten.
int fuse_addmm(Program& p);
/// Pass "conv_epilogue": conv2d -> add(per-channel bias) -> add(residual) -> relu chains (any
/// non-empty part of one) whose intermediates nothing else reads become one conv2d_fused (or
/// conv2d_fused_add) node: float32. Returns the number of chains fused.
int fuse_conv_epilogue(Program& p);
/// Pass "block_layout": float32 convolutions with groups 1 and static shapes compute in
/// oneDNN's channel-blocked layout ([N, C/b, H, W, b], b from the CPU), and their outputs stay
/// blocked through following convolutions, max pools and elementwise ops; any other reader gets
/// an NCHW copy. Constant weights are blocked once, here; channel counts the block does not
/// divide are padded to it (zero weight rows and columns). Inference programs only (none that
/// computes a convolution's gradient); without oneDNN (or without AVX2) it does nothing.
/// Returns the number of nodes moved to blocks.
int block_layout(Program& p);
/// Whether a pass is disabled through KILN_DISABLE_PASSES.
bool pass_enabled(const std::string& name);
/// Checks a program's structure (topological order, arities, fetches inside); kiln::Error
/// naming the pass `after` which it broke. optimize() runs it after every pass in debug builds.
void verify_program(const Program& p, const std::string& after);
/// Runs the enabled default pipeline; returns a one-line summary ("cse: 3, const_fold: 1, ...").
std::string optimize(Program& p);

}  // namespace kiln::detail
