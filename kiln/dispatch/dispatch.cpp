// Eager dispatch. Hot path for a small op: one handler check, inference, one allocation per
// output from the caching allocator, the kernel, and a branch on grad mode.
#include "kiln/dispatch/dispatch.h"

#include "kiln/core/tls.h"
#include "kiln/dispatch/autocast.h"
#include "kiln/dispatch/profile.h"
#include "kiln/kernels/cpu/cast.h"

namespace kiln::detail {
namespace {
thread_local bool t_grad_mode KILN_TLS = true;
thread_local SymbolicHandler* t_handler KILN_TLS = nullptr;
SymbolicHandler* g_graph_handler = nullptr;
thread_local bool t_capture_all KILN_TLS = false;
AutogradRecorder g_recorder = nullptr;
thread_local uint64_t t_count KILN_TLS = 0;
thread_local bool t_autocast KILN_TLS = false;
thread_local DType t_autocast_dtype KILN_TLS = DType::BFloat16;
}  // namespace

SymbolicHandler* set_symbolic_handler(SymbolicHandler* h) {
  SymbolicHandler* p = t_handler;
  t_handler = h;
  return p;
}
SymbolicHandler* symbolic_handler() { return t_handler; }
void set_graph_handler(SymbolicHandler* h) { g_graph_handler = h; }
void set_capture_all(bool on) { t_capture_all = on; }
bool capturing() { return t_capture_all && t_handler; }

namespace {
const OpDef* (*g_producer_hook)(const Tensor&) = nullptr;
}
const OpDef* producer_op(const Tensor& t) {
  return t.defined() && t.is_symbolic() && g_producer_hook ? g_producer_hook(t) : nullptr;
}
void set_producer_hook(const OpDef* (*hook)(const Tensor&)) { g_producer_hook = hook; }

namespace {
Shape (*g_hint_hook)(const Tensor&) = nullptr;
struct PendingPatches {
  const OpDef* op = nullptr;
  std::vector<SizePatch> patches;
};
thread_local PendingPatches t_pending;
}  // namespace
Shape hint_shape(const Tensor& t) {
  if (!t.defined()) return {};
  if (!t.is_symbolic() || t.shape().is_static()) return t.shape();
  return g_hint_hook ? g_hint_hook(t) : Shape{};
}
void set_hint_hook(Shape (*hook)(const Tensor&)) { g_hint_hook = hook; }

TensorList call_patched(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                        std::span<const SizePatch> patches) {
  if (patches.size() > inputs.size())
    fail(op.name.c_str(), "internal: ", patches.size(), " size patches for ", inputs.size(),
         " inputs");
  PendingPatches prev = std::move(t_pending);
  t_pending.op = &op;
  t_pending.patches.assign(patches.begin(), patches.end());
  struct Restore {
    PendingPatches& cur;
    PendingPatches prev;
    ~Restore() { cur = std::move(prev); }
  } restore{t_pending, std::move(prev)};
  SymbolicHandler* h = t_handler ? t_handler : g_graph_handler;
  if (!h) fail(op.name.c_str(), "a symbolic size needs a graph being built or traced");
  return h->handle(op, inputs, attrs);
}

Attrs resolve_patches(const Attrs& attrs, std::span<const SizePatch> patches,
                      std::span<const Tensor> sizes) {
  Attrs a = attrs;
  for (size_t k = 0; k < patches.size(); ++k) {
    const Tensor& t = sizes[k];
    if (!t.defined() || !t.is_concrete() || t.numel() != 1 || !is_integral(t.dtype()))
      fail("size", "internal: a symbolic size attribute needs a concrete integer scalar, got ",
           t.defined() ? str_cat(t.dtype(), t.shape()) : std::string("an undefined tensor"));
    a.set_int(static_cast<size_t>(patches[k].attr), patches[k].elem, t.item<int64_t>());
  }
  return a;
}

TensorList call_node(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                     std::span<const SizePatch> patches) {
  if (patches.empty()) return call(op, ins, attrs);
  const size_t n = ins.size() - patches.size();
  bool symbolic = false;
  for (size_t k = n; k < ins.size(); ++k) symbolic = symbolic || ins[k].is_symbolic();
  if (symbolic) return call_patched(op, ins, attrs, patches);
  return call(op, ins.first(n), resolve_patches(attrs, patches, ins.subspan(n)));
}

TensorList run_node_kernel(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                           std::span<const SizePatch> patches) {
  if (patches.empty()) return run_kernel(op, ins, attrs);
  const size_t n = ins.size() - patches.size();
  return run_kernel(op, ins.first(n), resolve_patches(attrs, patches, ins.subspan(n)));
}

std::vector<SizePatch> take_patches(const OpDef& op) {
  if (t_pending.op != &op) return {};
  t_pending.op = nullptr;
  return std::move(t_pending.patches);
}
void set_autograd_recorder(AutogradRecorder r) { g_recorder = r; }
namespace {
InplaceWriter g_writer = nullptr;
ViewRefresher g_refresher = nullptr;
}  // namespace
void set_inplace_writer(InplaceWriter w) { g_writer = w; }
InplaceWriter inplace_writer() { return g_writer; }
void set_view_refresher(ViewRefresher r) { g_refresher = r; }
uint64_t eager_op_count() { return t_count; }

namespace {
TensorList run_checked(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);

// Eager deadness (TensorFlow's executor rule): an op with a dead input runs no kernel and its
// outputs are dead. Inference still runs, so the op checks its inputs as a graph builder would
// and the dead outputs carry dtypes and shapes (later ops on them check theirs too). merge is
// the exception: it forwards its live input.
TensorList dead_outputs(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (op.has(kMerge)) return op.view(inputs, attrs);
  MetaList metas = op.infer(inputs, attrs);
  TensorList outs;
  outs.reserve(metas.size());
  for (const auto& m : metas) outs.push_back(dead_tensor(m.shape, m.dtype));
  return outs;
}

TensorList run_kernel_impl(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (op.num_inputs >= 0 && static_cast<int>(inputs.size()) != op.num_inputs)
    fail(op.name.c_str(), "expected ", op.num_inputs, " inputs, got ", inputs.size());
  bool dead = false;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorImpl* i = inputs[k].impl();
    if (!i) fail(op.name.c_str(), "input ", k, " is an undefined tensor");
    dead = dead || i->dead;
  }
  check_attr_count(op, attrs);
  if (dead) [[unlikely]]
    return with_attr_check(op, attrs, [&] { return dead_outputs(op, inputs, attrs); });
  ++t_count;
  return with_attr_check(op, attrs, [&] { return run_checked(op, inputs, attrs); });
}

TensorList run_checked(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (op.view) return op.view(inputs, attrs);
  MetaList metas = op.infer(inputs, attrs);
  TensorList outs;
  outs.reserve(metas.size());
  for (const auto& m : metas) {
    // A size attribute of -1 means "dynamic" in a graph; run now, nothing can resolve it.
    if (!m.shape.is_static()) [[unlikely]]
      fail(op.name.c_str(), "output shape ", m.shape,
           " has a dynamic dim: a -1 size is only meaningful in a graph");
    outs.push_back(empty(m.shape, m.dtype));
  }
  if (op.contiguous_inputs) {
    bool all = true;
    for (const auto& t : inputs) all = all && t.is_contiguous();
    if (!all) {
      TensorList cin;
      for (const auto& t : inputs) cin.push_back(t.is_contiguous() ? t : raw_contiguous_copy(t));
      invoke_kernel(op, std::span<const Tensor>(cin.data(), cin.size()),
                    std::span<Tensor>(outs.data(), outs.size()), attrs);
      return outs;
    }
  }
  invoke_kernel(op, inputs, std::span<Tensor>(outs.data(), outs.size()), attrs);
  return outs;
}

bool computed_wider(const OpDef& op, const Tensor& t) {
  if (!t.defined()) return false;
  const DType d = t.impl()->dtype;
  return is_reduced(d) && (op.native_dtypes & dtype_bit(d)) == 0;
}

// The generic path for dtypes a kernel does not take: see invoke_kernel.
[[gnu::noinline]] void invoke_wider(const OpDef& op, std::span<const Tensor> inputs,
                                    std::span<Tensor> outputs, const Attrs& attrs) {
  TensorList cin, cout;
  cin.reserve(inputs.size());
  for (const auto& t : inputs) {
    if (!computed_wider(op, t) || !t.is_concrete()) {
      cin.push_back(t);
      continue;
    }
    Tensor w = empty(t.shape(), compute_dtype(t.dtype()));
    cpu::cast_copy(t, w);
    cin.push_back(std::move(w));
  }
  cout.reserve(outputs.size());
  for (auto& o : outputs)
    cout.push_back(computed_wider(op, o) ? empty(o.shape(), compute_dtype(o.dtype())) : o);
  op.kernel(std::span<const Tensor>(cin.data(), cin.size()),
            std::span<Tensor>(cout.data(), cout.size()), attrs);
  for (size_t k = 0; k < outputs.size(); ++k)
    if (computed_wider(op, outputs[k])) cpu::cast_copy(cout[k], outputs[k]);
}
}  // namespace

