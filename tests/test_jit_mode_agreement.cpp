// The mode-agreement suite: every OpSample run eagerly, as a static graph with fixed shapes, as a
// static graph whose leading dims are dynamic (`?`) fed two sizes, under jit, under jit at three
// sizes, and backward through a jitted call. Values and gradients must equal eager (float64,
// 1e-12 relative to the output's scale) and a mode may fail only where eager fails on the same
// inputs. An op that cannot take a dynamic dim says so in its OpDef (kStaticShapes); the suite
// then checks the declaration is honoured: a clear kiln::Error from the dynamic graph, a static
// recompile under jit that still agrees. The test prints samples x modes run, agreed and
// declared, and fails on any failure and when more than 5% of the samples are declared
// static-only.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "kiln/kernels/cpu/parallel.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

using namespace kiln;
using namespace kiln::testing;

namespace {

using In = std::vector<Tensor>;
// Set before every run, so random ops draw the same values; the samples' own seed (dropout's run
// seeds 1234 itself, which a compiled run does not repeat).
constexpr uint64_t kSeed = 1234;

enum Mode { kGraphStatic, kGraphDynamic, kJit, kJitSizes, kJitBackward, kNumModes };
const char* const kModeNames[kNumModes] = {"graph static", "graph dynamic dim 0 (2 sizes)", "jit",
                                           "jit at 3 sizes", "jit backward"};

enum Outcome {
  kAgreed,        // same values (and gradients) as eager
  kDeclared,      // the op declares static shapes and the mode honoured it
  kNotApplicable  // nothing to check in this mode (no resizable input, not differentiable)
};

struct ModeResult {
  Outcome outcome = kAgreed;
  std::string failure;  // non-empty: a mismatch, a crash-like error or an unexpected refusal
};

// |got - want| <= 1e-12 * (|want| + max|want| + 1e-300) per element; NaN matches NaN and infs
// match themselves. Float32 outputs (ops that compute in float32 whatever the input) get 1e-5.
std::string compare(const Tensor& got, const Tensor& want, const std::string& what) {
  if (!got.defined() || !want.defined())
    return got.defined() == want.defined() ? "" : what + ": defined in one mode only";
  if (got.shape() != want.shape())
    return what + ": shape " + got.shape().str() + " vs eager " + want.shape().str();
  if (got.dtype() != want.dtype())
    return what + ": dtype " + std::string(dtype_name(got.dtype())) + " vs eager " +
           dtype_name(want.dtype());
  const double rel = want.dtype() == Float64 || !is_floating(want.dtype()) ? 1e-12 : 1e-5;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double x : w)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    double err = std::fabs(g[i] - w[i]);
    if (!(err <= rel * (std::fabs(w[i]) + scale + 1e-300))) {
      std::ostringstream o;
      o.precision(17);
      o << what << ": element " << i << " is " << g[i] << ", eager " << w[i];
      return o.str();
    }
  }
  return "";
}

// A fixed, shape-determined cotangent, so every mode's loss is sum(out * v) with the same v.
Tensor cotangent(const Shape& s, DType dt) {
  int64_t n = s.numel();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = std::sin(0.7 * static_cast<double>(i) + 0.3);
  return from_vals(v, s).to(dt);
}

bool declares_static(const OpSample& s) {
  for (const auto& name : s.ops)
    if (const OpDef* d = OpRegistry::get().find(name); d && d->has(kStaticShapes)) return true;
  return false;
}

// ---- eager reference ------------------------------------------------------------------------

struct EagerResult {
  bool ok = false;
  std::string error;
  Tensor out;
  std::vector<Tensor> grads;  // per input; undefined for integer inputs or no influence
};

