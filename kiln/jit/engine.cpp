// The engine's call policy (engine.h): the guard check, a hit replayed (or a new branch traced
// into its tree), a miss compiled as a new version (dynamic dims when only dims changed), a
// failing version recompiled for the concrete shape or given to eager, the recompile budget,
// held state written back, verify mode.
#include "kiln/jit/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "kiln/autograd/autograd.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/jit/replay.h"
#include "kiln/jit/shape_guard.h"

namespace kiln::detail::jit_engine {
namespace {

bool env_has(const char* var, const char* word) {
  const char* e = std::getenv(var);
  if (!e) return false;
  std::string s(e);
  return s == "1" || s == "all" || s.find(word) != std::string::npos;
}

bool any_symbolic(const std::vector<Arg>& args) {
  for (const auto& a : args) {
    if (a.kind == Arg::kTensor && a.t.defined() && a.t.is_symbolic()) return true;
    for (const auto& t : a.ts)
      if (t.defined() && t.is_symbolic()) return true;
  }
  return false;
}

// Whether a call of a version under autograd (a tree kept to heal) follows branches already
// traced: the pieces up to each guard run compiled, without gradients; leaves do not run.
bool path_traced(Version& v, const std::vector<Arg>& args) {
  std::vector<Tensor> outs;
  std::string why;
  return replay(v, args, outs, &why, /*donate=*/{}, /*probe=*/true);
}

}  // namespace

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Engine::Engine(JitOptions o)
    : opts(std::move(o)),
      verify(env_has("KILN_JIT_VERIFY", "1")),
      log_recompiles(env_has("KILN_JIT_LOG", "recompiles")),
      log_breaks(env_has("KILN_JIT_LOG", "breaks")) {}

std::vector<Tensor> Engine::call(const std::vector<Arg>& user_args, const TraceFn& fn) {
  // A call on symbolic tensors only inlines fn (call_ext): it reads no engine state and takes
  // no lock, so traces of functions that call each other cannot deadlock.
  std::unique_lock<std::recursive_mutex> lk(mu, std::defer_lock);
  if (!any_symbolic(user_args)) lk.lock();
  // Traced again with the buffers and captured tensors found as inputs (a trace that finds
  // new ones throws NewStateSlots before anything is kept).
  for (int attempt = 0;; ++attempt) {
    try {
      return call_ext(user_args, fn);
    } catch (const NewStateSlots&) {
      // Tensors the function makes afresh on every call outside Kiln's ops (a module that
      // rebuilds its weights, a swapped parameter set) look like new captured state each
      // time: the function runs eagerly from then on, as when the recompile budget runs out.
      if (attempt >= 3) {
        stats.eager_fallback = true;
        fallback_unstable = true;
        fallback_reason = "captured state keeps changing between traces";
        if (!warned_fallback) {
          warned_fallback = true;
          std::cerr << "[jit] " << opts.name
                    << ": captured state keeps changing between traces, running eagerly from "
                       "now on\n";
        }
        return fn(user_args);
      }
    }
  }
}

std::vector<Tensor> Engine::call_ext(const std::vector<Arg>& user_args, const TraceFn& fn) {
  for (int d : opts.donate)
    if (d < 0 || d >= static_cast<int>(user_args.size()) ||
        (user_args[static_cast<size_t>(d)].kind != Arg::kTensor &&
         user_args[static_cast<size_t>(d)].kind != Arg::kTensorList))
      fail("jit", opts.name, ": donate position ", d,
           " is not a tensor or tensor-list argument (the function takes ", user_args.size(),
           " arguments)");
  // Called on symbolic tensors (inside a graph being built or another trace): inline fn
  // into that graph, as jax does with nested jit.
  if (any_symbolic(user_args)) return fn(user_args);
  if (stats.eager_fallback) return fn(user_args);
  // The module buffers fn assigns and the tensors it captures (found by earlier traces) are
  // fed as trailing arguments.
  held.user_arity = user_args.size();
  std::vector<Arg> ext;
  const bool extended = !held.state_slots.empty() || !held.captures.empty();
  if (extended) {
    ext = user_args;
    for (Tensor* slot : held.state_slots) ext.push_back(to_arg(*slot));
    for (const Tensor& c : held.captures) ext.push_back(to_arg(c));
  }
  const std::vector<Arg>& args = extended ? ext : user_args;
  Key k = key_of(args, opts.runtime_scalars);
  std::string guard_failed;
  Version* hit = find_version(k, args, &guard_failed);
  if (!hit) return call_miss(k, guard_failed, args, fn);
  if (hit->eager_only) {
    ++stats.hits;
    return fn(args);
  }
  if (hit->lazy) {
    LazyResult r = hit->lazy->run(hit->key, args, fn, /*stop_if_no_reads=*/false);
    take_lazy_captures(r);
    ++stats.hits;
    return std::move(r.outs);
  }
  if (hit->grad_tree) return call_grad_tree(*hit, args, fn);
  return call_hit(*hit, k, args, fn);
}

Version* Engine::find_version(const Key& k, const std::vector<Arg>& args,
                              std::string* guard_failed) {
  for (auto& v : versions) {
    if (!mismatch(v->key, k).empty()) continue;
    if (!v->shape_guards.empty()) {
      const std::string g = failed_shape_guard(v->shape_guards, flat_tensors(args, v->key));
      if (!g.empty()) {
        if (guard_failed->empty()) *guard_failed = g;
        continue;
      }
    }
    return v.get();
  }
  return nullptr;
}

// A compiled version accepts the call: replay it. A guard value of its trace tree without a
// traced branch retraces fn along the new path into the same version.
std::vector<Tensor> Engine::call_hit(Version& v, const Key& k, const std::vector<Arg>& args,
                                     const TraceFn& fn) {
  std::vector<Tensor> outs;
  std::string reason;
  bool replayed = false;
  try {
    if (v.with_grad) {
      outs = call_with_grad(v, args);
      replayed = true;
    } else {
      replayed = replay(v, args, outs, &reason, verify ? std::vector<int>{} : opts.donate);
    }
  } catch (const Error& e) {
    return recover(v, k, args, fn, e.what());
  }
  if (replayed) {
    ++stats.hits;
    finish(v, outs);
    if (verify) verify_outputs(args, fn, outs);
    return outs;
  }
  if (!budget_ok(reason)) return fn(args);
  ++stats.misses;
  log_recompile(reason);
  try {
    trace(v, args, fn);
    if (v.eager_only) return fn(args);
    if (!replay(v, args, outs, &reason))
      fail("jit", "internal: the new trace does not replay: ", reason);
  } catch (const Error& e) {
    // The version keeps the paths it had; this call runs eagerly (and raises what eager
    // raises).
    log_recompile(str_cat("trace of the new branch failed (", e.what(), ") -> eager call"));
    return fn(args);
  }
  finish(v, outs);
  return outs;
}

// No version accepts the call: a new one, with dynamic dims where only dims changed.
std::vector<Tensor> Engine::call_miss(const Key& k, const std::string& guard_failed,
                                      const std::vector<Arg>& args, const TraceFn& fn) {
  Key nk = with_marked_dims(k);
  std::string reason;
  if (versions.empty()) {
    reason = "first call";
  } else {
    reason = guard_failed.empty() ? mismatch(versions.back()->key, k) : guard_failed;
    Key dyn;
    if (opts.dynamic_dims) {
      for (auto& v : versions)
        if (!v->eager_only && !v->lazy && only_dims_differ(v->key, k, &dyn)) {
          nk = with_marked_dims(dyn);
          reason += " -> recompiling with those dims dynamic";
          break;
        }
    }
  }
  if (!versions.empty() && !budget_ok(reason)) return fn(args);
  ++stats.misses;
  if (!versions.empty()) log_recompile(reason);
  return compile_and_run(nk, k, args, fn);
}

// A call under autograd of a version whose tree waits to heal: eager, and a call along a
// branch not traced yet traces it (which heals the tree once every bool break has both).
// Checking the branch runs the pieces before each guard once more (20% of a step on a small
// MLP), so after the first 8 calls only every power-of-two-th call checks: a branch that
// never comes costs nothing in the long run, one that comes heals within twice the calls.
std::vector<Tensor> Engine::call_grad_tree(Version& v, const std::vector<Arg>& args,
                                           const TraceFn& fn) {
  const int64_t n = ++v.grad_tree_calls;
  if (n > 8 && (n & (n - 1)) != 0) {
    ++stats.hits;
    return fn(args);
  }
  bool traced = true;
  try {
    traced = path_traced(v, args);
  } catch (const Error&) {
    return fn(args);  // raises what eager raises, or gives eager's result
  }
  if (traced || !budget_ok("a branch not traced yet under autograd")) {
    ++stats.hits;
    return fn(args);
  }
  ++stats.misses;
  log_recompile("a branch not traced yet under autograd -> tracing it");
  try {
    trace(v, args, fn);
  } catch (const Error& e) {
    log_recompile(str_cat("trace of the new branch failed (", e.what(), ") -> eager call"));
    return fn(args);
  }
  if (!v.with_grad) return fn(args);
  std::vector<Tensor> outs = call_with_grad(v, args);
  finish(v, outs);
  return outs;
}

// The call recorded on the eager tape as one jit_call op, whose gradient runs the version's
// compiled backward (jit_call.cpp).
std::vector<Tensor> Engine::call_with_grad(Version& v, const std::vector<Arg>& args) {
  const int64_t id = register_version(v);
  // Inputs in the order of the trace's placeholders: a runtime scalar is one (a 0-d tensor).
  std::vector<Tensor> ins;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    if (a.kind == Arg::kTensor) ins.push_back(a.t);
    if (a.kind == Arg::kTensorList) ins.insert(ins.end(), a.ts.begin(), a.ts.end());
    if ((a.kind == Arg::kScalar || a.kind == Arg::kBool) && v.key[i].runtime)
      ins.push_back(scalar_tensor(a.v, Float32));
  }
  // With random ops the generator state goes into the node, so that the backward graph's
  // recomputed forward draws what this forward drew.
  std::vector<int64_t> rng;
  if (v.has_random)
    for (uint64_t w : get_rng_state()) rng.push_back(static_cast<int64_t>(w));
  Attrs attrs;
  attrs.push(id);
  attrs.push(std::move(rng));
  TensorList r =
      kiln::detail::call(jit_call_op(), std::span<const Tensor>(ins.data(), ins.size()), attrs);
  // Past the function's outputs come the saved activations, for the backward only.
  const size_t n = std::min(r.size(), v.g_outputs.size());
  return std::vector<Tensor>(r.begin(), r.begin() + static_cast<long>(n));
}

