// Pass "addmm": a matrix product added to (or subtracted from) another value becomes one
// addmm, whose GEMM accumulates the product onto that value (beta = 1) instead of writing the
// product out and reading it back in a separate elementwise pass. A training step makes exactly
// this: every SGD update of a weight is p - lr * (A^T G), and the gradient is used nowhere else
// (W4: the [256, 784] update pass cost 66 us a step beside its 248 us GEMM).
#include <cmath>
#include <set>
#include <unordered_map>

#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"
#include "kiln/passes/passes.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {
namespace {

const TensorMeta& meta(ValueRef v) { return v.node->outputs[static_cast<size_t>(v.index)]; }

// A one-element finite constant whose broadcast cannot enlarge a rank-2 value.
bool scalar_constant(ValueRef v, double* c) {
  const Node* n = v.node;
  if (n->kind != NodeKind::Constant || !n->value.defined() || !n->value.is_concrete() ||
      n->value.numel() != 1 || n->value.dim() > 2 || !is_floating(n->value.dtype()))
    return false;
  *c = n->value.to_vector<double>()[0];
  return std::isfinite(*c);
}

}  // namespace

int fuse_addmm(Program& p) {
  std::unordered_map<const Node*, int> uses;
  std::set<const Node*> fetched;
  for (const auto& f : p.fetches) fetched.insert(f.node);
  for (const auto& n : p.graph->nodes)
    for (const auto& in : n->inputs) ++uses[in.node];
  // Values only the candidate reads (one use, not fetched) may disappear into it.
  auto private_value = [&](ValueRef v) {
    return v.node->kind == NodeKind::Op && v.index == 0 && v.node->outputs.size() == 1 &&
           uses[v.node] == 1 && !fetched.count(v.node);
  };
  const OpDef& addmm_op = *ops::addmm;

  // The product behind v and its factor: matmul, mul(matmul, c), mul(c, matmul), neg(matmul).
  struct Scaled {
    const Node* mm = nullptr;
    double scale = 1;
  };
  auto scaled_product = [&](ValueRef v, const TensorMeta& out) {
    Scaled s;
    if (!private_value(v)) return s;
    const Node* n = v.node;
    double c = 1;
    ValueRef inner = v;
    if (n->is(ops::mul) && n->inputs.size() == 2) {
      if (scalar_constant(n->inputs[1], &c))
        inner = n->inputs[0];
      else if (scalar_constant(n->inputs[0], &c))
        inner = n->inputs[1];
      else
        return s;
      if (!private_value(inner)) return s;
    } else if (n->is(ops::neg)) {
      c = -1;
      inner = n->inputs[0];
      if (!private_value(inner)) return s;
    }
    const Node* m = inner.node;
    if (!m->is(ops::matmul) || m->inputs.size() != 2) return s;
    const TensorMeta& a = meta(m->inputs[0]);
    const TensorMeta& b = meta(m->inputs[1]);
    const TensorMeta& o = m->outputs[0];
    if (a.shape.rank() != 2 || b.shape.rank() != 2 || o.shape != out.shape || o.dtype != out.dtype)
      return s;
    s.mm = m;
    s.scale = c;
    return s;
  };

  int fused = 0;
  for (auto& up : p.graph->nodes) {
    Node* n = up.get();
    const bool add = n->is(ops::add), sub = n->is(ops::sub);
    if ((!add && !sub) || n->inputs.size() != 2 || n->outputs.size() != 1) continue;
    const TensorMeta& out = n->outputs[0];
    // Static [m, n]: the accumulated value then never broadcasts the product to a larger shape.
    if (out.shape.rank() != 2 || !out.shape.is_static() ||
        (out.dtype != Float32 && out.dtype != Float64))
      continue;
    // x + s*P, s*P + x, x - s*P.
    for (int side : {1, 0}) {
      if (sub && side == 0) break;
      Scaled s = scaled_product(n->inputs[static_cast<size_t>(side)], out);
      if (!s.mm) continue;
      ValueRef acc = n->inputs[static_cast<size_t>(1 - side)];
      if (meta(acc).dtype != out.dtype) continue;
      const double alpha = sub ? -s.scale : s.scale;
      n->op = &addmm_op;
      n->attrs = Attrs{AttrValue(1.0), AttrValue(alpha)};
      n->inputs = {acc, s.mm->inputs[0], s.mm->inputs[1]};
      ++fused;
      break;
    }
  }
  if (fused) dce(p);  // drops the products and their scalings
  return fused;
}

}  // namespace kiln::detail