EagerResult run_eager(const OpSample& s, const In& in, bool with_grad) {
  EagerResult r;
  try {
    In xs;
    for (const Tensor& t : in)
      xs.push_back(with_grad && is_floating(t.dtype()) ? t.clone().requires_grad_() : t);
    manual_seed(kSeed);
    Tensor out = s.run(xs);
    r.out = out.detach();
    r.grads.resize(in.size());
    if (with_grad && is_floating(out.dtype()) && out.requires_grad()) {
      Tensor loss = sum(mul(out, cotangent(out.shape(), out.dtype())));
      loss.backward();
      for (size_t k = 0; k < in.size(); ++k)
        if (xs[k].requires_grad()) r.grads[k] = xs[k].grad();
    }
    r.ok = true;
  } catch (const Error& e) {
    r.error = e.what();
  }
  return r;
}

// A gradient that is undefined means "does not influence the loss": zeros.
Tensor or_zeros(const Tensor& g, const Tensor& like) {
  return g.defined() ? g : zeros(like.shape(), like.dtype());
}

// ---- input variants with another leading size ----------------------------------------------

// Inputs whose dim 0 changes: the rows are cut to n - 1 (or, for a single row, doubled).
In resize(const In& in, const std::vector<size_t>& group, int64_t delta) {
  In out = in;
  for (size_t k : group) {
    const Tensor& t = in[k];
    int64_t n = t.size(0);
    if (delta < 0) {
      out[k] = t.narrow(0, 0, n + delta).contiguous();
    } else {
      std::vector<Tensor> parts{t};
      for (int64_t d = 0; d < delta; ++d) parts.push_back(t.narrow(0, d % n, 1));
      out[k] = cat(parts, 0).contiguous();
    }
  }
  return out;
}

struct Sizes {
  std::vector<size_t> group;  // inputs whose dim 0 is dynamic
  In b, c;                    // two more input sets (dim 0 changed), eager-valid
};

// The first group of inputs whose dim 0 can change with eager still accepting the call: the
// inputs sharing input 0's leading size, then each input alone.
std::optional<Sizes> find_sizes(const OpSample& s, const In& in) {
  std::vector<std::vector<size_t>> cands;
  auto resizable = [&](size_t k) { return in[k].dim() >= 1 && in[k].size(0) >= 1; };
  if (!in.empty() && resizable(0)) {
    std::vector<size_t> g;
    for (size_t k = 0; k < in.size(); ++k)
      if (resizable(k) && in[k].size(0) == in[0].size(0)) g.push_back(k);
    cands.push_back(g);
  }
  for (size_t k = 0; k < in.size(); ++k)
    if (resizable(k) &&
        std::find(cands.begin(), cands.end(), std::vector<size_t>{k}) == cands.end())
      cands.push_back({k});
  for (const auto& g : cands) {
    int64_t n = in[g[0]].size(0);
    int64_t d1 = n >= 2 ? -1 : 1, d2 = n >= 3 ? 1 : 2;
    Sizes z{g, resize(in, g, d1), resize(in, g, d2)};
    // A sample's own code may assume its sizes (index the pieces of a split): the other sizes
    // are tried in a child process first, so such a sample only loses its resized modes.
    pid_t pid = fork();
    if (pid == 0) {
      NoGradGuard ng;
      EagerResult e1 = run_eager(s, z.b, false), e2 = run_eager(s, z.c, false);
      _exit(e1.ok && e2.ok ? 0 : 1);
    }
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      return z;
  }
  return std::nullopt;
}

// ---- static graphs ---------------------------------------------------------------------------

struct Built {
  Graph g;
  In sym;
  std::vector<size_t> fed;  // inputs fed through placeholders
  Tensor out, v;            // output and the cotangent placeholder
  std::vector<size_t> fl;   // floating placeholders (differentiated)
  std::vector<Tensor> grads;
  bool int_constants = false;  // integer inputs are constants (the wrapper reads their values)
};

