// kiln::dist collectives over two MPI ranks (ctest runs this binary under `mpirun -np 2`): sums,
// means, broadcast and all_gather on odd sizes, empty and 0-d tensors, int64 and float64; async
// handles waited out of order; errors raised on every rank alike (no rank left waiting); the
// all_reduce graph op in a Session and under jit. Run alone (no launcher) it checks the world of
// one, where every collective is a no-op.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/dist/dist.h"
#include "kiln/graph/node.h"
#include "kiln/ops/collective.h"
#include "kiln/passes/passes.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

int R() { return dist::rank(); }
int W() { return dist::world_size(); }

// Sum over ranks r of f(r).
double over_ranks(const std::function<double(int)>& f) {
  double s = 0;
  for (int r = 0; r < W(); ++r) s += f(r);
  return s;
}

// [n] float tensor with x[i] = (i + 1) * (rank + 1) + 0.25.
Tensor ramp(int64_t n, DType dt, int rank) {
  return add(mul(arange(1, static_cast<double>(n) + 1, 1, Float64), rank + 1.0), 0.25).to(dt);
}

TEST(DistCollectives, WorldFromLauncher) {
  EXPECT_GE(W(), 1);
  EXPECT_GE(R(), 0);
  EXPECT_LT(R(), W());
  EXPECT_LE(dist::local_world_size(), W());
  EXPECT_LT(dist::local_rank(), dist::local_world_size());
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_TRUE(dist::launched());
    EXPECT_EQ(W(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
    EXPECT_EQ(R(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  }
}

TEST(DistCollectives, AllReduceSumOddSizesAndDtypes) {
  for (int64_t n : {1, 7, 1001, 65537}) {
    for (DType dt : {Float32, Float64}) {
      Tensor t = ramp(n, dt, R());
      dist::all_reduce(t);
      std::vector<double> v = t.to(Float64).to_vector<double>();
      ASSERT_EQ(static_cast<int64_t>(v.size()), n);
      for (int64_t i : {int64_t(0), n / 2, n - 1}) {
        double want = over_ranks([&](int r) { return (i + 1.0) * (r + 1) + 0.25; });
        EXPECT_NEAR(v[i], want, std::abs(want) * (dt == Float32 ? 1e-6 : 1e-15)) << n << " " << i;
      }
    }
  }
  // int64 beyond float precision: exact.
  Tensor big = tensor(std::vector<int64_t>{(int64_t(1) << 53) + 1 + R(), -3, R()});
  dist::all_reduce(big);
  std::vector<int64_t> b = big.to_vector<int64_t>();
  int64_t want0 = 0, want2 = 0;
  for (int r = 0; r < W(); ++r) want0 += (int64_t(1) << 53) + 1 + r, want2 += r;
  EXPECT_EQ(b[0], want0);
  EXPECT_EQ(b[1], -3 * W());
  EXPECT_EQ(b[2], want2);
  Tensor i32 = tensor(std::vector<int32_t>{1, 2, 3});
  dist::all_reduce(i32);
  EXPECT_EQ(i32.to_vector<int32_t>()[2], 3 * W());
}

TEST(DistCollectives, AllReduceMeanEmptyAndScalar) {
  Tensor t = ramp(13, Float64, R());
  dist::all_reduce(t, dist::ReduceOp::Mean);
  std::vector<double> v = t.to_vector<double>();
  for (int64_t i = 0; i < 13; ++i)
    EXPECT_NEAR(v[i], over_ranks([&](int r) { return (i + 1.0) * (r + 1) + 0.25; }) / W(), 1e-13);
  Tensor e = zeros({0, 5});
  dist::all_reduce(e);
  EXPECT_EQ(e.shape(), Shape({0, 5}));
  Tensor s = scalar_tensor(R() + 1.5, Float64);
  dist::all_reduce(s, dist::ReduceOp::Mean);
  EXPECT_DOUBLE_EQ(s.item<double>(), over_ranks([](int r) { return r + 1.5; }) / W());
}

TEST(DistCollectives, BadInputRaisesOnEveryRankWithoutCommunicating) {
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  expect_error([&] { dist::all_reduce(i, dist::ReduceOp::Mean); }, {"[all_reduce]", "mean"});
  Tensor b = tensor(std::vector<bool>{true});
  expect_error([&] { dist::all_reduce(b); }, {"[all_reduce]", "bool"});
  Tensor strided = transpose(zeros({3, 4}), 0, 1);
  expect_error([&] { dist::all_reduce(strided); }, {"[all_reduce]", "contiguous"});
  Tensor u;
  expect_error([&] { dist::all_reduce(u); }, {"[all_reduce]", "undefined"});
  Tensor t = zeros({2});
  expect_error([&] { dist::broadcast(t, W()); }, {"[broadcast]", "root"});
  Tensor out = zeros({W() + 1, 2});
  expect_error([&] { dist::all_gather_async(t, out); }, {"[all_gather]", "out must be"});
  // The group still works afterwards.
  Tensor one = ones({3});
  dist::all_reduce(one);
  EXPECT_EQ(one.to_vector<float>()[0], static_cast<float>(W()));
}

TEST(DistCollectives, Broadcast) {
  for (int root = 0; root < W(); ++root) {
    Tensor t = ramp(9, Float64, R());
    dist::broadcast(t, root);
    std::vector<double> v = t.to_vector<double>();
    for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(v[i], (i + 1.0) * (root + 1) + 0.25);
    Tensor k = tensor(std::vector<int64_t>{R() * 1000 + 7, -R()});
    dist::broadcast(k, root);
    EXPECT_EQ(k.to_vector<int64_t>(), (std::vector<int64_t>{root * 1000 + 7, -root}));
  }
  Tensor e = zeros({0});
  dist::broadcast(e, 0);
  EXPECT_EQ(e.numel(), 0);
}

TEST(DistCollectives, AllGather) {
  Tensor t = ramp(5, Float64, R()).reshape({1, 5});
  Tensor g = dist::all_gather(t);
  ASSERT_EQ(g.shape(), Shape({W(), 1, 5}));
  std::vector<double> v = g.to_vector<double>();
  for (int r = 0; r < W(); ++r)
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(v[r * 5 + i], (i + 1.0) * (r + 1) + 0.25);
  Tensor k = dist::all_gather(tensor(std::vector<int64_t>{R(), 10 * R(), 3}));
  std::vector<int64_t> kv = k.to_vector<int64_t>();
  for (int r = 0; r < W(); ++r) {
    EXPECT_EQ(kv[3 * r], r);
    EXPECT_EQ(kv[3 * r + 1], 10 * r);
  }
  Tensor e = dist::all_gather(zeros({0, 3}, Float64));
  EXPECT_EQ(e.shape(), Shape({W(), 0, 3}));
}

TEST(DistCollectives, AllGatherShapeMismatchRaisesOnEveryRank) {
  if (W() == 1) GTEST_SKIP() << "needs two ranks";
  Tensor t = zeros({R() == 0 ? 3 : 4});
  expect_error([&] { dist::all_gather(t); }, {"[all_gather]", "differs from rank 0"});
  dist::barrier();
}

TEST(DistCollectives, AsyncHandlesWaitedOutOfOrder) {
  std::vector<Tensor> ts;
  std::vector<dist::Work> ws;
  for (int k = 0; k < 24; ++k) {
    ts.push_back(full({100 + 37 * k}, k + R(), k % 2 ? Float64 : Float32));
    ws.push_back(
        dist::all_reduce_async(ts.back(), k % 3 ? dist::ReduceOp::Sum : dist::ReduceOp::Mean));
  }
  Tensor bt = full({4}, R() + 5.0);
  dist::Work bw = dist::broadcast_async(bt, W() - 1);
  dist::Work barrier = dist::barrier_async();
  barrier.wait();  // the last one first: everything before it is done too (FIFO)
  bw.wait();
  for (int k = 23; k >= 0; k -= 2) ws[static_cast<size_t>(k)].wait();
  for (int k = 0; k < 24; k += 2) ws[static_cast<size_t>(k)].wait();
  for (int k = 0; k < 24; ++k) {
    EXPECT_TRUE(ws[static_cast<size_t>(k)].completed());
    double sum = over_ranks([&](int r) { return double(k + r); });
    double want = k % 3 ? sum : sum / W();
    EXPECT_DOUBLE_EQ(ts[static_cast<size_t>(k)].to(Float64).to_vector<double>()[99], want) << k;
  }
  EXPECT_EQ(bt.to_vector<float>()[3], static_cast<float>(W() - 1 + 5));
  dist::Work none;
  none.wait();  // a default handle is complete
  EXPECT_TRUE(none.completed());
}

TEST(DistCollectives, GraphOpInSessionAndJit) {
  // In a static graph: all_reduce is a node; two identical ones are not merged (kSideEffect).
  Graph g;
  Tensor x = g.placeholder("x", Float64, {Dim::any()});
  Tensor a = detail::all_reduce_value(x, "sum");
  Tensor b = detail::all_reduce_value(x, "sum");
  Tensor y = add(mul(a, 2.0), detail::all_reduce_value(b, "mean"));
  Session sess(g);
  Tensor xv = ramp(6, Float64, R());
  std::vector<double> got = sess.run(y, {{x, xv}}).to_vector<double>();
  for (int64_t i = 0; i < 6; ++i) {
    double s = over_ranks([&](int r) { return (i + 1.0) * (r + 1) + 0.25; });
    EXPECT_NEAR(got[i], 3 * s, 1e-12 * s) << i;  // mean of a sum is the sum
  }
  // Under jit, written with the in-place API: the trace rebinds t to a collective node.
  auto f = jit([](const Tensor& t) {
    Tensor u = mul(t, 3.0);
    dist::all_reduce(u, dist::ReduceOp::Mean);
    return add(u, 1.0);
  });
  for (int call = 0; call < 3; ++call) {
    Tensor in = full({5}, R() + call, Float64);
    double want = 3.0 * over_ranks([&](int r) { return double(r + call); }) / W() + 1.0;
    EXPECT_DOUBLE_EQ(f(in).to_vector<double>()[4], want) << call;
  }
  EXPECT_EQ(f.stats().compiles, 1);
  // Its gradient is the same reduction of the output's gradient.
  Tensor p = full({3}, 1.0, Float64).requires_grad_();
  Tensor out = detail::all_reduce_value(mul(p, R() + 1.0), "sum");
  out.sum().backward();
  EXPECT_DOUBLE_EQ(p.grad().to_vector<double>()[0], W() * (R() + 1.0));
}

// The optimizer keeps every collective: identical ones are not merged (cse), none is fused into
// the elementwise group around it, and they stay in program order; by trait (kSideEffect), which
// is what the passes read. (A collective of a concrete tensor runs when called, while the graph
// is built, as every op on concrete inputs does.)
TEST(DistCollectives, PassesKeepCollectivesAndTheirOrder) {
  Graph g;
  Tensor x = g.placeholder("x", Float64, {4});
  Tensor a = detail::all_reduce_value(add(x, 1.0), "sum");
  Tensor b = detail::all_reduce_value(add(x, 1.0), "sum");  // the same node: cse must not merge
  Tensor c = detail::all_reduce_value(mul(x, 2.0), "mean");
  Tensor y = mul(add(a, b), c);
  std::vector<detail::ValueRef> refs{g.value_of(y)};
  detail::Program p = detail::prune(*g.impl(), refs);
  detail::optimize(p);
  std::vector<const detail::Node*> coll;
  for (const auto& n : p.graph->nodes)
    if (n->kind == detail::NodeKind::Op && n->op->has(detail::kSideEffect)) coll.push_back(n.get());
  ASSERT_EQ(coll.size(), 3u) << g.to_text();
  for (const auto* n : coll) EXPECT_EQ(n->op->name, "all_reduce");
  // Program order: a's collective before b's before c's, as built (every rank alike).
  EXPECT_EQ(coll[2]->attrs.s(0), "mean");
  Session sess(g);
  std::vector<double> v = sess.run(y, {{x, full({4}, 1.0, Float64)}}).to_vector<double>();
  EXPECT_DOUBLE_EQ(v[0], 2.0 * W() * 2.0 * 2.0);  // (2W + 2W) * 2
}

}  // namespace

int main(int argc, char** argv) {
  dist::init();
  // Rank 0 prints gtest's progress; the others print their failures only (the printer is
  // chosen when gtest initializes).
  if (dist::rank() != 0) GTEST_FLAG_SET(brief, true);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
