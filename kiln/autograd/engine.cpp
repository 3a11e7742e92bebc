// Recording (installed into the dispatcher) and the backward engine: dependency counting over
// the nodes reachable from the roots, gradients summed per output slot, leaves accumulated.
#include <algorithm>
#include <atomic>
#include <optional>
#include <queue>
#include <unordered_map>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/ops.h"

namespace kiln {
namespace {

std::atomic<uint64_t> g_seq{0};

AutogradMeta& meta(TensorImpl* t) {
  if (!t->autograd) t->autograd = std::make_unique<AutogradMeta>();
  return *t->autograd;
}

Edge edge_of(const Tensor& t) {
  Edge e;
  if (!t.requires_grad()) return e;
  AutogradMeta& m = *t.impl()->autograd;
  if (m.grad_fn) {
    e.fn = m.grad_fn;
    e.output_nr = m.output_nr;
  } else {
    e.leaf = t.impl_ptr();
  }
  return e;
}

void record(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs,
            const Attrs& attrs) {
  auto node = std::make_shared<GradNode>();
  node->op = &op;
  node->attrs = attrs;
  node->seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  for (const auto& t : inputs) {
    node->inputs.push_back(t);
    node->input_versions.push_back(t.impl()->version());
    node->next.push_back(edge_of(t));
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& o = outputs[k];
    Tensor alias = o.is_concrete() ? make_view(o, o.shape(), o.strides(), o.offset()) : o;
    node->outputs.push_back(alias);
    node->output_versions.push_back(o.is_concrete() ? o.impl()->version() : 0);
    node->out_impls.push_back(o.impl_ptr());
    if (is_floating(o.dtype())) {
      AutogradMeta& m = meta(o.impl());
      m.requires_grad = true;
      m.grad_fn = node;
      m.output_nr = static_cast<uint32_t>(k);
    }
  }
}

// An in-place op with autograd (x.add_(y) on a tensor with history): `result` was computed out
// of place and recorded by node N, and its values are about to be written into `self`. N saved
// `self` (and maybe other aliases of its storage) as inputs; their values change with the
// write, so N gets
// snapshots instead: fresh buffers holding the old values, with the old autograd identity
// (grad_fn, output_nr), so that gradients of gradients still reach the old history. Then `self`
// becomes N's output: its history continues from N, as torch rebases an in-place op's history.
void rebase_in_place(Tensor& self, const Tensor& result) {
  if (!result.requires_grad() || !result.impl()->autograd->grad_fn) return;
  const std::shared_ptr<GradNode>& node = result.impl()->autograd->grad_fn;
  for (size_t k = 0; k < node->inputs.size(); ++k) {
    Tensor& in = node->inputs[k];
    if (!in.is_concrete() || !in.shares_storage(self)) continue;
    Tensor snap = raw_contiguous_copy(in);
    if (in.impl()->autograd) {
      const AutogradMeta& old = *in.impl()->autograd;
      AutogradMeta& m = meta(snap.impl());
      m.requires_grad = old.requires_grad;
      m.grad_fn = old.grad_fn;
      m.output_nr = old.output_nr;
    }
    in = snap;
    node->input_versions[k] = snap.impl()->version();
  }
  const uint32_t nr = result.impl()->autograd->output_nr;
  AutogradMeta& m = meta(self.impl());
  m.requires_grad = true;
  m.grad_fn = node;
  m.output_nr = nr;
  node->out_impls[nr] = self.impl_ptr();
}

struct Installer {
  Installer() {
    set_autograd_recorder(&record);
    set_inplace_rebaser(&rebase_in_place);
  }
} g_installer;

Tensor accumulate(const Tensor& old, const Tensor& g) {
  if (!old.defined()) return g;
  if (!g.defined()) return old;
  return add(old, g);
}

// Reduces a broadcast gradient back to the input's shape.
Tensor fit_to(const Tensor& g, const Tensor& input) {
  if (!g.defined()) return g;
  if (g.shape() == input.shape()) return g;
  return sum_to(g, input.shape());
}

struct Capture {
  std::vector<Tensor> inputs;
  std::vector<Tensor> results;
};

void run_engine(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads_in,
                bool retain_graph, bool create_graph, Capture* cap) {
  if (roots.empty()) fail("backward", "no outputs given");
  std::vector<Tensor> root_grads(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) fail("backward", "output ", i, " is undefined");
    if (!r.requires_grad())
      fail("backward", "output ", i, " (shape ", r.shape(),
           ") does not require grad and has no grad_fn");
    if (i < grads_in.size() && grads_in[i].defined()) {
      if (grads_in[i].shape() != r.shape())
        fail("backward", "gradient shape ", grads_in[i].shape(), " does not match output shape ",
             r.shape());
      root_grads[i] = grads_in[i];
    } else {
      if (r.numel() != 1)
        fail("backward",
             "grad can be implicitly created only for scalar outputs; output has shape ", r.shape(),
             ", pass a gradient");
      root_grads[i] = ones_like(r.detach());
    }
  }