// Builds the sample on placeholders (integer inputs as constants if the wrapper needs their
// values). `dyn` lists inputs whose dim 0 is `?`.
std::string build(const OpSample& s, const In& in, const std::vector<size_t>& dyn, bool with_grad,
                  Built& b) {
  std::string first_error;
  for (bool int_ph : {true, false}) {
    b = Built{};
    try {
      for (size_t k = 0; k < in.size(); ++k) {
        Shape sh = in[k].shape();
        if (std::find(dyn.begin(), dyn.end(), k) != dyn.end()) sh[0] = Dim::any();
        if (is_floating(in[k].dtype()) || int_ph) {
          b.sym.push_back(b.g.placeholder("in" + std::to_string(k), in[k].dtype(), sh));
          b.fed.push_back(k);
          if (is_floating(in[k].dtype())) b.fl.push_back(k);
        } else {
          b.sym.push_back(b.g.constant(in[k], "in" + std::to_string(k)));
          b.int_constants = true;
        }
      }
      b.out = s.run(b.sym);
      if (!b.out.defined()) return "run returned an undefined tensor";
      if (!b.out.is_symbolic()) b.out = b.g.constant(b.out);
      if (with_grad && is_floating(b.out.dtype()) && !b.fl.empty()) {
        b.v = b.g.placeholder("cotangent", b.out.dtype(), b.out.shape());
        Tensor loss = sum(mul(b.out, b.v));
        In wrt;
        for (size_t k : b.fl) wrt.push_back(b.sym[k]);
        b.grads = gradients({loss}, wrt);
      }
      return "";
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
      bool has_int = std::any_of(in.begin(), in.end(),
                                 [](const Tensor& t) { return !is_floating(t.dtype()); });
      if (!has_int) break;
    }
  }
  return first_error;
}

// Runs a built graph on `in` and compares with eager on the same inputs.
std::string run_built(Built& b, Session& sess, const OpSample& s, const In& in, bool with_grad,
                      const std::string& what) {
  EagerResult e = run_eager(s, in, with_grad);
  FeedDict feeds;
  for (size_t k : b.fed) feeds.push_back({b.sym[k], in[k]});
  std::vector<Tensor> fetches{b.out};
  std::vector<int> slot(b.grads.size(), -1);
  if (b.v.defined()) {
    feeds.push_back({b.v, cotangent(e.ok ? e.out.shape() : Shape{}, b.out.dtype())});
    for (size_t j = 0; j < b.grads.size(); ++j)
      if (b.grads[j].defined() && b.grads[j].is_symbolic()) {
        slot[j] = static_cast<int>(fetches.size());
        fetches.push_back(b.grads[j]);
      }
  }
  std::vector<Tensor> got;
  try {
    manual_seed(kSeed);
    got = sess.run(fetches, feeds);
  } catch (const Error& err) {
    if (!e.ok) return "";  // eager refuses these inputs too
    return what + ": Session::run failed where eager works: " + err.what();
  }
  if (!e.ok) return what + ": the graph ran where eager raises: " + e.error;
  std::string m = compare(got[0], e.out, what + " output");
  if (!m.empty()) return m;
  if (!with_grad || !b.v.defined()) return "";
  for (size_t j = 0; j < b.grads.size(); ++j) {
    size_t k = b.fl[j];
    Tensor gg = slot[j] >= 0 ? got[static_cast<size_t>(slot[j])] : b.grads[j];
    m = compare(or_zeros(gg, in[k]), or_zeros(e.grads[k], in[k]),
                what + " gradient of input " + std::to_string(k));
    if (!m.empty()) return m;
  }
  return "";
}