void invoke_kernel(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                   const Attrs& attrs) {
  bool wider = false;
  for (const auto& t : inputs) wider = wider || computed_wider(op, t);
  for (const auto& t : outputs) wider = wider || computed_wider(op, t);
  if (wider) [[unlikely]]
    return invoke_wider(op, inputs, outputs, attrs);
  op.kernel(inputs, outputs, attrs);
}

TensorList run_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (!profiling_enabled()) [[likely]]
    return run_kernel_impl(op, inputs, attrs);
  // Self time: when a kernel runs other ops through run_kernel, their time is charged to them,
  // not to it.
  static thread_local double t_children = 0;
  const double saved = t_children;
  t_children = 0;
  const double t0 = profile_now();
  TensorList outs = run_kernel_impl(op, inputs, attrs);
  const double elapsed = profile_now() - t0;
  profile_record(op, elapsed - t_children, inputs);
  t_children = saved + elapsed;
  return outs;
}

namespace {
// Whether autocast under `policy` casts a tensor of dtype d, and to what.
bool autocast_target(AutocastPolicy policy, DType d, DType* to) {
  // As torch: float64 is never cast (nor are integer and bool tensors).
  if (!is_floating(d) || d == Float64) return false;
  *to = policy == AutocastPolicy::kLower ? t_autocast_dtype : Float32;
  return d != *to;
}
bool autocast_target(AutocastPolicy policy, const Tensor& t, DType* to) {
  return t.defined() && autocast_target(policy, t.dtype(), to);
}

// A recorded cast op (kiln/ops' cast(), looked up here: ops sit above the dispatcher).
Tensor autocast_cast(const Tensor& t, DType to) {
  static const OpDef& cast_op = OpRegistry::get().at("cast");
  return call1(cast_op, {t}, {static_cast<int64_t>(to)});
}

// The inputs autocast gives `op`, in *cast; false when none changes. Casts run through the
// dispatcher, so autograd, graph building and tracing record them.
bool autocast_inputs(const OpDef& op, std::span<const Tensor> inputs, TensorList* cast) {
  bool any = false;
  DType to;
  for (const auto& t : inputs) any = any || autocast_target(op.autocast, t, &to);
  if (!any) return false;
  cast->reserve(inputs.size());
  for (const auto& t : inputs)
    cast->push_back(autocast_target(op.autocast, t, &to) ? autocast_cast(t, to) : t);
  return true;
}
}  // namespace