  std::optional<NoGradGuard> ng;
  std::optional<EnableGradGuard> eg;
  if (create_graph)
    eg.emplace();
  else
    ng.emplace();

  // Captured non-leaf inputs for grad(): (node, slot) -> index.
  auto capture_leaf = [&](TensorImpl* leaf, const Tensor& g) -> bool {
    if (!cap) return false;
    bool hit = false;
    for (size_t k = 0; k < cap->inputs.size(); ++k)
      if (cap->inputs[k].impl() == leaf) {
        cap->results[k] = accumulate(cap->results[k], g);
        hit = true;
      }
    return hit;
  };

  auto deliver_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    if (!g.defined()) return;
    if (cap) {
      capture_leaf(leaf.get(), g);
      return;
    }
    AutogradMeta& m = meta(leaf.get());
    Tensor old = m.grad ? Tensor(m.grad) : Tensor();
    Tensor ng2 = accumulate(old, create_graph ? g : g.detach());
    m.grad = ng2.impl_ptr();
  };

  // Discover nodes and count dependencies.
  std::unordered_map<GradNode*, int> deps;
  std::unordered_map<GradNode*, SmallVec<Tensor, 4>> buf;
  std::vector<GradNode*> stack;
  for (const auto& r : roots) {
    auto& fn = r.impl()->autograd->grad_fn;
    if (fn && !deps.count(fn.get())) {
      deps[fn.get()] = 0;
      stack.push_back(fn.get());
    }
  }
  while (!stack.empty()) {
    GradNode* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next) {
      if (!e.fn) continue;
      auto it = deps.find(e.fn.get());
      if (it == deps.end()) {
        deps[e.fn.get()] = 1;
        stack.push_back(e.fn.get());
      } else {
        ++it->second;
      }
    }
  }

  // Seed the roots.
  for (size_t i = 0; i < roots.size(); ++i) {
    AutogradMeta& m = *roots[i].impl()->autograd;
    if (m.grad_fn) {
      auto& b = buf[m.grad_fn.get()];
      if (b.size() < m.grad_fn->out_impls.size()) b.resize(m.grad_fn->out_impls.size());
      b[m.output_nr] = accumulate(b[m.output_nr], root_grads[i]);
    } else {
      deliver_leaf(roots[i].impl_ptr(), root_grads[i]);
    }
  }

  auto cmp = [](GradNode* a, GradNode* b) { return a->seq < b->seq; };
  std::priority_queue<GradNode*, std::vector<GradNode*>, decltype(cmp)> ready(cmp);
  for (auto& [n, d] : deps)
    if (d == 0) ready.push(n);

  // Keep nodes alive while we run (edges hold them; roots hold theirs).
  std::vector<std::shared_ptr<GradNode>> alive;

  while (!ready.empty()) {
    GradNode* n = ready.top();
    ready.pop();
    auto bit = buf.find(n);
    SmallVec<Tensor, 4> gout;
    if (bit != buf.end()) gout = std::move(bit->second);
    gout.resize(n->out_impls.size());
    if (n->released)
      fail("backward", "trying to backward through the graph a second time (op '", n->name(),
           "'); the saved tensors were freed. Pass retain_graph=true to the first backward");
    for (size_t k = 0; k < n->inputs.size(); ++k)
      if (n->inputs[k].impl()->version() != n->input_versions[k])
        fail("backward", "input ", k, " of op '", n->name(),
             "' was modified in place after it was saved for the gradient");
    // Outputs modified in place since recording are withheld from the gradient rule; only a
    // rule that reads one (exp, tanh, sqrt...) fails, as PyTorch fails only for saved outputs.
    int modified_out = -1;
    for (size_t k = 0; k < n->outputs.size(); ++k)
      if (n->outputs[k].is_concrete() && n->outputs[k].impl()->version() != n->output_versions[k])
        modified_out = static_cast<int>(k);

    // retain_grad and grad() captures of non-leaf outputs.
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      if (!gout[k].defined()) continue;
      auto impl = n->out_impls[k].lock();
      if (!impl) continue;
      if (cap) {
        capture_leaf(impl.get(), gout[k]);
      } else if (impl->autograd && impl->autograd->retains_grad) {
        Tensor old = impl->autograd->grad ? Tensor(impl->autograd->grad) : Tensor();
        impl->autograd->grad = accumulate(old, gout[k].detach()).impl_ptr();
      }
    }

    bool any_needed = false;
    SmallVec<bool, 4> needs;
    for (const auto& e : n->next) {
      needs.push_back(e.defined());
      any_needed = any_needed || e.defined();
    }
    TensorList gin;
    if (any_needed) {
      // Materialize missing output grads as zeros; re-wrap saved outputs for create_graph.
      TensorList outs;
      SmallVec<bool, 4> flows;
      std::shared_ptr<GradNode> self;
      for (size_t k = 0; k < n->outputs.size(); ++k) {
        const Tensor& o = n->outputs[k];
        flows.push_back(gout[k].defined());
        if (!gout[k].defined() && is_floating(o.dtype())) gout[k] = zeros(o.shape(), o.dtype());
        if (create_graph && is_floating(o.dtype())) {
          if (!self) {
            auto impl = n->out_impls[k].lock();
            if (impl && impl->autograd) self = impl->autograd->grad_fn;
          }
          Tensor w = make_view(o, o.shape(), o.strides(), o.offset());
          if (self) {
            AutogradMeta& m = meta(w.impl());
            m.requires_grad = true;
            m.grad_fn = self;
            m.output_nr = static_cast<uint32_t>(k);
          }
          outs.push_back(w);
        } else {
          outs.push_back(o);
        }
        if (modified_out >= 0 && o.is_concrete() && o.impl()->version() != n->output_versions[k])
          outs.back() = Tensor();
      }
      GradCtx ctx{*n->op,
                  n->attrs,
                  std::span<const Tensor>(n->inputs.data(), n->inputs.size()),
                  std::span<const Tensor>(outs.data(), outs.size()),
                  std::span<const Tensor>(gout.data(), gout.size()),
                  std::span<const bool>(needs.data(), needs.size()),
                  std::span<const bool>(flows.data(), flows.size())};
      if (modified_out < 0) {
        gin = n->op->grad(ctx);
      } else {
        try {
          gin = n->op->grad(ctx);
        } catch (const Error&) {
          fail("backward", "output ", modified_out, " of op '", n->name(),
               "' was modified in place after it was saved for the gradient");
        }
      }
      if (gin.size() != n->next.size())
        fail("backward", "gradient rule of '", n->name(), "' returned ", gin.size(),
             " gradients for ", n->next.size(), " inputs");
    }

    for (size_t k = 0; k < n->next.size(); ++k) {
      const Edge& e = n->next[k];
      if (!e.defined()) continue;
      Tensor g = any_needed ? fit_to(gin[k], n->inputs[k]) : Tensor();
      if (e.leaf) {
        deliver_leaf(e.leaf, g);
        continue;
      }
      auto& b = buf[e.fn.get()];
      if (b.size() < e.fn->out_impls.size()) b.resize(e.fn->out_impls.size());
      if (g.defined()) b[e.output_nr] = accumulate(b[e.output_nr], g);
      alive.push_back(e.fn);
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
    if (!retain_graph) {
      n->inputs.clear();
      n->outputs.clear();
      n->released = true;
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph, bool create_graph) {
  run_engine(outputs, grad_outputs, retain_graph || create_graph, create_graph, nullptr);
}

namespace {
SymbolicGradHook g_sym_grad = nullptr;
}
void set_symbolic_grad_hook(SymbolicGradHook h) { g_sym_grad = h; }

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool create_graph, bool allow_unused) {
  bool symbolic = false;
  for (const auto& o : outputs) symbolic = symbolic || (o.defined() && o.is_symbolic());
  if (symbolic) {
    if (!g_sym_grad) fail("grad", "symbolic outputs but no graph support is linked");
    std::vector<Tensor> r = g_sym_grad(outputs, inputs, grad_outputs);
    for (size_t k = 0; k < r.size(); ++k)
      if (!r[k].defined() && !allow_unused)
        fail("grad", "input ", k, " (shape ", inputs[k].shape(),
             ") was not used to compute the outputs; pass allow_unused=true");
    return r;
  }
  Capture cap;
  cap.inputs = inputs;
  cap.results.resize(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!inputs[k].requires_grad())
      fail("grad", "input ", k, " (shape ", inputs[k].shape(), ") does not require grad");
  run_engine(outputs, grad_outputs, retain_graph || create_graph, create_graph, &cap);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!cap.results[k].defined()) {
      if (!allow_unused)
        fail("grad", "input ", k, " (shape ", inputs[k].shape(),
             ") was not used to compute the outputs; pass allow_unused=true");
      continue;
    }
    if (cap.results[k].shape() != inputs[k].shape())
      cap.results[k] = sum_to(cap.results[k], inputs[k].shape());
  }
  return cap.results;
}

