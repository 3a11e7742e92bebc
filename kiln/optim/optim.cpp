// Optimizer updates written once in Kiln ops; eager step() writes them into parameters and
// slots with copy_, graph minimize() turns them into assign nodes.
#include "kiln/optim/optim.h"

#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/node.h"
#include "kiln/kernels/cpu/optim_kernels.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, const char* who, bool graph)
    : params_(std::move(params)) {
  // As torch.optim: an empty list is almost always a model whose parameters() was not what the
  // caller meant, and step() would then silently train nothing.
  if (!graph && params_.empty())
    fail(who, "got an empty parameter list (for the graph form, construct with options only)");
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].defined() || !params_[i].is_concrete() || !params_[i].requires_grad() ||
        !params_[i].is_leaf())
      fail(who, "parameter ", i, " must be a concrete leaf tensor that requires grad");
}

void Optimizer::check_lr(const char* who, double lr) {
  if (!(lr >= 0)) fail(who, "learning rate must be >= 0, got ", lr);
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

void Optimizer::step() {
  NoGradGuard ng;
  if (slots_.empty()) {
    slots_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i)
      for (size_t k = 0; k < slot_names().size(); ++k) slots_[i].push_back(zeros_like(params_[i]));
    step_ = scalar_tensor(0.0, Float64);
  }
  step_ = add(step_, 1.0);
  // Eagerly each parameter is updated in place in one pass; while a JIT trace captures this
  // call, the update goes through ops (which the trace records).
  const bool fused = !capturing() && step_.is_concrete();
  const double t = fused ? step_.item<double>() : 0.0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (fused && fused_ok(p, g, slots_[i]) &&
        fused_update(p, g.is_contiguous() ? g : raw_contiguous_copy(g), slots_[i], t)) {
      p.impl()->storage->bump_version();
      for (auto& sl : slots_[i]) sl.impl()->storage->bump_version();
      continue;
    }
    std::vector<Tensor> slots = slots_[i];
    Tensor np = update(p, g, slots, step_);
    for (size_t k = 0; k < slots.size(); ++k)
      if (!slots[k].is_same(slots_[i][k])) slots_[i][k].copy_(slots[k]);
    p.copy_(np);
  }
}

bool Optimizer::fused_update(Tensor&, const Tensor&, std::vector<Tensor>&, double) { return false; }

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  s.emplace_back("step", step_.defined() ? step_.clone() : scalar_tensor(0.0, Float64));
  s.emplace_back("lr", scalar_tensor(lr(), Float64));
  const std::vector<std::string> names = slot_names();
  for (size_t i = 0; i < slots_.size(); ++i)
    for (size_t k = 0; k < slots_[i].size(); ++k)
      s.emplace_back("state." + std::to_string(i) + "." + names[k], slots_[i][k].clone());
  return s;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  const char* op = "load_state_dict";
  if (params_.empty()) fail(op, "the graph form keeps its state in graph variables");
  const std::vector<std::string> names = slot_names();
  Tensor step, lr_t;
  std::vector<std::vector<Tensor>> slots;
  size_t expected = 2;
  auto scalar = [&](const std::string& name, const Tensor& t) {
    if (!t.defined() || !t.is_concrete() || t.numel() != 1 || !is_floating(t.dtype()))
      fail(op, "'", name, "' must be a floating scalar, got ",
           t.defined() ? t.shape().str() : std::string("an undefined tensor"));
    return t.to(Float64).reshape({});
  };
  for (const auto& [name, t] : state) {
    if (name == "step") {
      step = scalar(name, t);
    } else if (name == "lr") {
      lr_t = scalar(name, t);
    } else if (name.rfind("state.", 0) != 0) {
      fail(op, "unexpected entry '", name, "' (this optimizer has step, lr and state.<i>.<slot>)");
    }
  }
  if (!step.defined() || !lr_t.defined()) fail(op, "the state needs 'step' and 'lr'");
  const double steps = step.item<double>(), lr_v = lr_t.item<double>();
  if (!(steps >= 0) || steps != std::floor(steps))
    fail(op, "'step' must be a whole number >= 0, got ", steps);
  check_lr(op, lr_v);
  if (steps > 0) {
    slots.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i)
      for (const auto& sn : names) {
        const std::string key = "state." + std::to_string(i) + "." + sn;
        const Tensor* found = nullptr;
        for (const auto& [name, t] : state)
          if (name == key) found = &t;
        if (!found) fail(op, "missing '", key, "'");
        const Tensor& t = *found;
        if (!t.defined() || !t.is_concrete() || t.shape() != params_[i].shape() ||
            t.dtype() != params_[i].dtype())
          fail(op, "'", key, "' must be ", params_[i].dtype(), params_[i].shape(),
               " like parameter ", i, ", got ",
               t.defined() ? str_cat(t.dtype(), t.shape()) : std::string("an undefined tensor"));
        slots[i].push_back(t.detach().clone());
        ++expected;
      }
  }
  if (state.size() != expected)
    fail(op, "the state has ", state.size(), " entries, this optimizer (", params_.size(),
         " parameters, slots ", names.size(), ", step ", steps, ") expects ", expected);
  // All checked: take it.
  set_lr(lr_v);
  slots_ = std::move(slots);
  step_ = steps > 0 ? scalar_tensor(steps, Float64) : Tensor();
}

