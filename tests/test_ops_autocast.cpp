// Mixed precision: bfloat16 kernels (oneDNN matmul / addmm / conv2d and its gradients) against
// float32 on the same bfloat16-rounded inputs, and the autocast scope: which ops cast to
// bfloat16 and which to float32 (torch.autocast("cpu", torch.bfloat16)'s lists, from the
// OpDef::autocast field), float32 gradients for float32 parameters, nesting, enabled = false,
// thread-locality, a training loop that converges as float32 does, and autocast under jit and in
// a static graph.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

std::vector<double> values(const Tensor& t) { return cast(t, Float64).to_vector<double>(); }

// max |a - b| / (max |b| + tiny): bfloat16 keeps 8 significant bits, so results rounded to it
// are within 2^-8 of the float32 ones (relative to the output's scale).
double rel_err(const Tensor& a, const Tensor& b) {
  auto x = values(a), y = values(b);
  EXPECT_EQ(x.size(), y.size());
  double m = 0, s = 1e-30;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    m = std::max(m, std::fabs(x[i] - y[i]));
    s = std::max(s, std::fabs(y[i]));
  }
  return m / s;
}

// A float32 tensor whose values bfloat16 holds exactly: the reference then sees the same inputs
// as the bfloat16 kernel, and only the rounding of the output (and summation order) differs.
Tensor bf16_exact(const Shape& s) { return cast(cast(randn(s), BF16), Float32); }

TEST(AutocastKernels, MatmulBf16MatchesFloat32) {
  manual_seed(3);
  struct Case {
    Shape a, b;
  };
  for (const Case& c :
       {Case{{64, 96}, {96, 80}}, Case{{3, 17, 33}, {3, 33, 9}}, Case{{4, 2, 8, 16}, {16, 5}},
        Case{{2, 1, 8, 16}, {3, 16, 4}}, Case{{1, 130}, {130, 1}}, Case{{300, 256}, {256, 300}}}) {
    Tensor a = bf16_exact(c.a), b = bf16_exact(c.b);
    Tensor r = matmul(cast(a, BF16), cast(b, BF16));
    EXPECT_EQ(r.dtype(), BF16);
    EXPECT_LT(rel_err(r, matmul(a, b)), 8e-3) << c.a << " @ " << c.b;
  }
  // Transposed views go to the GEMM as flags; a bias row is added in the epilogue.
  Tensor a = bf16_exact({40, 24}), w = bf16_exact({32, 24}), bias = bf16_exact({32});
  Tensor r = linear(cast(a, BF16), cast(w, BF16), cast(bias, BF16));
  EXPECT_EQ(r.dtype(), BF16);
  EXPECT_LT(rel_err(r, linear(a, w, bias)), 8e-3);
  Tensor at = transpose(cast(bf16_exact({24, 40}), BF16), 0, 1);  // [40, 24], column-major
  Tensor wm = bf16_exact({24, 40});
  EXPECT_LT(rel_err(matmul(at, cast(wm, BF16)), matmul(cast(at, Float32), wm)), 8e-3);
}

TEST(AutocastKernels, AddmmBf16MatchesFloat32) {
  manual_seed(4);
  Tensor in = bf16_exact({1, 20}), a = bf16_exact({12, 30}), b = bf16_exact({30, 20});
  for (auto [beta, alpha] : {std::pair{1.0, 1.0}, {0.5, 2.0}, {0.0, 1.0}}) {
    Tensor r = addmm(cast(in, BF16), cast(a, BF16), cast(b, BF16), beta, alpha);
    EXPECT_EQ(r.dtype(), BF16);
    EXPECT_LT(rel_err(r, addmm(in, a, b, beta, alpha)), 8e-3) << beta << " " << alpha;
  }
}

