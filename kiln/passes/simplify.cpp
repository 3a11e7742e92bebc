// Algebraic simplification and transpose folding over a Program (see simplify.h). Both walk the
// nodes once in topological order, substituting as they go, so chains (neg(neg(neg(neg(x)))),
// transpose of transpose of ...) collapse in one pass; dce then drops the dead nodes.
#include "kiln/passes/simplify.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"

namespace kiln::detail {
namespace {

using Key = std::pair<const Node*, int>;

const TensorMeta& meta(ValueRef v) { return v.node->outputs[static_cast<size_t>(v.index)]; }

// A Constant node whose every element equals c (small constants only: a large one is checked
// element by element, and large all-ones constants do not occur in practice).
bool constant_all(ValueRef v, double c) {
  const Node* n = v.node;
  if (n->kind != NodeKind::Constant || !n->value.defined() || !n->value.is_concrete()) return false;
  if (n->value.numel() > (1 << 16)) return false;
  for (double x : n->value.to_vector<double>())
    if (x != c) return false;
  return true;
}

// Whether broadcasting a tensor of shape c against x leaves x's shape as it is: c has no more
// dims than x and each of its dims is 1 or equals x's (static) dim. A dynamic dim of x may be 1
// at run time, so a constant dim > 1 against it could enlarge the result.
bool does_not_enlarge(const Shape& c, const Shape& x) {
  if (c.rank() > x.rank()) return false;
  int64_t off = x.rank() - c.rank();
  for (int64_t d = 0; d < c.rank(); ++d)
    if (c[d] != 1 && (x[d + off] < 0 || c[d] != x[d + off])) return false;
  return true;
}

// The permutation a transpose or permute node applies (out dim j = in dim p[j]); false for any
// other node.
bool perm_of_node(const Node* n, std::vector<int64_t>* p) {
  if (n->kind != NodeKind::Op || n->inputs.size() != 1) return false;
  int64_t r = meta(n->inputs[0]).shape.rank();
  if (n->is(ops::transpose)) {
    p->resize(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) (*p)[static_cast<size_t>(i)] = i;
    if (r > 0) {
      int64_t d0 = wrap_dim(n->attrs.i(0), r, "transpose");
      int64_t d1 = wrap_dim(n->attrs.i(1), r, "transpose");
      std::swap((*p)[static_cast<size_t>(d0)], (*p)[static_cast<size_t>(d1)]);
    }
    return true;
  }
  if (n->is(ops::permute)) {
    *p = n->attrs.ints(0);
    for (auto& d : *p) d = wrap_dim(d, r, "permute");
    return true;
  }
  return false;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Follows a chain of transposes/permutes down from v: the value under the whole chain and the
// composed permutation relative to it. Returns the chain length (0: v is not a permutation).
int permutation_chain(ValueRef v, ValueRef* root, std::vector<int64_t>* perm) {
  int len = 0;
  std::vector<int64_t> p;
  perm->clear();
  for (int64_t i = 0; i < meta(v).shape.rank(); ++i) perm->push_back(i);
  while (perm_of_node(v.node, &p)) {
    // out[j] = mid[perm[j]] and mid[i] = in[p[i]], so out[j] = in[p[perm[j]]].
    for (auto& d : *perm) d = p[static_cast<size_t>(d)];
    v = v.node->inputs[0];
    ++len;
  }
  *root = v;
  return len;
}

// Whether a value may share memory with a variable: a variable itself, or a view / forwarded
// value (view ops, control flow, assign, while) of something that may. A copy of such a value
// must stay a copy: an assign later in the same run would change what it reads.
class StateAliasing {
 public:
  bool operator()(const Node* n) {
    auto it = memo_.find(n);
    if (it != memo_.end()) return it->second;
    bool r = false;
    if (n->kind == NodeKind::Variable) {
      r = true;
    } else if (n->kind == NodeKind::Op && n->op->view) {
      // A kView op aliases input 0 only; other ops with a view function (switch, merge, while)
      // may forward any input.
      size_t k_end = n->op->has(kView) ? std::min<size_t>(1, n->inputs.size()) : n->inputs.size();
      for (size_t k = 0; k < k_end && !r; ++k) r = (*this)(n->inputs[k].node);
    }
    memo_[n] = r;
    return r;
  }

 private:
  std::unordered_map<const Node*, bool> memo_;
};

const OpDef& permute_op() {
  static const OpDef& op = *ops::permute;
  return op;
}

}  // namespace

int replace_all_uses(Program& p, ValueRef from, ValueRef to) {
  int changed = 0;
  for (auto& n : p.graph->nodes)
    for (auto& in : n->inputs)
      if (in == from) {
        in = to;
        ++changed;
      }
  for (auto& f : p.fetches)
    if (f == from) {
      f = to;
      ++changed;
    }
  return changed;
}

namespace {

// simplify's rules, node by node: which value a node's users may read instead of its output
// (forwarding), and the nodes rewritten in place (a reshape of a reshape, a chain of permutes).
class Simplifier {
 public:
  explicit Simplifier(const Program& p) {
    for (const auto& f : p.fetches) fetched_.insert({f.node, f.index});
  }
  int rewrites = 0;