bool Optimizer::fused_ok(const Tensor& p, const Tensor& g, const std::vector<Tensor>& slots) {
  auto fits = [&](const Tensor& t) {
    return t.is_concrete() && t.dtype() == p.dtype() && t.shape() == p.shape() &&
           !t.requires_grad();
  };
  if (!p.is_concrete() || !p.is_contiguous() || !is_floating(p.dtype()) || !fits(g)) return false;
  if (p.dtype() != Float32 && p.dtype() != Float64) return false;
  for (const auto& sl : slots)
    if (!fits(sl) || !sl.is_contiguous() || sl.shares_storage(p)) return false;
  return !g.shares_storage(p);
}

Tensor Optimizer::minimize(const Tensor& loss, const std::vector<Tensor>& var_list) {
  if (!loss.defined() || !loss.is_symbolic())
    fail("minimize",
         "loss must be a symbolic tensor of a graph; eagerly use backward() and step()");
  if (loss.numel() != 1) fail("minimize", "loss must have one element, got shape ", loss.shape());
  Graph g = Graph::of(loss);
  std::vector<Tensor> vars = var_list;
  if (vars.empty())
    for (Node* v : g.variables())
      if (is_floating(v->outputs[0].dtype) && v->name.find('/') == std::string::npos)
        vars.push_back(g.tensor_of(ValueRef{v, 0}));
  std::vector<Tensor> grads = gradients({loss}, vars);
  // One step counter per minimize() call.
  Tensor step = g.variable(g.unique_name("optimizer/step"), scalar_tensor(0.0, Float64));
  Tensor next_step = add(step, 1.0);
  std::vector<Tensor> updates;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    Node* vn = g.node_of(vars[i], "minimize");
    std::vector<Tensor> slots, slot_vars;
    for (const auto& s : slot_names()) {
      Tensor v = g.variable(g.unique_name(vn->name + "/" + s), zeros_like(vn->value));
      slots.push_back(v);
      slot_vars.push_back(v);
    }
    Tensor np = update(vars[i], grads[i], slots, next_step);
    for (size_t k = 0; k < slots.size(); ++k)
      if (!slots[k].is_same(slot_vars[k])) updates.push_back(assign(slot_vars[k], slots[k]));
    updates.push_back(assign(vars[i], np));
  }
  if (updates.empty()) fail("minimize", "the loss depends on none of the variables");
  updates.push_back(assign(step, next_step));
  return group(updates);
}

// ---- SGD ------------------------------------------------------------------------------------

// The comparisons are written so that NaN fails them, as in torch.optim.
SGDOptions SGD::checked(SGDOptions opts) {
  check_lr("SGD", opts.lr);
  if (!(opts.momentum >= 0)) fail("SGD", "momentum must be >= 0, got ", opts.momentum);
  if (!(opts.weight_decay >= 0)) fail("SGD", "weight_decay must be >= 0, got ", opts.weight_decay);
  if (opts.nesterov && opts.momentum <= 0) fail("SGD", "nesterov needs momentum > 0");
  return opts;
}

SGD::SGD(std::vector<Tensor> params, SGDOptions opts)
    : Optimizer(std::move(params), "SGD", false), opts_(checked(opts)) {}