TEST(AutocastKernels, Conv2dBf16ForwardAndGradients) {
  manual_seed(5);
  struct Case {
    Shape x, w;
    std::vector<int64_t> stride, pad, dil;
    int64_t groups;
  };
  for (const Case& c : {Case{{2, 16, 12, 12}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                        Case{{1, 8, 9, 11}, {8, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 4},
                        Case{{3, 3, 8, 8}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}}) {
    Tensor x = bf16_exact(c.x), w = bf16_exact(c.w);
    Tensor xb = cast(x, BF16), wb = cast(w, BF16);
    xb.requires_grad_();
    wb.requires_grad_();
    Tensor x32 = x.clone().requires_grad_(), w32 = w.clone().requires_grad_();
    Tensor y = conv2d(xb, wb, Tensor(), c.stride, c.pad, c.dil, c.groups);
    Tensor y32 = conv2d(x32, w32, Tensor(), c.stride, c.pad, c.dil, c.groups);
    EXPECT_EQ(y.dtype(), BF16);
    EXPECT_LT(rel_err(y, y32), 8e-3) << c.x << " * " << c.w;
    Tensor g = bf16_exact(y32.shape());
    (y * cast(g, BF16)).sum().backward();
    (y32 * g).sum().backward();
    EXPECT_EQ(xb.grad().dtype(), BF16);
    EXPECT_EQ(wb.grad().dtype(), BF16);
    // The bfloat16 product y * g rounds before the sum's gradient reaches conv: a looser bound.
    EXPECT_LT(rel_err(xb.grad(), x32.grad()), 2e-2) << c.x << " * " << c.w;
    EXPECT_LT(rel_err(wb.grad(), w32.grad()), 2e-2) << c.x << " * " << c.w;
  }
}

TEST(AutocastPolicy, LowerPrecisionFloat32AndPromotedOps) {
  manual_seed(6);
  Tensor x = randn({8, 16}), w = randn({4, 16}), b = randn({4});
  Tensor img = randn({2, 3, 8, 8}), k = randn({5, 3, 3, 3});
  Tensor target = randint(0, 4, {8});
  EXPECT_FALSE(autocast_enabled());
  AutocastGuard ac(BF16);
  EXPECT_TRUE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(), BF16);
  // lower precision: matmul, mm, bmm, addmm, linear, conv, attention
  EXPECT_EQ(matmul(x, transpose(w, 0, 1)).dtype(), BF16);
  EXPECT_EQ(linear(x, w, b).dtype(), BF16);
  EXPECT_EQ(linear(x.select(0, 0), w, b).dtype(), BF16);  // 1-D input: bias cast too
  EXPECT_EQ(addmm(b, x, transpose(w, 0, 1)).dtype(), BF16);
  EXPECT_EQ(matmul(randn({3, 4, 5}), randn({3, 5, 2})).dtype(), BF16);
  EXPECT_EQ(conv2d(img, k, randn({5})).dtype(), BF16);
  Tensor q = randn({2, 4, 6, 8});
  EXPECT_EQ(scaled_dot_product_attention(q, q, q, true).dtype(), BF16);
  // mixed inputs are cast alike
  EXPECT_EQ(matmul(cast(x, BF16), transpose(w, 0, 1)).dtype(), BF16);
  // float64 is never cast
  EXPECT_EQ(matmul(cast(x, Float64), cast(transpose(w, 0, 1), Float64)).dtype(), Float64);
  // float32 ops: losses take bfloat16 inputs to float32
  Tensor logits = linear(x, w, b);
  EXPECT_EQ(cross_entropy(logits, target).dtype(), Float32);
  EXPECT_EQ(nll_loss(log_softmax(logits, 1), target).dtype(), Float32);
  EXPECT_EQ(mse_loss(logits, zeros({8, 4})).dtype(), Float32);
  // everything else: the promoted dtype of its inputs (as torch 1.13 on CPU)
  EXPECT_EQ(sum(x).dtype(), Float32);
  EXPECT_EQ(sum(logits).dtype(), BF16);
  EXPECT_EQ(relu(logits).dtype(), BF16);
  EXPECT_EQ(softmax(logits, -1).dtype(), BF16);
  EXPECT_EQ(add(logits, zeros({8, 4})).dtype(), Float32);
  // Values: the bfloat16 product of the float32 inputs.
  EXPECT_LT(
      rel_err(linear(x, w, b), linear(cast(cast(x, BF16), Float32), cast(cast(w, BF16), Float32),
                                      cast(cast(b, BF16), Float32))),
      8e-3);
}

TEST(AutocastPolicy, NestingDisabledScopesAndThreads) {
  Tensor a = randn({4, 4});
  {
    AutocastGuard on(BF16);
    EXPECT_EQ(matmul(a, a).dtype(), BF16);
    {
      AutocastGuard off(false);
      EXPECT_FALSE(autocast_enabled());
      EXPECT_EQ(matmul(a, a).dtype(), Float32);
      {
        AutocastGuard again(true);
        EXPECT_EQ(autocast_dtype(), BF16);
        EXPECT_EQ(matmul(a, a).dtype(), BF16);
      }
      EXPECT_EQ(matmul(a, a).dtype(), Float32);
    }
    EXPECT_EQ(matmul(a, a).dtype(), BF16);
    // Another thread has its own state: off.
    DType there = BF16;
    bool enabled_there = true;
    std::thread t([&] {
      enabled_there = autocast_enabled();
      there = matmul(a, a).dtype();
    });
    t.join();
    EXPECT_FALSE(enabled_there);
    EXPECT_EQ(there, Float32);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(matmul(a, a).dtype(), Float32);
  expect_error([] { AutocastGuard bad(Int32); }, "autocast", {"bfloat16 or float16", "int32"});
}

TEST(AutocastPolicy, Float32ParametersGetFloat32Gradients) {
  manual_seed(7);
  Tensor x = randn({16, 12}), target = randint(0, 5, {16});
  Tensor w1 = mul(randn({32, 12}), 0.3), b1 = zeros({32}), w2 = mul(randn({5, 32}), 0.3),
         b2 = zeros({5});
  for (Tensor* p : {&w1, &b1, &w2, &b2}) p->requires_grad_();
  auto loss_fn = [&] { return cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), target); };
  Tensor loss;
  {
    AutocastGuard ac(BF16);
    loss = loss_fn();
  }
  EXPECT_EQ(loss.dtype(), Float32);
  loss.backward();
  std::vector<Tensor> amp_grads;
  for (Tensor* p : {&w1, &b1, &w2, &b2}) {
    EXPECT_EQ(p->grad().dtype(), Float32);
    amp_grads.push_back(p->grad());
    p->zero_grad();
  }
  loss_fn().backward();
  std::vector<Tensor> ps = {w1, b1, w2, b2};
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_LT(rel_err(amp_grads[i], ps[i].grad()), 5e-2) << i;
}

