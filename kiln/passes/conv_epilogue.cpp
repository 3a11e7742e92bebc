// Pass "conv_epilogue": an inference CNN's convolutions with what follows them (bias, residual
// add, activation) in one kernel. ResNet-18 at batch 32 (W9) spent 60 ms of 880 on relus and 13
// on residual adds after its convolutions: onnxruntime fuses them, and this pass does the same.
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "kiln/dispatch/grad_mode.h"
#include "kiln/graph/node.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/ops/handles.h"
#include "kiln/ops/ops.h"
#include "kiln/passes/conv_layout_gather.h"
#include "kiln/passes/passes.h"

namespace kiln::detail {
namespace {

using namespace conv_layout;

const OpHandle sigmoid_op{"sigmoid"}, hardswish_op{"hardswish"};

// A per-channel vector that broadcasts over [N, O, H, W]: [O], [O, 1, 1] or [1, O, 1, 1].
bool channel_vector(const Shape& s, int64_t O) {
  if (!s.is_static()) return false;
  if (s.rank() == 1) return s[0] == O;
  if (s.rank() == 3) return s[0] == O && s[1] == 1 && s[2] == 1;
  if (s.rank() == 4) return s[0] == 1 && s[1] == O && s[2] == 1 && s[3] == 1;
  return false;
}

// Rebuilds the node list with `before[n]` inserted ahead of n (each list already in order).
void insert_before(Program& p,
                   std::unordered_map<const Node*, std::vector<std::unique_ptr<Node>>>& before) {
  if (before.empty()) return;
  std::vector<std::unique_ptr<Node>> out;
  for (auto& up : p.graph->nodes) {
    auto it = before.find(up.get());
    if (it != before.end())
      for (auto& x : it->second) out.push_back(std::move(x));
    out.push_back(std::move(up));
  }
  p.graph->nodes = std::move(out);
}

// fuse_conv_epilogue over one program: each node's readers and the fetched nodes, the nodes
// already taken into a fused convolution, and the reshapes of biases to place before it.
class EpilogueFuser {
 public:
  explicit EpilogueFuser(Program& p) : p_(p) {
    for (const auto& n : p.graph->nodes)
      for (const auto& in : n->inputs) users_[in.node].push_back(n.get());
    for (const auto& f : p.fetches) fetched_.insert(f.node);
  }

  // Fuses each float32 convolution with the bias, residual add and activation that follow it;
  // returns how many it fused.
  int run() {
    std::vector<Node*> convs;
    for (const auto& n : p_.graph->nodes)
      if (n->is(ops::conv2d) && n->outputs[0].dtype == Float32 && n->outputs[0].shape.rank() == 4 &&
          n->outputs[0].shape[1] >= 0)
        convs.push_back(n.get());
    int fused = 0;
    for (Node* c : convs) {
      if (absorbed_.count(c)) continue;
      Epilogue e = match(c);
      if (e.last == c) continue;
      fuse(c, e);
      ++fused;
    }
    if (!fused) return 0;
    insert_before(p_, before_);
    dce(p_);
    return fused;
  }

 private:
  // What follows a convolution c: `last` becomes the fused node; `chain` holds c and the nodes
  // up to `last`, which the fused node replaces.
  struct Epilogue {
    Node* last;
    ValueRef bias{}, residual{};
    int64_t act = cpu::kConvActNone;
    std::vector<Node*> chain;
  };

  // The one node reading n's value, when nothing else does (a value the gradient or a fetch
  // reads must stay).
  Node* only_user(const Node* n) const {
    if (fetched_.count(n) || n->outputs.size() != 1) return nullptr;
    auto it = users_.find(n);
    return it != users_.end() && it->second.size() == 1 ? it->second[0] : nullptr;
  }

  // n's only reader, unless a fused convolution took it already (a residual add reads two).
  Node* next(Node* n) const {
    Node* u = only_user(n);
    return u && !absorbed_.count(u) ? u : nullptr;
  }

  // add(v, other) or add(other, v) with v read once: other.
  static const ValueRef* other_addend(const Node* add, const Node* v) {
    if (!add->is(ops::add) || add->inputs.size() != 2) return nullptr;
    const bool l = add->inputs[0].node == v, r = add->inputs[1].node == v;
    if (l == r) return nullptr;
    return &add->inputs[l ? 1 : 0];
  }

