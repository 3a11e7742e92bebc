// Learning-rate schedules: pure functions of the step (StepLR, ExponentialLR, CosineAnnealingLR,
// OneCycleLR, LinearWarmup wrapping another), and LRScheduler, which applies one to an Optimizer as
// torch.optim's schedulers do.
#pragma once
#include <cstdint>
#include <memory>

#include "kiln/optim/optim.h"

namespace kiln::optim {

/// A learning rate as a function of the scheduler step t (0, 1, 2, ...) and the base rate.
class Schedule {
 public:
  virtual ~Schedule() = default;
  /// The rate at step t >= 0 for an optimizer whose initial rate is base_lr.
  virtual double lr(int64_t t, double base_lr) const = 0;
  virtual std::unique_ptr<Schedule> clone() const = 0;
};

/// base_lr * gamma^floor(t / step_size) (torch.optim.lr_scheduler.StepLR).
class StepLR : public Schedule {
 public:
  explicit StepLR(int64_t step_size, double gamma = 0.1);
  double lr(int64_t t, double base_lr) const override;
  std::unique_ptr<Schedule> clone() const override { return std::make_unique<StepLR>(*this); }

 private:
  int64_t step_size_;
  double gamma_;
};

/// eta_min + (base_lr - eta_min) * (1 + cos(pi * t / t_max)) / 2 (the closed form of
/// torch.optim.lr_scheduler.CosineAnnealingLR). Past t_max it rises again, as PyTorch's does;
/// stop stepping at t_max to stay at eta_min.
class CosineAnnealingLR : public Schedule {
 public:
  explicit CosineAnnealingLR(int64_t t_max, double eta_min = 0.0);
  double lr(int64_t t, double base_lr) const override;
  std::unique_ptr<Schedule> clone() const override {
    return std::make_unique<CosineAnnealingLR>(*this);
  }

 private:
  int64_t t_max_;
  double eta_min_;
};

/// base_lr * gamma^t (torch.optim.lr_scheduler.ExponentialLR).
class ExponentialLR : public Schedule {
 public:
  explicit ExponentialLR(double gamma);
  double lr(int64_t t, double base_lr) const override;
  std::unique_ptr<Schedule> clone() const override {
    return std::make_unique<ExponentialLR>(*this);
  }

 private:
  double gamma_;
};

/// torch.optim.lr_scheduler.OneCycleLR (two phases, cosine annealing): from max_lr / div_factor
/// up to max_lr over the first pct_start of total_steps, then down to max_lr / div_factor /
/// final_div_factor at step total_steps - 1. The optimizer's own rate is not used (as torch);
/// stepping past total_steps - 1 raises.
class OneCycleLR : public Schedule {
 public:
  OneCycleLR(double max_lr, int64_t total_steps, double pct_start = 0.3, double div_factor = 25,
             double final_div_factor = 1e4);
  double lr(int64_t t, double base_lr) const override;
  std::unique_ptr<Schedule> clone() const override { return std::make_unique<OneCycleLR>(*this); }

 private:
  double max_lr_, pct_start_, div_, final_div_;
  int64_t total_;
};

/// Linear warmup: base_lr * (t + 1) / warmup_steps for t < warmup_steps, then `after` at step
/// t - warmup_steps (or base_lr when there is none). With `after` this equals PyTorch's
/// SequentialLR([LinearLR(1/W, 1, total_iters=W-1), after], milestones=[W]).
class LinearWarmup : public Schedule {
 public:
  explicit LinearWarmup(int64_t warmup_steps);
  LinearWarmup(int64_t warmup_steps, const Schedule& after);
  LinearWarmup(const LinearWarmup& o);
  LinearWarmup& operator=(const LinearWarmup&) = delete;
  double lr(int64_t t, double base_lr) const override;
  std::unique_ptr<Schedule> clone() const override { return std::make_unique<LinearWarmup>(*this); }

 private:
  int64_t warmup_;
  std::unique_ptr<Schedule> after_;
};

/// Drives an optimizer's learning rate from a Schedule, as torch.optim.lr_scheduler does:
/// construction records base_lr = opt.lr() and sets the rate for step 0; each step() (call it
/// after opt.step()) advances t and sets the rate for it. The rate is recomputed from the
/// schedule each time, so a manual set_lr between steps is overwritten at the next step().
/// The optimizer must outlive the scheduler. Eager-only in effect: see Optimizer::set_lr.
class LRScheduler {
 public:
  LRScheduler(Optimizer& opt, const Schedule& schedule);
  /// Advances one step and updates the optimizer's rate.
  void step();
  /// The current rate (PyTorch's get_last_lr()).
  double lr() const { return opt_.lr(); }
  /// Steps taken so far (PyTorch's last_epoch).
  int64_t last_step() const { return t_; }
  double base_lr() const { return base_lr_; }

 private:
  void apply();
  Optimizer& opt_;
  std::unique_ptr<Schedule> schedule_;
  double base_lr_;
  int64_t t_ = 0;
};

}  // namespace kiln::optim
