// Runs every OpSample: forward vs the float64 reference (in float64 and float32), gradcheck on
// contiguous, non-contiguous and (where the sample broadcasts) broadcast layouts, bad inputs and
// attributes through the dispatcher and through a Session (kiln::Error, never a crash), and
// fails when a registered op has no sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <typeinfo>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/handles.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

using namespace kiln;
using namespace kiln::testing;

namespace {

std::vector<Tensor> to32(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const auto& t : in) out.push_back(t.dtype() == Float64 ? t.to(Float32) : t);
  return out;
}

// Stores each chosen input transposed in memory and transposes it back: same values,
// non-contiguous strides.
std::vector<Tensor> noncontig(const OpSample& s, const std::vector<Tensor>& in) {
  std::vector<Tensor> out = in;
  for (size_t k = 0; k < in.size(); ++k) {
    bool chosen = s.noncontig_inputs.empty()
                      ? (is_floating(in[k].dtype()) && in[k].dim() >= 2)
                      : std::find(s.noncontig_inputs.begin(), s.noncontig_inputs.end(),
                                  static_cast<int>(k)) != s.noncontig_inputs.end();
    if (!chosen || in[k].dim() < 2) continue;
    Tensor t = in[k].transpose(-1, -2).contiguous().transpose(-1, -2);
    out[k] = t;
  }
  return out;
}

std::string compare(const Tensor& got, const Tensor& want, double tol) {
  if (got.shape() != want.shape())
    return "shape " + got.shape().str() + " vs reference " + want.shape().str();
  auto g = got.to_vector<double>();
  auto w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    double err = std::fabs(g[i] - w[i]);
    if (!(err <= tol * (1 + std::fabs(w[i]))))
      return "element " + std::to_string(i) + ": got " + std::to_string(g[i]) + ", reference " +
             std::to_string(w[i]);
  }
  return "";
}

class OpSampleTest : public ::testing::TestWithParam<size_t> {};

TEST_P(OpSampleTest, ForwardFloat64) {
  const OpSample& s = sample_registry()[GetParam()];
  auto in = s.inputs();
  Tensor out = s.run(in);
  if (s.reference) {
    EXPECT_EQ(compare(out, s.reference(in), 1e-10), "");
  }
  if (s.check) {
    EXPECT_EQ(s.check(in, out), "");
  }
}

TEST_P(OpSampleTest, ForwardFloat32) {
  const OpSample& s = sample_registry()[GetParam()];
  auto in = s.inputs();
  Tensor out = s.run(to32(in));
  if (is_floating(out.dtype())) {
    EXPECT_EQ(out.dtype(), Float32);
  }
  if (s.reference) {
    EXPECT_EQ(compare(out, s.reference(in), s.tol32), "");
  }
  if (s.check) {
    EXPECT_EQ(s.check(to32(in), out), "");
  }
}

TEST_P(OpSampleTest, NonContiguousForward) {
  const OpSample& s = sample_registry()[GetParam()];
  auto in = s.inputs();
  auto nc = noncontig(s, in);
  Tensor a = s.run(in), b = s.run(nc);
  if (s.reference) {
    EXPECT_EQ(compare(b, s.reference(in), 1e-10), "");
  } else {
    EXPECT_EQ(a.shape(), b.shape());
  }
}