SGD::SGD(double lr, double momentum) : SGD(SGDOptions{.lr = lr, .momentum = momentum}) {}
SGD::SGD(std::vector<Tensor> params, double lr, double momentum)
    : SGD(std::move(params), SGDOptions{.lr = lr, .momentum = momentum}) {}
SGD::SGD(SGDOptions opts) : Optimizer({}, "SGD", true), opts_(checked(opts)) {}

std::vector<std::string> SGD::slot_names() const {
  if (opts_.momentum != 0) return {"momentum"};
  return {};
}

// v = momentum * v + g';  p -= lr * (nesterov ? g' + momentum * v : v), g' = g + wd * p.
// With momentum, PyTorch starts v at g on the first step; v starts at zero here, which gives
// the same first step (0 * momentum + g).
Tensor SGD::update(const Tensor& p, const Tensor& g0, std::vector<Tensor>& slots, const Tensor&) {
  Tensor g = opts_.weight_decay != 0 ? add(g0, mul(p, opts_.weight_decay)) : g0;
  if (opts_.momentum != 0) {
    slots[0] = add(mul(slots[0], opts_.momentum), g);
    g = opts_.nesterov ? add(g, mul(slots[0], opts_.momentum)) : slots[0];
  }
  return sub(p, mul(g, opts_.lr));
}

bool SGD::fused_update(Tensor& p, const Tensor& g, std::vector<Tensor>& slots, double) {
  cpu::SgdParams a{opts_.lr, opts_.momentum, opts_.weight_decay, opts_.nesterov};
  KILN_DISPATCH_FLOAT(p.dtype(), "SGD", [&] {
    cpu::sgd_update<scalar_t>(p.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                              slots.empty() ? nullptr : slots[0].data_ptr<scalar_t>(), p.numel(),
                              a);
  });
  return true;
}

// ---- Adam / AdamW ---------------------------------------------------------------------------

AdamOptions Adam::checked(AdamOptions opts, const char* who) {
  check_lr(who, opts.lr);
  if (!(opts.beta1 >= 0 && opts.beta1 < 1 && opts.beta2 >= 0 && opts.beta2 < 1))
    fail(who, "betas must be in [0, 1), got ", opts.beta1, ", ", opts.beta2);
  if (!(opts.eps >= 0)) fail(who, "eps must be >= 0, got ", opts.eps);
  if (!opts.weight_decay) opts.weight_decay = opts.decoupled ? 0.01 : 0.0;
  if (!(*opts.weight_decay >= 0)) fail(who, "weight_decay must be >= 0, got ", *opts.weight_decay);
  return opts;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions opts, const char* who, bool graph)
    : Optimizer(std::move(params), who, graph),
      opts_(checked(opts, who)),
      wd_(*opts_.weight_decay) {}
Adam::Adam(std::vector<Tensor> params, AdamOptions opts)
    : Adam(std::move(params), opts, "Adam", false) {}
Adam::Adam(double lr, double b1, double b2, double eps)
    : Adam(AdamOptions{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps}) {}
Adam::Adam(AdamOptions opts) : Adam({}, opts, "Adam", true) {}
Adam::Adam(std::vector<Tensor> params, double lr, double b1, double b2, double eps)
    : Adam(std::move(params), AdamOptions{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps}) {}

std::vector<std::string> Adam::slot_names() const { return {"m", "v"}; }

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) +
// eps) AdamW also subtracts lr * wd * p; Adam adds wd * p to g instead.
Tensor Adam::update(const Tensor& p, const Tensor& g0, std::vector<Tensor>& slots,
                    const Tensor& t) {
  const auto& o = opts_;
  Tensor g = (!o.decoupled && wd_ != 0) ? add(g0, mul(p, wd_)) : g0;
  slots[0] = add(mul(slots[0], o.beta1), mul(g, 1 - o.beta1));
  slots[1] = add(mul(slots[1], o.beta2), mul(mul(g, g), 1 - o.beta2));
  // Bias corrections as tensors of the step, so a graph computes them per run.
  Tensor bc1 = sub(1.0, pow(full_like(t, o.beta1), t));
  Tensor bc2 = sub(1.0, pow(full_like(t, o.beta2), t));
  Tensor mhat = div(slots[0], cast(bc1, p.dtype()));
  Tensor vhat = div(slots[1], cast(bc2, p.dtype()));
  Tensor upd = div(mhat, add(sqrt(vhat), o.eps));
  if (o.decoupled && wd_ != 0) upd = add(upd, mul(p, wd_));
  return sub(p, mul(upd, o.lr));
}

