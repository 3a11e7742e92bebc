// kiln/optim extras: gradient clipping (PyTorch semantics), learning-rate schedules against
// PyTorch's formulas, and SGD / Adam / AdamW trajectories against PyTorch's update rules
// written out step by step in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <optional>

#include "kiln/io/safetensors.h"
#include "kiln/kiln.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/optim.h"
#include "kiln/optim/schedule.h"
#include "test_util.h"

using namespace kiln;

namespace {

Tensor param(std::vector<double> v) {
  Tensor t = tensor(v);
  t.requires_grad_();
  return t;
}

}  // namespace

// ---- clipping --------------------------------------------------------------------------------

TEST(ClipGradNorm, ScalesAllGradientsByTheGlobalNorm) {
  Tensor a = param({1, 2}), b = param({3}), c = param({5});
  a.set_grad(tensor(std::vector<double>{3, 0}));
  b.set_grad(tensor(std::vector<double>{4}));  // c has no gradient: skipped
  Tensor ga = a.grad();
  const double total = optim::clip_grad_norm({a, b, c}, 1.0);
  EXPECT_DOUBLE_EQ(total, 5.0);  // sqrt(3^2 + 4^2)
  const double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_TRUE(a.grad().is_same(ga));  // scaled in place
  EXPECT_DOUBLE_EQ(a.grad().at({0}), 3 * coef);
  EXPECT_DOUBLE_EQ(b.grad().at({0}), 4 * coef);
  EXPECT_FALSE(c.grad().defined());
  // Below the limit nothing changes.
  a.set_grad(tensor(std::vector<double>{0.3, 0.4}));
  EXPECT_NEAR(optim::clip_grad_norm({a}, 1.0), 0.5, 1e-15);
  EXPECT_EQ(a.grad().to_vector<double>(), std::vector<double>({0.3, 0.4}));
}

TEST(ClipGradNorm, OtherNormsAndDtypes) {
  Tensor a = tensor({1.0f, -2.0f, 0.5f});
  a.requires_grad_();
  a.set_grad(tensor({-3.0f, 1.0f, 2.0f}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a}, 10.0, INFINITY), 3.0);
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a}, 10.0, 1.0), 6.0);
  EXPECT_NEAR(optim::clip_grad_norm({a}, 10.0, 3.0), std::cbrt(27.0 + 1 + 8), 1e-12);
  const double total = optim::clip_grad_norm({a}, 1.5, INFINITY);
  EXPECT_DOUBLE_EQ(total, 3.0);
  EXPECT_NEAR(a.grad().at({0}), -3.0 * 1.5 / (3.0 + 1e-6), 1e-6);
  EXPECT_EQ(a.grad().dtype(), Float32);
  // Non-contiguous gradient.
  Tensor m = zeros({2, 2});
  m.requires_grad_();
  m.set_grad(tensor({1.0f, 2.0f, 2.0f, 4.0f}, {2, 2}).t());
  EXPECT_NEAR(optim::clip_grad_norm({m}, 100.0), 5.0, 1e-6);
  // No gradients at all.
  Tensor n = param({1});
  EXPECT_EQ(optim::clip_grad_norm({n}, 1.0), 0.0);
}

TEST(ClipGradNorm, BadArgumentsRaise) {
  Tensor a = param({1});
  a.set_grad(tensor(std::vector<double>{2}));
  EXPECT_THROW(optim::clip_grad_norm({a}, -1.0), Error);
  EXPECT_THROW(optim::clip_grad_norm({a}, 1.0, 0.0), Error);
  EXPECT_THROW(optim::clip_grad_norm({a}, NAN), Error);
  EXPECT_THROW(optim::clip_grad_norm({Tensor()}, 1.0), Error);
  EXPECT_THROW(optim::clip_grad_value({a}, -0.5), Error);
  EXPECT_EQ(a.grad().at({0}), 2.0);  // untouched by the failed calls
}

