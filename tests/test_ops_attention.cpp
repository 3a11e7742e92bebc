// Behaviour of scaled_dot_product_attention beyond the registry samples: agreement with the
// composite it replaces (matmul, scale, causal mask, softmax, matmul) on the GPT block's strided
// head views, the memory order of its result and gradients, thread-count independence, eager /
// graph / jit agreement with gradients, gradients of gradients, empty lengths, and bad inputs
// raising kiln::Error with the inputs left untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln::detail;

using namespace kiln;

namespace {

using kiln_test::max_diff;
double max_abs(const Tensor& a) { return max(abs(a)).item<double>(); }

// The five ops the fused op replaces.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t tq = q.size(-2), tk = k.size(-2);
  Tensor s = mul(matmul(q, transpose(k, -1, -2)), 1.0 / std::sqrt(double(q.size(-1))));
  if (causal) {
    std::vector<double> m(static_cast<size_t>(tq * tk), 0.0);
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = i + 1; j < tk; ++j)
        m[static_cast<size_t>(i * tk + j)] = -std::numeric_limits<double>::infinity();
    s = add(s, tensor(m, {tq, tk}).to(q.dtype()));
  }
  return matmul(softmax(s, -1), v);
}

// q, k, v as the GPT block makes them: [B, H, T, E] views of one [B, T, 3 H E] projection.
struct Heads {
  Tensor q, k, v;
};
Heads heads_of(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), E = qkv.size(2) / (3 * H);
  auto c = chunk(qkv, 3, 2);
  auto h = [&](const Tensor& t) { return permute(reshape(t, {B, T, H, E}), {0, 2, 1, 3}); };
  return {h(c[0]), h(c[1]), h(c[2])};
}
Tensor merge_heads(const Tensor& o) {
  return reshape(permute(o, {0, 2, 1, 3}), {o.size(0), o.size(2), o.size(1) * o.size(3)});
}

TEST(AttentionOp, MatchesCompositeOnGptHeadViews) {
  manual_seed(31);
  const int64_t B = 3, H = 4, T = 64, E = 32;
  Tensor qkv0 = randn({B, T, 3 * H * E});
  Tensor w = randn({B, T, H * E});
  for (bool causal : {true, false}) {
    Tensor x1 = qkv0.clone().requires_grad_(), x2 = qkv0.clone().requires_grad_();
    Heads a = heads_of(x1, H), b = heads_of(x2, H);
    EXPECT_FALSE(a.q.is_contiguous());
    Tensor o = scaled_dot_product_attention(a.q, a.k, a.v, causal);
    Tensor r = composite(b.q, b.k, b.v, causal);
    EXPECT_EQ(o.shape(), (Shape{B, H, T, E}));
    // Laid out as [B, T, H, E]: merging the heads back is a view.
    EXPECT_TRUE(permute(o, {0, 2, 1, 3}).is_contiguous());
    EXPECT_LT(max_diff(o, r), 1e-5 * (1 + max_abs(r))) << "causal " << causal;
    sum(mul(merge_heads(o), w)).backward();
    sum(mul(merge_heads(r), w)).backward();
    EXPECT_LT(max_diff(x1.grad(), x2.grad()), 1e-5 * (1 + max_abs(x2.grad())))
        << "causal " << causal;
  }
}

