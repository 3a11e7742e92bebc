// DistributedDataParallel over two MPI ranks (ctest runs it under `mpirun -np 2`): N SGD steps with
// each rank on its half of every global batch give the parameters of single-process training on
// the whole batch (float64 within 1e-9 relative, float32 within 1e-5), eagerly with the overlap
// on and off and one or many buckets, with no_sync() gradient accumulation, and as a jitted
// training step (a collective node per bucket). Each rank also trains the single-process reference
// itself, so the comparison needs no files. Mismatched models raise on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kiln/dist/ddp.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

constexpr int64_t kGlobalBatch = 8, kIn = 6, kOut = 3, kSteps = 5;
constexpr double kLr = 0.1;

std::shared_ptr<nn::Sequential> make_net(uint64_t seed, DType dt) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->emplace_back<nn::Linear>(kIn, 16);
  net->emplace_back<nn::Tanh>();
  net->emplace_back<nn::Linear>(16, 16);
  net->emplace_back<nn::ReLU>();
  net->emplace_back<nn::Linear>(16, kOut);
  net->to(dt);
  return net;
}

// The global batches: the same on every rank (own seed, drawn before any model).
struct Data {
  std::vector<Tensor> x, y;
};
Data make_data(DType dt, int64_t steps) {
  manual_seed(77);
  Data d;
  for (int64_t s = 0; s < steps; ++s) {
    d.x.push_back(randn({kGlobalBatch, kIn}, Float64).to(dt));
    d.y.push_back(randn({kGlobalBatch, kOut}, Float64).to(dt));
  }
  return d;
}

// This rank's rows of a global batch.
Tensor shard(const Tensor& t) {
  const int64_t per = t.size(0) / dist::world_size();
  return slice(t, 0, dist::rank() * per, (dist::rank() + 1) * per).contiguous();
}

Tensor mse(const Tensor& out, const Tensor& y) {
  Tensor d = sub(out, y);
  return mean(mul(d, d));
}

std::vector<Tensor> snapshot(nn::Module& m) {
  std::vector<Tensor> v;
  for (const Tensor& p : m.parameters()) v.push_back(p.detach().clone());
  return v;
}