TEST(ClipGradValue, ClampsElementwise) {
  Tensor a = param({0, 0, 0});
  a.set_grad(tensor(std::vector<double>{-2, 0.5, 3}));
  optim::clip_grad_value({a}, 1.0);
  EXPECT_EQ(a.grad().to_vector<double>(), std::vector<double>({-1, 0.5, 1}));
}

// ---- schedules -------------------------------------------------------------------------------

TEST(Schedules, StepLRThroughTheScheduler) {
  Tensor w = param({1});
  optim::SGD opt({w}, {.lr = 0.8});
  optim::LRScheduler sched(opt, optim::StepLR(3, 0.5));
  std::vector<double> got;
  for (int t = 0; t < 8; ++t) {
    got.push_back(opt.lr());
    sched.step();
  }
  EXPECT_EQ(got, std::vector<double>({0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2}));
  EXPECT_EQ(sched.last_step(), 8);
  EXPECT_EQ(sched.base_lr(), 0.8);
}

TEST(Schedules, CosineMatchesPyTorchRecursiveForm) {
  // PyTorch's CosineAnnealingLR.get_lr() updates the rate recursively from the previous one;
  // its closed form is what Kiln evaluates. They agree over several periods.
  const double base = 0.1, eta_min = 0.001;
  const int t_max = 10;
  Tensor w = param({1});
  optim::Adam opt({w}, {.lr = base});
  optim::LRScheduler sched(opt, optim::CosineAnnealingLR(t_max, eta_min));
  const double pi = std::numbers::pi;
  double torch_lr = base;
  for (int t = 0; t <= 35; ++t) {
    if (t > 0) {
      if ((t - 1 - t_max) % (2 * t_max) == 0)
        torch_lr += (base - eta_min) * (1 - std::cos(pi / t_max)) / 2;
      else
        torch_lr = (1 + std::cos(pi * t / t_max)) / (1 + std::cos(pi * (t - 1) / t_max)) *
                       (torch_lr - eta_min) +
                   eta_min;
    }
    EXPECT_NEAR(opt.lr(), torch_lr, 1e-12) << "step " << t;
    sched.step();
  }
  optim::CosineAnnealingLR c(t_max, eta_min);
  EXPECT_DOUBLE_EQ(c.lr(0, base), base);
  EXPECT_NEAR(c.lr(5, base), (base + eta_min) / 2, 1e-15);
  EXPECT_NEAR(c.lr(10, base), eta_min, 1e-15);
}

TEST(Schedules, LinearWarmupMatchesSequentialLinearLR) {
  const int warm = 4, t_max = 6;
  const double base = 0.5;
  optim::LinearWarmup only(warm);
  EXPECT_EQ(only.lr(0, 1.0), 0.25);
  EXPECT_EQ(only.lr(3, 1.0), 1.0);
  EXPECT_EQ(only.lr(100, 1.0), 1.0);
  EXPECT_EQ(optim::LinearWarmup(0).lr(0, 1.0), 1.0);

  Tensor w = param({1});
  optim::SGD opt({w}, {.lr = base});
  optim::LRScheduler sched(opt, optim::LinearWarmup(warm, optim::CosineAnnealingLR(t_max)));
  for (int t = 0; t < 12; ++t) {
    // SequentialLR([LinearLR(start_factor=1/W, end_factor=1, total_iters=W-1), cosine], [W])
    double want;
    if (t < warm) {
      const double start = 1.0 / warm;
      want = base * (start + (1 - start) * std::min(t, warm - 1) / (warm - 1));
    } else {
      want = base * (1 + std::cos(std::numbers::pi * (t - warm) / t_max)) / 2;
    }
    EXPECT_NEAR(opt.lr(), want, 1e-15) << "step " << t;
    sched.step();
  }
  // A copy of a warmup keeps its own inner schedule.
  optim::LinearWarmup a(2, optim::StepLR(1, 0.5));
  optim::LinearWarmup b = a;
  EXPECT_EQ(b.lr(3, 1.0), 0.5);
}

