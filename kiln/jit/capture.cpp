// Captured state of a JIT trace (capture.h): the capturing handler that turns a closure's
// parameters and a module's buffers into graph inputs, and the in-place write hook that records
// writes into them instead of doing them at trace time.
#include "kiln/jit/capture.h"

#include "kiln/dispatch/grad_mode.h"
#include "kiln/graph/node.h"
#include "kiln/ops/ops.h"
#include "kiln/ops/traced_write.h"

namespace kiln::detail::jit_engine {
namespace {

thread_local CaptureScope* t_scope = nullptr;

bool write_hook(Tensor& self, const Tensor& value) {
  return t_scope ? t_scope->write(self, value) : false;
}

// Runs an op call with capturing off (the handler below this scope, or the graph builder).
struct Redispatch {
  explicit Redispatch(SymbolicHandler* below) : mine(set_symbolic_handler(below)) {
    set_capture_all(false);
  }
  ~Redispatch() {
    set_symbolic_handler(mine);
    set_capture_all(true);
  }
  SymbolicHandler* mine;
};

}  // namespace

CaptureScope* capture_scope() { return t_scope; }

CaptureScope::CaptureScope(Graph g, const std::vector<std::pair<Tensor, Tensor>>& known, bool lazy)
    : g_(std::move(g)), lazy_(lazy) {
  for (const auto& [t, sym] : known) {
    value[t.impl()] = sym;
    known_.insert(t.impl());
  }
  prev_scope_ = t_scope;
  t_scope = this;
  prev_handler_ = set_symbolic_handler(this);
  set_capture_all(true);
  prev_hook_ = reinterpret_cast<void*>(set_traced_write_hook(&write_hook));
}

CaptureScope::~CaptureScope() {
  set_traced_write_hook(reinterpret_cast<TracedWriteHook>(prev_hook_));
  set_symbolic_handler(prev_handler_);
  set_capture_all(prev_scope_ != nullptr);
  t_scope = prev_scope_;
}

CaptureScope::Pause::Pause() : scope(t_scope) {
  handler = scope ? set_symbolic_handler(scope->prev_handler_) : nullptr;
  if (scope) {
    set_capture_all(false);
    set_traced_write_hook(nullptr);
    t_scope = nullptr;
  }
}

CaptureScope::Pause::~Pause() {
  if (!scope) return;
  t_scope = scope;
  set_traced_write_hook(&write_hook);
  set_capture_all(true);
  set_symbolic_handler(handler);
}

bool CaptureScope::liftable(const Tensor& t) const {
  if (made_.count(t.impl())) return false;
  return t.requires_grad() || t.numel() > kSmallCapture;
}

void CaptureScope::note(const Tensor& t) {
  for (const auto& f : found)
    if (f.is_same(t)) return;
  found.push_back(t);
  if (lazy_ && t.requires_grad() && grad_mode_enabled()) need_trace = true;
}

TensorList CaptureScope::handle(const OpDef& op, std::span<const Tensor> inputs,
                                const Attrs& attrs) {
  TensorList ins(inputs.begin(), inputs.end());
  bool sym = false, foreign = false;
  // While a while_loop's body is built inside the trace (an input capture hook is active), its
  // values are the trace's too: a parameter the body reads (an RNN's bias) is captured state.
  const bool in_body = input_capture() != nullptr;
  for (const auto& t : ins)
    if (t.defined() && t.is_symbolic()) (in_body || Graph::of(t) == g_ ? sym : foreign) = true;
  // An op of another graph (a pass, a graph the function builds itself) is not the trace's.
  if (!foreign)
    for (auto& t : ins) {
      if (!t.defined() || !t.is_concrete() || t.is_dead()) continue;
      if (auto it = value.find(t.impl()); it != value.end()) {
        t = it->second;
        sym = true;
      } else if (liftable(t)) {
        note(t);  // a constant of this trace; the engine traces again with it as an input
      }
    }
  TensorList out;
  {
    Redispatch r(prev_handler_);
    out = call(op, std::span<const Tensor>(ins.data(), ins.size()), attrs);
  }
  if (!sym && !foreign)
    for (const auto& o : out)
      if (o.defined() && o.is_concrete()) made_.insert(o.impl());
  return out;
}

bool CaptureScope::write(Tensor& self, const Tensor& v) {
  if (!self.defined() || !self.is_concrete() || self.is_dead()) return false;
  // A write through a view of a tensor that something else holds stays eager (the base is
  // what would be state); a view whose base only it holds (a Python 0-d literal) is its own.
  if (self.impl()->view_base && self.impl()->view_base.use_count() > 1) return false;
  if (v.is_symbolic() && !(Graph::of(v) == g_)) return false;
  const TensorImpl* k = self.impl();
  const bool made = made_.count(k) > 0;
  if (made && v.is_concrete()) return false;  // a tensor of the trace, written eagerly
  Tensor nv = v;
  if (nv.dtype() != self.dtype()) nv = cast(nv, self.dtype());
  if (nv.shape() != self.shape()) nv = expand(nv, self.shape());
  if (nv.is_concrete()) nv = g_.constant(nv.clone());
  value[k] = nv;
  if (made) {
    hold_.push_back(self);  // a local of the trace: its address must not be reused meanwhile
    return true;
  }
  if (!known_.count(k)) {
    note(self);
    if (lazy_) need_trace = true;
    return true;
  }
  for (const auto& w : written)
    if (w.is_same(self)) return true;
  written.push_back(self);
  return true;
}

void CaptureScope::drop_temporaries() {
  std::vector<Tensor> keep;
  const auto& consts = g_.impl()->constants;
  for (auto& t : found) {
    long others = t.impl_ptr().use_count() - 1;  // less `found` itself
    if (consts.count(t.impl())) --others;
    if (others > 0) keep.push_back(t);
  }
  found = std::move(keep);
}

}  // namespace kiln::detail::jit_engine
