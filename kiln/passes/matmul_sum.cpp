// Pass "matmul_sum": a sum of matrix products over a short inner dim becomes one product over
// the concatenated operands, sum_i A_i B_i = [A_1 .. A_n] [B_1; ..; B_n]. Backpropagation
// through time makes exactly this: a recurrent weight's gradient is one [H, 32] x [32, 4H]
// product per time step (K = the batch), each writing the whole [H, 4H] result, then a chain of
// adds. One GEMM with K = steps x batch reads the operands once and writes the result once (W6:
// 31 products of 0.49 ms plus a 32-way sum -> one product of ~4 ms).
#include <algorithm>
#include <set>
#include <unordered_map>

#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"
#include "kiln/passes/simplify.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {
namespace {

const TensorMeta& meta(ValueRef v) { return v.node->outputs[static_cast<size_t>(v.index)]; }

// A 2-D transpose node (transpose of a rank-2 value, or permute [1, 0]).
bool is_transpose2d(const Node* n) {
  if (n->kind != NodeKind::Op || n->outputs.size() != 1 || n->outputs[0].shape.rank() != 2)
    return false;
  if (n->is(ops::permute)) return n->attrs.ints(0)[0] == 1 || n->attrs.ints(0)[0] == -1;
  if (!n->is(ops::transpose)) return false;
  auto w = [](int64_t d) { return d < 0 ? d + 2 : d; };
  return w(n->attrs.i(0)) != w(n->attrs.i(1));
}

// The products among an add tree's leaves worth merging, and the rest of its leaves.
struct Products {
  std::vector<const Node*> mms;
  std::vector<ValueRef> rest;
};

// One run of the pass over a program: the add trees found from their roots, and the nodes each
// rewrite makes, inserted before their root at the end.
class MatmulSums {
 public:
  explicit MatmulSums(Program& p) : p_(p) {
    for (const auto& f : p.fetches) fetched_.insert(f.node);
    for (const auto& n : p.graph->nodes)
      for (const auto& in : n->inputs) ++uses_[in.node];
  }

  int run() {
    int merged = 0;
    // Roots first (latest node first): an add feeding another add of the same tree is reached
    // as part of that tree.
    std::vector<Node*> order;
    for (auto& n : p_.graph->nodes) order.push_back(n.get());
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* root = *it;
      if (!root->is(ops::add) || absorbed_.count(root)) continue;
      const TensorMeta& out = root->outputs[0];
      if (out.shape.rank() != 2 || !out.shape.is_static() || !is_floating(out.dtype)) continue;
      std::vector<const Node*> tree_adds;
      const std::vector<ValueRef> leaves = sum_leaves(root, tree_adds);
      if (leaves.empty()) continue;
      Products pr = products(leaves, out);
      if (pr.mms.size() < 3) continue;
      for (const Node* a : tree_adds) absorbed_.insert(a);
      rewrite(root, pr);
      ++merged;
    }
    if (!merged) return 0;
    insert_made();
    dce(p_);  // renumbers and drops the old products and adds
    return merged;
  }

 private:
  struct Insert {
    Node* before;
    std::vector<std::unique_ptr<Node>> made;
  };

  // Only this pass's single-use internal values may be absorbed into a sum.
  bool private_value(const Node* n) {
    return n->kind == NodeKind::Op && n->outputs.size() == 1 && uses_[n] == 1 && !fetched_.count(n);
  }

  // The leaves of the add tree under root over values of root's shape and dtype (none when an
  // add broadcasts: not a plain sum), and the tree's adds.
  std::vector<ValueRef> sum_leaves(const Node* root, std::vector<const Node*>& tree_adds) {
    const TensorMeta& out = root->outputs[0];
    std::vector<ValueRef> leaves;
    std::vector<const Node*> stack = {root};
    while (!stack.empty()) {
      const Node* a = stack.back();
      stack.pop_back();
      tree_adds.push_back(a);
      for (const auto& in : a->inputs) {
        if (meta(in).shape != out.shape || meta(in).dtype != out.dtype) {
          leaves.clear();  // a broadcasting add: not a plain sum
          stack.clear();
          break;
        }
        if (in.node->is(ops::add) && private_value(in.node))
          stack.push_back(in.node);
        else
          leaves.push_back(in);
      }
    }
    return leaves;
  }

  // The products among the leaves: rank-2 operands, K small enough that the concatenation
  // (K (M + N) elements per product) costs less than the product's own output (M N).
  Products products(const std::vector<ValueRef>& leaves, const TensorMeta& out) {
    const int64_t M = out.shape[0], N = out.shape[1];
    Products pr;
    for (const auto& v : leaves) {
      const Node* m = v.node;
      bool ok = m->is(ops::matmul) && private_value(m) && m->inputs.size() == 2;
      if (ok) {
        const TensorMeta &a = meta(m->inputs[0]), &b = meta(m->inputs[1]);
        ok = a.shape.rank() == 2 && b.shape.rank() == 2 && a.shape.is_static() &&
             b.shape.is_static() && a.dtype == out.dtype && b.dtype == out.dtype &&
             a.shape[1] * (M + N) <= M * N;
      }
      if (ok)
        pr.mms.push_back(m);
      else
        pr.rest.push_back(v);
    }
    return pr;
  }