TEST(AttentionOp, ProbabilitiesAreExactlyZeroPastTheDiagonal) {
  manual_seed(32);
  Tensor q = randn({2, 6, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 3});
  TensorList r = call(OpRegistry::get().at("scaled_dot_product_attention"), {q, k, v}, {true, 0.5});
  auto p = r[1].to_vector<float>();
  ASSERT_EQ(r[1].shape(), (Shape{2, 6, 5}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 6; ++i) {
      float rowsum = 0;
      for (int64_t j = 0; j < 5; ++j) {
        float x = p[static_cast<size_t>((b * 6 + i) * 5 + j)];
        if (j > i) {
          EXPECT_EQ(x, 0.f) << b << " " << i << " " << j;
        }
        rowsum += x;
      }
      EXPECT_NEAR(rowsum, 1.f, 1e-6);
    }
}

TEST(AttentionOp, ThreadCountDoesNotChangeResults) {
  manual_seed(33);
  const int64_t H = 4;
  Tensor qkv0 = randn({8, 48, 3 * H * 16});
  const int saved = get_num_threads();
  std::vector<Tensor> outs, grads;
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    Tensor x = qkv0.clone().requires_grad_();
    Heads h = heads_of(x, H);
    Tensor o = scaled_dot_product_attention(h.q, h.k, h.v, true);
    sum(mul(o, o)).backward();
    outs.push_back(o.detach());
    grads.push_back(x.grad());
  }
  set_num_threads(saved);
  EXPECT_EQ(outs[0].to_vector<float>(), outs[1].to_vector<float>());
  EXPECT_EQ(grads[0].to_vector<float>(), grads[1].to_vector<float>());
}

// The loss and its gradient w.r.t. the projection, written once and run eagerly, as a graph
// and under jit.
Tensor attn_loss(const Tensor& qkv, const Tensor& w) {
  Heads h = heads_of(qkv, 2);
  return sum(mul(merge_heads(scaled_dot_product_attention(h.q, h.k, h.v, true)), w));
}

TEST(AttentionOp, EagerGraphAndJitAgreeWithGradients) {
  manual_seed(34);
  Tensor qkv0 = randn({2, 7, 3 * 2 * 4}), w = randn({2, 7, 8});
  Tensor xe = qkv0.clone().requires_grad_();
  Tensor le = attn_loss(xe, w);
  le.backward();

  Graph g;
  Tensor xg = g.placeholder("qkv", Float32, {Dim::any(), 7, 24});
  Tensor wg = g.placeholder("w", Float32, {Dim::any(), 7, 8});
  Tensor lg = attn_loss(xg, wg);
  std::vector<Tensor> dg = gradients({lg}, {xg});
  Session sess(g);
  auto out = sess.run({lg, dg[0]}, {{xg, qkv0}, {wg, w}});
  EXPECT_NEAR(out[0].item<double>(), le.item<double>(), 1e-5 * (1 + std::fabs(le.item<double>())));
  EXPECT_LT(max_diff(out[1], xe.grad()), 1e-5 * (1 + max_abs(xe.grad())));

  auto step = jit([](const Tensor& x_in, const Tensor& wt) {
    Tensor x = x_in.detach().requires_grad_();
    Tensor l = attn_loss(x, wt);
    auto gr = grad({l}, {x});
    return std::vector<Tensor>{l.detach(), gr[0]};
  });
  for (int i = 0; i < 2; ++i) {
    auto r = step(qkv0, w);
    EXPECT_NEAR(r[0].item<double>(), le.item<double>(), 1e-5 * (1 + std::fabs(le.item<double>())));
    EXPECT_LT(max_diff(r[1], xe.grad()), 1e-5 * (1 + max_abs(xe.grad())));
  }
  EXPECT_EQ(step.stats().graph_breaks, 0);
}

TEST(AttentionOp, GradientsOfGradientsMatchComposite) {
  manual_seed(35);
  Tensor q0 = randn({2, 5, 3}, Float64), k0 = randn({2, 4, 3}, Float64),
         v0 = randn({2, 4, 2}, Float64);
  for (bool causal : {true, false}) {
    std::vector<Tensor> second;
    for (bool fused : {true, false}) {
      Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
             v = v0.clone().requires_grad_();
      Tensor o = fused ? scaled_dot_product_attention(q, k, v, causal) : composite(q, k, v, causal);
      auto g1 = grad({sum(mul(o, o))}, {q, k, v}, {}, true, true);
      Tensor s = add(add(sum(mul(g1[0], g1[0])), sum(mul(g1[1], g1[1]))), sum(g1[2]));
      auto g2 = grad({s}, {q, k, v});
      for (auto& t : g2) second.push_back(t);
    }
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(max_diff(second[i], second[i + 3]), 1e-9 * (1 + max_abs(second[i + 3])))
          << "input " << i << " causal " << causal;
  }
}

