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