ModeResult graph_mode(const OpSample& s, const In& in, const std::optional<Sizes>& sz,
                      bool dynamic) {
  ModeResult r;
  const bool with_grad = s.differentiable;
  if (dynamic && !sz) {
    r.outcome = kNotApplicable;
    return r;
  }
  Built b;
  std::string why = build(s, in, dynamic ? sz->group : std::vector<size_t>{}, with_grad, b);
  if (!why.empty()) {
    if (dynamic && declares_static(s)) {
      r.outcome = kDeclared;
      if (why.find("needs a static size") == std::string::npos)
        r.failure = "declared static-only, but the graph's error does not say so: " + why;
      return r;
    }
    r.failure = std::string(dynamic ? "dynamic" : "static") + " graph cannot be built: " + why;
    return r;
  }
  try {
    Session sess(b.g);
    r.failure = run_built(b, sess, s, in, with_grad, dynamic ? "size A" : "graph");
    // Integer inputs baked in as constants keep their size: only the fed inputs could vary.
    bool const_resized = false;
    if (dynamic && b.int_constants)
      for (size_t k : sz->group) const_resized = const_resized || !is_floating(in[k].dtype());
    if (r.failure.empty() && dynamic && !const_resized)
      r.failure = run_built(b, sess, s, sz->b, with_grad, "size B");
    if (r.failure.empty() && dynamic)  // and back: plans cached per feed shape stay right
      r.failure = run_built(b, sess, s, in, with_grad, "size A again");
    if (!r.failure.empty() && std::getenv("KILN_TEST_GRAPH")) r.failure += "\n" + b.g.to_text();
  } catch (const Error& e) {
    r.failure = std::string("Session: ") + e.what();
  }
  return r;
}

// ---- jit -------------------------------------------------------------------------------------

std::string jit_compare(const OpSample& s, JitFunction<std::function<Tensor(const In&)>>& f,
                        const In& in, const std::string& what) {
  EagerResult e;
  {
    NoGradGuard ng;
    e = run_eager(s, in, false);
  }
  Tensor got;
  try {
    NoGradGuard ng;
    manual_seed(kSeed);
    got = f(in);
  } catch (const Error& err) {
    if (!e.ok) return "";
    return what + ": jit raised where eager works: " + err.what();
  }
  if (!e.ok) return what + ": jit ran where eager raises: " + e.error;
  return compare(got, e.out, what);
}

JitFunction<std::function<Tensor(const In&)>> make_jit(const OpSample& s) {
  std::function<Tensor(const In&)> fn = [&s](const In& xs) { return s.run(xs); };
  return jit(fn, JitOptions{.name = s.ops[0] + "/" + s.name});
}

ModeResult jit_mode(const OpSample& s, const In& in) {
  ModeResult r;
  auto f = make_jit(s);
  r.failure = jit_compare(s, f, in, "first call");
  if (r.failure.empty()) r.failure = jit_compare(s, f, in, "replay");
  if (!r.failure.empty())
    r.failure += "\n" + f.explain();
  else if (f.explain().find("runs eagerly") != std::string::npos)
    r.failure = "jit ran it eagerly:\n" + f.explain();
  return r;
}

ModeResult jit_sizes_mode(const OpSample& s, const In& in, const std::optional<Sizes>& sz) {
  ModeResult r;
  if (!sz) {
    r.outcome = kNotApplicable;
    return r;
  }
  auto f = make_jit(s);
  for (auto [ins, what] : {std::pair<const In*, const char*>{&in, "size A"},
                           {&sz->b, "size B"},
                           {&sz->c, "size C"},
                           {&in, "size A again"},
                           {&sz->b, "size B again"}}) {
    r.failure = jit_compare(s, f, *ins, what);
    if (!r.failure.empty()) {
      r.failure += "\n" + f.explain();
      return r;
    }
  }
  // The static fallback is a safety net: an op that does not declare static shapes must compile
  // with dynamic dims.
  const std::string ex = f.explain();
  const bool fell_back = ex.find("recompiling for the concrete shape") != std::string::npos ||
                         ex.find("runs eagerly") != std::string::npos;
  if (declares_static(s))
    r.outcome = kDeclared;
  else if (fell_back)
    r.failure = "the dynamic-dim version failed and jit fell back:\n" + ex;
  return r;
}