// In a static graph gradients() of gradients() runs the gradient op's own rule (the first
// derivative stays one fused op), against the composite's eager second derivatives.
TEST(AttentionOp, GraphGradientsOfGradientsMatchComposite) {
  manual_seed(36);
  Tensor q0 = randn({2, 2, 6, 3}, Float64), k0 = randn({2, 2, 6, 3}, Float64),
         v0 = randn({2, 2, 6, 4}, Float64);
  for (bool causal : {true, false}) {
    Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
           v = v0.clone().requires_grad_();
    Tensor o = composite(q, k, v, causal);
    auto g1 = grad({sum(mul(o, o))}, {q, k, v}, {}, true, true);
    auto g2 = grad({add(add(sum(mul(g1[0], g1[0])), sum(mul(g1[1], mul(g1[1], k)))), sum(g1[2]))},
                   {q, k, v});

    Graph g;
    Tensor qg = g.placeholder("q", Float64, {Dim::any(), 2, 6, 3});
    Tensor kg = g.placeholder("k", Float64, {Dim::any(), 2, 6, 3});
    Tensor vg = g.placeholder("v", Float64, {Dim::any(), 2, 6, 4});
    Tensor og = scaled_dot_product_attention(qg, kg, vg, causal);
    std::vector<Tensor> d1 = gradients({sum(mul(og, og))}, {qg, kg, vg});
    std::vector<Tensor> d2 =
        gradients({add(add(sum(mul(d1[0], d1[0])), sum(mul(d1[1], mul(d1[1], kg)))), sum(d1[2]))},
                  {qg, kg, vg});
    int fused_grads = 0;
    for (const auto& n : g.nodes())
      if (n->op && n->op->name == "scaled_dot_product_attention_grad") ++fused_grads;
    EXPECT_GE(fused_grads, 1);
    Session sess(g);
    auto out = sess.run({d2[0], d2[1], d2[2]}, {{qg, q0}, {kg, k0}, {vg, v0}});
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(max_diff(out[i], g2[i]), 1e-9 * (1 + max_abs(g2[i])))
          << "input " << i << " causal " << causal;
  }
}

// Under jit, a traced function taking second derivatives (create_graph) compiles to one graph
// with the fused gradient op and its rule, and replays to the eager values.
TEST(AttentionOp, JitGradientsOfGradientsMatchEager) {
  manual_seed(37);
  Tensor q0 = randn({2, 2, 5, 3}, Float64), k0 = randn({2, 2, 5, 3}, Float64),
         v0 = randn({2, 2, 5, 4}, Float64);
  auto f = [](const Tensor& qi, const Tensor& ki, const Tensor& vi) {
    Tensor q = qi.detach().requires_grad_(), k = ki.detach().requires_grad_(),
           v = vi.detach().requires_grad_();
    Tensor o = scaled_dot_product_attention(q, k, v, true);
    auto g1 = grad({sum(mul(o, o))}, {q, k, v}, {}, true, true);
    return grad({add(sum(mul(g1[0], g1[0])), sum(g1[2]))}, {q, k, v});
  };
  const std::vector<Tensor> want = f(q0, k0, v0);
  auto jf = jit(f);
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> got = jf(q0, k0, v0);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(max_diff(got[i], want[i]), 1e-9 * (1 + max_abs(want[i]))) << "input " << i;
  }
  EXPECT_EQ(jf.stats().compiles, 1);
  EXPECT_EQ(jf.stats().graph_breaks, 0);
}

