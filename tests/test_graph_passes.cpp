// Graph passes: algebraic simplification, transpose folding, matmul sums, addmm and memory
// planning. Each pass is checked on a Program before and after (which ops remain, same numbers),
// switched off through KILN_DISABLE_PASSES, and the memory planner on hand cases, random
// lifetimes and an MLP. The convolution passes: test_graph_passes_conv.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include "graph_pass_util.h"
#include "kiln/core/allocator.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "kiln/passes/memory_plan.h"
#include "kiln/passes/simplify.h"
#include "test_util.h"

using namespace kiln::detail;

using namespace kiln;
using namespace kiln_test;

namespace {

// ---- simplify ------------------------------------------------------------------------------

TEST(PassSimplify, NeutralElementsVanish) {
  manual_seed(1);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {4, 3});
  Tensor c1 = g.constant(ones({3}));
  Tensor c0 = g.constant(zeros({4, 3}));
  Tensor y = mul(c1, x);                                        // 1*x
  y = add(mul(y, 1.0), c0);                                     // x*1 + 0
  y = ((0.0 + y) - 0.0) / 1.0;                                  // (0+x - 0) / 1
  y = neg(neg(y));                                              // --x
  y = call1(op("cast"), {y}, {static_cast<int64_t>(Float32)});  // cast to its own dtype
  Tensor out = exp(y);
  Program p = program_of({out});
  const int before_ops = count_ops(p);
  auto feeds = std::map<std::string, Tensor>{{"x", randn({4, 3})}};
  auto before = evaluate(p, feeds);
  int n = simplify(p);
  EXPECT_EQ(n, 8);  // 6 neutral elements, neg(neg), cast
  EXPECT_EQ(count_ops(p), 1) << "from " << before_ops;
  EXPECT_EQ(count_op(p, "exp"), 1);
  EXPECT_EQ(p.fetches[0].node->inputs[0].node->kind, NodeKind::Placeholder);
  expect_same(before, evaluate(p, feeds));
}

TEST(PassSimplify, KeepsWhatWouldChangeShapeDtypeOrValue) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3});
  Tensor d = g.placeholder("d", Float32, {Dim::any(), 3});
  // A ones constant that broadcasts x to [4, 3] is not a no-op.
  Tensor a = mul(x, g.constant(ones({4, 3})));
  // Against a dynamic dim (maybe 1 at run time) a [2, 3] constant could enlarge too.
  Tensor b = mul(d, g.constant(ones({1, 3})));  // this one is exact: [1, 3] never enlarges
  Tensor c = mul(x, g.constant(tensor({1.f, 2.f, 1.f})));  // not all ones
  Tensor e = add(x, g.constant(full({3}, 1e-30)));         // not zero
  Tensor f = sub(g.constant(zeros({3})), x);               // 0 - x is -x
  Tensor h = div(g.constant(ones({3})), x);                // 1 / x
  Tensor k = neg(exp(x));                                  // a single neg
  Program p = program_of({exp(a), exp(b), exp(c), exp(e), exp(f), exp(h), exp(k)});
  auto feeds = std::map<std::string, Tensor>{{"x", tensor({0.5f, -1.f, 2.f})},
                                             {"d", tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3})}};
  auto before = evaluate(p, feeds);
  EXPECT_EQ(simplify(p), 1);  // only d * [[1, 1, 1]]
  EXPECT_EQ(count_op(p, "mul"), 2);
  EXPECT_EQ(count_op(p, "add"), 1);
  EXPECT_EQ(count_op(p, "sub"), 1);
  EXPECT_EQ(count_op(p, "div"), 1);
  EXPECT_EQ(count_op(p, "neg"), 1);
  expect_same(before, evaluate(p, feeds));
}

TEST(PassSimplify, IntegerOneDoesNotHideAPromotion) {
  Graph g;
  Tensor i = g.placeholder("i", Int64, {3});
  Tensor y = mul(i, 1.5);  // promotes to float32: kept
  Tensor z = mul(cast(i, Float32), 1.0);
  Program p = program_of({exp(y), exp(z)});
  auto feeds = std::map<std::string, Tensor>{{"i", tensor(std::vector<int64_t>{1, 2, 3}, {3})}};
  auto before = evaluate(p, feeds);
  EXPECT_EQ(simplify(p), 1);  // z's * 1.0 only; the int->float cast stays
  EXPECT_EQ(count_op(p, "cast"), 2);
  expect_same(before, evaluate(p, feeds));
}

TEST(PassSimplify, ViewChains) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2, 3, 4});
  Tensor t = transpose(transpose(x, 0, 2), 2, 0);                   // cancels
  Tensor q = permute(permute(x, {1, 2, 0}), {2, 0, 1});             // cancels
  Tensor r = transpose(transpose(x, 0, 1), 1, 2);                   // one permute
  Tensor s = reshape(reshape(reshape(x, {6, 4}), {4, 6}), {3, 8});  // one reshape
  Tensor same = reshape(x, {2, -1, 4});                             // same shape
  Tensor e = expand(x, {2, 3, 4});                                  // same shape
  Tensor sum_all = add(add(add(t, q), same), e);
  Program p = program_of({sum_all, exp(r), exp(s)});
  auto feeds = std::map<std::string, Tensor>{{"x", arange(0, 24, 1, Float32).reshape({2, 3, 4})}};
  auto before = evaluate(p, feeds);
  EXPECT_GT(simplify(p), 0);
  EXPECT_EQ(count_op(p, "transpose"), 0);
  EXPECT_EQ(count_op(p, "permute"), 1);
  EXPECT_EQ(count_op(p, "reshape"), 1);
  EXPECT_EQ(count_op(p, "expand"), 0);
  // Every add now reads x directly.
  for (const auto& n : p.graph->nodes)
    if (n->kind == NodeKind::Op && n->op->name == "add") {
      EXPECT_EQ(n->inputs[1].node->kind, NodeKind::Placeholder);
    }
  expect_same(before, evaluate(p, feeds));
}