// A compiled version raised on a call its guards accept. A version with dynamic dims is
// compiled again for the call's concrete shape; a static one gives the call to eager.
std::vector<Tensor> Engine::recover(Version& v, const Key& k, const std::vector<Arg>& args,
                                    const TraceFn& fn, const std::string& why) {
  if (has_dynamic_dims(v.key) && opts.dynamic_dims) {
    if (!budget_ok(why)) return fn(args);
    ++stats.misses;
    log_recompile(str_cat("the version with dynamic dims failed (", why,
                          ") -> recompiling for the concrete shape"));
    return compile_and_run(k, k, args, fn);
  }
  return eager_instead(k, args, fn, str_cat("the compiled version failed: ", why));
}

// Runs the call eagerly. If eager raises too, that is the caller's error (nothing is kept);
// otherwise this exact key gets a version that runs eagerly from now on.
std::vector<Tensor> Engine::eager_instead(const Key& k, const std::vector<Arg>& args,
                                          const TraceFn& fn, const std::string& why) {
  std::vector<Tensor> outs = fn(args);
  auto v = std::make_unique<Version>();
  v->key = k;
  v->eager_only = true;
  v->eager_reason = why;
  versions.insert(versions.begin(), std::move(v));
  log_recompile(str_cat(why, " -> this shape runs eagerly"));
  return outs;
}

