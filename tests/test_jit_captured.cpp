// Captured state under kiln::jit (docs/jit.md, "Captured state"): a jitted function that reads a
// module's parameters and buffers through its closure gets them as graph inputs held by identity,
// so gradients reach them, optimizer steps between calls are seen without recompiling, and
// BatchNorm's running statistics move as in eager: a jitted training step trains exactly as eager.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

using namespace kiln;

namespace {

using kiln_test::max_diff;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace_back<nn::Linear>(6, 32);
  m->emplace_back<nn::BatchNorm1d>(32);
  m->emplace_back<nn::ReLU>();
  m->emplace_back<nn::Linear>(32, 3);
  return m;
}

std::shared_ptr<nn::Sequential> make_cnn(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace_back<nn::Conv2d>(1, 4, std::vector<int64_t>{3, 3});
  m->emplace_back<nn::BatchNorm2d>(4);
  m->emplace_back<nn::ReLU>();
  m->emplace_back<nn::Flatten>();
  m->emplace_back<nn::Linear>(4 * 6 * 6, 3);
  return m;
}

// Trains a jitted and an eager twin side by side for 20 steps and compares losses, parameters
// and buffers after every step; returns the jitted function's explain().
template <typename MakeModel, typename MakeOpt>
std::string train_twins(MakeModel make_model, MakeOpt make_opt, const Shape& in_shape,
                        const char* what) {
  auto jm = make_model(7), em = make_model(7);
  auto jopt = make_opt(jm->parameters()), eopt = make_opt(em->parameters());
  // The step closes over the module: no parameter is an argument.
  auto step = jit([jm](const Tensor& x, const Tensor& y) { return cross_entropy((*jm)(x), y); },
                  JitOptions{.name = "step"});
  manual_seed(99);
  for (int s = 0; s < 20; ++s) {
    Tensor x = randn(in_shape);
    Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 1, 0, 2, 2, 1}, {8});
    jopt->zero_grad();
    Tensor jl = step(x, y);
    EXPECT_TRUE(jl.requires_grad()) << what << ": the loss of a jitted step must require grad";
    jl.backward();
    jopt->step();
    eopt->zero_grad();
    Tensor el = cross_entropy((*em)(x), y);
    el.backward();
    eopt->step();
    EXPECT_LT(std::fabs(jl.item<double>() - el.item<double>()), 1e-5) << what << " step " << s;
  }
  auto jp = jm->named_parameters(), ep = em->named_parameters();
  EXPECT_EQ(jp.size(), ep.size());
  for (size_t i = 0; i < jp.size() && i < ep.size(); ++i)
    EXPECT_LT(max_diff(jp[i].second, ep[i].second), 1e-5) << what << " " << jp[i].first;
  auto jb = jm->named_buffers(), eb = em->named_buffers();
  EXPECT_EQ(jb.size(), eb.size());
  for (size_t i = 0; i < jb.size() && i < eb.size(); ++i)
    EXPECT_LT(max_diff(jb[i].second, eb[i].second), 1e-5) << what << " " << jb[i].first;
  // One trace: the optimizer's in-place updates are read through the inputs, not recompiled.
  EXPECT_EQ(step.stats().compiles, 1) << step.explain();
  EXPECT_EQ(step.explain().find("runs eagerly"), std::string::npos) << step.explain();
  return step.explain();
}

TEST(JitCaptured, TrainingStepClosingOverAModelTrainsAsEagerWithSGD) {
  std::string ex = train_twins(
      make_mlp,
      [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), 0.1, 0.9); },
      Shape{8, 6}, "mlp sgd");
  EXPECT_NE(ex.find("captured state"), std::string::npos) << ex;
  EXPECT_NE(ex.find("requires grad (gets its gradient)"), std::string::npos) << ex;
}

TEST(JitCaptured, TrainingStepClosingOverAModelTrainsAsEagerWithAdam) {
  train_twins(
      make_mlp,
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), 0.01); },
      Shape{8, 6}, "mlp adam");
}

TEST(JitCaptured, SmallCnnTrainsAsEager) {
  train_twins(
      make_cnn,
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), 0.01); },
      Shape{8, 1, 8, 8}, "cnn adam");
}

TEST(JitCaptured, InPlaceUpdateOfACapturedWeightIsSeenWithoutRecompiling) {
  Tensor w = randn({16, 16});  // no grad, larger than a constant: an input by identity
  auto f = jit([&w](const Tensor& x) { return matmul(x, transpose(w, 0, 1)); });
  Tensor x = randn({2, 16});
  for (int i = 0; i < 4; ++i) {
    Tensor want = matmul(x, transpose(w, 0, 1));
    EXPECT_LT(max_diff(f(x), want), 1e-5) << i;
    {
      NoGradGuard ng;
      w.mul_(0.5).add_(1.0);  // between calls, as an optimizer does
    }
  }
  EXPECT_EQ(f.stats().compiles, 1) << f.explain();
}

TEST(JitCaptured, InPlaceWriteIntoCapturedStateInsideTheFunctionHappensEveryCall) {
  Tensor counter = zeros({80});  // state the function updates in place
  auto f = jit([&counter](const Tensor& x) {
    counter.add_(x);
    return mul(counter, 2.0);
  });
  Tensor x = ones({80});
  for (int i = 1; i <= 3; ++i) {
    Tensor y = f(x);
    EXPECT_EQ(counter.to_vector<float>()[0], float(i)) << f.explain();
    EXPECT_EQ(y.to_vector<float>()[5], float(2 * i));
  }
  EXPECT_NE(f.explain().find("written in place"), std::string::npos) << f.explain();
}

}  // namespace