  // c, then optionally a per-channel bias add, a residual add of the output's shape, and a
  // relu, hardswish or SiLU, each the only reader of the one before.
  Epilogue match(Node* c) const {
    const TensorMeta& out = c->outputs[0];
    const int64_t O = out.shape[1];
    Epilogue e{c};
    e.chain.push_back(c);
    auto take = [&](Node* u) {
      e.last = u;
      e.chain.push_back(u);
      return next(u);
    };
    Node* u = next(c);
    if (u) {
      const ValueRef* b = other_addend(u, e.last);
      if (b && meta(*b).dtype == Float32 && channel_vector(meta(*b).shape, O) &&
          u->outputs[0].shape == out.shape) {
        e.bias = *b;
        u = take(u);
      }
    }
    if (u) {
      const ValueRef* r = other_addend(u, e.last);
      // Static and equal: a dynamic dim of the residual could be 1 at run time and broadcast.
      if (r && meta(*r).dtype == Float32 && meta(*r).shape.is_static() &&
          meta(*r).shape == out.shape && u->outputs[0].shape == out.shape) {
        e.residual = *r;
        u = take(u);
      }
    }
    if (u && (u->is(ops::relu) || u->is(hardswish_op)) && u->inputs.size() == 1) {
      e.act = u->is(ops::relu) ? cpu::kConvActRelu : cpu::kConvActHardswish;
      e.last = u;
      e.chain.push_back(u);
    } else if (!u) {
      take_swish(e, out.shape);
    }
    return e;
  }

  // SiLU as exported, v * sigmoid(v): v's two readers are the sigmoid and the product, which
  // alone reads the sigmoid.
  void take_swish(Epilogue& e, const Shape& shape) const {
    const Node* v = e.last;
    if (fetched_.count(v)) return;
    auto it = users_.find(v);
    if (it == users_.end() || it->second.size() != 2) return;
    Node *sg = it->second[0], *m = it->second[1];
    if (!sg->is(sigmoid_op)) std::swap(sg, m);
    if (sg->is(sigmoid_op) && sg->inputs.size() == 1 && !absorbed_.count(sg) &&
        only_user(sg) == m && m->is(ops::mul) && m->inputs.size() == 2 && !absorbed_.count(m) &&
        ((m->inputs[0].node == v && m->inputs[1].node == sg) ||
         (m->inputs[1].node == v && m->inputs[0].node == sg)) &&
        m->outputs[0].shape == shape) {
      e.act = cpu::kConvActSwish;
      e.chain.push_back(sg);
      e.last = m;
      e.chain.push_back(m);
    }
  }

  // The kernel takes the bias as [O]: a constant is reshaped here, anything else by a reshape
  // view placed just before the fused node.
  ValueRef bias_vector(ValueRef bias, int64_t O, Node* last) {
    if (meta(bias).shape.rank() == 1) return bias;
    std::unique_ptr<Node> r;
    if (bias.node->kind == NodeKind::Constant && bias.node->value.is_concrete()) {
      NoGradGuard ng;
      r = constant_node(reshape(bias.node->value, Shape{O}).contiguous());
    } else {
      r = op_node(*ops::reshape, Attrs{Ints{O}}, {bias}, TensorMeta{Float32, Shape{O}});
    }
    ValueRef v{r.get(), 0};
    before_[last].push_back(std::move(r));
    return v;
  }

  // e.last becomes conv2d_fused(_add) of c's operands and e's; the rest of the chain goes.
  void fuse(Node* c, Epilogue& e) {
    const TensorMeta out = c->outputs[0];
    Node* last = e.last;
    e.chain.pop_back();  // `last` stays, as the fused node
    std::vector<ValueRef> inputs;
    if (e.residual.node) inputs.push_back(e.residual);
    inputs.push_back(c->inputs[0]);
    inputs.push_back(c->inputs[1]);
    if (e.bias.node) inputs.push_back(bias_vector(e.bias, out.shape[1], last));
    last->op = e.residual.node ? &*ops::conv2d_fused_add : &*ops::conv2d_fused;
    last->attrs = fused_attrs(c->attrs, e.bias.node != nullptr, e.act, 0, 0, false);
    last->inputs = std::move(inputs);
    last->outputs = {out};
    for (Node* n : e.chain) absorbed_.insert(n);
  }

  Program& p_;
  std::unordered_map<const Node*, std::vector<Node*>> users_;
  std::set<const Node*> fetched_, absorbed_;
  std::unordered_map<const Node*, std::vector<std::unique_ptr<Node>>> before_;
};

}  // namespace

int fuse_conv_epilogue(Program& p) {
  if (has_control_flow(p)) return 0;
  return EpilogueFuser(p).run();
}

}  // namespace kiln::detail