  // The value n's users may read instead of its output, if any (to). May rewrite n in place.
  bool forward(Node* n, ValueRef* to) {
    const OpDef* op = n->op;
    if (op == ops::mul) return neutral(n, 0, 1, 1.0, to) || neutral(n, 1, 0, 1.0, to);
    if (op == ops::add) return neutral(n, 0, 1, 0.0, to) || neutral(n, 1, 0, 0.0, to);
    if (op == ops::sub) return neutral(n, 0, 1, 0.0, to);
    if (op == ops::div) return neutral(n, 0, 1, 1.0, to);
    if (op == ops::neg) {
      const Node* inner = n->inputs[0].node;
      if (!inner->is(ops::neg)) return false;
      *to = inner->inputs[0];
      return copy_forwardable(n, *to);
    }
    if (op == ops::cast) {
      *to = n->inputs[0];
      return copy_forwardable(n, *to);
    }
    if (op == ops::clone) {
      // contiguous() is a clone in a graph. A kernel's output is a fresh contiguous buffer, as
      // is a contiguous constant, so the copy changes nothing.
      const Node* src = n->inputs[0].node;
      bool fresh =
          (src->kind == NodeKind::Op && !src->op->view) ||
          (src->kind == NodeKind::Constant && src->value.defined() && src->value.is_contiguous());
      *to = n->inputs[0];
      return fresh && copy_forwardable(n, *to);
    }
    if (op == ops::expand) {
      *to = n->inputs[0];
      return view_forwardable(n, *to);
    }
    if (op == ops::expand_as) {
      *to = n->inputs[0];
      return meta(*to).shape.is_static() && view_forwardable(n, *to);
    }
    if (op == ops::reshape) {
      if (n->inputs[0].node->is(ops::reshape)) {  // the -1 resolves against the same numel
        n->inputs[0] = n->inputs[0].node->inputs[0];
        ++rewrites;
      }
      *to = n->inputs[0];
      int dynamic = 0;
      for (int64_t d : meta(*to).shape) dynamic += d < 0;
      return dynamic <= 1 && view_forwardable(n, *to);
    }
    if (op == ops::transpose || op == ops::permute) return fold_permutes(n, to);
    return false;
  }

 private:
  // A copy (mul by one, cast, clone...) may be replaced by its source only when it has the
  // same dtype and shape, is not fetched, and the source cannot change later in the run.
  bool copy_forwardable(const Node* n, ValueRef to) {
    const TensorMeta& o = n->outputs[0];
    return !fetched_.count({n, 0}) && meta(to).dtype == o.dtype && meta(to).shape == o.shape &&
           !aliases_state_(to.node);
  }
  static bool view_forwardable(const Node* n, ValueRef to) {
    const TensorMeta& o = n->outputs[0];
    return meta(to).dtype == o.dtype && meta(to).shape == o.shape;
  }
  // x (op) c -> x where c is a constant that is all `value` and does not broadcast x.
  bool neutral(const Node* n, size_t x, size_t c, double value, ValueRef* to) {
    ValueRef vx = n->inputs[x], vc = n->inputs[c];
    if (!constant_all(vc, value) || !does_not_enlarge(meta(vc).shape, meta(vx).shape)) return false;
    if (!copy_forwardable(n, vx)) return false;
    *to = vx;
    return true;
  }
  // A chain of transposes and permutes: its root when they cancel out, else one permute of the
  // root (n rewritten in place).
  bool fold_permutes(Node* n, ValueRef* to) {
    ValueRef root;
    std::vector<int64_t> perm;
    int len = permutation_chain(ValueRef{n, 0}, &root, &perm);
    if (is_identity(perm)) {
      *to = root;
      return true;
    }
    if (len > 1) {  // one permute of the root instead of a chain of views
      n->op = &permute_op();
      n->attrs = Attrs{AttrValue(perm)};
      n->inputs[0] = root;
      ++rewrites;
    }
    return false;
  }