// Writes the new values of module buffers into them and keeps the function's own outputs.
void Engine::finish(const Version& v, std::vector<Tensor>& outs) const {
  if (outs.size() <= v.num_user_outputs) return;
  for (size_t j = 0; j < held.state_slots.size() && v.num_user_outputs + j < outs.size(); ++j)
    *held.state_slots[j] = outs[v.num_user_outputs + j].detach();
  // Captured tensors written in place get their new values in place, as eager wrote them.
  const size_t base = v.num_user_outputs + v.num_state_outputs;
  if (!v.capture_writes.empty()) {
    NoGradGuard ng;
    for (size_t j = 0; j < v.capture_writes.size() && base + j < outs.size(); ++j)
      Tensor(held.captures[v.capture_writes[j]]).copy_(outs[base + j].detach());
  }
  outs.resize(v.num_user_outputs);
}

// A lazy recording that met captured state it cannot take (a capture that requires grad, a
// write into captured state), or a complete trace recorded without running (no host reads)
// that met captures: the call is traced again with them as inputs. A rerunning version keeps
// the captures it met as constants of its pieces.
void Engine::take_lazy_captures(const LazyResult& r) {
  if (!r.need_trace && (r.complete || r.captures.empty())) return;
  for (const auto& t : r.captures) {
    bool have = false;
    for (const auto& c : held.captures) have = have || c.is_same(t);
    if (!have) held.captures.push_back(t);
  }
  throw NewStateSlots{};
}