TEST(PassSimplify, DynamicReshapeOnlyWhenProvablySame) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 4});
  Tensor y = g.placeholder("y", Float32, {Dim::any(), Dim::any()});
  Tensor a = reshape(x, {-1, 4});  // same: the one dynamic dim resolves to itself
  Tensor b = reshape(y, {-1, 4});  // y's shape is not known to be [?, 4]: kept
  Program p = program_of({exp(a), exp(b)});
  EXPECT_EQ(simplify(p), 1);
  EXPECT_EQ(count_op(p, "reshape"), 1);
}

TEST(PassSimplify, ContiguousOfFreshValueOnly) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3, 2});
  Tensor fresh = contiguous(exp(x));                  // exp's output is contiguous already
  Tensor view = contiguous(transpose(exp(x), 0, 1));  // a real copy: kept
  Tensor fed = contiguous(x);                         // a feed may be a strided view: kept
  Program p = program_of({sum(fresh), sum(view), sum(fed)});
  auto feeds = std::map<std::string, Tensor>{{"x", randn({2, 3}).t()}};
  auto before = evaluate(p, feeds);
  EXPECT_EQ(count_op(p, "clone"), 3);
  EXPECT_EQ(simplify(p), 1);
  EXPECT_EQ(count_op(p, "clone"), 2);
  expect_same(before, evaluate(p, feeds));
}

TEST(PassSimplify, FetchedCopiesAndCopiesOfVariablesStay) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  Tensor v = g.variable("v", tensor({1.f, 2.f}));
  Tensor fetched_copy = mul(x, 1.0);  // a fetch is a fresh tensor, not the feed itself
  Tensor old_v = reshape(mul(v, 1.0), {1, 2});
  Tensor step = assign(v, add(v, 10.0));
  Program p = program_of({fetched_copy, old_v, step});
  EXPECT_EQ(simplify(p), 0);
  EXPECT_EQ(count_op(p, "mul"), 2);
  // Through a Session: the copy of v is taken before the assign, so it keeps the old value.
  Session sess(g);
  auto out = sess.run({fetched_copy, old_v, step}, {{x, tensor({3.f, 4.f})}});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{3.f, 4.f}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1.f, 2.f}));
  EXPECT_EQ(sess.variable("v").to_vector<float>(), (std::vector<float>{11.f, 12.f}));
}

TEST(PassSimplify, SwitchedOffByName) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2, 3});
  Tensor y = exp(neg(neg(mul(transpose(transpose(x, 0, 1), 0, 1), 1.0))));
  Program base = program_of({y});
  std::string off_summary, on_summary;
  Program off = program_of({y}), on = program_of({y});
  {
    DisablePasses d("simplify,fuse_elementwise");
    off_summary = optimize(off);
  }
  {
    DisablePasses d("fuse_elementwise");
    on_summary = optimize(on);
  }
  EXPECT_EQ(off_summary.find("simplify"), std::string::npos) << off_summary;
  EXPECT_NE(on_summary.find("simplify: "), std::string::npos) << on_summary;
  EXPECT_EQ(count_ops(off), count_ops(base));
  EXPECT_EQ(count_op(off, "neg"), 2);
  EXPECT_EQ(count_ops(on), 1);
  // The same numbers through a Session either way, with fewer kernels run when on.
  Tensor xv = randn({2, 3});
  Tensor r_off, r_on;
  int64_t ran_off, ran_on;
  {
    DisablePasses d("simplify,fuse_elementwise");
    Session s(g);
    r_off = s.run(y, {{x, xv}});
    ran_off = s.last_run().nodes_executed;
  }
  {
    DisablePasses d("fuse_elementwise");
    Session s(g);
    r_on = s.run(y, {{x, xv}});
    ran_on = s.last_run().nodes_executed;
  }
  EXPECT_EQ(r_off.to_vector<float>(), r_on.to_vector<float>());
  EXPECT_EQ(ran_on, 1);
  EXPECT_GT(ran_off, ran_on);
}

TEST(PassSimplify, ReplaceAllUsesRewritesInputsAndFetches) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  Tensor a = exp(x);
  Tensor b = add(a, a);
  Program p = program_of({a, b});
  Node* exp_node = p.fetches[0].node;
  Node* ph = exp_node->inputs[0].node;
  EXPECT_EQ(replace_all_uses(p, ValueRef{exp_node, 0}, ValueRef{ph, 0}), 3);
  EXPECT_EQ(p.fetches[0].node, ph);
  EXPECT_EQ(dce(p), 1);
  EXPECT_EQ(count_op(p, "exp"), 0);
}

