// Recording (installed into the dispatcher) and the backward engine: dependency counting over
// the nodes reachable from the roots, gradients summed per output slot, leaves accumulated.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <queue>
#include <unordered_map>

#include "kiln/autograd/autograd.h"
#include "kiln/autograd/grad_node.h"
#include "kiln/autograd/grad_ready.h"
#include "kiln/dispatch/autocast.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/handles.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln {
namespace {

std::atomic<uint64_t> g_seq{0};

// Grad-ready hooks (grad_ready.h). Copied out under the lock once per backward, so a hook may
// add or remove hooks.
std::mutex g_hooks_mu;
std::vector<std::pair<int, GradReadyHooks>> g_hooks;
std::atomic<int> g_num_hooks{0};
int g_next_hook_id = 1;

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

// ---- in-place writes with autograd --------------------------------------------------------
// `result` was computed out of place (recorded by node N when it requires grad) and its values
// go into `self`. N may have saved `self` (and other aliases of its storage) as inputs; their
// values change with the write, so N gets snapshots instead: fresh buffers holding the old
// values, with the old autograd identity (grad_fn, output_nr), so that gradients of gradients
// still reach the old history. Then the write, then the new histories:
//  - `self` not a view: it becomes N's output (torch rebases an in-place op's history); a
//    result without history (fill_, copy_ of a constant) leaves it without history.
//  - `self` a view of base B (torch's CopySlices): B becomes the output of an
//    as_strided_scatter node (inputs: B's previous identity, result), and `self` the output of
//    an as_strided view of that. Both nodes read only shapes, so they take an identity-only
//    stand-in for B (no storage: nothing to snapshot, no version to go stale); a leaf B, whose
//    gradient must reach the tensor itself, is taken as it is.
// Other views of the storage notice the write by its version and re-derive their identity
// from their base when next used (refresh_view).

// A tensor with t's shape, dtype and autograd identity but no storage.
Tensor identity_only(const Tensor& t) {
  auto impl = make_tensor_impl();
  const TensorImpl& s = *t.impl();
  impl->shape = s.shape;
  impl->strides = s.strides;
  impl->offset = s.offset;
  impl->dtype = s.dtype;
  impl->contiguous = s.contiguous;
  if (s.autograd) {
    AutogradMeta& m = meta(impl.get());
    m.requires_grad = s.autograd->requires_grad;
    m.grad_fn = s.autograd->grad_fn;
    m.output_nr = s.autograd->output_nr;
  }
  return Tensor(std::move(impl));
}

void snapshot_aliases(const Tensor& self, const Tensor& result) {
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
}

void clear_history(TensorImpl* t) {
  if (t->autograd && t->autograd->grad_fn) {
    t->autograd->grad_fn.reset();
    t->autograd->requires_grad = false;
  }
}

// Geometry of a view relative to its (contiguous) base: as_strided's attributes.
Attrs view_geometry(const TensorImpl& v, const TensorImpl& base) {
  return Attrs{std::vector<int64_t>(v.shape.begin(), v.shape.end()),
               std::vector<int64_t>(v.strides.begin(), v.strides.end()), v.offset - base.offset};
}

// `view` becomes an as_strided view of its base's current identity (none if the base has none).
// The base is contiguous: write_in_place and refresh_view refuse the others.
void set_view_identity(const Tensor& view) {
  TensorImpl* vi = view.impl();
  vi->view_version = vi->storage->version();
  Tensor base(vi->view_base);
  if (!base.requires_grad()) {
    clear_history(vi);
    return;
  }
  static const OpDef& as_strided_op = *ops::as_strided;
  const Tensor in[1] = {base.is_leaf() ? base : identity_only(base)};
  Tensor out[1] = {view};
  record(as_strided_op, in, out, view_geometry(*vi, *base.impl()));
}

void refresh_view(const Tensor& view) {
  if (!grad_mode_enabled()) return;
  // A view that owns its gradient (requires_grad_() on a view) keeps it.
  const TensorImpl* vi = view.impl();
  if (vi->autograd && vi->autograd->requires_grad && !vi->autograd->grad_fn) return;
  // as_strided describes views of contiguous bases only; a stale history must not be used.
  const TensorImpl& base = *vi->view_base;
  if (!base.contiguous && base.autograd && base.autograd->requires_grad)
    fail("view", "a view (shape ", view.shape(), ") of a non-contiguous tensor (shape ", base.shape,
         ") whose storage was written since the view was taken cannot be given the "
         "new history; take the view again after the write");
  set_view_identity(view);
}

void write_in_place(const char* name, Tensor& self, const Tensor& result, void (*write)(void*),
                    void* ctx) {
  TensorImpl* si = self.impl();
  const std::shared_ptr<TensorImpl> base = si->view_base;
  Attrs geom;
  Tensor old_base;
  if (base) {
    Tensor b(base);
    if (b.requires_grad() && b.is_leaf())
      fail(name, "a view (shape ", self.shape(), ") of a leaf tensor that requires grad (shape ",
           b.shape(), ") cannot be modified in place in grad mode; wrap the write in NoGradGuard");
    if (!base->contiguous)
      fail(name, "writing through a view (shape ", self.shape(), ") of a non-contiguous tensor ",
           "(shape ", b.shape(), ") with autograd is not supported; write the out-of-place op");
    geom = view_geometry(*si, *base);
    // (as_strided's inference rejects views whose positions overlap, like expand's.)
    static const OpDef& scatter = *ops::as_strided_scatter;
    try {
      const Tensor probe[2] = {b, result};
      (void)scatter.infer(std::span<const Tensor>(probe, 2), geom);
    } catch (const Error& e) {
      fail(name, "cannot write through this view (shape ", self.shape(), ", strides ",
           ints_str(std::vector<int64_t>(self.strides().begin(), self.strides().end())),
           ") with autograd: ", e.what());
    }
    old_base = identity_only(b);
  }
  snapshot_aliases(self, result);
  write(ctx);
  if (!base) {
    if (result.requires_grad() && result.impl()->autograd->grad_fn) {
      const std::shared_ptr<GradNode>& node = result.impl()->autograd->grad_fn;
      const uint32_t nr = result.impl()->autograd->output_nr;
      AutogradMeta& m = meta(si);
      m.requires_grad = true;
      m.grad_fn = node;
      m.output_nr = nr;
      node->out_impls[nr] = self.impl_ptr();
    } else {
      clear_history(si);
    }
    return;
  }
  Tensor b(base);
  if (old_base.requires_grad() || result.requires_grad()) {
    static const OpDef& scatter = *ops::as_strided_scatter;
    const Tensor in[2] = {old_base, result};
    Tensor out[1] = {b};
    record(scatter, in, out, geom);
  }
  set_view_identity(self);
}

struct Installer {
  Installer() {
    set_autograd_recorder(&record);
    set_inplace_writer(&write_in_place);
    set_view_refresher(&refresh_view);
  }
} g_installer;

// A dead gradient (eager control flow: a gradient rule's switch_ sends the untaken side a dead
// tensor) is no gradient, as an undefined one.
bool no_grad_value(const Tensor& g) { return !g.defined() || g.is_dead(); }

Tensor accumulate(const Tensor& old, const Tensor& g) {
  if (no_grad_value(old)) return no_grad_value(g) ? Tensor() : g;
  if (no_grad_value(g)) return old;
  return add(old, g);
}

// Reduces a broadcast gradient back to the input's shape.
Tensor fit_to(const Tensor& g, const Tensor& input) {
  if (no_grad_value(g)) return Tensor();
  if (g.shape() == input.shape()) return g;
  return sum_to(g, input.shape());
}

struct Capture {
  std::vector<Tensor> inputs;
  std::vector<Tensor> results;
};

// The gradients the roots start from: the given ones (checked against the roots' shapes), ones
// for a scalar root given none, and none for a root whose given gradient is dead.
std::vector<Tensor> root_gradients(const std::vector<Tensor>& roots,
                                   const std::vector<Tensor>& grads_in) {
  if (roots.empty()) fail("backward", "no outputs given");
  std::vector<Tensor> root_grads(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) fail("backward", "output ", i, " is undefined");
    if (r.is_dead())
      fail("backward", "output ", i, " (", r.dtype(), r.shape(),
           ") is dead: it lies on the untaken side of a switch, so there is nothing to "
           "differentiate");
    if (!r.requires_grad())
      fail("backward", "output ", i, " (shape ", r.shape(),
           ") does not require grad and has no grad_fn");
    if (i < grads_in.size() && grads_in[i].is_dead()) {
      continue;  // a dead output gradient: nothing flows from this output
    } else if (i < grads_in.size() && grads_in[i].defined()) {
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
  return root_grads;
}

// One backward pass: the nodes reachable from the roots run their gradient rules in reverse
// recording order (seq), each once every consumer has delivered its output gradients; leaves
// accumulate .grad (backward) or the captured inputs collect theirs (grad(), `cap`).
class Backward {
 public:
  Backward(bool retain_graph, bool create_graph, Capture* cap)
      : retain_graph_(retain_graph), create_graph_(create_graph), cap_(cap) {}

  void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads_in) {
    const std::vector<Tensor> root_grads = root_gradients(roots, grads_in);
    std::optional<NoGradGuard> ng;
    std::optional<EnableGradGuard> eg;
    // Gradient rules run in the dtypes their forward ops saw (a cast's rule casts back).
    AutocastGuard no_autocast(false);
    if (create_graph_)
      eg.emplace();
    else
      ng.emplace();
    // Grad-ready hooks: only backward() (cap == nullptr) accumulates into leaves.
    if (!cap_ && g_num_hooks.load(std::memory_order_relaxed) > 0) {
      std::lock_guard<std::mutex> lk(g_hooks_mu);
      for (const auto& h : g_hooks) hooks_.push_back(h.second);
    }
    EndHooks end_hooks{&hooks_};
    for (const auto& h : hooks_)
      if (h.begin) h.begin();
    count_dependencies(roots, root_grads);
    seed(roots, root_grads);
    for (auto& [n, d] : deps_)
      if (d == 0) ready_.push(n);
    while (!ready_.empty()) {
      GradNode* n = ready_.top();
      ready_.pop();
      run_node(n);
    }
    end_hooks.ok = true;  // end(true) may raise (a failed collective): outside the destructor
    for (const auto& h : hooks_)
      if (h.end) h.end(true);
  }

 private:
  struct EndHooks {  // end(false) when backward raises, so a hook's state never dangles
    std::vector<GradReadyHooks>* hooks;
    bool ok = false;
    ~EndHooks() {
      if (ok) return;
      for (const auto& h : *hooks) try {
          if (h.end) h.end(false);
        } catch (...) {  // already unwinding from the first error, which is the one to report
        }
    }
  };
  struct LaterFirst {
    bool operator()(const GradNode* a, const GradNode* b) const { return a->seq < b->seq; }
  };

  // A gradient reaching a tensor grad() asked about. Returns whether it is one.
  bool capture(TensorImpl* t, const Tensor& g) {
    if (!cap_) return false;
    bool hit = false;
    for (size_t k = 0; k < cap_->inputs.size(); ++k)
      if (cap_->inputs[k].impl() == t) {
        cap_->results[k] = accumulate(cap_->results[k], g);
        hit = true;
      }
    return hit;
  }

  void deliver_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    if (!g.defined()) return;
    if (cap_) {
      capture(leaf.get(), g);
      return;
    }
    AutogradMeta& m = meta(leaf.get());
    Tensor old = m.grad ? Tensor(m.grad) : Tensor();
    m.grad = accumulate(old, create_graph_ ? g : g.detach()).impl_ptr();
  }

