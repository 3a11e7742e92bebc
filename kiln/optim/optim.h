// Optimizers that work both ways. Eagerly (torch.optim): construct with the parameters, then
// zero_grad() / backward() / step(). In a graph (TF1 tf.train): construct with hyperparameters
// only and call minimize(loss), which adds gradients() and assign nodes and returns one node
// whose run performs a training step; optimizer slots are graph variables.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// Unset: torch.optim's defaults, 0 for Adam and 0.01 for AdamW; 0 switches decay off in both.
  std::optional<double> weight_decay{};
  /// true: decoupled weight decay (AdamW); false: L2 added to the gradient (Adam).
  bool decoupled = false;
};

struct RMSpropOptions {
  double lr = 0.01;
  double alpha = 0.99;  ///< decay of the squared-gradient average
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  /// Normalize by the gradient's estimated variance (mean of g^2 minus the squared mean of g).
  bool centered = false;
};

/// Ordered name -> tensor pairs of an optimizer's state (see Optimizer::state_dict).
using OptimizerState = std::vector<std::pair<std::string, Tensor>>;

/// Common parts: parameter list, zero_grad, state, and the graph-mode driver.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Eager: one update from each parameter's .grad() (parameters without a gradient are skipped).
  void step();
  /// Eager: drops every parameter's gradient.
  void zero_grad();
  /// Graph: adds the update for `var_list` (default: every trainable variable the loss depends
  /// on) and returns one node that performs it when run.
  Tensor minimize(const Tensor& loss, const std::vector<Tensor>& var_list = {});
  const std::vector<Tensor>& params() const { return params_; }
  /// The learning rate the next step() uses (what schedules in kiln/optim/schedule.h adjust).
  /// In a graph, minimize() bakes the rate in when it is called; set_lr changes later eager
  /// steps and later minimize() calls, not nodes already built.
  virtual double lr() const = 0;
  /// Raises kiln::Error unless lr >= 0 (NaN included).
  virtual void set_lr(double lr) = 0;
  /// Eager state to resume training from (torch.optim's state_dict, flattened): "step" (float64
  /// scalar, the steps taken), "lr" (float64 scalar) and "state.<i>.<slot>" per parameter i
  /// (e.g. "state.0.m", "state.0.v" for Adam). Copies: later steps do not change them. Empty
  /// slots before the first step, as torch. Saved with io::save_safetensors like a model's.
  OptimizerState state_dict() const;
  /// Restores what state_dict() gave, for the same parameters in the same order (each slot's
  /// shape and dtype must match its parameter's, and names must be exactly this optimizer's);
  /// on any mismatch raises kiln::Error and changes nothing.
  void load_state_dict(const OptimizerState& state);

 protected:
  /// Eager form (graph = false): `params` must be non-empty (as torch.optim), each a concrete
  /// leaf that requires grad. Graph form: no parameters; minimize() finds the variables. `who`
  /// names the optimizer in errors.
  Optimizer(std::vector<Tensor> params, const char* who, bool graph);
  static void check_lr(const char* who, double lr);
  /// Computes the new value of parameter i from its gradient, reading and returning its slot
  /// tensors (same order as make_slots). Written in Kiln ops, so it serves both modes.
  virtual Tensor update(const Tensor& p, const Tensor& g, std::vector<Tensor>& slots,
                        const Tensor& step) = 0;
  virtual std::vector<std::string> slot_names() const = 0;
  /// The same update written into p and its slots in one pass (eager step() only), called when
  /// fused_ok(); `t` is the step number (1 for the first step). Returns false when the
  /// optimizer has none (the default), and step() runs update() instead.
  virtual bool fused_update(Tensor& p, const Tensor& g, std::vector<Tensor>& slots, double t);
  /// Whether p, g and the slots suit fused_update: concrete, contiguous (g may be strided: it
  /// is copied), float32/float64, one shape and dtype, no aliasing.
  static bool fused_ok(const Tensor& p, const Tensor& g, const std::vector<Tensor>& slots);
  std::vector<Tensor> params_;
  std::vector<std::vector<Tensor>> slots_;  // eager state per parameter
  Tensor step_;                             // eager step counter (float64 scalar)
};