// ---- transpose folding ---------------------------------------------------------------------

TEST(PassTransposeFold, ContiguousBetweenTransposeAndMatmulIsDropped) {
  manual_seed(2);
  Graph g;
  Tensor a = g.placeholder("a", Float32, {4, 5});
  Tensor b = g.placeholder("b", Float32, {4, 6});
  Tensor A = g.placeholder("A", Float32, {2, 3, 4});
  Tensor B = g.placeholder("B", Float32, {2, 3, 5});
  Tensor w = g.variable("w", randn({7, 6}));
  Tensor y1 = matmul(contiguous(transpose(a, 0, 1)), b);                        // a^T b
  Tensor y2 = matmul(contiguous(transpose(A, -1, -2)), B);                      // batched A^T B
  Tensor y3 = matmul(y1, contiguous(transpose(w, 0, 1)).clone());               // two copies
  Tensor y4 = matmul(transpose(transpose(b, 0, 1), 0, 1), transpose(b, 0, 1));  // b b^T
  Tensor used_elsewhere = contiguous(transpose(b, 0, 1));
  Tensor y5 = add(matmul(used_elsewhere, a), sum(used_elsewhere));
  Program p = program_of({y1, y2, y3, y4, y5});
  std::map<std::string, Tensor> feeds{
      {"a", randn({4, 5})}, {"b", randn({4, 6})}, {"A", randn({2, 3, 4})}, {"B", randn({2, 3, 5})}};
  auto before = evaluate(p, feeds);
  EXPECT_EQ(count_op(p, "clone"), 5);
  // y1's and y2's copies go, and y4's cancelling pair; y3's outer copy reads a clone, not a
  // view, and y5's copy has another reader.
  EXPECT_EQ(fold_transposes(p), 3);
  EXPECT_EQ(count_op(p, "clone"), 3);
  // simplify drops y3's clone of a clone; then y3's remaining copy of w^T folds too.
  EXPECT_GE(simplify(p), 1);
  EXPECT_EQ(fold_transposes(p), 1);
  EXPECT_EQ(count_op(p, "clone"), 1);  // the one a sum also reads
  int matmul_reads_clone = 0;
  for (const auto& node : p.graph->nodes)
    if (node->kind == NodeKind::Op && node->op->name == "matmul")
      for (const auto& in : node->inputs)
        matmul_reads_clone += in.node->kind == NodeKind::Op && in.node->op->name == "clone";
  EXPECT_EQ(matmul_reads_clone, 1);  // y5's shared copy
  auto after = evaluate(p, feeds);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    auto x = before[i].to_vector<double>(), y = after[i].to_vector<double>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t j = 0; j < x.size(); ++j) EXPECT_NEAR(x[j], y[j], 1e-4) << "fetch " << i;
  }
}

// The GEMM consumes row- and column-major operands without a copy: every case allocates its
// output and nothing else. A strided (sliced with a step) operand is copied once.
TEST(PassTransposeFold, MatmulTakesTransposedOperandsWithoutACopy) {
  manual_seed(3);
  NoGradGuard ng;
  auto allocations = [](auto&& fn) {
    AllocatorStats s0 = allocator_stats();
    Tensor r = fn();
    AllocatorStats s1 = allocator_stats();
    EXPECT_TRUE(r.defined());
    return (s1.hits + s1.misses) - (s0.hits + s0.misses);
  };
  Tensor a = randn({8, 5}), b = randn({8, 6}), c = randn({6, 5}), w = randn({7, 5});
  Tensor A = randn({3, 8, 5}), B = randn({3, 8, 6}), P = randn({8, 3, 5});
  Tensor X = randn({3, 4, 5});
  EXPECT_EQ(allocations([&] { return matmul(a.t(), b); }), 1u);                // A^T B
  EXPECT_EQ(allocations([&] { return matmul(a, c.t()); }), 1u);                // A B^T
  EXPECT_EQ(allocations([&] { return matmul(c.t(), b.t()); }), 1u);            // A^T B^T
  EXPECT_EQ(allocations([&] { return matmul(A.transpose(-1, -2), B); }), 1u);  // batched
  EXPECT_EQ(allocations([&] { return matmul(B.transpose(-1, -2), A); }), 1u);
  EXPECT_EQ(allocations([&] { return matmul(X, w.t()); }), 1u);  // linear, tall GEMM
  EXPECT_EQ(allocations([&] { return linear(X, w); }), 1u);
  // A batch operand whose batch dim is not outermost: strided batches, still no copy.
  EXPECT_EQ(allocations([&] { return matmul(P.permute({1, 0, 2}), c.t()); }), 1u);
  EXPECT_EQ(allocations([&] { return matmul(A, P.permute({1, 2, 0})); }), 1u);
  // Control: an operand with a step in its inner dim is neither layout, so it is copied.
  Tensor wide = randn({8, 10});
  EXPECT_EQ(allocations([&] { return matmul(wide.slice(1, 0, 10, 2), c.t()); }), 2u);
  // Strided batches of matrices too large for the batch-parallel loop (a batch_first sequence
  // read time-major, times a weight): copied once into one tall GEMM, same numbers.
  Tensor seq = randn({32, 16, 64}), proj = randn({2048, 64});
  Tensor strided;
  EXPECT_EQ(allocations([&] { return strided = matmul(seq.transpose(0, 1), proj.t()); }), 2u);
  EXPECT_LE(max_diff(strided, matmul(contiguous(seq.transpose(0, 1)), proj.t())), 1e-4);
}

