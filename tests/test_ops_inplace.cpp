// In-place arithmetic (Tensor::add_, sub_, mul_, div_, neg_, clamp_, relu_, zero_, copy_,
// fill_): the values of the out-of-place op written into the tensor's storage (views see them),
// torch's casting rule for the result, no temporary for contiguous tensors, autograd through
// them as in torch (history rebased onto the in-place op; writes through views give the base a
// new history, as CopySlices; leaves refused), refusals in graphs and under jit.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/core/allocator.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

std::vector<float> v(const Tensor& t) { return t.to_vector<float>(); }
std::vector<double> v64(const Tensor& t) { return t.to_vector<double>(); }

TEST(InPlace, MatchesTheOutOfPlaceOps) {
  manual_seed(41);
  Tensor a = randn({3, 4}), b = randn({3, 4}), row = randn({4});
  auto check = [&](const char* what, Tensor expect, const std::function<void(Tensor&)>& f) {
    Tensor x = a.clone();
    Tensor& r = [&]() -> Tensor& {
      f(x);
      return x;
    }();
    EXPECT_TRUE(r.is_same(x)) << what;
    EXPECT_EQ(v(x), v(expect)) << what;
  };
  check("add_", add(a, b), [&](Tensor& x) { x.add_(b); });
  check("add_ row", add(a, row), [&](Tensor& x) { x.add_(row); });
  check("add_ scalar", add(a, 2.5), [&](Tensor& x) { x.add_(2.5); });
  check("sub_", sub(a, b), [&](Tensor& x) { x.sub_(b); });
  check("sub_ scalar", sub(a, 1.0), [&](Tensor& x) { x.sub_(1.0); });
  check("mul_", mul(a, b), [&](Tensor& x) { x.mul_(b); });
  check("mul_ scalar", mul(a, -3.0), [&](Tensor& x) { x.mul_(-3.0); });
  check("div_", div(a, b), [&](Tensor& x) { x.div_(b); });
  check("div_ scalar", div(a, 4.0), [&](Tensor& x) { x.div_(4.0); });
  check("neg_", neg(a), [&](Tensor& x) { x.neg_(); });
  check("clamp_", clamp(a, -0.5, 0.5), [&](Tensor& x) { x.clamp_(-0.5, 0.5); });
  check("relu_", relu(a), [&](Tensor& x) { x.relu_(); });
  check("zero_", zeros({3, 4}), [&](Tensor& x) { x.zero_(); });
  check("self alias", add(a, a), [&](Tensor& x) { x.add_(x); });
  // Chains return the tensor itself, as torch's do.
  Tensor x = a.clone();
  x.mul_(2.0).add_(1.0);
  EXPECT_EQ(v(x), v(add(mul(a, 2.0), 1.0)));
}