// A two-layer MLP on a fixed classification task: 150 AdamW steps under autocast end within a
// few percent of float32's loss, both far below the start.
TEST(AutocastTraining, ConvergesLikeFloat32) {
  manual_seed(8);
  Tensor x = randn({128, 10});
  Tensor target = argmax(matmul(x, randn({10, 4})), 1);
  Tensor w1i = mul(randn({64, 10}), 0.3), w2i = mul(randn({4, 64}), 0.1);
  double first = 0, last[2] = {0, 0};
  for (int amp = 0; amp < 2; ++amp) {
    Tensor w1 = w1i.clone().requires_grad_(), b1 = zeros({64}).requires_grad_();
    Tensor w2 = w2i.clone().requires_grad_(), b2 = zeros({4}).requires_grad_();
    optim::AdamW opt({w1, b1, w2, b2}, optim::AdamOptions{.lr = 1e-2});
    for (int s = 0; s < 150; ++s) {
      Tensor loss;
      {
        AutocastGuard ac(BF16, amp == 1);
        loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), target);
      }
      if (s == 0) first = loss.item<double>();
      opt.zero_grad();
      loss.backward();
      opt.step();
      last[amp] = loss.item<double>();
    }
    EXPECT_EQ(w1.dtype(), Float32);
  }
  EXPECT_LT(last[0], 0.25 * first);
  EXPECT_LT(last[1], 0.25 * first);
  EXPECT_NEAR(last[1], last[0], 0.05 * first) << "fp32 " << last[0] << ", autocast " << last[1];
}

TEST(AutocastModes, JitTracesTheCastsAndGuardsOnTheScope) {
  manual_seed(9);
  Tensor x = randn({8, 16}), w = randn({4, 16}).requires_grad_(), b = randn({4});
  auto f = jit([](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = linear(x, w, b);
    return std::vector<Tensor>{y, sum(cast(y, Float32))};
  });
  std::vector<Tensor> eager;
  {
    AutocastGuard ac(BF16);
    eager = {linear(x, w, b)};
    std::vector<Tensor> r = f(x, w, b);
    EXPECT_EQ(r[0].dtype(), BF16);
    EXPECT_LT(rel_err(r[0], eager[0]), 1e-6);
    // The gradient through the traced casts reaches the float32 weight as float32.
    r[1].backward();
    EXPECT_EQ(w.grad().dtype(), Float32);
    r = f(x, w, b);  // same scope: the compiled version replays
    EXPECT_EQ(r[0].dtype(), BF16);
  }
  const int64_t compiles = f.stats().compiles;
  std::vector<Tensor> r = f(x, w, b);  // outside the scope: a version of its own
  EXPECT_EQ(r[0].dtype(), Float32);
  EXPECT_GT(f.stats().compiles, compiles);
  EXPECT_NE(f.explain().find("autocast"), std::string::npos) << f.explain();
}

TEST(AutocastModes, StaticGraphHoldsTheCasts) {
  manual_seed(10);
  Tensor xv = randn({8, 16}), wv = randn({4, 16}), tv = randint(0, 4, {8});
  Graph g;
  Tensor x = g.placeholder("x", Float32, {8, 16});
  Tensor t = g.placeholder("t", Int64, {8});
  Tensor w = g.variable("w", wv);
  Tensor logits, loss;
  {
    AutocastGuard ac(BF16);
    logits = linear(x, w);
    loss = cross_entropy(logits, t);
  }
  EXPECT_EQ(logits.dtype(), BF16);
  EXPECT_EQ(loss.dtype(), Float32);
  std::vector<Tensor> gw = gradients({loss}, {w});
  EXPECT_EQ(gw[0].dtype(), Float32);
  EXPECT_NE(g.to_text().find("cast"), std::string::npos);
  Session s(g);
  std::vector<Tensor> out = s.run({logits, loss, gw[0]}, {{x, xv}, {t, tv}});
  EXPECT_EQ(out[0].dtype(), BF16);
  Tensor wr = wv.clone().requires_grad_();
  Tensor ref;
  {
    AutocastGuard ac(BF16);
    ref = cross_entropy(linear(xv, wr), tv);
  }
  ref.backward();
  EXPECT_LT(rel_err(out[1], ref), 1e-5);
  EXPECT_LT(rel_err(out[2], wr.grad()), 1e-5);
}

}  // namespace
