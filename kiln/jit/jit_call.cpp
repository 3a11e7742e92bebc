// jit_call: a call of a compiled version recorded for autograd. Its backward runs the compiled
// backward graph (gradients() of the traced forward, fed the inputs and output gradients), or,
// where that graph cannot run (a size the trace assumed), fn again eagerly under autograd.
#include <algorithm>
#include <mutex>

#include "kiln/autograd/autograd.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/jit/version.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::detail::jit_engine {

// The call's arguments from jit_call's inputs, in the version's key order (a runtime scalar
// travels as a 0-d tensor, a constant scalar is the guarded value).
std::vector<Arg> args_from_inputs(const Version& v, std::span<const Tensor> tensors) {
  std::vector<Arg> args;
  size_t p = 0;
  for (const auto& ak : v.key) {
    Arg a;
    a.kind = ak.kind;
    if (ak.kind == Arg::kTensor) a.t = tensors[p++];
    if (ak.kind == Arg::kTensorList)
      for (size_t t = 0; t < ak.shapes.size(); ++t) a.ts.push_back(tensors[p++]);
    if (ak.kind == Arg::kScalar || ak.kind == Arg::kBool)
      a.v = ak.runtime ? tensors[p++].item<double>() : ak.value;
    args.push_back(a);
  }
  return args;
}