TEST_P(OpSampleTest, Gradcheck) {
  const OpSample& s = sample_registry()[GetParam()];
  if (!s.differentiable) GTEST_SKIP() << "not differentiable";
  auto in = s.inputs();
  auto r = gradcheck([&](const std::vector<Tensor>& xs) { return s.run(xs); }, in, 1e-6, s.gc_atol,
                     s.gc_rtol);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST_P(OpSampleTest, GradcheckNonContiguous) {
  const OpSample& s = sample_registry()[GetParam()];
  if (!s.differentiable) GTEST_SKIP() << "not differentiable";
  auto in = s.inputs();
  // The layout is rebuilt inside fn so that gradcheck's float64 copies keep the strides.
  auto r = gradcheck(
      [&](const std::vector<Tensor>& xs) {
        auto nc = noncontig(s, xs);
        for (size_t k = 0; k < nc.size(); ++k)
          if (xs[k].dim() >= 2 && is_floating(xs[k].dtype()) && !nc[k].is_same(xs[k])) {
            EXPECT_FALSE(nc[k].is_contiguous());
          }
        return s.run(nc);
      },
      in, 1e-6, s.gc_atol, s.gc_rtol);
  EXPECT_TRUE(r.ok) << r.message;
}

// Broadcast layout: for elementwise ops, each floating input of rank >= 1 is replaced by its first
// slice along dim 0, expanded back inside fn (stride 0), so every op reads a broadcast view and
// its gradient must sum over the broadcast dim.
TEST_P(OpSampleTest, GradcheckBroadcastLayout) {
  const OpSample& s = sample_registry()[GetParam()];
  const OpDef* op = OpRegistry::get().find(s.ops[0]);
  if (!s.differentiable || !op || !op->has(kElementwise)) {
    GTEST_SKIP() << "not a differentiable elementwise op (broadcast cases are samples)";
  }
  auto in = s.inputs();
  std::vector<Shape> full_shapes;
  std::vector<Tensor> small = in;
  bool any = false;
  for (size_t k = 0; k < in.size(); ++k) {
    full_shapes.push_back(in[k].shape());
    if (is_floating(in[k].dtype()) && in[k].dim() >= 1 && in[k].size(0) > 1) {
      small[k] = in[k].narrow(0, 0, 1).contiguous();
      any = true;
    }
  }
  if (!any) GTEST_SKIP() << "no input with a leading dim to broadcast";
  auto r = gradcheck(
      [&](const std::vector<Tensor>& xs) {
        std::vector<Tensor> b = xs;
        for (size_t k = 0; k < xs.size(); ++k)
          if (xs[k].shape() != full_shapes[k]) {
            b[k] = xs[k].expand(full_shapes[k]);
            EXPECT_EQ(b[k].stride(0), 0);
          }
        return s.run(b);
      },
      small, 1e-6, s.gc_atol, s.gc_rtol);
  EXPECT_TRUE(r.ok) << r.message;
}

// Bad input never crashes and never raises anything but kiln::Error, whose message starts with
// the called op's name (eagerly; in a graph the Session may name a feed). The sample runs once with
// every op call captured; then each captured call of the sample's ops is repeated through the
// dispatcher with one input at a time replaced by a wrong dtype, an extra or a missing dim, an
// empty or a longer dim, an undefined tensor, NaNs, or (integer inputs) out-of-range values. A
// mutation may also be valid (broadcasting, promotion); the op then just runs. Under ASan (CI)
// this also checks that no mutation reads or writes out of bounds.
std::vector<std::pair<std::string, Tensor>> mutations(const Tensor& t) {
  std::vector<std::pair<std::string, Tensor>> m;
  m.emplace_back("undefined", Tensor());
  if (!t.defined()) return m;
  if (is_floating(t.dtype())) {
    m.emplace_back("int64", t.to(Int64));
    m.emplace_back("bool", t.to(Bool));
    m.emplace_back("nan", full_like(t, std::nan("")));
  } else {
    m.emplace_back("float32", t.to(Float32));
    m.emplace_back("minus_one", full_like(t, -1));
    m.emplace_back("too_large", full_like(t, 1000003));
  }
  m.emplace_back("extra_dim", unsqueeze(t, 0));
  if (t.dim() >= 1) {
    if (t.shape()[0] > 0) m.emplace_back("dim0_dropped", t.select(0, 0));
    m.emplace_back("dim0_empty", slice(t, 0, 0, 0));
    Shape longer = t.shape();
    longer[longer.rank() - 1] += 1;
    m.emplace_back("last_dim_longer", zeros(longer, t.dtype()));
  } else {
    m.emplace_back("vector", reshape(t, {1}));
  }
  return m;
}

// Records every op call (op, inputs, attrs) and runs it.
struct Capture : SymbolicHandler {
  struct CallRec {
    const OpDef* op;
    std::vector<Tensor> inputs;
    Attrs attrs;
  };
  std::vector<CallRec> calls;
  SymbolicHandler* prev = nullptr;
  TensorList handle(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs) override {
    for (const Tensor& t : in)
      if (t.defined() && t.is_symbolic()) {  // a graph being built: its handler's business
        set_symbolic_handler(prev);
        set_capture_all(false);
        struct Back {
          Capture* c;
          ~Back() {
            set_symbolic_handler(c);
            set_capture_all(true);
          }
        } back{this};
        return call(op, in, attrs);
      }
    calls.push_back({&op, std::vector<Tensor>(in.begin(), in.end()), attrs});
    return run_kernel(op, in, attrs);
  }
  // Runs the sample once (no autograd), capturing its calls.
  void run(const OpSample& s) {
    NoGradGuard ng;
    prev = set_symbolic_handler(this);
    set_capture_all(true);
    struct Back {
      SymbolicHandler* prev;
      ~Back() {
        set_capture_all(false);
        set_symbolic_handler(prev);
      }
    } back{prev};
    (void)s.run(s.inputs());
  }
};

// Repeats a captured call with other inputs or attributes: kiln::Error or a result.
void try_call(const Capture::CallRec& c, const std::vector<Tensor>& in, const Attrs& attrs,
              const std::string& what) {
  if (std::getenv("KILN_TEST_TRACE"))
    std::fprintf(stderr, "%s %s\n", c.op->name.c_str(), what.c_str());
  try {
    TensorList out = call(*c.op, std::span<const Tensor>(in.data(), in.size()), attrs);
    for (const Tensor& o : out)
      if (o.defined() && o.is_concrete()) (void)o.to_vector<double>();
  } catch (const Error& e) {
    // Named by the op that was called, not by a helper it runs inside.
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("[" + c.op->name + "]", 0), 0u) << what << ": " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.op->name << " " << what << ": " << typeid(e).name() << ": " << e.what();
  }
  // The same call built into a static graph (inference at build time) and run by a Session
  // (the executor calls kernels without the eager dispatcher's checks).
  for (const Tensor& t : in)
    if (!t.defined()) return;
  try {
    Graph g;
    std::vector<Tensor> ph;
    FeedDict feeds;
    for (size_t k = 0; k < in.size(); ++k) {
      ph.push_back(g.placeholder("in" + std::to_string(k), in[k].dtype(), in[k].shape()));
      feeds.emplace_back(ph.back(), in[k]);
    }
    TensorList out = call(*c.op, std::span<const Tensor>(ph.data(), ph.size()), attrs);
    std::vector<Tensor> fetch(out.begin(), out.end());
    Session sess(g);
    for (const Tensor& o : sess.run(fetch, feeds))
      if (o.defined()) (void)o.to_vector<double>();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.op->name << " " << what << " (graph): " << typeid(e).name() << ": "
                  << e.what();
  }
}