TEST(Schedules, BadArgumentsRaise) {
  EXPECT_THROW(optim::StepLR(0), Error);
  EXPECT_THROW(optim::StepLR(1, 0.0), Error);
  EXPECT_THROW(optim::CosineAnnealingLR(0), Error);
  EXPECT_THROW(optim::CosineAnnealingLR(5, -1.0), Error);
  EXPECT_THROW(optim::LinearWarmup(-1), Error);
}

// ---- optimizer trajectories vs PyTorch's algorithms --------------------------------------------

namespace {

// Runs `steps` eager steps of `opt` on loss = sum(0.5 * a * w^2 + c * w), whose gradient is
// a * w + c, and returns w after each step.
template <typename Opt>
std::vector<std::vector<double>> run(Tensor w, Opt& opt, const std::vector<double>& a,
                                     const std::vector<double>& c, int steps) {
  Tensor ta = tensor(a), tc = tensor(c);
  std::vector<std::vector<double>> out;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = sum(add(mul(mul(mul(w, w), ta), 0.5), mul(tc, w)));
    loss.backward();
    opt.step();
    out.push_back(w.to_vector<double>());
  }
  return out;
}

void expect_traj(const std::vector<std::vector<double>>& got,
                 const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s)
    for (size_t i = 0; i < got[s].size(); ++i)
      EXPECT_NEAR(got[s][i], want[s][i], 1e-12 * (1 + std::fabs(want[s][i])))
          << "step " << s + 1 << " element " << i;
}

}  // namespace

TEST(OptimizerTrajectories, SgdMomentumByHand) {
  // loss = 0.5 w^2, lr 0.1, momentum 0.9, w0 = 1:
  // g=1, buf=1, w=0.9; g=0.9, buf=1.8, w=0.72; g=0.72, buf=2.34, w=0.486.
  Tensor w = param({1});
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  expect_traj(run(w, opt, {1}, {0}, 3), {{0.9}, {0.72}, {0.486}});
}

TEST(OptimizerTrajectories, SgdVariantsMatchPyTorch) {
  const std::vector<double> a{1.0, 2.0, 0.5}, c{0.3, -1.0, 0.0}, w0{1.0, -0.5, 2.0};
  for (bool nesterov : {false, true})
    for (double wd : {0.0, 0.05}) {
      SCOPED_TRACE(str_cat("nesterov ", nesterov, " wd ", wd));
      const double lr = 0.1, mom = 0.9;
      Tensor w = param(w0);
      optim::SGD opt({w}, {.lr = lr, .momentum = mom, .weight_decay = wd, .nesterov = nesterov});
      // torch.optim.SGD (dampening 0): d = g + wd p; buf = d on step 1, else mom buf + d;
      // d = nesterov ? d + mom buf : buf; p -= lr d.
      std::vector<double> p = w0, buf(3);
      std::vector<std::vector<double>> want;
      for (int s = 0; s < 3; ++s) {
        for (size_t i = 0; i < 3; ++i) {
          double d = a[i] * p[i] + c[i] + wd * p[i];
          buf[i] = s == 0 ? d : mom * buf[i] + d;
          d = nesterov ? d + mom * buf[i] : buf[i];
          p[i] -= lr * d;
        }
        want.push_back(p);
      }
      expect_traj(run(w, opt, a, c, 3), want);
    }
}