bool Adam::fused_update(Tensor& p, const Tensor& g, std::vector<Tensor>& slots, double t) {
  const auto& o = opts_;
  cpu::AdamParams a{o.lr,
                    o.beta1,
                    o.beta2,
                    o.eps,
                    wd_,
                    o.decoupled,
                    1.0 - std::pow(o.beta1, t),
                    1.0 - std::pow(o.beta2, t)};
  KILN_DISPATCH_FLOAT(p.dtype(), "Adam", [&] {
    cpu::adam_update<scalar_t>(p.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                               slots[0].data_ptr<scalar_t>(), slots[1].data_ptr<scalar_t>(),
                               p.numel(), a);
  });
  return true;
}

namespace {
AdamOptions adamw_options(AdamOptions opts) {
  opts.decoupled = true;
  return opts;
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamOptions opts)
    : Adam(std::move(params), adamw_options(opts), "AdamW", false) {}
AdamW::AdamW(AdamOptions opts) : Adam({}, adamw_options(opts), "AdamW", true) {}
AdamW::AdamW(std::vector<Tensor> params, double lr, double weight_decay)
    : AdamW(std::move(params), AdamOptions{.lr = lr, .weight_decay = weight_decay}) {}

}  // namespace kiln::optim

// ---- RMSprop --------------------------------------------------------------------------------

namespace kiln::optim {

RMSpropOptions RMSprop::checked(RMSpropOptions opts) {
  check_lr("RMSprop", opts.lr);
  if (!(opts.alpha >= 0 && opts.alpha < 1))
    fail("RMSprop", "alpha must be in [0, 1), got ", opts.alpha);
  if (!(opts.eps >= 0)) fail("RMSprop", "eps must be >= 0, got ", opts.eps);
  if (!(opts.momentum >= 0)) fail("RMSprop", "momentum must be >= 0, got ", opts.momentum);
  if (!(opts.weight_decay >= 0))
    fail("RMSprop", "weight_decay must be >= 0, got ", opts.weight_decay);
  return opts;
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions opts)
    : Optimizer(std::move(params), "RMSprop", false), opts_(checked(opts)) {}
RMSprop::RMSprop(RMSpropOptions opts) : Optimizer({}, "RMSprop", true), opts_(checked(opts)) {}
RMSprop::RMSprop(std::vector<Tensor> params, double lr, double alpha, double eps)
    : RMSprop(std::move(params), RMSpropOptions{.lr = lr, .alpha = alpha, .eps = eps}) {}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> n{"square_avg"};
  if (opts_.momentum > 0) n.push_back("momentum_buffer");
  if (opts_.centered) n.push_back("grad_avg");
  return n;
}

// torch.optim.RMSprop: g' = g + wd p;  s = alpha s + (1 - alpha) g'^2;  centered: a = alpha a +
// (1 - alpha) g', d = sqrt(s - a^2) + eps, else d = sqrt(s) + eps;  momentum: b = mu b + g'/d,
// p -= lr b;  else p -= lr g'/d.
Tensor RMSprop::update(const Tensor& p, const Tensor& g0, std::vector<Tensor>& slots,
                       const Tensor&) {
  const auto& o = opts_;
  const Tensor g = o.weight_decay != 0 ? add(g0, mul(p, o.weight_decay)) : g0;
  slots[0] = add(mul(slots[0], o.alpha), mul(mul(g, g), 1 - o.alpha));
  Tensor var = slots[0];
  if (o.centered) {
    const size_t k = o.momentum > 0 ? 2 : 1;
    slots[k] = add(mul(slots[k], o.alpha), mul(g, 1 - o.alpha));
    var = sub(var, mul(slots[k], slots[k]));
  }
  const Tensor step = div(g, add(sqrt(var), o.eps));
  if (o.momentum > 0) {
    slots[1] = add(mul(slots[1], o.momentum), step);
    return sub(p, mul(slots[1], o.lr));
  }
  return sub(p, mul(step, o.lr));
}

}  // namespace kiln::optim