Tensor autocast_arg(AutocastPolicy policy, const Tensor& t) {
  DType to;
  if (!t_autocast || policy == AutocastPolicy::kNone || !autocast_target(policy, t, &to)) return t;
  return autocast_cast(t, to);
}

DType autocast_input_dtype(AutocastPolicy policy, DType d) {
  DType to;
  if (!t_autocast || policy == AutocastPolicy::kNone || !autocast_target(policy, d, &to)) return d;
  return to;
}

TensorList call(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (t_autocast && op.autocast != AutocastPolicy::kNone) [[unlikely]] {
    TensorList cast;
    if (autocast_inputs(op, inputs, &cast))
      return call(op, std::span<const Tensor>(cast.data(), cast.size()), attrs);
  }
  if (t_capture_all && t_handler) return t_handler->handle(op, inputs, attrs);
  for (const auto& t : inputs) {
    if (t.defined() && t.is_symbolic()) {
      SymbolicHandler* h = t_handler ? t_handler : g_graph_handler;
      if (!h)
        fail(op.name.c_str(),
             "input is symbolic but no graph is being built; use the tensor "
             "inside its graph or fetch it with Session::run");
      return h->handle(op, inputs, attrs);
    }
  }
  TensorList outs = run_kernel(op, inputs, attrs);
  // Differentiable views remember their base (in-place writes through them rewrite its history).
  if (op.view && op.grad && !inputs.empty())
    for (auto& o : outs)
      if (o.is_concrete() && o.shares_storage(inputs[0])) {
        TensorImpl* in = inputs[0].impl();
        o.impl()->view_base = in->view_base ? in->view_base : inputs[0].impl_ptr();
        o.impl()->view_version = in->storage->version();
      }
  if (t_grad_mode && op.grad && g_recorder) {
    bool need = false, dead = false;
    for (const auto& t : inputs) {
      TensorImpl* i = t.impl();
      if (i->view_base && i->view_version != i->storage->version() && g_refresher) [[unlikely]]
        g_refresher(t);
      need = need || t.requires_grad();
      dead = dead || i->dead;
    }
    // Dead outputs have no gradient (and merge's output is its live input itself, whose
    // history must stay its own).
    if (need && !dead) g_recorder(op, inputs, std::span<Tensor>(outs.data(), outs.size()), attrs);
  }
  return outs;
}

Tensor call1(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  TensorList outs = call(op, inputs, attrs);
  return std::move(outs[0]);
}

}  // namespace kiln::detail

namespace kiln {
bool grad_mode_enabled() { return detail::t_grad_mode; }
void set_grad_mode(bool on) { detail::t_grad_mode = on; }

bool autocast_enabled() { return detail::t_autocast; }
DType autocast_dtype() { return detail::t_autocast_dtype; }

void detail::set_autocast_state(bool enabled, DType dtype) {
  // float16 runs through the kernels' float32 compute path (no native float16 GEMM on CPU).
  if (dtype != DType::BFloat16 && dtype != DType::Float16)
    fail("autocast", "the autocast dtype must be bfloat16 or float16, got ", dtype);
  t_autocast = enabled;
  t_autocast_dtype = dtype;
}

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : prev_enabled_(detail::t_autocast), prev_dtype_(detail::t_autocast_dtype) {
  detail::set_autocast_state(enabled, enabled ? dtype : prev_dtype_);
}
AutocastGuard::AutocastGuard(bool enabled) : AutocastGuard(detail::t_autocast_dtype, enabled) {}
AutocastGuard::~AutocastGuard() {
  detail::t_autocast = prev_enabled_;
  detail::t_autocast_dtype = prev_dtype_;
}
}  // namespace kiln