// AdamW's weight decay defaults to 0.01 (torch.optim.AdamW) and an explicit 0 switches it off
// (0 used to be read as "unset" and replaced by 0.01). With a zero gradient the Adam part of the
// step is 0, so only the decay moves p: p *= 1 - lr wd.
TEST(OptimizerTrajectories, AdamWWeightDecayDefaultAndZero) {
  for (auto [wd, want] : {std::pair<std::optional<double>, double>{std::nullopt, 1 - 0.1 * 0.01},
                          {0.0, 1.0},
                          {0.5, 1 - 0.1 * 0.5}}) {
    Tensor w = ones({3}).requires_grad_();
    optim::AdamW opt({w}, {.lr = 0.1, .weight_decay = wd});
    w.set_grad(zeros({3}));
    opt.step();
    EXPECT_NEAR(w.to_vector<double>()[0], want, 1e-7) << (wd ? *wd : -1.0);
  }
  // Adam's default stays 0.
  Tensor w = ones({3}).requires_grad_();
  optim::Adam opt({w}, optim::AdamOptions{.lr = 0.1});
  w.set_grad(zeros({3}));
  opt.step();
  EXPECT_EQ(w.to_vector<double>()[0], 1.0);
}

TEST(OptimizerTrajectories, AdamAndAdamWMatchPyTorch) {
  const std::vector<double> a{1.0, 2.0, 0.5}, c{0.3, -1.0, 0.0}, w0{1.0, -0.5, 2.0};
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam(weight_decay)");
    Tensor w = param(w0);
    optim::AdamOptions o{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd};
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{w}, o);
    else
      opt = std::make_unique<optim::Adam>(std::vector<Tensor>{w}, o);
    // torch.optim.AdamW: p *= 1 - lr wd; torch.optim.Adam: g += wd p. Then m, v updates and
    // p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
    std::vector<double> p = w0, m(3), v(3);
    std::vector<std::vector<double>> want;
    for (int t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < 3; ++i) {
        double g = a[i] * p[i] + c[i];
        if (decoupled)
          p[i] *= 1 - lr * wd;
        else
          g += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
      }
      want.push_back(p);
    }
    expect_traj(run(w, *opt, a, c, 3), want);
  }
}

TEST(OptimizerTrajectories, SetLrThroughTheBaseClass) {
  Tensor w = param({1});
  optim::AdamW opt({w}, {.lr = 0.01});
  optim::Optimizer& base = opt;
  EXPECT_EQ(base.lr(), 0.01);
  base.set_lr(0.5);
  EXPECT_EQ(opt.lr(), 0.5);
}

// Eager step() updates contiguous parameters in one fused pass and falls back to the update
// written in ops otherwise (a strided parameter here); both must give the same trajectory.
TEST(OptimizerTrajectories, FusedStepMatchesOpPath) {
  Tensor w0 = randn({4, 3}, Float32), a = rand({4, 3}), c = randn({4, 3});
  auto run_both = [&](auto make_opt) {
    Tensor wc = w0.clone().requires_grad_();
    Tensor wn = w0.t().contiguous().t().detach().requires_grad_();  // same values, strided
    ASSERT_TRUE(wc.is_contiguous());
    ASSERT_FALSE(wn.is_contiguous());
    auto oc = make_opt(wc);
    auto on = make_opt(wn);
    for (int s = 0; s < 4; ++s) {
      for (auto [w, o] : {std::pair{wc, oc.get()}, std::pair{wn, on.get()}}) {
        o->zero_grad();
        sum(add(mul(mul(mul(w, w), a), 0.5), mul(c, w))).backward();
        o->step();
      }
      std::vector<float> x = wc.to_vector<float>(), y = wn.to_vector<float>();
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(x[i], y[i], 2e-6 * (1 + std::fabs(y[i]))) << "step " << s + 1 << " i " << i;
    }
  };
  for (bool nesterov : {false, true})
    run_both([&](Tensor w) {
      return std::make_unique<optim::SGD>(
          std::vector<Tensor>{w},
          optim::SGDOptions{
              .lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = nesterov});
    });
  run_both([](Tensor w) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions{.lr = 0.1});
  });
  for (bool decoupled : {false, true})
    run_both([&](Tensor w) -> std::unique_ptr<optim::Optimizer> {
      optim::AdamOptions o{.lr = 0.05, .weight_decay = 0.1};
      if (decoupled) return std::make_unique<optim::AdamW>(std::vector<Tensor>{w}, o);
      return std::make_unique<optim::Adam>(std::vector<Tensor>{w}, o);
    });
}