TEST(PassTransposeFold, SwitchedOffByNameAndSameNumbersInASession) {
  manual_seed(4);
  Graph g;
  Tensor a = g.placeholder("a", Float32, {4, 5});
  Tensor b = g.placeholder("b", Float32, {4, 6});
  Tensor y = matmul(contiguous(transpose(a, 0, 1)), b);
  Program off = program_of({y}), on = program_of({y});
  {
    DisablePasses d("fold_transposes,simplify,fuse_elementwise");
    optimize(off);
  }
  {
    DisablePasses d("simplify,fuse_elementwise");
    optimize(on);
  }
  EXPECT_EQ(count_op(off, "clone"), 1);
  EXPECT_EQ(count_op(on, "clone"), 0);
  Tensor av = randn({4, 5}), bv = randn({4, 6});
  Tensor r_off, r_on;
  {
    DisablePasses d("fold_transposes,simplify");
    Session s(g);
    r_off = s.run(y, {{a, av}, {b, bv}});
  }
  Session s(g);
  r_on = s.run(y, {{a, av}, {b, bv}});
  auto x = r_off.to_vector<float>(), z = r_on.to_vector<float>();
  ASSERT_EQ(x.size(), z.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], z[i], 1e-5f);
}

// ---- memory planning -----------------------------------------------------------------------

ValueLife life(int64_t bytes, int def, int last, int inplace = -1, bool plannable = true) {
  ValueLife v;
  v.bytes = bytes;
  v.def = def;
  v.last_use = last;
  v.inplace_from = inplace;
  v.plannable = plannable;
  return v;
}

void expect_valid(const std::vector<ValueLife>& v, const MemoryPlan& plan) {
  std::string why;
  EXPECT_TRUE(validate_plan(v, plan, &why)) << why;
}

std::string name_of(const char* prefix, int t) {
  std::string s(prefix);
  s += std::to_string(t);
  return s;
}

// Backpropagation through time's weight gradient: sum_t h_t^T g_t over steps. The pass makes it
// one product of concatenations; a sum with fewer than three products, a broadcasting add, a
// product read elsewhere and a long inner dim are left alone.
TEST(PassMatmulSum, SumOfProductsBecomesOneProduct) {
  manual_seed(11);
  Graph g;
  const int T = 5;
  std::vector<Tensor> hs, gs;
  std::map<std::string, Tensor> feeds;
  for (int t = 0; t < T; ++t) {
    std::string hn = name_of("h", t), gn = name_of("g", t);
    hs.push_back(g.placeholder(hn, Float32, {4, 16}));
    gs.push_back(g.placeholder(gn, Float32, {4, 24}));
    feeds[hn] = randn({4, 16});
    feeds[gn] = randn({4, 24});
  }
  Tensor bptt = matmul(transpose(hs[0], 0, 1), gs[0]);  // [16, 24], K = 4
  for (int t = 1; t < T; ++t) bptt = add(bptt, matmul(transpose(hs[t], 0, 1), gs[t]));
  // Plain (untransposed) operands, plus a non-product leaf in the tree.
  std::vector<Tensor> ps, qs;
  for (int t = 0; t < 3; ++t) {
    std::string pn = name_of("p", t), qn = name_of("q", t);
    ps.push_back(g.placeholder(pn, Float32, {16, 4}));
    qs.push_back(g.placeholder(qn, Float32, {4, 24}));
    feeds[pn] = randn({16, 4});
    feeds[qn] = randn({4, 24});
  }
  Tensor plain =
      add(add(add(matmul(ps[0], qs[0]), matmul(ps[1], qs[1])), g.constant(ones({16, 24}))),
          matmul(ps[2], qs[2]));
  // Left alone: two products only; a broadcast add; a product also fetched.
  Tensor two = add(matmul(transpose(hs[0], 0, 1), gs[0]), matmul(transpose(hs[1], 0, 1), gs[1]));
  Tensor shared = matmul(transpose(hs[3], 0, 1), gs[3]);
  Tensor bcast = add(add(add(shared, matmul(transpose(hs[1], 0, 1), gs[1])),
                         matmul(transpose(hs[2], 0, 1), gs[2])),
                     g.constant(ones({24})));
  Program p = program_of({bptt, plain, two, bcast, shared});
  auto before = evaluate(p, feeds);
  const int mm_before = count_op(p, "matmul");
  EXPECT_EQ(merge_matmul_sums(p), 2);
  verify_program(p, "matmul_sum");
  // bptt: 5 products -> 1; plain: 3 -> 1; two and bcast keep theirs (2 + 3).
  EXPECT_EQ(mm_before, 5 + 3 + 2 + 3);
  EXPECT_EQ(count_op(p, "matmul"), 1 + 1 + 2 + 3);
  EXPECT_EQ(count_op(p, "cat"), 4);
  expect_close(before, evaluate(p, feeds), 1e-5);
}