std::string jit_backward_at(const OpSample& s, const In& in, const std::string& what,
                            JitFunction<std::function<Tensor(const In&)>>& f) {
  EagerResult e = run_eager(s, in, true);
  In xs;
  for (const Tensor& t : in) xs.push_back(is_floating(t.dtype()) ? t.clone().requires_grad_() : t);
  Tensor out;
  try {
    manual_seed(kSeed);
    out = f(xs);
    if (!e.ok) return what + ": jit ran where eager raises: " + e.error;
    if (is_floating(out.dtype()) && out.requires_grad())
      sum(mul(out, cotangent(out.shape(), out.dtype()))).backward();
  } catch (const Error& err) {
    if (!e.ok) return "";
    return what + ": raised where eager works: " + err.what();
  }
  std::string m = compare(out.detach(), e.out, what + " output");
  for (size_t k = 0; k < in.size() && m.empty(); ++k) {
    if (!is_floating(in[k].dtype())) continue;
    m = compare(or_zeros(xs[k].grad(), in[k]), or_zeros(e.grads[k], in[k]),
                what + " gradient of input " + std::to_string(k));
    if (m.empty() && !xs[k].is_leaf())
      m = what + ": the caller's input " + std::to_string(k) + " stopped being a leaf";
  }
  return m;
}

ModeResult jit_backward_mode(const OpSample& s, const In& in, const std::optional<Sizes>& sz) {
  ModeResult r;
  if (!s.differentiable) {
    r.outcome = kNotApplicable;
    return r;
  }
  auto f = make_jit(s);
  r.failure = jit_backward_at(s, in, "size A", f);
  if (r.failure.empty()) r.failure = jit_backward_at(s, in, "size A replay", f);
  if (r.failure.empty() && sz) r.failure = jit_backward_at(s, sz->b, "size B", f);
  if (!r.failure.empty())
    r.failure += "\n" + f.explain();
  else if (f.explain().find("runs eagerly") != std::string::npos && !declares_static(s))
    r.failure = "jit ran it eagerly:\n" + f.explain();
  return r;
}

// ---- one sample through every mode ------------------------------------------------------------

std::vector<ModeResult> run_all(const OpSample& s) {
  std::vector<ModeResult> r(kNumModes);
  if (s.eager_only) {
    for (auto& x : r) x.outcome = kNotApplicable;
    return r;
  }
  In in = s.inputs();
  std::optional<Sizes> sz = find_sizes(s, in);
  auto guarded = [&](Mode m, auto fn) {
    try {
      r[m] = fn();
    } catch (const Error& e) {
      r[m].failure = std::string("unexpected kiln::Error: ") + e.what();
    } catch (const std::exception& e) {
      r[m].failure = std::string("not a kiln::Error: ") + e.what();
    }
  };
  guarded(kGraphStatic, [&] { return graph_mode(s, in, sz, false); });
  guarded(kGraphDynamic, [&] { return graph_mode(s, in, sz, true); });
  guarded(kJit, [&] { return jit_mode(s, in); });
  guarded(kJitSizes, [&] { return jit_sizes_mode(s, in, sz); });
  guarded(kJitBackward, [&] { return jit_backward_mode(s, in, sz); });
  return r;
}