// ---- bad input found by probing the public API ----------------------------------------------

TEST(OptimizerProbe, NaNAndOutOfRangeHyperparameters) {
  using kiln_test::expect_error;
  const double nan = std::nan("");
  Tensor w = param({1, 2});
  // Each of these was accepted (NaN fails no `<` comparison) and turned the weights into NaN.
  expect_error([&] { optim::SGD({w}, {.lr = nan}); }, "SGD", {"learning rate", "nan"});
  expect_error([&] { optim::SGD({w}, {.momentum = nan}); }, "SGD", {"momentum"});
  expect_error([&] { optim::SGD({w}, {.weight_decay = -1}); }, "SGD", {"weight_decay"});
  expect_error([&] { optim::Adam({w}, {.lr = nan}); }, "Adam", {"learning rate"});
  expect_error([&] { optim::Adam({w}, {.beta2 = nan}); }, "Adam", {"betas"});
  expect_error([&] { optim::Adam({w}, {.eps = -1}); }, "Adam", {"eps"});
  expect_error([&] { optim::AdamW({w}, {.weight_decay = nan}); }, "AdamW", {"weight_decay"});
  expect_error([&] { optim::Adam opt(nan); }, "Adam", {"learning rate"});  // graph form too
  optim::SGD sgd({w}, {.lr = 0.5});
  expect_error([&] { sgd.set_lr(nan); }, "SGD", {"learning rate"});
  EXPECT_EQ(sgd.lr(), 0.5);
}

TEST(OptimizerProbe, EmptyEagerParameterListIsRefused) {
  using kiln_test::expect_error;
  // As torch.optim; step() used to do nothing, silently.
  expect_error([] { optim::SGD(std::vector<Tensor>{}, {}); }, "SGD", {"empty parameter list"});
  expect_error([] { optim::AdamW(std::vector<Tensor>{}, {}); }, "AdamW", {"empty parameter list"});
  expect_error([] { optim::SGD({Tensor()}, {}); }, "SGD", {"parameter 0"});
  // The graph forms hold no parameters by design.
  EXPECT_TRUE(optim::SGD(0.1).params().empty());
  EXPECT_TRUE(optim::AdamW(optim::AdamOptions{}).params().empty());
}

TEST(OptimizerProbe, SchedulesRefuseNegativeSteps) {
  using kiln_test::expect_error;
  // LinearWarmup returned a negative rate for t = -5.
  expect_error([] { optim::LinearWarmup(3).lr(-5, 1.0); }, "LinearWarmup", {"step", "-5"});
  expect_error([] { optim::StepLR(2).lr(-1, 1.0); }, "StepLR", {"step"});
  expect_error([] { optim::CosineAnnealingLR(2).lr(-1, 1.0); }, "CosineAnnealingLR", {"step"});
}

// ---- RMSprop ---------------------------------------------------------------------------------

TEST(OptimizerTrajectories, RmspropMatchesPyTorch) {
  const std::vector<double> a{1.0, 2.0, 0.5}, c{0.3, -1.0, 0.0}, w0{1.0, -0.5, 2.0};
  for (bool centered : {false, true})
    for (double mom : {0.0, 0.9})
      for (double wd : {0.0, 0.05}) {
        SCOPED_TRACE(str_cat("centered ", centered, " momentum ", mom, " wd ", wd));
        const double lr = 0.01, alpha = 0.99, eps = 1e-8;
        Tensor w = param(w0);
        optim::RMSprop opt({w}, {.lr = lr,
                                 .alpha = alpha,
                                 .eps = eps,
                                 .weight_decay = wd,
                                 .momentum = mom,
                                 .centered = centered});
        // torch.optim.RMSprop (_single_tensor_rmsprop), written out.
        std::vector<double> p = w0, sq(3), ga(3), buf(3);
        std::vector<std::vector<double>> want;
        for (int s = 0; s < 4; ++s) {
          for (size_t i = 0; i < 3; ++i) {
            const double g = a[i] * p[i] + c[i] + wd * p[i];
            sq[i] = alpha * sq[i] + (1 - alpha) * g * g;
            double avg;
            if (centered) {
              ga[i] = alpha * ga[i] + (1 - alpha) * g;
              avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
            } else {
              avg = std::sqrt(sq[i]) + eps;
            }
            if (mom > 0) {
              buf[i] = mom * buf[i] + g / avg;
              p[i] -= lr * buf[i];
            } else {
              p[i] -= lr * g / avg;
            }
          }
          want.push_back(p);
        }
        expect_traj(run(w, opt, a, c, 4), want);
      }
  EXPECT_THROW(optim::RMSprop({param({1})}, {.alpha = 1.0}), Error);
  EXPECT_THROW(optim::RMSprop({param({1})}, {.momentum = -0.1}), Error);
  EXPECT_THROW(optim::RMSprop({param({1})}, {.eps = NAN}), Error);
}