  // A new node (inserted before the root being rewritten) of root's dtype.
  ValueRef make(Insert& ins, const OpDef& op, Attrs attrs, std::vector<ValueRef> in, Shape s) {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::Op;
    n->op = &op;
    n->attrs = std::move(attrs);
    n->inputs = std::move(in);
    n->outputs = {TensorMeta{ins.before->outputs[0].dtype, std::move(s)}};
    Node* raw = n.get();
    ins.made.push_back(std::move(n));
    return ValueRef{raw, 0};
  }

  // One side's concatenation (0: the left operands [M, K_i] along K, 1: the right ones). When
  // every operand on that side is a transpose, the rows of the sources are concatenated
  // (contiguous copies) and the result transposed back as a view the GEMM reads through a flag.
  ValueRef concat(Insert& ins, const std::vector<const Node*>& mms, int side) {
    const size_t sd = static_cast<size_t>(side);
    const int64_t cat_dim = side == 0 ? 1 : 0;
    int64_t total = 0;
    bool all_t = true;
    for (const Node* m : mms) {
      total += meta(m->inputs[sd]).shape[cat_dim];
      all_t = all_t && is_transpose2d(m->inputs[sd].node) &&
              meta(m->inputs[sd].node->inputs[0]).shape.rank() == 2;
    }
    const int64_t other = ins.before->outputs[0].shape[side == 0 ? 0 : 1];
    std::vector<ValueRef> parts;
    if (all_t) {
      for (const Node* m : mms) parts.push_back(m->inputs[sd].node->inputs[0]);
      Shape cs = side == 0 ? Shape{total, other} : Shape{other, total};
      Attrs cat_rows{AttrValue(int64_t(1 - cat_dim))},
          swap{AttrValue(int64_t(0)), AttrValue(int64_t(1))};
      ValueRef c = make(ins, *ops::cat, std::move(cat_rows), parts, cs);
      Shape ts = side == 0 ? Shape{other, total} : Shape{total, other};
      return make(ins, *ops::transpose, std::move(swap), {c}, ts);
    }
    for (const Node* m : mms) parts.push_back(m->inputs[sd]);
    Shape cs = side == 0 ? Shape{other, total} : Shape{total, other};
    Attrs cat_cols{AttrValue(cat_dim)};
    return make(ins, *ops::cat, std::move(cat_cols), parts, cs);
  }

  // root = [A_1 .. A_n] [B_1; ..; B_n] (+ the other leaves).
  void rewrite(Node* root, const Products& pr) {
    const int64_t M = root->outputs[0].shape[0], N = root->outputs[0].shape[1];
    Insert ins{root, {}};
    ValueRef a = concat(ins, pr.mms, 0), b = concat(ins, pr.mms, 1);
    if (pr.rest.empty()) {
      // The root itself becomes the product (its users and fetches keep pointing at it).
      root->op = &*ops::matmul;
      root->attrs = Attrs{};
      root->inputs = {a, b};
    } else {
      ValueRef acc = make(ins, *ops::matmul, Attrs{}, {a, b}, Shape{M, N});
      for (size_t i = 0; i + 1 < pr.rest.size(); ++i)
        acc = make(ins, *ops::add, Attrs{}, {acc, pr.rest[i]}, Shape{M, N});
      root->inputs = {acc, pr.rest.back()};
    }
    inserts_.push_back(std::move(ins));
  }

  // New nodes go right before their root, keeping the program in topological order (their
  // inputs all precede the root's old inputs' position or are among them).
  void insert_made() {
    auto& nodes = p_.graph->nodes;
    std::unordered_map<const Node*, std::vector<std::unique_ptr<Node>>*> made_for;
    for (auto& i : inserts_) made_for[i.before] = &i.made;
    std::vector<std::unique_ptr<Node>> out;
    for (auto& n : nodes) {
      auto f = made_for.find(n.get());
      if (f != made_for.end())
        for (auto& m : *f->second) out.push_back(std::move(m));
      out.push_back(std::move(n));
    }
    nodes = std::move(out);
  }

  Program& p_;
  std::unordered_map<const Node*, int> uses_;
  std::set<const Node*> fetched_;
  std::set<const Node*> absorbed_;  // adds inside a tree already rewritten from its root
  std::vector<Insert> inserts_;
};

}  // namespace

int merge_matmul_sums(Program& p) { return MatmulSums(p).run(); }

}  // namespace kiln::detail
