// kiln::jit: trace eager code into graphs, piecewise, with guards (docs/design.md section 7).
//
//   auto f = kiln::jit([](const Tensor& x, int k) { return relu(x) * double(k); });
//   Tensor y = f(x, 3);   // miss: traced, optimized, compiled; later calls with the same
//                         // dtype/shape/requires_grad of x and k == 3 replay the plan
//
// Guards: per tensor argument dtype, shape and requires_grad; per scalar argument its value
// (one compiled version per constant) unless it is listed in JitOptions::runtime_scalars, in
// which case fn's parameter must be a Tensor and receives a 0-d tensor (one version for all).
// A host read of a traced value (item(), bool conversion, to_vector()) is a graph break: the
// ops recorded so far are compiled and run as a piece, and the host code after the read goes on
// with the concrete value. What happens on the next calls is JitOptions::host_code's choice:
//  - kAuto (default): a function without host reads replays its one compiled graph and its host
//    code runs only while tracing (as with jax.jit: fn must be a function of its inputs). A
//    function with host reads reruns: fn itself runs on every call, its tensor ops record into
//    pieces that run compiled (one compile per piece structure), so side effects between
//    pieces happen on every call, and a value the host computes and hands to the next piece (a
//    float from item(), a tensor it made) is baked in while it keeps its value and becomes an
//    input of the piece once it changes: a piece compiles at most twice for any number of values.
//  - kRerun: every function reruns (the host code runs on every call even without host reads).
//  - kReplay: the trace tree: host code runs only while tracing; each host-read value is a guard
//    with one traced branch per value. No host code per call (the cheapest replay), but a value
//    that changes on every call recompiles until the budget sends the function eager.
// Calls that record gradients trace (kReplay); one with host reads runs eagerly until its
// breaks are healed.
//
// Healing (JitOptions::heal_breaks, on by default): in a trace tree (kReplay, and calls that
// record gradients), once every guard is a bool read that has been traced both ways and every
// continuation is graph code (no further unhealed break), the tree is joined into one graph:
// each such guard becomes cond() on the predicate tensor (Switch on what the branches read,
// Merge on their results), so a replay makes no host read there and gradients flow through it
// as through cond. A guard on a number (item<float>()) or a value seen one way only stays a
// break. explain() lists the healed breaks; to_mermaid() draws their Switch/Merge.
//
// Thread safety: a jitted function (and its copies, which share its compiled versions) may be
// called from several threads at once. Calls with concrete arguments take turns on one lock per
// function (guard check, tracing, compiling, replay): for calls in parallel use one jit(...) per
// thread. Tracing is per thread, so other threads' eager code is never captured. fn itself runs
// under that lock while tracing or eagerly; what it reads besides its arguments (captured
// tensors, module parameters) must not change meanwhile.
//
// JitFunction<F> (what jit() returns) is typed by fn; JitCallable below is the same jitted
// function over flattened arguments (JitArg), for bindings that call through it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct JitOptions {
  /// Positions of scalar arguments that are run-time inputs (passed to fn as 0-d tensors).
  std::vector<int> runtime_scalars{};
  /// Positions of tensor or tensor-list arguments whose buffers a call may overwrite (JAX's
  /// donate_argnums): a result computed elementwise from a donated tensor, or accumulated onto
  /// it (addmm: an SGD update p - lr * a^T g), is written into that tensor's buffer and
  /// returned aliasing it, with no new buffer and no copy. The caller must treat donated
  /// arguments as consumed: after the call their contents are unspecified (typically the new
  /// values, as `params = step(params, ...)` wants). Not done while tracing, under
  /// KILN_JIT_VERIFY=1, for calls that record gradients, or for a tensor that shares storage
  /// with another argument.
  std::vector<int> donate{};
  /// Past this many recompiles the function runs eagerly (and says so once).
  int max_recompiles = 8;
  /// After a shape guard fails only on some dims, recompile once with those dims dynamic.
  bool dynamic_dims = true;
  /// Name used in explain() and logs.
  std::string name = "fn";
  /// What runs on each call: see the file comment.
  enum class HostCode { kAuto, kRerun, kReplay };
  HostCode host_code = HostCode::kAuto;
  /// Calls that record gradients: the forward keeps the values its backward reads (as PyTorch's
  /// autograd does) instead of the backward recomputing the forward. False trades that memory
  /// for the recompute.
  bool save_activations = true;
  /// Join bool graph breaks traced both ways into Switch/Merge (see the file comment). False
  /// keeps the trace tree: a host read at each break on every call.
  bool heal_breaks = true;
};

/// One argument of a jitted call, flattened: a tensor, a list of tensors, or a number or bool
/// (held as a double). JitCallable takes its arguments so.
struct JitArg {
  enum Kind { kTensor, kTensorList, kScalar, kBool } kind = kTensor;
  Tensor t;
  std::vector<Tensor> ts;
  double v = 0;