class SGD : public Optimizer {
 public:
  /// Eager form: `SGD(model.parameters(), 0.5)` as torch.optim.SGD(params, lr, momentum).
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0);
  SGD(std::vector<Tensor> params, SGDOptions opts);
  /// Graph form (`SGD(0.5).minimize(loss)`).
  explicit SGD(double lr, double momentum = 0.0);
  explicit SGD(SGDOptions opts);
  double lr() const override { return opts_.lr; }
  void set_lr(double lr) override {
    check_lr("SGD", lr);
    opts_.lr = lr;
  }

 protected:
  Tensor update(const Tensor& p, const Tensor& g, std::vector<Tensor>& slots,
                const Tensor& step) override;
  std::vector<std::string> slot_names() const override;
  bool fused_update(Tensor& p, const Tensor& g, std::vector<Tensor>& slots, double t) override;

 private:
  static SGDOptions checked(SGDOptions opts);
  SGDOptions opts_;
};

class Adam : public Optimizer {
 public:
  /// torch.optim.Adam(params, lr, betas, eps).
  Adam(std::vector<Tensor> params, double lr, double beta1 = 0.9, double beta2 = 0.999,
       double eps = 1e-8);
  Adam(std::vector<Tensor> params, AdamOptions opts);
  explicit Adam(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8);
  explicit Adam(AdamOptions opts);
  double lr() const override { return opts_.lr; }
  void set_lr(double lr) override {
    check_lr(opts_.decoupled ? "AdamW" : "Adam", lr);
    opts_.lr = lr;
  }

 protected:
  Tensor update(const Tensor& p, const Tensor& g, std::vector<Tensor>& slots,
                const Tensor& step) override;
  std::vector<std::string> slot_names() const override;
  bool fused_update(Tensor& p, const Tensor& g, std::vector<Tensor>& slots, double t) override;
  /// `who` names the optimizer (Adam or AdamW) in errors; empty params: the graph form.
  Adam(std::vector<Tensor> params, AdamOptions opts, const char* who, bool graph);

 private:
  static AdamOptions checked(AdamOptions opts, const char* who);
  AdamOptions opts_;
  double wd_;  // opts_.weight_decay resolved
};

/// Adam with decoupled weight decay.
class AdamW : public Adam {
 public:
  /// torch.optim.AdamW(params, lr, weight_decay = 0.01).
  AdamW(std::vector<Tensor> params, double lr, double weight_decay = 0.01);
  AdamW(std::vector<Tensor> params, AdamOptions opts);
  explicit AdamW(AdamOptions opts);
};

/// torch.optim.RMSprop: divides the gradient by a running root mean square of recent gradients
/// (optionally centered), with optional momentum and L2 weight decay.
class RMSprop : public Optimizer {
 public:
  /// torch.optim.RMSprop(params, lr, alpha, eps).
  RMSprop(std::vector<Tensor> params, double lr, double alpha = 0.99, double eps = 1e-8);
  RMSprop(std::vector<Tensor> params, RMSpropOptions opts);
  explicit RMSprop(RMSpropOptions opts);
  double lr() const override { return opts_.lr; }
  void set_lr(double lr) override {
    check_lr("RMSprop", lr);
    opts_.lr = lr;
  }

 protected:
  Tensor update(const Tensor& p, const Tensor& g, std::vector<Tensor>& slots,
                const Tensor& step) override;
  std::vector<std::string> slot_names() const override;

 private:
  static RMSpropOptions checked(RMSpropOptions opts);
  RMSpropOptions opts_;
};

}  // namespace kiln::optim