  // One of a leaf's edges has delivered: its hooks' leaf_ready runs after the last one.
  void leaf_delivered(const std::shared_ptr<TensorImpl>& leaf) {
    if (hooks_.empty()) return;
    auto it = leaf_pending_.find(leaf.get());
    if (it == leaf_pending_.end() || --it->second > 0) return;
    for (const auto& h : hooks_)
      if (h.leaf_ready) h.leaf_ready(leaf);
  }

  // Discovers the nodes reachable from the roots, counting the edges into each node (and, for
  // the hooks, into each leaf).
  void count_dependencies(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads) {
    std::vector<GradNode*> stack;
    for (size_t i = 0; i < roots.size(); ++i) {
      if (!root_grads[i].defined()) continue;  // a dead gradient: nothing flows from this root
      auto& fn = roots[i].impl()->autograd->grad_fn;
      if (fn && !deps_.count(fn.get())) {
        deps_[fn.get()] = 0;
        stack.push_back(fn.get());
      }
    }
    while (!stack.empty()) {
      GradNode* n = stack.back();
      stack.pop_back();
      for (const auto& e : n->next) {
        if (e.leaf && !hooks_.empty()) ++leaf_pending_[e.leaf.get()];
        if (!e.fn) continue;
        auto it = deps_.find(e.fn.get());
        if (it == deps_.end()) {
          deps_[e.fn.get()] = 1;
          stack.push_back(e.fn.get());
        } else {
          ++it->second;
        }
      }
    }
  }