  JitArg() = default;
  explicit JitArg(const Tensor& x) : kind(kTensor), t(x) {}
  explicit JitArg(const std::vector<Tensor>& xs) : kind(kTensorList), ts(xs) {}
  explicit JitArg(bool b) : kind(kBool), v(b ? 1.0 : 0.0) {}
  template <typename T,
            std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
  explicit JitArg(T x) : kind(kScalar), v(static_cast<double>(x)) {}

  /// The kind a parameter of type P takes.
  template <typename P>
  static constexpr Kind kind_of() {
    using D = std::decay_t<P>;
    if constexpr (std::is_same_v<D, Tensor>)
      return kTensor;
    else if constexpr (std::is_same_v<D, std::vector<Tensor>>)
      return kTensorList;
    else if constexpr (std::is_same_v<D, bool>)
      return kBool;
    else
      return kScalar;
  }
  /// The argument as a parameter of type P (a runtime scalar arrives as a Tensor): tensors and
  /// lists by reference, numbers and bools by value.
  template <typename P>
  decltype(auto) as() const {
    using D = std::decay_t<P>;
    if constexpr (std::is_same_v<D, Tensor>)
      return (t);
    else if constexpr (std::is_same_v<D, std::vector<Tensor>>)
      return (ts);
    else if constexpr (std::is_same_v<D, bool>)
      return v != 0;
    else
      return static_cast<D>(v);
  }
};

/// What a jitted function has done so far (JitFunction::stats(), JitCallable::stats()).
struct JitStats {
  int64_t hits = 0, misses = 0, compiles = 0, graph_breaks = 0, pieces = 0;
  int64_t verify_mismatches = 0;
  bool eager_fallback = false;
  /// Rerunning versions (host_code): calls, pieces run compiled, piece compiles, and the most
  /// compiles any one piece structure took.
  int64_t reruns = 0, rerun_pieces = 0, piece_compiles = 0;
  int max_piece_compiles = 0;
  /// Bool breaks joined into Switch/Merge (JitOptions::heal_breaks).
  int64_t healed = 0;
};

/// A jitted function over flattened arguments: the compiled versions, their guards and the
/// policy of the file comment, for a function given on each call as `fn`, which takes the
/// arguments (possibly symbolic, while tracing) and returns its outputs flattened. JitFunction
/// wraps one for a typed C++ function; a binding (Python's kiln.jit) holds one directly. Copies
/// share the compiled versions. Pass the same function on every call: it is traced once per
/// version and called eagerly on a fallback.
class JitCallable {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<JitArg>&)>;

  explicit JitCallable(JitOptions opts = {});
  /// Runs `fn` on `args` through the compiled version whose guards accept them (traced on a
  /// miss). The engine may pass more arguments than `args` (captured state, after them); fn
  /// takes the first args.size().
  std::vector<Tensor> call(const std::vector<JitArg>& args, const Fn& fn);
  /// Pieces, graph breaks (reason and source line), recompiles (which guard failed), compile
  /// times, hits and misses.
  std::string explain() const;
  /// The piecewise program as a Mermaid flowchart: each version with its guards; its pieces
  /// with their sizes; graph breaks as guard diamonds (kReplay) or host-code edges (rerun),
  /// named by the user's file:line; the backward when there is one.
  std::string to_mermaid() const;
  JitStats stats() const;
  /// The guard check alone (no execution): whether some compiled version accepts `args`.
  bool guards_accept(const std::vector<JitArg>& args) const;
  /// Raises naming argument `i` when the caller passed `got` where fn's parameter is `want`
  /// (numbers and bools convert into each other as in C++; a runtime scalar may go to a Tensor
  /// parameter; otherwise tensors and numbers do not mix).
  void check_arg(size_t i, JitArg::Kind got, JitArg::Kind want) const;

  /// The engine (internal, kiln/jit/engine.h; kiln::onnx's save_jit reads its versions).
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

/// Whether op calls on this thread are being recorded by kiln::jit now (a trace, or the recording
/// of a function whose host code reruns), as torch.jit.is_tracing() says.
bool is_tracing();

/// A callable's result and parameter types (a lambda, a function object, a function pointer).
template <typename F>
struct JitSignature : JitSignature<decltype(&F::operator())> {};
template <typename C, typename R, typename... A>
struct JitSignature<R (C::*)(A...) const> {
  using Ret = R;
  using Params = std::tuple<A...>;
};
template <typename C, typename R, typename... A>
struct JitSignature<R (C::*)(A...)> {
  using Ret = R;
  using Params = std::tuple<A...>;
};
template <typename R, typename... A>
struct JitSignature<R (*)(A...)> {
  using Ret = R;
  using Params = std::tuple<A...>;
};

/// A jitted callable; see the file comment. Copies share the same compiled versions.
template <typename F, typename Params = typename JitSignature<F>::Params>
class JitFunction;

template <typename F, typename... P>
class JitFunction<F, std::tuple<P...>> {
  using Ret = typename JitSignature<F>::Ret;

 public:
  JitFunction(F fn, JitOptions opts)
      : fn_(std::make_shared<F>(std::move(fn))), callable_(std::move(opts)) {}