// The graph form (minimize) takes the same steps as the eager one.
TEST(OptimizerTrajectories, RmspropGraphMatchesEager) {
  const std::vector<double> w0{1.0, -0.5, 2.0};
  Tensor we = param(w0);
  optim::RMSprop eopt({we}, {.lr = 0.05, .momentum = 0.5, .centered = true});
  auto eager = run(we, eopt, {1.0, 2.0, 0.5}, {0.3, -1.0, 0.0}, 3);
  Graph g;
  Tensor w = g.variable("w", tensor(w0));
  Tensor loss = sum(add(mul(mul(mul(w, w), tensor(std::vector<double>{1.0, 2.0, 0.5})), 0.5),
                        mul(tensor(std::vector<double>{0.3, -1.0, 0.0}), w)));
  Tensor step = optim::RMSprop({.lr = 0.05, .momentum = 0.5, .centered = true}).minimize(loss);
  Session s(g);
  for (int k = 0; k < 3; ++k) {
    s.run(step);
    const auto got = s.run(w).to_vector<double>();
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], eager[static_cast<size_t>(k)][i], 1e-12);
  }
}

// ---- optimizer state -------------------------------------------------------------------------

// Resuming from a saved state (through a safetensors file) continues the same trajectory as
// never stopping; bad states raise and change nothing.
TEST(OptimizerState, SaveLoadResumesTheTrajectory) {
  const std::vector<double> a{1.0, 2.0, 0.5}, c{0.3, -1.0, 0.0}, w0{1.0, -0.5, 2.0};
  Tensor wa = param(w0);
  optim::AdamW full({wa}, {.lr = 0.1});
  auto straight = run(wa, full, a, c, 5);

  Tensor wb = param(w0);
  optim::AdamW first({wb}, {.lr = 0.1});
  EXPECT_EQ(first.state_dict().size(), 2u);  // step and lr only before the first step
  run(wb, first, a, c, 2);
  const optim::OptimizerState st = first.state_dict();
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0].first, "step");
  EXPECT_EQ(st[0].second.item<double>(), 2.0);
  EXPECT_EQ(st[2].first, "state.0.m");
  EXPECT_EQ(st[3].first, "state.0.v");
  const std::string path = ::testing::TempDir() + "/kiln_optim_state.safetensors";
  io::save_safetensors(path, st);

  Tensor wc = param(wb.to_vector<double>());
  optim::AdamW resumed({wc}, {.lr = 0.5});  // lr comes from the state
  resumed.load_state_dict(io::load_safetensors(path));
  EXPECT_EQ(resumed.lr(), 0.1);
  auto rest = run(wc, resumed, a, c, 3);
  expect_traj(rest, {straight[2], straight[3], straight[4]});

  // Bad states: wrong slot shape, a missing slot, an unknown entry, a negative step. Each
  // raises naming the problem, and the optimizer keeps its state.
  Tensor wd = param(w0);
  optim::AdamW victim({wd}, {.lr = 0.1});
  run(wd, victim, a, c, 1);
  const optim::OptimizerState before = victim.state_dict();
  auto with = [&](const std::string& name, const Tensor& t) {
    optim::OptimizerState s = st;
    for (auto& [n, v] : s)
      if (n == name) v = t;
    return s;
  };
  kiln_test::expect_error([&] { victim.load_state_dict(with("state.0.m", zeros({2}, Float64))); },
                          "load_state_dict", {"state.0.m", "[3]", "[2]"});
  optim::OptimizerState missing(st.begin(), st.end() - 1);
  kiln_test::expect_error([&] { victim.load_state_dict(missing); }, "load_state_dict",
                          {"state.0.v"});
  optim::OptimizerState extra = st;
  extra.emplace_back("momentum", zeros({3}, Float64));
  kiln_test::expect_error([&] { victim.load_state_dict(extra); }, "load_state_dict", {"momentum"});
  kiln_test::expect_error(
      [&] { victim.load_state_dict(with("step", scalar_tensor(-1.0, Float64))); },
      "load_state_dict", {"step"});
  const optim::OptimizerState after = victim.state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i].second.to_vector<double>(), before[i].second.to_vector<double>())
        << after[i].first;
  // SGD without momentum has no slots: step and lr only.
  Tensor ws = param(w0);
  optim::SGD sgd({ws}, {.lr = 0.1});
  run(ws, sgd, a, c, 1);
  EXPECT_EQ(sgd.state_dict().size(), 2u);
  sgd.load_state_dict(sgd.state_dict());
}