void Engine::verify_outputs(const std::vector<Arg>& args, const TraceFn& fn,
                            const std::vector<Tensor>& outs) {
  // The reference runs with the caller's grad mode: fn may call grad() itself (a training
  // step), which a no-grad reference would refuse.
  std::vector<Tensor> ref;
  {
    std::vector<Arg> a = args;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::find(opts.runtime_scalars.begin(), opts.runtime_scalars.end(),
                    static_cast<int>(i)) != opts.runtime_scalars.end()) {
        a[i].kind = Arg::kTensor;
        a[i].t = scalar_tensor(a[i].v, Float32);
      }
    ref = fn(a);
    for (auto& r : ref) r = r.detach();
  }
  for (size_t k = 0; k < outs.size() && k < ref.size(); ++k) {
    auto x = outs[k].to_vector<double>(), y = ref[k].to_vector<double>();
    double worst = x.size() == y.size() ? 0 : INFINITY;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      double d = std::fabs(x[i] - y[i]);
      if (!(d <= 1e-5 + 1e-4 * std::fabs(y[i]))) worst = std::max(worst, d);
    }
    if (worst > 0) {
      ++stats.verify_mismatches;
      std::cerr << "[jit] " << opts.name << ": KILN_JIT_VERIFY mismatch on output " << k
                << " (max abs diff " << worst << "); the compiled plan and eager disagree — "
                << "is fn a pure function of its inputs?\n";
    }
  }
}

bool Engine::budget_ok(const std::string& reason) {
  if (stats.compiles < opts.max_recompiles + 1) return true;
  stats.eager_fallback = true;
  fallback_reason = reason;
  if (!warned_fallback) {
    warned_fallback = true;
    std::cerr << "[jit] " << opts.name << ": recompile budget (" << opts.max_recompiles
              << ") exhausted, running eagerly from now on; last reason: " << reason << "\n";
  }
  return false;
}

void Engine::log_recompile(const std::string& reason) {
  recompile_log.push_back(reason);
  if (log_recompiles) std::cerr << "[jit] " << opts.name << ": recompile: " << reason << "\n";
}

}  // namespace kiln::detail::jit_engine