  std::set<Key> fetched_;
  StateAliasing aliases_state_;
};

}  // namespace

int simplify(Program& p) {
  std::map<Key, ValueRef> subst;  // node output -> the equal value its users read instead
  Simplifier rules(p);
  for (auto& up : p.graph->nodes) {
    Node* n = up.get();
    for (auto& in : n->inputs) {
      auto it = subst.find({in.node, in.index});
      if (it != subst.end()) in = it->second;
    }
    // A node with symbolic sizes (Node::patches) is what its sizes make it on each run.
    if (n->kind != NodeKind::Op || n->outputs.size() != 1 || !n->patches.empty()) continue;
    ValueRef to;
    if (rules.forward(n, &to)) {
      subst[{n, 0}] = to;
      ++rules.rewrites;
    }
  }
  for (auto& f : p.fetches) {
    auto it = subst.find({f.node, f.index});
    if (it != subst.end()) f = it->second;
  }
  if (rules.rewrites) dce(p);
  return rules.rewrites;
}

// Matmul readers from which a transposed operand is worth one contiguous copy.
constexpr int kHoistUses = 4;

namespace {

// Matmul operands read through what needs no copy: a clone of a permuted view (the GEMM takes
// the view) and transpose/permute chains that cancel. Returns how many operands changed.
int fold_matmul_operands(Program& p) {
  std::unordered_map<const Node*, int> uses, matmul_uses;
  std::set<const Node*> fetched;
  for (const auto& f : p.fetches) fetched.insert(f.node);
  for (const auto& n : p.graph->nodes)
    for (const auto& in : n->inputs) {
      ++uses[in.node];
      if (n.get()->is(ops::matmul)) ++matmul_uses[in.node];
    }
  int folded = 0;
  for (auto& up : p.graph->nodes) {
    Node* n = up.get();
    if (!n->is(ops::matmul)) continue;
    for (auto& operand : n->inputs) {
      ValueRef v = operand, root;
      std::vector<int64_t> perm;
      // clone(permuted view) read only by matmuls: the GEMM takes the view as a flag when its
      // last two dims are the source's last two (in either order); otherwise matmul makes the
      // same one copy itself, so dropping the clone never costs more.
      const Node* c = v.node;
      if (c->is(ops::clone) && !fetched.count(c) && uses[c] == matmul_uses[c] &&
          matmul_uses[c] < kHoistUses && permutation_chain(c->inputs[0], &root, &perm) > 0) {
        int64_t r = static_cast<int64_t>(perm.size());
        if (r >= 2) {
          int64_t a = perm[static_cast<size_t>(r - 2)], b = perm[static_cast<size_t>(r - 1)];
          if (std::min(a, b) == r - 2 && std::max(a, b) == r - 1) v = c->inputs[0];
        }
      }
      // transpose/permute chains that cancel: read the source itself.
      if (permutation_chain(v, &root, &perm) > 0 && is_identity(perm)) v = root;
      if (!(v == operand)) {
        operand = v;
        ++folded;
      }
    }
  }
  return folded;
}

// A transposed matrix that many matmuls read (a recurrent weight, once per time step) is
// copied once into its own layout: with few rows (M = the batch) the GEMM runs 1.3-1.5x
// slower reading a transposed operand (W6: [32, 1024] x [1024, 256] 145 -> 93 us).
// Keyed by the transposed source: before cse, each time step has its own transpose node.
// Returns how many copies were made.
int hoist_shared_transposes(Program& p) {
  int folded = 0;
  struct Group {
    Node* first = nullptr;  // the earliest transpose node (it precedes every reader)
    std::vector<std::pair<Node*, size_t>> readers;
  };
  std::map<std::pair<const Node*, int>, Group> groups;
  std::unordered_map<const Node*, size_t> pos;
  for (size_t i = 0; i < p.graph->nodes.size(); ++i) pos[p.graph->nodes[i].get()] = i;
  for (const auto& up : p.graph->nodes) {
    Node* n = up.get();
    if (!n->is(ops::matmul)) continue;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      Node* t = n->inputs[k].node;
      if (!(t->is(ops::transpose) || t->is(ops::permute)) || t->outputs[0].shape.rank() != 2 ||
          !t->outputs[0].shape.is_static() || meta(t->inputs[0]).shape.rank() != 2)
        continue;
      std::vector<int64_t> perm;
      if (!perm_of_node(t, &perm) || is_identity(perm)) continue;
      Group& g = groups[{t->inputs[0].node, t->inputs[0].index}];
      if (!g.first || pos[t] < pos[g.first]) g.first = t;
      g.readers.push_back({n, k});
    }
  }
  std::unordered_map<const Node*, std::unique_ptr<Node>> clones;
  for (auto& [src, g] : groups) {
    if (static_cast<int>(g.readers.size()) < kHoistUses) continue;
    auto c = std::make_unique<Node>();
    c->kind = NodeKind::Op;
    c->op = &*ops::clone;
    c->inputs = {ValueRef{g.first, 0}};
    c->outputs = g.first->outputs;
    for (auto& [n, k] : g.readers) n->inputs[k] = ValueRef{c.get(), 0};
    clones[g.first] = std::move(c);
    ++folded;
  }
  if (!clones.empty()) {
    std::vector<std::unique_ptr<Node>> out;
    for (auto& n : p.graph->nodes) {
      auto it = clones.find(n.get());
      out.push_back(std::move(n));
      if (it != clones.end()) out.push_back(std::move(it->second));
    }
    p.graph->nodes = std::move(out);
  }
  return folded;
}

}  // namespace

int fold_transposes(Program& p) {
  const int folded = fold_matmul_operands(p) + hoist_shared_transposes(p);
  if (folded) dce(p);
  return folded;
}

}  // namespace kiln::detail