// An SGD-style update p - lr * (a^T g) and its relatives become addmm; products used elsewhere,
// fetched, batched or broadcast to a larger shape stay as they were.
TEST(PassAddmm, ScaledProductsAccumulateOntoTheirSummand) {
  manual_seed(13);
  Graph g;
  Tensor w = g.variable("w", randn({16, 24}));
  Tensor a = g.placeholder("a", Float32, {Dim::any(), 16});
  Tensor gr = g.placeholder("g", Float32, {Dim::any(), 24});
  Tensor c = g.placeholder("c", Float32, {16, 24});
  Tensor b3 = g.placeholder("b3", Float32, {2, 16, 8});
  Tensor m3 = g.placeholder("m3", Float32, {8, 24});
  std::map<std::string, Tensor> feeds{{"a", randn({5, 16})},
                                      {"g", randn({5, 24})},
                                      {"c", randn({16, 24})},
                                      {"b3", randn({2, 16, 8})},
                                      {"m3", randn({8, 24})}};
  Tensor at = transpose(a, 0, 1);
  Tensor sgd = sub(w, mul(matmul(at, gr), 0.01));  // -> addmm(w, a^T, g, 1, -0.01)
  Tensor left = add(mul(g.constant(scalar_tensor(2.0)), matmul(at, gr)), c);  // scalar first
  Tensor plain = add(c, matmul(at, gr));                                      // no scale
  Tensor negated = sub(c, neg(matmul(at, gr)));                               // c + a^T g
  Tensor shared = matmul(at, gr);                                             // also fetched: stays
  Tensor kept = sub(c, shared);
  Tensor twice = matmul(at, gr);  // two users: stays
  Tensor kept2 = add(add(c, twice), twice);
  Tensor batched = add(matmul(b3, m3), c);                   // rank-3 product: stays
  Tensor row = add(matmul(at, gr), g.constant(ones({24})));  // row broadcast into the product
  Tensor enlarged = add(matmul(transpose(c, 0, 1), g.constant(ones({16, 1}))),
                        g.constant(ones({24, 5})));  // product [24, 1] broadcast: stays
  Program p = program_of({sgd, left, plain, negated, shared, kept, kept2, batched, row, enlarged});
  auto before = evaluate(p, feeds);
  EXPECT_EQ(fuse_addmm(p), 5);  // sgd, left, plain, negated, row
  verify_program(p, "addmm");
  EXPECT_EQ(count_op(p, "addmm"), 5);
  EXPECT_EQ(count_op(p, "matmul"), 4);  // shared, twice, batched, enlarged
  for (const auto& node : p.graph->nodes)
    if (node->kind == NodeKind::Op && node->op->name == "addmm" &&
        node->inputs[0].node->kind == NodeKind::Variable) {
      EXPECT_DOUBLE_EQ(node->attrs.f(0), 1.0);
      EXPECT_FLOAT_EQ(static_cast<float>(node->attrs.f(1)), -0.01f);
    }
  expect_close(before, evaluate(p, feeds), 1e-5);
}

// The pass in the default pipeline: a graph-mode SGD step updates the weights through addmm,
// with the same numbers as without it.
TEST(PassAddmm, SgdStepInASessionMatchesThePassSwitchedOff) {
  auto run = [](bool pass) {
    if (pass)
      ::unsetenv("KILN_DISABLE_PASSES");
    else
      ::setenv("KILN_DISABLE_PASSES", "fuse_addmm", 1);
    manual_seed(14);
    Graph g;
    Tensor x = g.placeholder("x", Float32, {Dim::any(), 12});
    Tensor y = g.placeholder("y", Int64, {Dim::any()});
    Tensor w1 = g.variable("w1", mul(randn({20, 12}), 0.3)), b1 = g.variable("b1", zeros({20}));
    Tensor w2 = g.variable("w2", mul(randn({4, 20}), 0.3)), b2 = g.variable("b2", zeros({4}));
    Tensor loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y);
    Tensor step = optim::SGD(0.1).minimize(loss);
    Session s(g);
    Tensor xs = randn({8, 12}), ys = randint(0, 4, {8});
    std::vector<float> losses;
    for (int i = 0; i < 5; ++i)
      losses.push_back(s.run({loss, step}, {{x, xs}, {y, ys}})[0].item<float>());
    ::unsetenv("KILN_DISABLE_PASSES");
    return std::make_pair(losses, s.run({w1, w2}, {}));
  };
  auto [l_on, w_on] = run(true);
  auto [l_off, w_off] = run(false);
  ASSERT_EQ(l_on.size(), l_off.size());
  for (size_t i = 0; i < l_on.size(); ++i) EXPECT_NEAR(l_on[i], l_off[i], 1e-5);
  EXPECT_LT(l_on.back(), l_on.front());
  expect_close(w_on, w_off, 1e-5);
}