// The first captured call of each op the sample names.
std::vector<Capture::CallRec> first_calls(const OpSample& s) {
  Capture cap;
  cap.run(s);
  std::set<std::string> done;
  std::vector<Capture::CallRec> r;
  for (auto& c : cap.calls)
    if (std::find(s.ops.begin(), s.ops.end(), c.op->name) != s.ops.end() &&
        done.insert(c.op->name).second)
      r.push_back(c);
  return r;
}

TEST_P(OpSampleTest, BadInputsRaiseKilnError) {
  for (const auto& c : first_calls(sample_registry()[GetParam()]))
    for (size_t k = 0; k < c.inputs.size(); ++k)
      for (auto& [what, bad] : mutations(c.inputs[k])) {
        std::vector<Tensor> b = c.inputs;
        b[k] = bad;
        try_call(c, b, c.attrs, std::string("input ") + std::to_string(k) + " " + what);
      }
}

// Each attribute of a captured call in turn replaced by a wrong value of its type (negative,
// zero or large integers and sizes, NaN and infinite doubles, flipped bools, shorter and longer
// integer lists, unknown strings): kiln::Error or a result, never a crash.
std::vector<std::pair<std::string, AttrValue>> attr_mutations(const AttrValue& v) {
  std::vector<std::pair<std::string, AttrValue>> m;
  if (std::holds_alternative<int64_t>(v)) {
    for (int64_t x : {int64_t(-1), int64_t(-1000), int64_t(0), int64_t(1000)})
      m.emplace_back(std::string("int ") + std::to_string(x), x);
  } else if (std::holds_alternative<double>(v)) {
    for (double x : {std::nan(""), double(INFINITY), -double(INFINITY), -1.0, 0.0})
      m.emplace_back(std::string("double ") + std::to_string(x), x);
  } else if (std::holds_alternative<bool>(v)) {
    m.emplace_back("bool flipped", !std::get<bool>(v));
  } else if (std::holds_alternative<std::vector<int64_t>>(v)) {
    const auto& xs = std::get<std::vector<int64_t>>(v);
    m.emplace_back("list empty", std::vector<int64_t>{});
    std::vector<int64_t> longer = xs;
    longer.push_back(1);
    m.emplace_back("list longer", longer);
    for (size_t i = 0; i < xs.size(); ++i)
      for (int64_t x : {int64_t(-1), int64_t(-9), int64_t(0), int64_t(7)}) {
        std::vector<int64_t> y = xs;
        y[i] = x;
        m.emplace_back(std::string("list[") + std::to_string(i) + "] " + std::to_string(x), y);
      }
  } else {
    m.emplace_back("string empty", std::string());
    m.emplace_back("string unknown", std::string("no-such-value"));
  }
  return m;
}