// Largest relative difference over the parameters: max |a - b| / max |b| per tensor.
double max_rel(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    std::vector<double> av = a[k].to(Float64).to_vector<double>();
    std::vector<double> bv = b[k].to(Float64).to_vector<double>();
    double diff = 0, scale = 1e-300;
    for (size_t i = 0; i < av.size(); ++i) {
      diff = std::max(diff, std::abs(av[i] - bv[i]));
      scale = std::max(scale, std::abs(bv[i]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

double tol(DType dt) { return dt == Float64 ? 1e-9 : 1e-5; }

// Single-process training on the whole batch, from rank 0's initial parameters. `accumulate`:
// each step is two batches' gradients summed (what no_sync() splits).
std::vector<Tensor> reference(DType dt, double momentum, bool accumulate = false) {
  Data d = make_data(dt, 2 * kSteps);
  auto net = make_net(100, dt);
  optim::SGD opt(net->parameters(), kLr, momentum);
  for (int64_t s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    if (accumulate) {
      mse(net->forward(d.x[2 * s]), d.y[2 * s]).backward();
      mse(net->forward(d.x[2 * s + 1]), d.y[2 * s + 1]).backward();
    } else {
      mse(net->forward(d.x[s]), d.y[s]).backward();
    }
    opt.step();
  }
  return snapshot(*net);
}

void report(const char* what, DType dt, double rel) {
  if (dist::is_main())
    std::printf("[ddp equality] %-40s %s: max relative difference %.3g (bound %.0e)\n", what,
                dt == Float64 ? "float64" : "float32", rel, tol(dt));
}

struct EagerCase {
  DType dt;
  bool overlap;
  double bucket_mb;  // tiny: one bucket per parameter or two
};

class DdpEager : public ::testing::TestWithParam<EagerCase> {};

TEST_P(DdpEager, HalfBatchPerRankEqualsWholeBatchOnOneProcess) {
  const EagerCase c = GetParam();
  std::vector<Tensor> want = reference(c.dt, 0.9);
  Data d = make_data(c.dt, 2 * kSteps);
  // A different initialization per rank: DDP's broadcast makes rank 0's the start everywhere.
  auto net = make_net(100 + static_cast<uint64_t>(dist::rank()), c.dt);
  dist::DDP ddp(*net, {.bucket_cap_mb = c.bucket_mb, .overlap = c.overlap});
  optim::SGD opt(net->parameters(), kLr, 0.9);
  for (int64_t s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    mse(net->forward(shard(d.x[s])), shard(d.y[s])).backward();
    opt.step();
  }
  double rel = max_rel(snapshot(*net), want);
  std::string what = std::string("eager, overlap ") + (c.overlap ? "on" : "off") + ", " +
                     std::to_string(ddp.buckets().size()) + " bucket(s)";
  report(what.c_str(), c.dt, rel);
  EXPECT_LE(rel, tol(c.dt));
  if (c.bucket_mb < 1) {
    EXPECT_GT(ddp.buckets().size(), 2u);
  }
  if (dist::world_size() > 1) {
    // Overlap on: buckets started from the grad-ready hook, during backward; off: none did.
    if (c.overlap) {
      EXPECT_GT(ddp.buckets_started_during_backward(), 0);
    } else {
      EXPECT_EQ(ddp.buckets_started_during_backward(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DdpEager,
                         ::testing::Values(EagerCase{Float64, true, 0.001},
                                           EagerCase{Float64, false, 0.001},
                                           EagerCase{Float64, true, 25.0},
                                           EagerCase{Float32, true, 0.001},
                                           EagerCase{Float32, false, 25.0}));

TEST(DdpEager, NoSyncAccumulatesLocallyThenAverages) {
  for (DType dt : {Float64, Float32}) {
    std::vector<Tensor> want = reference(dt, 0.0, /*accumulate=*/true);
    Data d = make_data(dt, 2 * kSteps);
    auto net = make_net(100 + static_cast<uint64_t>(dist::rank()), dt);
    dist::DDP ddp(*net, {.bucket_cap_mb = 0.001});
    optim::SGD opt(net->parameters(), kLr);
    for (int64_t s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      {
        auto guard = ddp.no_sync();
        mse(net->forward(shard(d.x[2 * s])), shard(d.y[2 * s])).backward();
      }
      mse(net->forward(shard(d.x[2 * s + 1])), shard(d.y[2 * s + 1])).backward();
      opt.step();
    }
    double rel = max_rel(snapshot(*net), want);
    report("eager, no_sync() accumulation of 2", dt, rel);
    EXPECT_LE(rel, tol(dt));
  }
}

TEST(DdpJit, JittedStepWithCollectiveNodesEqualsWholeBatch) {
  for (DType dt : {Float64, Float32}) {
    std::vector<Tensor> want = reference(dt, 0.0);
    Data d = make_data(dt, 2 * kSteps);
    auto net = make_net(100 + static_cast<uint64_t>(dist::rank()), dt);
    dist::DDP ddp(*net, {.bucket_cap_mb = 0.001});
    const size_t np = net->parameters().size();
    auto step = jit(
        [&](const std::vector<Tensor>& st, const Tensor& x, const Tensor& y) {
          std::vector<Tensor> ps;
          for (const Tensor& t : st) ps.push_back(t.detach().requires_grad_());
          nn::ParameterSwap swap(*net, ps);
          Tensor loss = mse(net->forward(x), y);
          std::vector<Tensor> g = grad({loss}, ps);
          ddp.average_gradients(g);  // one all_reduce node per bucket
          std::vector<Tensor> out;
          for (size_t i = 0; i < np; ++i) out.push_back(sub(st[i], mul(g[i], kLr)));
          out.push_back(loss.detach());
          return out;
        },
        JitOptions{.name = "ddp_step"});
    std::vector<Tensor> st = snapshot(*net);
    for (int64_t s = 0; s < kSteps; ++s) {
      std::vector<Tensor> r = step(st, shard(d.x[s]), shard(d.y[s]));
      st.assign(r.begin(), r.begin() + static_cast<long>(np));
    }
    EXPECT_EQ(step.stats().compiles, 1) << step.explain();
    EXPECT_EQ(step.stats().graph_breaks, 0) << step.explain();
    double rel = max_rel(st, want);
    report("jit step, 1 all_reduce node per bucket", dt, rel);
    EXPECT_LE(rel, tol(dt));
  }
}

// A weight used twice in one forward (its leaf gets two gradient contributions: the bucket must
// wait for both) and a parameter no forward uses (no gradient anywhere: its bucket starts when
// backward ends, with zeros).
struct TiedAndUnused : nn::Layer {
  nn::Linear lin{kIn, kIn};
  nn::Linear head{kIn, kOut};
  Tensor unused;
  TiedAndUnused() {
    register_module("lin", &lin);
    register_module("head", &head);
    unused = zeros({5});
    register_parameter("unused", &unused);
  }
  Tensor forward(const Tensor& x) override { return head(tanh(lin(tanh(lin(x))))); }
};

TEST(DdpEager, WeightUsedTwiceAndUnusedParameter) {
  for (DType dt : {Float64, Float32}) {
    Data d = make_data(dt, kSteps);
    auto train = [&](bool ddp_on, uint64_t seed) {
      manual_seed(seed);
      TiedAndUnused m;
      m.to(dt);
      std::unique_ptr<dist::DDP> ddp;
      if (ddp_on) ddp = std::make_unique<dist::DDP>(m, dist::DDPOptions{.bucket_cap_mb = 0.0002});
      optim::SGD opt(m.parameters(), kLr);
      for (int64_t s = 0; s < kSteps; ++s) {
        opt.zero_grad();
        Tensor x = ddp_on ? shard(d.x[s]) : d.x[s], y = ddp_on ? shard(d.y[s]) : d.y[s];
        mse(m.forward(x), y).backward();
        if (ddp_on && dist::world_size() > 1) {
          EXPECT_TRUE(m.unused.grad().defined());
          EXPECT_EQ(abs(m.unused.grad()).sum().item<double>(), 0.0);
        }
        opt.step();
      }
      return snapshot(m);
    };
    std::vector<Tensor> want = train(false, 100);
    std::vector<Tensor> got = train(true, 100 + static_cast<uint64_t>(dist::rank()));
    double rel = max_rel(got, want);
    report("eager, a weight used twice, an unused one", dt, rel);
    EXPECT_LE(rel, tol(dt));
  }
}

TEST(DdpConstruction, MismatchedModelsRaiseOnEveryRank) {
  if (dist::world_size() == 1) GTEST_SKIP() << "needs two ranks";
  nn::Sequential net;
  net.emplace_back<nn::Linear>(4, 5);
  net.emplace_back<nn::Linear>(5, dist::rank() == 0 ? 2 : 3);
  std::string m = expect_error([&] { dist::DDP ddp(net); },
                               {"[DistributedDataParallel]", "differs across ranks"});
  if (dist::rank() != 0) {
    EXPECT_NE(m.find("parameter 2: rank 0 has 1.weight float32[2, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("float32[3, 5]"), std::string::npos) << m;
  }
  dist::barrier();  // the group still works
}

TEST(DdpConstruction, BadOptionsAndGradientLists) {
  nn::Linear lin(3, 2);
  expect_error([&] { dist::DDP ddp(lin, {.bucket_cap_mb = 0}); },
               {"[DistributedDataParallel]", "bucket_cap_mb"});
  dist::DDP ddp(lin);
  std::vector<Tensor> g{zeros({2, 3})};
  expect_error([&] { ddp.average_gradients(g); },
               {"[DistributedDataParallel]", "1 gradients for 2"});
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
