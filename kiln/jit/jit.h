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
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
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

namespace detail::jit_engine {

struct TracedVersion;  // version.h: what kiln::onnx saves of a compiled version

/// One flattened argument.
struct Arg {
  enum Kind { kTensor, kTensorList, kScalar, kBool } kind = kTensor;
  Tensor t;
  std::vector<Tensor> ts;
  double v = 0;
};

/// The non-template engine behind every jitted function.
class Engine {
 public:
  explicit Engine(JitOptions opts);
  ~Engine();
  /// Runs the function: `trace(args)` calls the user's fn on (possibly symbolic) arguments and
  /// returns its flattened outputs; `eager(args)` calls it plainly.
  std::vector<Tensor> call(const std::vector<Arg>& args,
                           const std::function<std::vector<Tensor>(const std::vector<Arg>&)>& fn);
  std::string explain() const;
  /// Mermaid flowchart of the versions, pieces, guards and branches.
  std::string to_mermaid() const;
  /// Raises naming argument `i` when the caller passed `got` where fn's parameter is `want`
  /// (numbers and bools convert into each other as in C++; a runtime scalar may go to a Tensor
  /// parameter; otherwise tensors and numbers do not mix).
  void check_arg(size_t i, Arg::Kind got, Arg::Kind want) const;
  /// Runs only the guard check: whether some compiled version accepts `args` (for benchmarks).
  bool guards_accept(const std::vector<Arg>& args) const;
  /// The version whose guards accept `args` as saved by kiln::onnx (save_jit): its traced graph,
  /// placeholders, outputs and guards, or in `refusal` why it cannot stand alone (graph breaks,
  /// host code that reruns, an eager fallback, module buffers it assigns).
  TracedVersion traced_version(const std::vector<Arg>& args) const;
  struct Stats {
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
  Stats stats() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

inline Arg to_arg(const Tensor& t) { return Arg{Arg::kTensor, t, {}, 0}; }
inline Arg to_arg(const std::vector<Tensor>& ts) { return Arg{Arg::kTensorList, {}, ts, 0}; }
inline Arg to_arg(bool b) { return Arg{Arg::kBool, {}, {}, b ? 1.0 : 0.0}; }
template <typename T,
          std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
Arg to_arg(T v) {
  return Arg{Arg::kScalar, {}, {}, static_cast<double>(v)};
}

inline const char* kind_name(Arg::Kind k) {
  switch (k) {
    case Arg::kTensor:
      return "a Tensor";
    case Arg::kTensorList:
      return "a std::vector<Tensor>";
    case Arg::kScalar:
      return "a number";
    case Arg::kBool:
      return "a bool";
  }
  return "?";
}

template <typename P>
constexpr Arg::Kind param_kind() {
  using D = std::decay_t<P>;
  if constexpr (std::is_same_v<D, Tensor>)
    return Arg::kTensor;
  else if constexpr (std::is_same_v<D, std::vector<Tensor>>)
    return Arg::kTensorList;
  else if constexpr (std::is_same_v<D, bool>)
    return Arg::kBool;
  else
    return Arg::kScalar;
}

template <typename P>
struct FromArg {
  static P get(const Arg& a) {
    using D = std::decay_t<P>;
    if constexpr (std::is_same_v<D, Tensor>) {
      return a.t;
    } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
      return a.ts;
    } else if constexpr (std::is_same_v<D, bool>) {
      return a.v != 0;
    } else {
      return static_cast<D>(a.v);
    }
  }
};

inline void flatten(const Tensor& t, std::vector<Tensor>& out) { out.push_back(t); }
inline void flatten(const std::vector<Tensor>& ts, std::vector<Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <typename... T>
void flatten(const std::tuple<T...>& tup, std::vector<Tensor>& out) {
  std::apply([&](const auto&... x) { (flatten(x, out), ...); }, tup);
}
template <typename A, typename B>
void flatten(const std::pair<A, B>& p, std::vector<Tensor>& out) {
  flatten(p.first, out);
  flatten(p.second, out);
}

// Rebuilds a result of type R from flattened tensors; `shape_of` (a result of the trace) gives
// vector sizes.
inline Tensor unflatten(const Tensor*, const std::vector<Tensor>& v, size_t& i) { return v[i++]; }
inline std::vector<Tensor> unflatten(const std::vector<Tensor>* proto, const std::vector<Tensor>& v,
                                     size_t& i) {
  size_t n = proto ? proto->size() : v.size() - i;
  std::vector<Tensor> r(v.begin() + static_cast<long>(i), v.begin() + static_cast<long>(i + n));
  i += n;
  return r;
}
template <typename... T>
std::tuple<T...> unflatten(const std::tuple<T...>*, const std::vector<Tensor>& v, size_t& i) {
  return std::tuple<T...>{unflatten(static_cast<const T*>(nullptr), v, i)...};
}
template <typename A, typename B>
std::pair<A, B> unflatten(const std::pair<A, B>*, const std::vector<Tensor>& v, size_t& i) {
  A a = unflatten(static_cast<const A*>(nullptr), v, i);
  B b = unflatten(static_cast<const B*>(nullptr), v, i);
  return {a, b};
}

template <typename F>
struct Traits : Traits<decltype(&F::operator())> {};
template <typename C, typename R, typename... A>
struct Traits<R (C::*)(A...) const> {
  using Ret = R;
  using Params = std::tuple<A...>;
};
template <typename C, typename R, typename... A>
struct Traits<R (C::*)(A...)> {
  using Ret = R;
  using Params = std::tuple<A...>;
};
template <typename R, typename... A>
struct Traits<R (*)(A...)> {
  using Ret = R;
  using Params = std::tuple<A...>;
};

// A call operator with fn's own parameter types, beside JitFunction's template one: a braced
// list (`f({a, b}, x)` for a std::vector<Tensor> parameter) cannot deduce a template argument.
template <typename Self, typename Params>
struct TypedCall;
template <typename Self, typename... P>
struct TypedCall<Self, std::tuple<P...>> {
  auto operator()(const std::decay_t<P>&... args) {
    return static_cast<Self&>(*this).invoke(args...);
  }
};

}  // namespace detail::jit_engine

/// A jitted callable; see the file comment. Copies share the same compiled versions.
template <typename F>
class JitFunction
    : public detail::jit_engine::TypedCall<JitFunction<F>,
                                           typename detail::jit_engine::Traits<F>::Params> {
 public:
  JitFunction(F fn, JitOptions opts)
      : fn_(std::make_shared<F>(std::move(fn))),
        engine_(std::make_shared<detail::jit_engine::Engine>(std::move(opts))) {}

  using detail::jit_engine::TypedCall<JitFunction<F>,
                                      typename detail::jit_engine::Traits<F>::Params>::operator();
  /// Any arguments that convert to fn's parameters (numbers, and a number for a Tensor
  /// parameter listed in JitOptions::runtime_scalars).
  template <typename... Args>
  auto operator()(Args&&... args) {
    return invoke(args...);
  }

  /// The call behind both operators.
  template <typename... Args>
  auto invoke(const Args&... args) {
    using Ret = typename detail::jit_engine::Traits<F>::Ret;
    using Params = typename detail::jit_engine::Traits<F>::Params;
    static_assert(sizeof...(Args) == std::tuple_size_v<Params>, "wrong number of arguments");
    std::vector<detail::jit_engine::Arg> flat{detail::jit_engine::to_arg(args)...};
    check_kinds(flat, std::make_index_sequence<std::tuple_size_v<Params>>{});
    // The last traced result gives the structure (vector sizes) for unflattening.
    auto shared_fn = fn_;
    auto proto = std::make_shared<std::vector<size_t>>();
    std::vector<Tensor> outs =
        engine_->call(flat, [shared_fn](const std::vector<detail::jit_engine::Arg>& a) {
          Ret r = call_with(*shared_fn, a, std::make_index_sequence<std::tuple_size_v<Params>>{});
          std::vector<Tensor> o;
          detail::jit_engine::flatten(r, o);
          return o;
        });
    size_t i = 0;
    return detail::jit_engine::unflatten(static_cast<const Ret*>(nullptr), outs, i);
  }

  /// Pieces, graph breaks (reason and source line), recompiles (which guard failed), compile
  /// times, hits and misses.
  std::string explain() const { return engine_->explain(); }
  /// The piecewise program as a Mermaid flowchart (as the lecture draws graphs): each version
  /// with its guards; its pieces with their sizes; graph breaks as guard diamonds (kReplay) or
  /// host-code edges (rerun), named by the user's file:line; the backward when there is one.
  std::string to_mermaid() const { return engine_->to_mermaid(); }
  /// The guard check alone (no execution), for measuring its cost.
  template <typename... Args>
  bool guards_accept(const Args&... args) const {
    std::vector<detail::jit_engine::Arg> flat{detail::jit_engine::to_arg(args)...};
    return engine_->guards_accept(flat);
  }
  detail::jit_engine::Engine::Stats stats() const { return engine_->stats(); }
  /// The engine behind the function (internal: kiln::onnx's save_jit reads its versions).
  const detail::jit_engine::Engine& engine() const { return *engine_; }

 private:
  template <std::size_t... I>
  void check_kinds(const std::vector<detail::jit_engine::Arg>& a, std::index_sequence<I...>) const {
    using Params = typename detail::jit_engine::Traits<F>::Params;
    (engine_->check_arg(I, a[I].kind,
                        detail::jit_engine::param_kind<std::tuple_element_t<I, Params>>()),
     ...);
  }
  template <std::size_t... I>
  static auto call_with(F& f, const std::vector<detail::jit_engine::Arg>& a,
                        std::index_sequence<I...>) {
    using Params = typename detail::jit_engine::Traits<F>::Params;
    return f(detail::jit_engine::FromArg<std::tuple_element_t<I, Params>>::get(a[I])...);
  }
  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::jit_engine::Engine> engine_;
};

/// Wraps `fn` (a lambda or function object taking Tensors, std::vector<Tensor>, arithmetic
/// scalars and bools; returning a Tensor, a std::vector<Tensor>, a tuple or a pair of those).
template <typename F>
JitFunction<std::decay_t<F>> jit(F&& fn, JitOptions opts = {}) {
  return JitFunction<std::decay_t<F>>(std::forward<F>(fn), std::move(opts));
}

}  // namespace kiln