// copy_ into a plain tensor from one with history joins the graph (it used to copy values only
// and drop the gradient).
TEST(InPlaceCopy, CopyIntoAPlainTensorRecords) {
  Tensor w = param({1.0, 2.0});
  Tensor buf = zeros({2}, Float64);
  buf.copy_(mul(w, 3.0));
  EXPECT_TRUE(buf.requires_grad());
  sum(buf).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>({3.0, 3.0}));
}

// Values printed by PyTorch 1.13 (torch.optim.lr_scheduler.OneCycleLR on SGD, get_last_lr()
// before each step) for two configurations.
TEST(Schedules, OneCycleAndExponentialMatchPyTorch) {
  Tensor w = param({0});
  optim::SGD opt({w}, {.lr = 0.1});
  optim::LRScheduler sched(opt, optim::OneCycleLR(0.5, 10));
  const std::vector<double> want = {0.02,
                                    0.26,
                                    0.5,
                                    0.475242316006737,
                                    0.405872826974882,
                                    0.305631010968145,
                                    0.194370989031855,
                                    0.0941291730251185,
                                    0.0247596839932631,
                                    2e-06};
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_NEAR(sched.lr(), want[t], 1e-14) << "step " << t;
    if (t + 1 < want.size()) sched.step();
  }
  EXPECT_THROW(sched.step(), Error);  // past total_steps - 1, as torch
  const optim::OneCycleLR oc(1.0, 7, 0.25, 10, 100);
  const std::vector<double> want2 = {0.1,
                                     0.994420997699452,
                                     0.866659409978998,
                                     0.611649206511179,
                                     0.318012158328986,
                                     0.0877937322291607,
                                     0.001};
  for (int64_t t = 0; t < 7; ++t)
    EXPECT_NEAR(oc.lr(t, 123.0), want2[static_cast<size_t>(t)], 1e-14) << "step " << t;
  const optim::ExponentialLR ex(0.9);
  EXPECT_NEAR(ex.lr(3, 2.0), 2.0 * 0.729, 1e-15);
  EXPECT_THROW(optim::ExponentialLR(0.0), Error);
  EXPECT_THROW(optim::OneCycleLR(1.0, 1), Error);
  EXPECT_THROW(optim::OneCycleLR(1.0, 10, 1.0), Error);
  EXPECT_THROW(optim::OneCycleLR(NAN, 10), Error);
}