  // The roots' gradients into their nodes' output slots, or straight into roots that are leaves.
  void seed(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads) {
    for (size_t i = 0; i < roots.size(); ++i) {
      if (!root_grads[i].defined()) continue;
      AutogradMeta& m = *roots[i].impl()->autograd;
      if (m.grad_fn) {
        auto& b = buf_[m.grad_fn.get()];
        if (b.size() < m.grad_fn->out_impls.size()) b.resize(m.grad_fn->out_impls.size());
        b[m.output_nr] = accumulate(b[m.output_nr], root_grads[i]);
      } else {
        if (!hooks_.empty()) ++leaf_pending_[roots[i].impl()];
        deliver_leaf(roots[i].impl_ptr(), root_grads[i]);
        leaf_delivered(roots[i].impl_ptr());
      }
    }
  }

  void run_node(GradNode* n) {
    auto bit = buf_.find(n);
    SmallVec<Tensor, 4> gout;
    if (bit != buf_.end()) gout = std::move(bit->second);
    gout.resize(n->out_impls.size());
    if (n->released)
      fail("backward", "trying to backward through the graph a second time (op '", n->name(),
           "'); the saved tensors were freed. Pass retain_graph=true to the first backward");
    // (View ops' rules read only their input's shape: a later write into it changes nothing
    // they use, as torch's view nodes save no values.)
    const bool reads_values = !(n->op && n->op->view);
    if (reads_values) check_saved_inputs(*n);
    keep_output_grads(*n, gout);
    bool any_needed = false;
    SmallVec<bool, 4> needs;
    for (const auto& e : n->next) {
      needs.push_back(e.defined());
      any_needed = any_needed || e.defined();
    }
    TensorList gin;
    if (any_needed) gin = apply_rule(*n, gout, needs, reads_values);
    pass_on(*n, gin, any_needed);
    if (!retain_graph_) {
      n->inputs.clear();
      n->outputs.clear();
      n->released = true;
    }
  }

