// nn::Module: the base of every layer (torch.nn.Module): named parameters, buffers and
// children, train/eval, state_dict/load_state_dict, and ParameterSwap, which runs a module on
// tensors passed in from outside (torch.func.functional_call) so that a jitted training step can
// take the parameters as arguments instead of baking them in as constants.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {

/// Gives a buffer a new value (BatchNorm's running statistics). Eagerly a plain assignment.
/// Under a jit trace the new value is symbolic; the installed hook (kiln/jit) makes it an extra
/// output of the compiled function, which writes it into the buffer on every call, and puts the
/// buffer's concrete value back when the trace ends: a module never keeps a traced value.
void assign_buffer(Tensor& slot, const Tensor& value);
/// Returns true when it took the write. Thread-local; returns the previous hook.
using BufferWriteHook = bool (*)(Tensor& slot, const Tensor& value);
BufferWriteHook set_buffer_write_hook(BufferWriteHook h);

/// Ordered name -> tensor pairs ("fc1.weight"), as PyTorch's state_dict.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Every parameter, this module's first, then each child's in registration order; a tensor
  /// held twice (a module shared by two parents, or a weight tied across two slots) is listed
  /// once, under its first name, as torch's parameters() (an optimizer would otherwise update it
  /// twice per step).
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  /// Non-trainable state (running statistics), same order rules.
  std::vector<Tensor> buffers() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  /// Sets training mode here and in every descendant.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Drops the gradient of every parameter.
  void zero_grad();
  /// Parameters then buffers (those that are set), by dotted name; a shared module's under
  /// every name it has (as torch's state_dict()).
  StateDict state_dict() const;
  /// Copies values in by name. Checks every name, shape and dtype first and changes nothing
  /// when any is wrong (`strict`: the names must match exactly).
  void load_state_dict(const StateDict& sd, bool strict = true);
  /// Number of parameter elements.
  int64_t num_parameters() const;
  /// Casts every floating parameter and buffer to `dtype` (torch's module.double()); integer
  /// buffers (BatchNorm's num_batches_tracked) are left as they are. Parameters stay leaves that
  /// require grad.
  void to(DType dtype);
  /// The class name printers and errors use ("Linear").
  virtual std::string type_name() const { return "Module"; }

  /// Handles to the parameter/buffer members, in parameters()/buffers() order: per entry every
  /// member that holds it (more than one where a module is shared or a weight tied), so that a
  /// replacement (ParameterSwap, to()) keeps the sharing.
  std::vector<std::vector<Tensor*>> parameter_slots();
  std::vector<std::vector<Tensor*>> buffer_slots();

 protected:
  /// Registers a member tensor as a parameter; sets requires_grad on it.
  void register_parameter(const std::string& name, Tensor* slot);
  void register_buffer(const std::string& name, Tensor* slot);
  void register_module(const std::string& name, Module* child);

 private:
  /// Whether m is this module or one of its descendants.
  bool contains(const Module* m) const;
  void collect(const std::string& prefix, bool params,
               std::vector<std::pair<std::string, Tensor*>>& out) const;
  /// collect() from here grouped by tensor: (first name, every slot holding that tensor).
  std::vector<std::pair<std::string, std::vector<Tensor*>>> slot_groups(bool params) const;
  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

/// A module with one input and one output (what Sequential chains).
class Layer : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

/// Runs a module on other tensors for the guard's lifetime: parameters (and, if given, buffers)
/// are replaced by `params`/`buffers` in parameters()/buffers() order and restored on
/// destruction. Buffers a module reassigns while swapped (BatchNorm's running stats) can be read
/// with module.buffers() before the guard ends, which is how a jitted step returns them.
class ParameterSwap {
 public:
  ParameterSwap(Module& m, const std::vector<Tensor>& params,
                const std::vector<Tensor>& buffers = {});
  ~ParameterSwap();
  ParameterSwap(const ParameterSwap&) = delete;
  ParameterSwap& operator=(const ParameterSwap&) = delete;

 private:
  std::vector<Tensor*> slots_;
  std::vector<Tensor> saved_;
};

}  // namespace kiln::nn