TEST_P(OpSampleTest, BadAttributesRaiseKilnError) {
  for (const auto& c : first_calls(sample_registry()[GetParam()]))
    for (size_t k = 0; k < c.attrs.size(); ++k)
      for (auto& [what, bad] : attr_mutations(c.attrs[k])) {
        Attrs a;
        for (size_t j = 0; j < c.attrs.size(); ++j) a.push(j == k ? bad : c.attrs[j]);
        try_call(c, c.inputs, a, std::string("attr ") + std::to_string(k) + " " + what);
      }
}

std::string sample_name(const ::testing::TestParamInfo<size_t>& info) {
  const OpSample& s = sample_registry()[info.param];
  std::string n = s.ops[0] + "_" + s.name + "_" + std::to_string(info.param);
  for (auto& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::vector<size_t> all_samples() {
  std::vector<size_t> v;
  for (size_t i = 0; i < sample_registry().size(); ++i) v.push_back(i);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpSampleTest, ::testing::ValuesIn(all_samples()), sample_name);

TEST(Registry, EveryOpHasASample) {
  std::set<std::string> covered;
  for (const auto& s : sample_registry())
    for (const auto& o : s.ops) covered.insert(o);
  std::vector<std::string> missing;
  for (const OpDef* d : OpRegistry::get().all())
    if (!covered.count(d->name)) missing.push_back(d->name);
  std::string m;
  for (auto& x : missing) m += x + " ";
  EXPECT_TRUE(missing.empty()) << "ops without a test sample: " << m;
}

TEST(Registry, SamplesNameRegisteredOps) {
  for (const auto& s : sample_registry())
    for (const auto& o : s.ops)
      EXPECT_NE(OpRegistry::get().find(o), nullptr) << "sample names unknown op " << o;
}

TEST(Registry, DifferentiableSamplesCoverBroadcast) {
  // Every binary elementwise op has a broadcast case among its samples.
  std::set<std::string> bc;
  for (const auto& s : sample_registry())
    if (s.name.find("broadcast") != std::string::npos)
      for (const auto& o : s.ops) bc.insert(o);
  for (const OpDef* d : OpRegistry::get().all())
    if (d->has(kElementwise) && d->num_inputs >= 2 && d->grad) {
      EXPECT_TRUE(bc.count(d->name)) << d->name << " has no broadcast sample";
    }
}

}  // namespace

// Passes, the Session and the JIT name ops through handles: each must resolve to a registered op,
// so renaming or removing an op fails here instead of silently skipping a rewrite.
TEST(RegistryHandles, EveryHandleNamesARegisteredOp) {
  const auto handles = kiln::detail::all_op_handles();
  EXPECT_GE(handles.size(), 17u);
  for (const kiln::detail::OpHandle* h : handles) {
    const kiln::detail::OpDef* def = kiln::detail::OpRegistry::get().find(h->name());
    ASSERT_NE(def, nullptr) << "handle '" << h->name() << "' names no registered op";
    EXPECT_EQ(&h->def(), def);
  }
}

// The traits passes read instead of names are where the ops that need them are.
TEST(RegistryHandles, TraitsPassesReadAreDeclared) {
  int switches = 0, merges = 0;
  for (const kiln::detail::OpDef* op : kiln::detail::OpRegistry::get().all()) {
    if (op->has(kiln::detail::kSwitch)) ++switches;
    if (op->has(kiln::detail::kMerge)) ++merges;
    if (op->has(kiln::detail::kSwitch) || op->has(kiln::detail::kMerge)) {
      EXPECT_TRUE(op->has(kiln::detail::kControlFlow)) << op->name;
    }
  }
  EXPECT_EQ(switches, 1);
  EXPECT_EQ(merges, 1);
  EXPECT_TRUE(kiln::detail::ops::addmm->has(kiln::detail::kAccumulates));
}