  static void check_saved_inputs(const GradNode& n) {
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if ((!n.op || n.op->reads_input(k)) && n.inputs[k].impl()->version() != n.input_versions[k])
        fail("backward", "input ", k, " of op '", n.name(),
             "' was modified in place after it was saved for the gradient");
  }

  // retain_grad and grad() captures of non-leaf outputs.
  void keep_output_grads(const GradNode& n, const SmallVec<Tensor, 4>& gout) {
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (!gout[k].defined()) continue;
      auto impl = n.out_impls[k].lock();
      if (!impl) continue;
      if (cap_) {
        capture(impl.get(), gout[k]);
      } else if (impl->autograd && impl->autograd->retains_grad) {
        Tensor old = impl->autograd->grad ? Tensor(impl->autograd->grad) : Tensor();
        impl->autograd->grad = accumulate(old, gout[k].detach()).impl_ptr();
      }
    }
  }

  // Runs n's gradient rule on its output gradients (missing ones as zeros) and saved tensors.
  TensorList apply_rule(const GradNode& n, SmallVec<Tensor, 4>& gout,
                        const SmallVec<bool, 4>& needs, bool reads_values) {
    // Outputs modified in place since recording are withheld from the gradient rule; only a
    // rule that reads one (exp, tanh, sqrt...) fails, as PyTorch fails only for saved outputs.
    int modified_out = -1;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k].is_concrete() && n.outputs[k].impl()->version() != n.output_versions[k])
        modified_out = static_cast<int>(k);
    TensorList outs;
    SmallVec<bool, 4> flows;
    saved_outputs(n, gout, modified_out >= 0, outs, flows);
    GradCtx ctx{*n.op, n.attrs, std::span<const Tensor>(n.inputs.data(), n.inputs.size()),
                std::span<const Tensor>(outs.data(), outs.size()),
                std::span<const Tensor>(gout.data(), gout.size()),
                std::span<const bool>(needs.data(), needs.size()),
                std::span<const bool>(flows.data(), flows.size()),
                // (view rules read only shapes: no version check there, as above)
                reads_values
                    ? std::span<const uint32_t>(n.input_versions.data(), n.input_versions.size())
                    : std::span<const uint32_t>()};
    TensorList gin;
    if (modified_out < 0) {
      gin = n.op->grad(ctx);
    } else {
      try {
        gin = n.op->grad(ctx);
      } catch (const Error&) {
        fail("backward", "output ", modified_out, " of op '", n.name(),
             "' was modified in place after it was saved for the gradient");
      }
    }
    if (gin.size() != n.next.size())
      fail("backward", "gradient rule of '", n.name(), "' returned ", gin.size(), " gradients for ",
           n.next.size(), " inputs");
    return gin;
  }

  // The outputs the rule sees (`outs`; those written since recording withheld) and which of
  // them a gradient flows into (`flows`); missing output gradients become zeros. With
  // create_graph the outputs are re-wrapped as outputs of n, so the rule's use of them is
  // differentiable too.
  void saved_outputs(const GradNode& n, SmallVec<Tensor, 4>& gout, bool any_modified,
                     TensorList& outs, SmallVec<bool, 4>& flows) {
    std::shared_ptr<GradNode> self;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Tensor& o = n.outputs[k];
      flows.push_back(gout[k].defined());
      if (!gout[k].defined() && is_floating(o.dtype()) && !n.op->has(kUndefinedGradOutputs))
        gout[k] = zeros(o.shape(), o.dtype());
      if (create_graph_ && is_floating(o.dtype())) {
        if (!self) {
          auto impl = n.out_impls[k].lock();
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
      if (any_modified && o.is_concrete() && o.impl()->version() != n.output_versions[k])
        outs.back() = Tensor();
    }
  }

  // n's input gradients along its edges: into leaves, or into the producing nodes' slots, which
  // become ready once their last consumer has delivered.
  void pass_on(const GradNode& n, const TensorList& gin, bool any_needed) {
    for (size_t k = 0; k < n.next.size(); ++k) {
      const Edge& e = n.next[k];
      if (!e.defined()) continue;
      Tensor g = any_needed ? fit_to(gin[k], n.inputs[k]) : Tensor();
      if (e.leaf) {
        deliver_leaf(e.leaf, g);
        leaf_delivered(e.leaf);
        continue;
      }
      auto& b = buf_[e.fn.get()];
      if (b.size() < e.fn->out_impls.size()) b.resize(e.fn->out_impls.size());
      if (g.defined()) b[e.output_nr] = accumulate(b[e.output_nr], g);
      alive_.push_back(e.fn);
      if (--deps_[e.fn.get()] == 0) ready_.push(e.fn.get());
    }
  }

  const bool retain_graph_, create_graph_;
  Capture* const cap_;
  std::vector<GradReadyHooks> hooks_;
  // Edges still to deliver per leaf: a leaf is ready when its count reaches zero.
  std::unordered_map<TensorImpl*, int> leaf_pending_;
  std::unordered_map<GradNode*, int> deps_;
  std::unordered_map<GradNode*, SmallVec<Tensor, 4>> buf_;
  std::priority_queue<GradNode*, std::vector<GradNode*>, LaterFirst> ready_;
  // Keeps nodes alive while the pass runs (edges hold them; roots hold theirs).
  std::vector<std::shared_ptr<GradNode>> alive_;
};

void run_engine(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads_in,
                bool retain_graph, bool create_graph, Capture* cap) {
  Backward(retain_graph, create_graph, cap).run(roots, grads_in);
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph, bool create_graph) {
  run_engine(outputs, grad_outputs, retain_graph || create_graph, create_graph, nullptr);
}

int detail::add_grad_ready_hooks(GradReadyHooks hooks) {
  std::lock_guard<std::mutex> lk(g_hooks_mu);
  int id = g_next_hook_id++;
  g_hooks.emplace_back(id, std::move(hooks));
  g_num_hooks.store(static_cast<int>(g_hooks.size()), std::memory_order_relaxed);
  return id;
}

void detail::remove_grad_ready_hooks(int id) {
  std::lock_guard<std::mutex> lk(g_hooks_mu);
  std::erase_if(g_hooks, [id](const auto& h) { return h.first == id; });
  g_num_hooks.store(static_cast<int>(g_hooks.size()), std::memory_order_relaxed);
}

namespace {
SymbolicGradHook g_sym_grad = nullptr;
}
void detail::set_symbolic_grad_hook(SymbolicGradHook h) { g_sym_grad = h; }

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