// Writes go to the storage: views of the tensor see them, and a view (slice, transpose) can be
// written into, which changes its base.
TEST(InPlace, WritesThroughViews) {
  Tensor base = arange(0, 12, 1, Float32).reshape({3, 4});
  Tensor row = base.select(0, 1);
  row.add_(100.0);
  EXPECT_EQ(v(base.select(0, 1)), (std::vector<float>{104, 105, 106, 107}));
  Tensor t = base.t();              // non-contiguous: computed aside, then written through the view
  t.mul_(tensor({1.f, 0.f, 1.f}));  // [4, 3] * [3]: zeroes base's row 1
  EXPECT_EQ(v(base.select(0, 1)), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(v(base.select(0, 2)), (std::vector<float>{8, 9, 10, 11}));
  // An operand that overlaps the destination elsewhere reads the values before the write.
  Tensor s = arange(0, 6, 1, Float32);
  Tensor dst = s.slice(0, 1, 6), src = s.slice(0, 0, 5);
  dst.add_(src);
  EXPECT_EQ(v(s), (std::vector<float>{0, 1, 3, 5, 7, 9}));
}

// A contiguous tensor with an operand of its dtype is computed into directly: no buffer is
// allocated (a scalar operand's 0-d tensor aside).
TEST(InPlace, ContiguousTensorsNeedNoTemporary) {
  Tensor x = randn({256, 64}), y = randn({256, 64});
  x.add_(y);  // warm
  const AllocatorStats s0 = allocator_stats();
  x.add_(y).mul_(y).sub_(y).relu_().clamp_(-1, 1).neg_();
  const AllocatorStats s1 = allocator_stats();
  EXPECT_EQ(s1.hits + s1.misses, s0.hits + s0.misses);
}

// torch's rule: the result must be castable to the tensor's dtype (no float into integers,
// nothing but bool into bool), and must keep the tensor's shape.
TEST(InPlace, DtypeAndShapeRules) {
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3}, {3});
  i.add_(2).mul_(tensor(std::vector<int64_t>{2, 2, 2}, {3}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{6, 8, 10}));
  // A float result (a float scalar, true division) cannot go into an integer tensor, as torch.
  expect_error([&] { i.add_(2.0); }, "add_", {"float32", "int64", "[3]"});
  expect_error([&] { i.add_(0.5); }, "add_", {"float32", "int64", "[3]"});
  expect_error([&] { i.mul_(tensor({1.f, 2.f, 3.f})); }, "mul_", {"float32", "int64"});
  expect_error([&] { i.div_(3); }, "div_", {"float32", "int64"});
  expect_error(
      [&] {
        i.div_(tensor(std::vector<int64_t>{1, 0, 1}, {3}));
      },
      "div_", {"float32", "int64"});
  Tensor f = tensor({1.f, 2.f, 3.f});
  f.add_(tensor(std::vector<int64_t>{1, 1, 1}, {3}));  // an integer operand into float: fine
  EXPECT_EQ(v(f), (std::vector<float>{2, 3, 4}));
  Tensor bl = tensor(std::vector<int64_t>{1, 0}, {2}).to(Bool);
  expect_error([&] { bl.add_(1.0); }, "add_", {"bool"});
  expect_error([&] { f.add_(ones({2, 3})); }, "add_", {"[2, 3]", "[3]"});
  expect_error([&] { f.add_(ones({2})); }, "add_", {"[2]", "[3]"});
  expect_error([&] { f.clamp_(1.0, 0.0); }, "clamp_", {"min"});
  expect_error(
      [&] {
        Tensor u;
        u.add_(1.0);
      },
      "add_", {"undefined"});
  expect_error([&] { f.add_(Tensor()); }, "add_", {"undefined"});
  // Nothing was written by the refused calls.
  EXPECT_EQ(v(f), (std::vector<float>{2, 3, 4}));
}

using kiln_test::max_diff;

// With autograd (torch's semantics): an in-place op on a tensor with history continues that
// history, with the gradients of the same computation written out of place.
TEST(InPlace, AutogradThroughInPlaceChainsMatchesOutOfPlace) {
  manual_seed(42);
  Tensor a = randn({3, 4}, Float64).requires_grad_(), b = randn({3, 4}, Float64).requires_grad_();
  Tensor d = add(abs(randn({4}, Float64)), 1.0);
  Tensor x = mul(a, 2.0);
  x.add_(b).mul_(b).relu_().sub_(0.5).clamp_(-1.0, 1.0).neg_().div_(d).mul_(x);
  Tensor lx = sum(mul(x, a));
  Tensor y = mul(a, 2.0);
  y = mul(neg(clamp(sub(relu(mul(add(y, b), b)), 0.5), -1.0, 1.0)), 1.0);
  y = div(y, d);
  y = mul(y, y);
  Tensor ly = sum(mul(y, a));
  EXPECT_LT(max_diff(lx, ly), 1e-12);
  std::vector<Tensor> gx = grad({lx}, {a, b}), gy = grad({ly}, {a, b});
  EXPECT_LT(max_diff(gx[0], gy[0]), 1e-12);
  EXPECT_LT(max_diff(gx[1], gy[1]), 1e-12);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(x.is_leaf());
}