TEST(AttentionOp, EmptyLengths) {
  Tensor q = randn({2, 3, 4}), k = randn({2, 0, 4}), v = randn({2, 0, 5});
  Tensor qg = q.clone().requires_grad_();
  Tensor o = scaled_dot_product_attention(qg, k, v);
  EXPECT_EQ(o.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(max_abs(o), 0.0);
  sum(o).backward();
  EXPECT_EQ(max_abs(qg.grad()), 0.0);
  Tensor e = scaled_dot_product_attention(randn({2, 0, 4}), randn({2, 3, 4}), randn({2, 3, 5}));
  EXPECT_EQ(e.shape(), (Shape{2, 0, 5}));
}

using kiln_test::expect_error;

TEST(AttentionBadInput, ShapesDtypesAndScale) {
  const std::string op = "scaled_dot_product_attention";
  Tensor q = randn({2, 3, 5, 4}), k = randn({2, 3, 6, 4}), v = randn({2, 3, 6, 2});
  const auto qb = q.to_vector<float>(), kb = k.to_vector<float>(), vb = v.to_vector<float>();
  expect_error([&] { scaled_dot_product_attention(randn({4}), randn({4}), randn({4})); }, op,
               {"rank >= 2", "[4]"});
  expect_error(
      [&] {
        scaled_dot_product_attention(q, randn({3, 6, 4}), v);
      },
      op, {"[2, 3, 5, 4]", "[3, 6, 4]", "[2, 3, 6, 2]"});
  expect_error(
      [&] {
        scaled_dot_product_attention(q, randn({2, 3, 6, 3}), v);
      },
      op, {"last dim", "[2, 3, 5, 4]", "[2, 3, 6, 3]"});
  expect_error(
      [&] {
        scaled_dot_product_attention(q, k, randn({2, 3, 7, 2}));
      },
      op, {"length", "[2, 3, 6, 4]", "[2, 3, 7, 2]"});
  expect_error(
      [&] {
        scaled_dot_product_attention(q, randn({2, 2, 6, 4}), randn({2, 2, 6, 2}));
      },
      op, {"batch dims", "[2, 3, 5, 4]", "[2, 2, 6, 4]"});
  expect_error([&] { scaled_dot_product_attention(q, k.to(Float64), v); }, op,
               {"float64", "[2, 3, 6, 4]"});
  expect_error([&] { scaled_dot_product_attention(q.to(Int64), k.to(Int64), v.to(Int64)); }, op,
               {"int64", "[2, 3, 5, 4]"});
  expect_error(
      [&] { scaled_dot_product_attention(q, k, v, true, std::numeric_limits<double>::infinity()); },
      op, {"scale", "[2, 3, 5, 4]"});
  EXPECT_EQ(q.to_vector<float>(), qb);
  EXPECT_EQ(k.to_vector<float>(), kb);
  EXPECT_EQ(v.to_vector<float>(), vb);

  const std::string gop = "scaled_dot_product_attention_grad";
  const OpDef& gd = OpRegistry::get().at(gop);
  Tensor p = softmax(randn({2, 3, 5, 6}), -1);
  expect_error(
      [&] {
        call(gd, {randn({2, 3, 5, 3}), q, k, v, p}, {true, 0.5});
      },
      gop, {"gradient shape", "[2, 3, 5, 3]", "[2, 3, 5, 2]"});
  expect_error(
      [&] {
        call(gd, {randn({2, 3, 5, 2}), q, k, v, randn({2, 3, 6, 5})}, {true, 0.5});
      },
      gop, {"probabilities", "[2, 3, 6, 5]", "[2, 3, 5, 6]"});
  expect_error(
      [&] {
        call(gd, {randn({2, 3, 5, 2}, Float64), q, k, v, p}, {true, 0.5});
      },
      gop, {"g float64", "[2, 3, 5, 2]", "float32"});
  // Attributes given through the registry are checked too: missing ones, wrong types, a
  // non-finite scale (the wrapper's own check is bypassed there).
  const OpDef& fd = OpRegistry::get().at(op);
  expect_error([&] { call(fd, {q, k, v}, {}); }, op, {"takes 2 attributes", "causal, scale"});
  expect_error(
      [&] {
        call(fd, {q, k, v}, {int64_t(1), 0.5});
      },
      op, {"bad attributes", "attribute 0 is an integer, expected a bool"});
  expect_error([&] { call(fd, {q, k, v}, {true, std::nan("")}); }, op, {"scale must be finite"});
  expect_error(
      [&] {
        call(gd, {randn({2, 3, 5, 2}), q, k, v, p}, {true});
      },
      gop, {"takes 2 attributes"});
  EXPECT_EQ(q.to_vector<float>(), qb);
  // Nothing was left half-done: the op still works.
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, true).shape(), (Shape{2, 3, 5, 2}));
}

}  // namespace