// ---- Tensor's autograd methods ---------------------------------------------------------------

Tensor& Tensor::requires_grad_(bool on) {
  if (!impl_) fail("requires_grad_", "tensor is undefined");
  if (on && !is_floating(dtype()))
    fail("requires_grad_", "only floating tensors can require grad, got ", dtype(), " (shape ",
         shape(), ")");
  if (impl_->autograd && impl_->autograd->grad_fn && !on)
    fail("requires_grad_", "cannot turn off requires_grad on a non-leaf; use detach()");
  meta(impl_.get()).requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl_ || !impl_->autograd || !impl_->autograd->grad) return Tensor();
  return Tensor(impl_->autograd->grad);
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined() && g.shape() != shape())
    fail("set_grad", "gradient shape ", g.shape(), " does not match tensor shape ", shape());
  meta(impl_.get()).grad = g.impl_ptr();
}

void Tensor::zero_grad() const {
  if (impl_ && impl_->autograd) impl_->autograd->grad.reset();
}

void Tensor::retain_grad() const {
  if (!requires_grad()) fail("retain_grad", "tensor does not require grad");
  meta(impl_.get()).retains_grad = true;
}

bool Tensor::is_leaf() const { return !(impl_ && impl_->autograd && impl_->autograd->grad_fn); }

const std::shared_ptr<GradNode>& Tensor::grad_fn() const {
  static const std::shared_ptr<GradNode> none;
  if (!impl_ || !impl_->autograd) return none;
  return impl_->autograd->grad_fn;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  kiln::backward({*this}, {gradient}, retain_graph, create_graph);
}

}  // namespace kiln