// A plain tensor that takes an operand requiring grad joins the graph (torch's c.mul_(w)); a
// leaf that requires grad is refused in grad mode and updatable under NoGradGuard.
TEST(InPlace, OperandRequiringGradAndLeafRules) {
  Tensor w = tensor({1.f, 2.f}).requires_grad_();
  expect_error([&] { w.add_(1.0); }, "add_", {"leaf", "requires grad", "[2]"});
  Tensor c = tensor({5.f, 6.f});
  c.mul_(w);
  EXPECT_TRUE(c.requires_grad());
  EXPECT_EQ(v(c), (std::vector<float>{5, 12}));
  sum(c).backward();
  EXPECT_EQ(v(w.grad()), (std::vector<float>{5, 6}));
  {
    NoGradGuard ng;
    w.sub_(tensor({0.5f, 0.5f}));
  }
  EXPECT_EQ(v(w), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_TRUE(w.is_leaf());
}

// What an in-place op reads of its own old value is kept for the gradient (x.mul_(x) is x^2),
// second derivatives go through it, and a tensor saved by an earlier op and then changed in
// place fails that op's backward (as in PyTorch).
TEST(InPlace, SavedValuesSecondOrderAndVersionCounter) {
  Tensor a = tensor(std::vector<double>{1.5, -2.0, 3.0}, {3}).requires_grad_();
  Tensor x = mul(a, 1.0);
  x.mul_(x);  // a^2
  x.mul_(a);  // a^3
  std::vector<Tensor> g = grad({sum(x)}, {a}, {}, /*retain_graph=*/false, /*create_graph=*/true);
  EXPECT_LT(max_diff(g[0], mul(mul(a, a), 3.0)), 1e-12);
  std::vector<Tensor> g2 = grad({sum(g[0])}, {a});
  EXPECT_LT(max_diff(g2[0], mul(a, 6.0)), 1e-12);
  // exp saves its output: changing it in place breaks exp's backward.
  Tensor e = exp(a);
  e.add_(1.0);
  expect_error([&] { sum(e).backward(); }, {"backward"});
  // A plain tensor saved by mul, changed under NoGradGuard.
  Tensor s = tensor(std::vector<double>{1, 2, 3}, {3});
  Tensor y = mul(a, s);
  {
    NoGradGuard ng;
    s.mul_(2.0);
  }
  expect_error([&] { sum(y).backward(); }, {"backward", "modified in place"});
}

// Writes through views with autograd, as torch's CopySlices: the base takes a new history
// (its old one outside the view, the written value inside), the view becomes a view of that,
// and other views re-derive their history when next used. Each case against the same values
// computed out of place, in float64.
TEST(InPlace, WritesThroughViewsRewriteTheBaseHistory) {
  manual_seed(5);
  const Tensor c = randn({2, 3}, Float64);
  {
    // Rows of a plain buffer filled from values with history (out[i].copy_(h)): the buffer
    // joins the graph. (Before: the buffer kept no history and w's gradient was lost.)
    Tensor w = randn({3}, Float64).requires_grad_();
    Tensor out = zeros({2, 3}, Float64);
    out.select(0, 0).copy_(w);
    out.select(0, 1).add_(mul(w, 2.0));
    EXPECT_TRUE(out.requires_grad());
    Tensor g = grad({sum(mul(out, c))}, {w})[0];
    Tensor want = add(c.select(0, 0), mul(c.select(0, 1), 2.0));
    EXPECT_LT(max_diff(g, want), 1e-12);
  }
  {
    // A slice of a reshape of a tensor with history, tripled; the base and the view both see it.
    Tensor a = randn({3, 4}, Float64).requires_grad_();
    Tensor x = mul(a, 2.0);
    Tensor r = x.reshape({12});
    Tensor part = r.slice(0, 2, 5);
    part.mul_(3.0);
    std::vector<double> m(12, 1.0);
    m[2] = m[3] = m[4] = 3.0;
    const Tensor mask = tensor(m, {3, 4});
    Tensor y = mul(mul(a, 2.0), mask);
    EXPECT_LT(max_diff(x, y), 1e-12);
    const Tensor k = randn({3}, Float64);
    Tensor lx = add(sum(mul(x, a)), sum(mul(part, k)));
    Tensor ly = add(sum(mul(y, a)), sum(mul(y.reshape({12}).slice(0, 2, 5), k)));
    EXPECT_LT(max_diff(grad({lx}, {a})[0], grad({ly}, {a})[0]), 1e-12);
  }
  {
    // A view taken before its base changed in place reads the new value and the new history.
    Tensor a = randn({2, 3}, Float64).requires_grad_();
    Tensor x = mul(a, 2.0);
    Tensor row = x.select(0, 1);
    x.mul_(x);  // (2a)^2
    Tensor g = grad({sum(mul(row, c.select(0, 0)))}, {a})[0];
    // d/da[1] (2 a[1])^2 = 8 a[1]
    Tensor want = cat(
        {zeros({1, 3}, Float64), mul(mul(a.select(0, 1), 8.0), c.select(0, 0)).unsqueeze(0)}, 0);
    EXPECT_LT(max_diff(g, want), 1e-12);
  }
  {
    // A recurrence written into a preallocated buffer, against the stacked form.
    Tensor w = randn({4}, Float64).requires_grad_();
    Tensor xs = randn({5, 4}, Float64);
    Tensor buf = zeros({5, 4}, Float64);
    Tensor h = zeros({4}, Float64);
    std::vector<Tensor> hs;
    for (int64_t t = 0; t < 5; ++t) {
      h = tanh(add(mul(h, w), xs.select(0, t)));
      buf.select(0, t).copy_(h);
      hs.push_back(h);
    }
    const Tensor k = randn({5, 4}, Float64);
    Tensor g1 = grad({sum(mul(buf, k))}, {w}, {}, /*retain_graph=*/true)[0];
    Tensor g2 = grad({sum(mul(stack(hs, 0), k))}, {w})[0];
    EXPECT_LT(max_diff(g1, g2), 1e-12);
  }
  {
    // A column through a transpose, and a second derivative through a view written with itself.
    Tensor a = randn({3, 4}, Float64).requires_grad_();
    Tensor x = mul(a, 1.0);
    Tensor col = x.t().select(0, 1);
    col.mul_(col);  // x[:, 1] = a[:, 1]^2
    std::vector<Tensor> g = grad({sum(x)}, {a}, {}, false, /*create_graph=*/true);
    std::vector<double> want = v64(ones({3, 4}, Float64));
    auto av = v64(a);
    for (int i = 0; i < 3; ++i)
      want[static_cast<size_t>(i * 4 + 1)] = 2 * av[static_cast<size_t>(i * 4 + 1)];
    EXPECT_EQ(v64(g[0]).size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(v64(g[0])[i], want[i], 1e-12);
    Tensor g2 = grad({sum(g[0])}, {a})[0];  // 2 in column 1, 0 elsewhere
    auto g2v = v64(g2);
    for (size_t i = 0; i < g2v.size(); ++i) EXPECT_NEAR(g2v[i], i % 4 == 1 ? 2.0 : 0.0, 1e-12);
  }
  {
    // zero_ through a view cuts that part's gradient; zero_ of a whole tensor with history
    // leaves it without history (torch: the gradient through it is zero).
    Tensor a = randn({2, 3}, Float64).requires_grad_();
    Tensor x = mul(a, 3.0);
    x.select(0, 0).zero_();
    auto g = v64(grad({sum(x)}, {a})[0]);
    EXPECT_EQ(g, (std::vector<double>{0, 0, 0, 3, 3, 3}));
    Tensor z = mul(a, 2.0);
    z.zero_();
    EXPECT_FALSE(z.requires_grad());
    EXPECT_EQ(v64(grad({sum(add(z, a))}, {a})[0]), std::vector<double>(6, 1.0));
  }
}

TEST(InPlace, WritesThroughViewsRefusals) {
  // A view of a leaf that requires grad (torch refuses it too).
  Tensor a = randn({3, 4}).requires_grad_();
  expect_error([&] { a.select(0, 0).add_(1.0); }, "add_", {"leaf", "requires grad", "[4]"});
  expect_error([&] { a.select(0, 0).copy_(ones({4})); }, "copy_", {"leaf"});
  // An expanded view repeats positions: a write through it has no well-defined history.
  Tensor w = randn({2, 3}).requires_grad_();
  Tensor e = zeros({3}).expand({2, 3});
  expect_error([&] { e.add_(w); }, "add_", {"view", "twice"});
  // Without autograd views are fine (the base sees the write).
  Tensor p = zeros({2, 3});
  p.select(0, 1).add_(1.0);
  EXPECT_EQ(v(p), (std::vector<float>{0, 0, 0, 1, 1, 1}));
  // Operands of another dtype under autograd: refused, naming it.
  Tensor f = mul(randn({3}).requires_grad_(), 1.0);
  expect_error([&] { f.add_(ones({3}, Float64)); }, "add_", {"float32", "float64"});
  Tensor f64 = mul(randn({3}, Float64).requires_grad_(), 1.0);
  f64.add_(ones({3}, Float32));  // a float32 operand promotes to the tensor's float64: fine
  EXPECT_TRUE(f64.requires_grad());
}

// Graphs and jitted functions are dataflow: the in-place forms refuse symbolic tensors and say
// what to write instead.
TEST(InPlace, RefusedInGraphsAndEagerUnderJit) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3});
  expect_error([&] { x.add_(1.0); }, "add_", {"eager-only", "add("});
  auto f = jit([](const Tensor& a) {
    Tensor b = mul(a, 2.0);
    b.relu_();
    return b;
  });
  // The trace refuses the in-place op; the JIT then runs the function eagerly for that shape
  // (never worse than eager) and says why.
  Tensor y;
  EXPECT_NO_THROW(y = f(tensor({1.f, -2.f})));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2.f, 0.f}));
  EXPECT_NE(f.explain().find("runs eagerly"), std::string::npos) << f.explain();
  EXPECT_NE(f.explain().find("relu_"), std::string::npos) << f.explain();
}

}  // namespace