// run_all in a child process, so that a crash in any mode is reported as this sample's failure
// instead of ending the summary.
std::vector<ModeResult> run_all_isolated(const OpSample& s) {
  int fds[2];
  if (pipe(fds) != 0) return run_all(s);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string buf;
    for (const ModeResult& r : run_all(s)) {
      buf += static_cast<char>('0' + r.outcome);
      buf += std::to_string(r.failure.size()) + ":" + r.failure;
    }
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t w = write(fds[1], buf.data() + off, buf.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string buf;
  char tmp[4096];
  for (ssize_t r; (r = read(fds[0], tmp, sizeof tmp)) > 0;) buf.append(tmp, static_cast<size_t>(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::vector<ModeResult> out(kNumModes);
  size_t at = 0;
  for (int m = 0; m < kNumModes; ++m) {
    if (at >= buf.size()) {
      out[static_cast<size_t>(m)].failure =
          WIFSIGNALED(status) ? "crashed with signal " + std::to_string(WTERMSIG(status))
                              : "the child process ended early";
      continue;
    }
    out[static_cast<size_t>(m)].outcome = static_cast<Outcome>(buf[at] - '0');
    size_t colon = buf.find(':', at);
    size_t len = std::stoul(buf.substr(at + 1, colon - at - 1));
    out[static_cast<size_t>(m)].failure = buf.substr(colon + 1, len);
    at = colon + 1 + len;
  }
  return out;
}

// One thread: forked children must not inherit an OpenMP pool (agreement, not speed, is tested).
const bool kOneThread = [] {
  set_num_threads(1);
  return true;
}();

std::string sample_name(size_t i) {
  const OpSample& s = sample_registry()[i];
  std::string n = s.ops[0] + "_" + s.name + "_" + std::to_string(i);
  for (auto& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// Every sample in every mode, each in a child process (a crash is that sample's failure); one
// failure reported per sample and mode, with the reason. The counts quoted in notes: samples x
// modes run, agreed, declared static-only (listed). KILN_MODE_SAMPLE=<part of a name> runs only
// the matching samples, in this process (for a debugger).
TEST(ModeAgreement, EverySampleInEveryModeEqualsEager) {
  const auto& reg = sample_registry();
  int run = 0, agreed = 0, declared = 0, na = 0, failed = 0;
  std::set<std::string> static_only;
  std::vector<std::string> failures;
  const char* only = std::getenv("KILN_MODE_SAMPLE");
  for (size_t i = 0; i < reg.size(); ++i) {
    if (only && sample_name(i).find(only) == std::string::npos) continue;
    auto r = only ? run_all(reg[i]) : run_all_isolated(reg[i]);
    for (int m = 0; m < kNumModes; ++m) {
      const ModeResult& x = r[static_cast<size_t>(m)];
      if (x.outcome == kNotApplicable && x.failure.empty()) {
        ++na;
        continue;
      }
      ++run;
      if (!x.failure.empty()) {
        ++failed;
        failures.push_back(sample_name(i) + " [" + kModeNames[m] + "]");
        ADD_FAILURE() << sample_name(i) << " [" << kModeNames[m] << "]: " << x.failure;
      } else if (x.outcome == kDeclared) {
        ++declared;
        static_only.insert(sample_name(i));
      } else {
        ++agreed;
      }
    }
  }
  std::cout << "[mode agreement] " << reg.size() << " samples x " << kNumModes << " modes: " << run
            << " run, " << agreed << " agreed, " << declared << " declared static-only, " << failed
            << " failed, " << na
            << " not applicable (eager-only sample, no resizable input or not differentiable)\n";
  std::cout << "[mode agreement] samples with a declared mode (" << static_only.size() << "):";
  for (const auto& n : static_only) std::cout << " " << n;
  std::cout << "\n";
  // Each op still declaring static shapes says why in its registry doc ("Static shapes: ...").
  std::set<std::string> static_ops;
  for (size_t i = 0; i < reg.size(); ++i)
    if (static_only.count(sample_name(i)))
      for (const auto& name : reg[i].ops)
        if (const OpDef* d = OpRegistry::get().find(name); d && d->has(kStaticShapes))
          static_ops.insert(name);
  for (const auto& name : static_ops) {
    const std::string& doc = OpRegistry::get().at(name).doc;
    const size_t at = doc.find("Static shapes:");
    std::cout << "[mode agreement] static-only op " << name << ": "
              << (at == std::string::npos ? "(no reason given)" : doc.substr(at)) << "\n";
    EXPECT_NE(at, std::string::npos)
        << name << " declares kStaticShapes without a \"Static shapes: <why>\" note in its doc";
  }
  for (const auto& f : failures) std::cout << "  failed: " << f << "\n";
  EXPECT_EQ(failed, 0);
  if (!only) {
    EXPECT_LT(static_cast<double>(static_only.size()), 0.05 * static_cast<double>(reg.size()));
  }
}

}  // namespace