  /// fn's own parameter types, beside the template operator below: a braced list (`f({a, b},
  /// x)` for a std::vector<Tensor> parameter) cannot deduce a template argument.
  auto operator()(const std::decay_t<P>&... args) { return invoke(args...); }
  /// Any arguments that convert to fn's parameters (numbers, and a number for a Tensor
  /// parameter listed in JitOptions::runtime_scalars).
  template <typename... Args>
  auto operator()(Args&&... args) {
    return invoke(args...);
  }

  /// The call behind both operators.
  template <typename... Args>
  auto invoke(const Args&... args) {
    static_assert(sizeof...(Args) == sizeof...(P), "wrong number of arguments");
    std::vector<JitArg> flat{JitArg(args)...};
    check_kinds(flat, std::index_sequence_for<P...>{});
    auto shared_fn = fn_;
    std::vector<Tensor> outs = callable_.call(flat, [shared_fn](const std::vector<JitArg>& a) {
      Ret r = call_with(*shared_fn, a, std::index_sequence_for<P...>{});
      std::vector<Tensor> o;
      flatten(r, o);
      return o;
    });
    size_t i = 0;
    return unflatten(static_cast<const Ret*>(nullptr), outs, i);
  }

  /// Pieces, graph breaks (reason and source line), recompiles (which guard failed), compile
  /// times, hits and misses.
  std::string explain() const { return callable_.explain(); }
  /// The piecewise program as a Mermaid flowchart (as the lecture draws graphs); see
  /// JitCallable::to_mermaid.
  std::string to_mermaid() const { return callable_.to_mermaid(); }
  /// The guard check alone (no execution), for measuring its cost.
  template <typename... Args>
  bool guards_accept(const Args&... args) const {
    return callable_.guards_accept({JitArg(args)...});
  }
  JitStats stats() const { return callable_.stats(); }
  /// The untyped jitted function behind this one.
  const JitCallable& callable() const { return callable_; }
  /// Its engine (internal: kiln::onnx's save_jit reads its versions).
  const JitCallable::Impl& engine() const { return callable_.impl(); }

 private:
  template <std::size_t... I>
  void check_kinds(const std::vector<JitArg>& a, std::index_sequence<I...>) const {
    (callable_.check_arg(I, a[I].kind, JitArg::kind_of<P>()), ...);
  }
  template <std::size_t... I>
  static Ret call_with(F& f, const std::vector<JitArg>& a, std::index_sequence<I...>) {
    return f(a[I].template as<P>()...);
  }

  // fn's result flattened into tensors, and rebuilt from them (vector sizes: what is left).
  static void flatten(const Tensor& t, std::vector<Tensor>& out) { out.push_back(t); }
  static void flatten(const std::vector<Tensor>& ts, std::vector<Tensor>& out) {
    out.insert(out.end(), ts.begin(), ts.end());
  }
  template <typename... T>
  static void flatten(const std::tuple<T...>& tup, std::vector<Tensor>& out) {
    std::apply([&](const auto&... x) { (flatten(x, out), ...); }, tup);
  }
  template <typename A, typename B>
  static void flatten(const std::pair<A, B>& p, std::vector<Tensor>& out) {
    flatten(p.first, out);
    flatten(p.second, out);
  }
  static Tensor unflatten(const Tensor*, const std::vector<Tensor>& v, size_t& i) { return v[i++]; }
  static std::vector<Tensor> unflatten(const std::vector<Tensor>*, const std::vector<Tensor>& v,
                                       size_t& i) {
    std::vector<Tensor> r(v.begin() + static_cast<long>(i), v.end());
    i = v.size();
    return r;
  }
  template <typename... T>
  static std::tuple<T...> unflatten(const std::tuple<T...>*, const std::vector<Tensor>& v,
                                    size_t& i) {
    return std::tuple<T...>{unflatten(static_cast<const T*>(nullptr), v, i)...};
  }
  template <typename A, typename B>
  static std::pair<A, B> unflatten(const std::pair<A, B>*, const std::vector<Tensor>& v,
                                   size_t& i) {
    A a = unflatten(static_cast<const A*>(nullptr), v, i);
    B b = unflatten(static_cast<const B*>(nullptr), v, i);
    return {a, b};
  }

  std::shared_ptr<F> fn_;
  JitCallable callable_;
};

/// torch._dynamo.mark_dynamic / mark_static: dim `dim` of `t` is dynamic from a jitted
/// function's first version (no static version first), or never made dynamic (a version per
/// size). The mark stays with the tensor (and its views share it not); dims 0..31.
void mark_dynamic(const Tensor& t, int64_t dim);
void mark_static(const Tensor& t, int64_t dim);

/// Wraps `fn` (a lambda or function object taking Tensors, std::vector<Tensor>, arithmetic
/// scalars and bools; returning a Tensor, a std::vector<Tensor>, a tuple or a pair of those).
template <typename F>
JitFunction<std::decay_t<F>> jit(F&& fn, JitOptions opts = {}) {
  return JitFunction<std::decay_t<F>>(std::forward<F>(fn), std::move(opts));
}

}  // namespace kiln