namespace {

struct GradTable {
  std::mutex mu;
  std::vector<Version*> versions;
};
GradTable& grad_table() {
  static GradTable* t = new GradTable();
  return *t;
}

Version& version_of(const Attrs& a) {
  auto& t = grad_table();
  std::lock_guard<std::mutex> lk(t.mu);
  const int64_t id = a.i(0);
  if (id < 0 || id >= static_cast<int64_t>(t.versions.size()) ||
      !t.versions[static_cast<size_t>(id)])
    fail("jit_call", "compiled version ", id,
         " no longer exists (the jitted function was destroyed before this call's backward)");
  return *t.versions[static_cast<size_t>(id)];
}

// Sets the generator to the state a forward recorded (jit_call's rng_state) for the scope, so a
// recomputed forward draws what it drew; puts the caller's state back after.
class RngReplay {
 public:
  explicit RngReplay(const std::vector<int64_t>& state) {
    if (state.empty()) return;
    if (state.size() != 4)
      fail("jit_call", "rng_state must be empty or the 4 words of get_rng_state, got ",
           state.size());
    saved_ = get_rng_state();
    std::vector<uint64_t> at;
    for (int64_t w : state) at.push_back(static_cast<uint64_t>(w));
    set_rng_state(at);
  }
  ~RngReplay() {
    if (!saved_.empty()) set_rng_state(saved_);
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  std::vector<uint64_t> saved_;
};

// The gradient of output k (kUndefinedGradOutputs: an output no gradient reached comes
// undefined; the backward graphs take zeros there). An output that is dead (it lies on the
// untaken side of a Switch) feeds a dead gradient, which the backward's Switch/Merge route
// around; its shape may hold dynamic dims, so no zeros can be made for it.
Tensor out_grad(const GradCtx& c, size_t k) {
  if (c.g(k).defined()) return c.g(k).detach();
  if (c.out(k).is_dead()) return c.out(k);
  return zeros(c.out(k).shape(), c.out(k).dtype());
}

// A dead input gradient (the input is read only on an untaken side) is zero.
Tensor live_grad(const Tensor& g, const Tensor& in) {
  return g.is_dead() ? zeros(in.shape(), in.dtype()) : g;
}

// The compiled backward graph, fed with jit_call's inputs and output gradients.
TensorList compiled_vjp(Version& v, const GradCtx& c) {
  FeedDict feeds;
  for (size_t k = 0; k < v.g_inputs.size(); ++k) feeds.push_back({v.g_inputs[k], c.in(k).detach()});
  for (size_t k = 0; k < v.g_out_grads.size(); ++k)
    if (v.g_out_grads[k].defined()) feeds.push_back({v.g_out_grads[k], out_grad(c, k)});
  std::vector<Tensor> fetch;
  std::vector<size_t> which;
  for (size_t k = 0; k < v.g_in_grads.size(); ++k)
    if (v.g_in_grads[k].defined() && c.need(k)) {
      fetch.push_back(v.g_in_grads[k]);
      which.push_back(k);
    }
  TensorList out;
  out.resize(c.inputs.size());
  if (fetch.empty()) return out;
  std::vector<Tensor> r = v.bwd_session->run(fetch, feeds);
  for (size_t j = 0; j < which.size(); ++j) out[which[j]] = live_grad(r[j], c.in(which[j]));
  return out;
}

// The backward graph of its own, fed with the inputs, the output gradients and the activations
// the forward saved (jit_call's outputs past the function's own).
TensorList saved_vjp(Version& v, const GradCtx& c) {
  FeedDict feeds;
  for (size_t k = 0; k < v.s_inputs.size(); ++k) feeds.push_back({v.s_inputs[k], c.in(k).detach()});
  for (size_t k = 0; k < v.s_out_grads.size(); ++k)
    if (v.s_out_grads[k].defined()) feeds.push_back({v.s_out_grads[k], out_grad(c, k)});
  const size_t n_out = v.g_outputs.size();
  if (c.outputs.size() != n_out + v.s_saved.size())
    fail("jit_call", "internal: ", c.outputs.size(), " outputs, expected ", n_out, " + ",
         v.s_saved.size(), " saved");
  for (size_t i = 0; i < v.s_saved.size(); ++i)
    feeds.push_back({v.s_saved[i], c.out(n_out + i).detach()});
  std::vector<Tensor> fetch;
  std::vector<size_t> which;
  for (size_t k = 0; k < v.s_in_grads.size(); ++k)
    if (v.s_in_grads[k].defined() && c.need(k)) {
      fetch.push_back(v.s_in_grads[k]);
      which.push_back(k);
    }
  TensorList out;
  out.resize(c.inputs.size());
  if (fetch.empty()) return out;
  std::vector<Tensor> r = v.bwd_saved_session->run(fetch, feeds);
  // An input read only by the untaken side of a Switch gets a dead gradient: it did not affect
  // this call's outputs, so its gradient is zero.
  for (size_t j = 0; j < which.size(); ++j) out[which[j]] = live_grad(r[j], c.in(which[j]));
  return out;
}

// The forward of a version that saves activations: its outputs, then the saved values.
TensorList run_saving(Version& v, std::span<const Tensor> in) {
  FeedDict feeds;
  for (size_t k = 0; k < v.g_inputs.size() && k < in.size(); ++k)
    feeds.push_back({v.g_inputs[k], in[k]});
  std::vector<Tensor> fetch = v.g_outputs;
  fetch.insert(fetch.end(), v.saved.begin(), v.saved.end());
  NoGradGuard ng;
  std::vector<Tensor> r = v.fwd_saved_session->run(fetch, feeds);
  return TensorList(r.begin(), r.end());
}

// jit_call's gradient taken eagerly: fn rerun with autograd on the inputs (the draws replayed,
// the module buffers it assigns left as they were), then grad() of its outputs.
TensorList eager_vjp(Version& v, const GradCtx& c) {
  EnableGradGuard on;
  std::vector<Tensor> xs;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    Tensor x = c.in(k).detach();
    if (c.need(k) && is_floating(x.dtype())) x.requires_grad_();
    xs.push_back(x);
  }
  std::vector<Arg> args = args_from_inputs(v, xs);
  for (const auto& ak : v.key)
    if (ak.runtime) {  // fn takes a runtime scalar as a 0-d tensor
      size_t i = static_cast<size_t>(&ak - v.key.data());
      args[i].kind = Arg::kTensor;
      args[i].t = scalar_tensor(args[i].v, Float32);
    }
  args.resize(std::min(args.size(), v.user_arity));
  std::vector<Tensor> saved;
  for (Tensor* s : v.state_slots) saved.push_back(*s);
  struct Restore {
    Version& v;
    std::vector<Tensor>& saved;
    ~Restore() {
      for (size_t j = 0; j < saved.size(); ++j) *v.state_slots[j] = saved[j];
    }
  } restore{v, saved};
  std::vector<Tensor> outs = v.fn(args);
  std::vector<Tensor> ys, gs, wrt;
  std::vector<size_t> which;
  for (size_t k = 0; k < outs.size() && k < v.num_user_outputs; ++k)
    if (outs[k].defined() && outs[k].requires_grad() && c.g(k).defined()) {
      ys.push_back(outs[k]);
      gs.push_back(c.g(k).detach());
    }
  for (size_t k = 0; k < xs.size(); ++k)
    if (xs[k].requires_grad()) {
      wrt.push_back(xs[k]);
      which.push_back(k);
    }
  TensorList out;
  out.resize(c.inputs.size());
  if (ys.empty() || wrt.empty()) return out;
  std::vector<Tensor> g = grad(ys, wrt, gs, false, false, /*allow_unused=*/true);
  for (size_t j = 0; j < which.size(); ++j) out[which[j]] = g[j];
  return out;
}

const OpDef& kJitCall =
    def_op({.name = "jit_call",
            .num_inputs = -1,
            .attr_names = {"version", "rng_state"},
            .traits = kUndefinedGradOutputs,
            .infer =
                [](std::span<const Tensor>, const Attrs& a) {
                  Version* v = &version_of(a);
                  MetaList m;
                  for (const auto& o : v->g_outputs) m.push_back(TensorMeta{o.dtype(), o.shape()});
                  if (v->saved_ok)
                    for (const auto& o : v->saved) m.push_back(TensorMeta{o.dtype(), o.shape()});
                  return m;
                },
            // Outputs never alias an input or each other: the autograd recorder gives each
            // output this node as its history, and an output that was the caller's own tensor
            // (fn returned its input) would turn the caller's leaf into a non-leaf and count
            // the gradient twice.
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  Version& v = version_of(a);
                  TensorList out = v.saved_ok ? run_saving(v, in) : run_version_plain(v, in);
                  // Saved activations (past the function's outputs) are never handed to the
                  // caller: views of one buffer among them stay views, not copies.
                  const size_t n_user = std::min(out.size(), v.g_outputs.size());
                  for (size_t k = 0; k < n_user; ++k) {
                    bool aliased = false;
                    for (const Tensor& x : in) aliased = aliased || out[k].shares_storage(x);
                    for (size_t j = 0; j < k; ++j)
                      aliased = aliased || out[k].shares_storage(out[j]);
                    if (aliased) out[k] = out[k].clone();
                  }
                  // ... but each output is its own tensor: the recorder gives each its output
                  // index, and a Session returns one tensor for a value fetched twice (an output
                  // that is also saved).
                  for (size_t k = n_user; k < out.size(); ++k) {
                    bool same = false;
                    for (const Tensor& x : in) same = same || out[k].impl() == x.impl();
                    for (size_t j = 0; j < k; ++j) same = same || out[k].impl() == out[j].impl();
                    if (same) out[k] = out[k].detach();
                  }
                  return out;
                },
            // The compiled backward graph: gradients() of the traced forward, run by a Session fed
            // with the inputs and the output gradients (the forward is recomputed inside it). A
            // backward that fails at run time (a dynamic size the trace took for another) is taken
            // eagerly instead: never an error eager would not give.
            .grad =
                [](const GradCtx& c) {
                  Version& v = version_of(c.attrs);
                  try {
                    if (v.saved_ok && c.outputs.size() > v.g_outputs.size()) return saved_vjp(v, c);
                    RngReplay replay(c.attrs.ints(1));
                    return compiled_vjp(v, c);
                  } catch (const Error&) {
                    if (!v.fn) throw;
                  }
                  RngReplay replay(c.attrs.ints(1));
                  return eager_vjp(v, c);
                }});

}  // namespace

// A jit_call node outlives the jitted function that recorded it when the function is destroyed
// before backward: its entry is cleared, and the op then raises instead of reading freed memory.
Version::~Version() {
  auto& t = grad_table();
  std::lock_guard<std::mutex> lk(t.mu);
  for (auto& p : t.versions)
    if (p == this) p = nullptr;
}

int64_t register_version(Version& v) {
  auto& t = grad_table();
  std::lock_guard<std::mutex> lk(t.mu);
  auto it = std::find(t.versions.begin(), t.versions.end(), &v);
  if (it == t.versions.end()) {
    t.versions.push_back(&v);
    it = t.versions.end() - 1;
  }
  return it - t.versions.begin();
}

const OpDef& jit_call_op() { return kJitCall; }

}  // namespace kiln::detail::jit_engine