// A transposed matrix read by many matmuls (one per time step) is copied once; one read by a
// few keeps being read through the GEMM's transpose flag.
TEST(PassTransposeFold, ManyReadersOfATransposeShareOneCopy) {
  manual_seed(12);
  Graph g;
  Tensor w = g.placeholder("w", Float32, {24, 16});
  Tensor u = g.placeholder("u", Float32, {24, 16});
  std::map<std::string, Tensor> feeds{{"w", randn({24, 16})}, {"u", randn({24, 16})}};
  std::vector<Tensor> outs;
  for (int t = 0; t < 6; ++t) {
    std::string xn = name_of("x", t);
    Tensor x = g.placeholder(xn, Float32, {4, 16});
    feeds[xn] = randn({4, 16});
    outs.push_back(matmul(x, transpose(w, 0, 1)));  // a fresh transpose node per step
    if (t < 2) outs.push_back(matmul(x, transpose(u, 0, 1)));
  }
  Program p = program_of(outs);
  auto before = evaluate(p, feeds);
  EXPECT_EQ(fold_transposes(p), 1);
  verify_program(p, "transpose_fold");
  EXPECT_EQ(count_op(p, "clone"), 1);
  int read_clone = 0;
  for (const auto& node : p.graph->nodes)
    if (node->kind == NodeKind::Op && node->op->name == "matmul")
      read_clone +=
          node->inputs[1].node->kind == NodeKind::Op && node->inputs[1].node->op->name == "clone";
  EXPECT_EQ(read_clone, 6);
  // Same products up to the GEMM's summation order for the other layout.
  expect_close(before, evaluate(p, feeds), 1e-5);
}

TEST(MemoryPlan, ChainReusesTheFirstBuffer) {
  // a -> b -> c: a is dead when c is written, so c takes a's place.
  std::vector<ValueLife> v{life(1024, 0, 1), life(1024, 1, 2), life(1024, 2, 3)};
  MemoryPlan plan = plan_memory(v);
  expect_valid(v, plan);
  EXPECT_EQ(plan.arena_bytes, 2048);
  EXPECT_EQ(plan.unplanned_bytes, 3072);
  EXPECT_EQ(plan.offset[0], plan.offset[2]);
  EXPECT_EQ(plan.reused, 1);
  EXPECT_EQ(plan.inplace, 0);
}

TEST(MemoryPlan, InPlaceChainIsOneBuffer) {
  std::vector<ValueLife> v{life(1000, 0, 1), life(1000, 1, 2, 0), life(1000, 2, 3, 1)};
  MemoryPlan plan = plan_memory(v);
  expect_valid(v, plan);
  EXPECT_EQ(plan.inplace, 2);
  EXPECT_EQ(plan.arena_bytes, 1024);  // aligned to 64
  EXPECT_EQ(plan.offset[0], plan.offset[1]);
  EXPECT_EQ(plan.offset[1], plan.offset[2]);
  EXPECT_NE(plan.summary().find("2 in place"), std::string::npos) << plan.summary();
}

TEST(MemoryPlan, InPlaceRefusedWhenInputLivesOnOrSizesDiffer) {
  // b would overwrite a, but a is read again at step 2; c's size differs from b's.
  std::vector<ValueLife> v{life(256, 0, 2), life(256, 1, 2, 0), life(512, 2, 3, 1)};
  MemoryPlan plan = plan_memory(v);
  expect_valid(v, plan);
  EXPECT_EQ(plan.inplace, 0);
  EXPECT_NE(plan.offset[0], plan.offset[1]);
  // validate_plan catches a forged in-place offset.
  MemoryPlan forged = plan;
  forged.offset[1] = forged.offset[0];
  std::string why;
  EXPECT_FALSE(validate_plan(v, forged, &why));
  EXPECT_NE(why.find("overlap"), std::string::npos) << why;
}

ValueLife piece(ValueLife v, int within, int64_t offset) {
  v.within = within;
  v.within_offset = offset;
  return v;
}

TEST(MemoryPlan, PiecesLieInsideTheirConcatenation) {
  // a and b (made at steps 0 and 1, read last by the cat at step 2) inside c; d is read after
  // the cat, so it stays out; e would overlap a inside c, so it stays out too.
  std::vector<ValueLife> v{piece(life(100, 0, 2), 2, 0), piece(life(128, 1, 2), 2, 128),
                           life(320, 2, 3), piece(life(64, 1, 3), 2, 256),
                           piece(life(64, 0, 2), 2, 64)};
  MemoryPlan plan = plan_memory(v);
  expect_valid(v, plan);
  EXPECT_EQ(plan.nested, 2);
  EXPECT_EQ(plan.offset[0], plan.offset[2]);
  EXPECT_EQ(plan.offset[1], plan.offset[2] + 128);
  EXPECT_NE(plan.offset[3], plan.offset[2] + 256);
  EXPECT_NE(plan.summary().find("2 inside a concatenation"), std::string::npos) << plan.summary();
  // validate_plan refuses a forged piece read after its container is made.
  MemoryPlan forged = plan;
  forged.offset[3] = forged.offset[2] + 256;
  std::string why;
  EXPECT_FALSE(validate_plan(v, forged, &why));
  EXPECT_NE(why.find("overlap"), std::string::npos) << why;
  // Malformed pieces are refused by name.
  kiln_test::expect_error(
      [&] {
        plan_memory({piece(life(64, 0, 1), 1, 32), life(128, 1, 2)});
      },
      "plan_memory", {"lies 32 bytes into value 1", "multiple of 64"});
  kiln_test::expect_error(
      [&] {
        plan_memory({piece(life(128, 0, 1), 1, 64), life(128, 1, 2)});
      },
      "plan_memory", {"expected a piece inside it"});
  kiln_test::expect_error([&] { plan_memory({piece(life(64, 0, 1), 5, 0)}); }, "plan_memory",
                          {"has within 5"});
}

