// Learning-rate schedules in closed form (so a schedule can be evaluated at any step, and
// wrapping one in another is composition).
#include "kiln/optim/schedule.h"

#include <cmath>
#include <numbers>

namespace kiln::optim {
namespace {
void require_step(const char* who, int64_t t) {
  if (t < 0) fail(who, "step must be >= 0, got ", t);
}
}  // namespace

StepLR::StepLR(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) fail("StepLR", "step_size must be positive, got ", step_size);
  if (!(gamma > 0)) fail("StepLR", "gamma must be > 0, got ", gamma);
}

double StepLR::lr(int64_t t, double base_lr) const {
  require_step("StepLR", t);
  return base_lr * std::pow(gamma_, static_cast<double>(t / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(int64_t t_max, double eta_min)
    : t_max_(t_max), eta_min_(eta_min) {
  if (t_max <= 0) fail("CosineAnnealingLR", "T_max must be positive, got ", t_max);
  if (!(eta_min >= 0)) fail("CosineAnnealingLR", "eta_min must be >= 0, got ", eta_min);
}

double CosineAnnealingLR::lr(int64_t t, double base_lr) const {
  require_step("CosineAnnealingLR", t);
  const double c =
      std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr - eta_min_) * (1 + c) / 2;
}

ExponentialLR::ExponentialLR(double gamma) : gamma_(gamma) {
  if (!(gamma > 0) || !std::isfinite(gamma))
    fail("ExponentialLR", "gamma must be finite and > 0, got ", gamma);
}

double ExponentialLR::lr(int64_t t, double base_lr) const {
  require_step("ExponentialLR", t);
  return base_lr * std::pow(gamma_, static_cast<double>(t));
}

OneCycleLR::OneCycleLR(double max_lr, int64_t total_steps, double pct_start, double div_factor,
                       double final_div_factor)
    : max_lr_(max_lr),
      pct_start_(pct_start),
      div_(div_factor),
      final_div_(final_div_factor),
      total_(total_steps) {
  const char* who = "OneCycleLR";
  if (!(max_lr >= 0) || !std::isfinite(max_lr))
    fail(who, "max_lr must be finite and >= 0, got ", max_lr);
  if (total_steps <= 1) fail(who, "total_steps must be > 1, got ", total_steps);
  if (!(pct_start > 0 && pct_start < 1)) fail(who, "pct_start must be in (0, 1), got ", pct_start);
  if (!(div_factor > 0) || !(final_div_factor > 0) || !std::isfinite(div_factor) ||
      !std::isfinite(final_div_factor))
    fail(who, "div_factor and final_div_factor must be finite and > 0, got ", div_factor, ", ",
         final_div_factor);
}

// torch's phases: [0, pct_start * total - 1] from initial to max, then to total - 1 from max to
// min; cos annealing end + (start - end) / 2 (1 + cos(pi pct)).
double OneCycleLR::lr(int64_t t, double) const {
  require_step("OneCycleLR", t);
  if (t >= total_) fail("OneCycleLR", "stepped to ", t, ", past total_steps - 1 = ", total_ - 1);
  const double initial = max_lr_ / div_, min_lr = initial / final_div_;
  const double end1 = pct_start_ * static_cast<double>(total_) - 1;
  const double end2 = static_cast<double>(total_) - 1;
  auto anneal = [](double from, double to, double pct) {
    return to + (from - to) / 2 * (std::cos(std::numbers::pi * pct) + 1);
  };
  const double x = static_cast<double>(t);
  if (x <= end1) return anneal(initial, max_lr_, x / end1);
  return anneal(max_lr_, min_lr, (x - end1) / (end2 - end1));
}

LinearWarmup::LinearWarmup(int64_t warmup_steps) : warmup_(warmup_steps) {
  if (warmup_steps < 0) fail("LinearWarmup", "warmup_steps must be >= 0, got ", warmup_steps);
}
LinearWarmup::LinearWarmup(int64_t warmup_steps, const Schedule& after)
    : LinearWarmup(warmup_steps) {
  after_ = after.clone();
}
LinearWarmup::LinearWarmup(const LinearWarmup& o)
    : Schedule(o), warmup_(o.warmup_), after_(o.after_ ? o.after_->clone() : nullptr) {}

double LinearWarmup::lr(int64_t t, double base_lr) const {
  require_step("LinearWarmup", t);
  if (t < warmup_) return base_lr * static_cast<double>(t + 1) / static_cast<double>(warmup_);
  return after_ ? after_->lr(t - warmup_, base_lr) : base_lr;
}

LRScheduler::LRScheduler(Optimizer& opt, const Schedule& schedule)
    : opt_(opt), schedule_(schedule.clone()), base_lr_(opt.lr()) {
  apply();
}

void LRScheduler::step() {
  ++t_;
  apply();
}

void LRScheduler::apply() {
  const double lr = schedule_->lr(t_, base_lr_);
  if (!std::isfinite(lr) || lr < 0)
    fail("LRScheduler", "schedule gave learning rate ", lr, " at step ", t_, " (base ", base_lr_,
         ")");
  opt_.set_lr(lr);
}

}  // namespace kiln::optim