TEST(MemoryPlan, Diamond) {
  // a feeds b and c; d = b + c may take b's buffer (b dies at d).
  std::vector<ValueLife> v{life(4096, 0, 2), life(4096, 1, 3), life(4096, 2, 3),
                           life(4096, 3, 4, 1), life(64, 0, 4, -1, false)};
  MemoryPlan plan = plan_memory(v);
  expect_valid(v, plan);
  EXPECT_EQ(plan.arena_bytes, 3 * 4096);  // a, b, c all live at step 2
  EXPECT_EQ(plan.inplace, 1);
  EXPECT_EQ(plan.offset[3], plan.offset[1]);
  EXPECT_EQ(plan.offset[4], -1);
  EXPECT_EQ(plan.not_planned, 1);
}

TEST(MemoryPlan, BadInputThrows) {
  EXPECT_THROW(plan_memory({life(-1, 0, 0)}), Error);
  EXPECT_THROW(plan_memory({life(8, 3, 1)}), Error);
  EXPECT_THROW(plan_memory({life(8, 0, 1, 5)}), Error);
  EXPECT_THROW(plan_memory({life(8, 0, 1)}, 48), Error);
  try {
    plan_memory({life(8, 3, 1)});
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[plan_memory]", 0), 0u) << e.what();
  }
}

// Greedy by size against the lower bound (the most bytes live at any one step).
TEST(MemoryPlan, RandomLifetimesAreValidAndNearTheLowerBound) {
  std::mt19937 rng(12345);
  double ratio_sum = 0, worst = 1;
  const int kSets = 400;
  int64_t inplace_total = 0;
  for (int set = 0; set < kSets; ++set) {
    int n = 1 + static_cast<int>(rng() % 60), steps = 1 + static_cast<int>(rng() % 40);
    bool with_inplace = set % 2 == 1;
    std::vector<ValueLife> v;
    for (int i = 0; i < n; ++i) {
      int def = static_cast<int>(rng() % static_cast<unsigned>(steps));
      int len = static_cast<int>(rng() % 8 == 0 ? rng() % static_cast<unsigned>(steps) : rng() % 4);
      int64_t bytes = 64 * static_cast<int64_t>(1 + rng() % 512);
      v.push_back(life(bytes, def, std::min(def + len, steps - 1), -1, rng() % 10 != 0));
    }
    if (with_inplace)  // some values may take an input's buffer
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (j != i && v[j].last_use == v[i].def && v[j].def < v[i].def && rng() % 2) {
            v[i].bytes = v[j].bytes;
            v[i].inplace_from = j;
            break;
          }
    MemoryPlan plan = plan_memory(v);
    std::string why;
    ASSERT_TRUE(validate_plan(v, plan, &why)) << "set " << set << ": " << why;
    EXPECT_LE(plan.arena_bytes, plan.unplanned_bytes) << "set " << set;
    inplace_total += plan.inplace;
    if (with_inplace) continue;  // shared buffers make the per-step bound below not a bound
    int64_t lower = 0;
    for (int s = 0; s < steps; ++s) {
      int64_t live = 0;
      for (const auto& x : v)
        if (x.plannable && x.def <= s && s <= x.last_use) live += x.bytes;
      lower = std::max(lower, live);
    }
    EXPECT_GE(plan.arena_bytes, lower) << "set " << set;
    double r = lower > 0 ? static_cast<double>(plan.arena_bytes) / static_cast<double>(lower) : 1;
    ratio_sum += r;
    worst = std::max(worst, r);
  }
  EXPECT_GT(inplace_total, 0);
  std::printf(
      "[memory plan] greedy by size over %d random sets: arena / lower bound = %.3f on "
      "average, %.3f worst; %lld in-place reuses in the in-place sets\n",
      kSets / 2, ratio_sum / (kSets / 2), worst, static_cast<long long>(inplace_total));
}

// An MLP 784-256-256-10 on a batch of 128: forward + backward, and a full SGD step.
struct Mlp {
  Graph g;
  Tensor x, y, loss;
  std::vector<Tensor> params;
  Mlp(int64_t batch) {
    manual_seed(5);
    x = g.placeholder("x", Float32, {batch, 784});
    y = g.placeholder("y", Int64, {batch});
    Tensor w1 = g.variable("w1", mul(randn({256, 784}), 0.05));
    Tensor b1 = g.variable("b1", zeros({256}));
    Tensor w2 = g.variable("w2", mul(randn({256, 256}), 0.05));
    Tensor b2 = g.variable("b2", zeros({256}));
    Tensor w3 = g.variable("w3", mul(randn({10, 256}), 0.05));
    Tensor b3 = g.variable("b3", zeros({10}));
    params = {w1, b1, w2, b2, w3, b3};
    Tensor h = relu(linear(x, w1, b1));
    h = relu(linear(h, w2, b2));
    loss = cross_entropy(linear(h, w3, b3), y);
  }
};

// Planned peak against the unplanned sum. Fusion (when on) removes intermediates before
// planning, which shrinks the unplanned sum, so the planner's own ratio is measured without it
// and the whole pipeline's figure is printed beside it.
MemoryPlan plan_mlp(const std::vector<Tensor>& fetches, const char* label, const char* disabled) {
  DisablePasses d(disabled);
  Program p = program_of(fetches);
  std::string passes = optimize(p);
  MemoryPlan plan = plan_program_memory(p);
  expect_valid(program_lifetimes(p), plan);
  std::printf("[memory plan] %s (KILN_DISABLE_PASSES=%s): %s\n    passes: %s\n", label, disabled,
              plan.summary().c_str(), passes.c_str());
  EXPECT_GT(plan.planned, 0);
  EXPECT_EQ(plan.dynamic, 0);
  EXPECT_LT(plan.arena_bytes, plan.unplanned_bytes);
  return plan;
}

TEST(MemoryPlan, MlpForwardBackward) {
  Mlp m(128);
  std::vector<Tensor> fetches{m.loss};
  for (const auto& gr : gradients({m.loss}, m.params)) fetches.push_back(gr);
  MemoryPlan plan = plan_mlp(fetches, "MLP fwd+bwd, grads fetched", "fuse_elementwise");
  EXPECT_LE(static_cast<double>(plan.arena_bytes), 0.6 * static_cast<double>(plan.unplanned_bytes));
  EXPECT_GT(plan.inplace, 0);
  plan_mlp(fetches, "MLP fwd+bwd, grads fetched", "none");

  // A training step: the gradients feed assign nodes instead of being fetched.
  Mlp t(128);
  Tensor step = optim::SGD(0.1).minimize(t.loss);
  MemoryPlan train = plan_mlp({step, t.loss}, "MLP SGD step", "fuse_elementwise");
  EXPECT_LE(static_cast<double>(train.arena_bytes),
            0.6 * static_cast<double>(train.unplanned_bytes));
  plan_mlp({step, t.loss}, "MLP SGD step", "none");
}

// The whole default pipeline gives the MLP's loss and gradients with and without the new passes.
TEST(PassSimplify, MlpSameNumbersWithAndWithoutPasses) {
  Mlp m(32);
  std::vector<Tensor> fetches{m.loss};
  for (const auto& gr : gradients({m.loss}, m.params)) fetches.push_back(gr);
  manual_seed(6);
  Tensor xv = randn({32, 784});
  Tensor yv = randint(0, 10, {32});
  std::vector<Tensor> off, on;
  {
    DisablePasses d("simplify,fold_transposes");
    Session s(m.g);
    off = s.run(fetches, {{m.x, xv}, {m.y, yv}});
  }
  Session s(m.g);
  on = s.run(fetches, {{m.x, xv}, {m.y, yv}});
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < on.size(); ++i) {
    auto a = off[i].to_vector<double>(), b = on[i].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(a[k], b[k], 1e-5 * (1 + std::fabs(a[k]))) << "fetch " << i;
  }
}

TEST(MemoryPlan, DynamicDimsAreNotPlanned) {
  Mlp m(Dim::any());
  Program p = program_of({m.loss});
  optimize(p);
  MemoryPlan plan = plan_program_memory(p);
  EXPECT_GT(plan.dynamic, 0);
  EXPECT_NE(plan.summary().find("dynamic dims"), std::string::npos) << plan.summary();
  expect_valid(program_lifetimes(p), plan);
}

TEST(MemoryPlan, ViewsExtendTheirSourceAndBlockInPlace) {
  // y = exp(x); t = transpose(y); z = add(y, t): z may not overwrite y (t reads it transposed),
  // and y lives until z because t aliases it.
  Graph g;
  Tensor x = g.placeholder("x", Float32, {16, 16});
  Tensor y = exp(x);
  Tensor z = add(y, transpose(y, 0, 1));
  Tensor w = relu(z);  // may take z's buffer
  Program p = program_of({sum(w)});
  std::vector<ValueLife> lives = program_lifetimes(p);
  MemoryPlan plan = plan_memory(lives);
  expect_valid(lives, plan);
  // Node order: x, exp, transpose, add, relu, sum.
  int vy = 1, vt = 2, vz = 3, vw = 4;
  EXPECT_FALSE(lives[vt].plannable);
  EXPECT_EQ(lives[vy].last_use, lives[vz].def);
  EXPECT_EQ(lives[vz].inplace_from, -1);
  EXPECT_EQ(lives[vw].inplace_from, vz);
  EXPECT_EQ(plan.inplace, 1);
}

// ---- verifier ---------------------------------------------------------------------------

TEST(PassVerifier, AcceptsOptimizedProgramsAndNamesThePassThatBrokeOne) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {4, 3});
  Tensor y = sum(mul(gelu(add(x, 1.0)), x), {1});
  Program p = prune(*g.impl(), {g.value_of(y)});
  optimize(p);
  EXPECT_NO_THROW(verify_program(p, "optimize"));
  // Swap the last op before its inputs: a use before definition.
  auto& nodes = p.graph->nodes;
  std::swap(nodes.front(), nodes.back());
  try {
    verify_program(p, "my_pass");
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("after my_pass"), std::string::npos) << e.what();
  }
}

}  // namespace
