// Autocast (torch.autocast("cpu", torch.bfloat16)): inside an AutocastGuard scope, ops that gain
// from lower precision (matmul, addmm and linear, conv, attention) cast their float32 inputs to
// bfloat16 and run bfloat16 kernels, ops that need float32's precision (losses, prod) cast
// lower-precision inputs back to float32, and every other op runs in the promoted dtype of its
// inputs. Which is which is an OpDef field (AutocastPolicy), read by the dispatcher; the casts
// are ordinary cast ops, so autograd, graphs and the JIT record them and gradients reach float32
// parameters as float32.
#pragma once
#include "kiln/core/dtype.h"

namespace kiln {

/// Whether autocast is on for this thread, and the lower-precision dtype it casts to.
bool autocast_enabled();
DType autocast_dtype();

/// Turns autocast on (or, with enabled = false, off) for this thread until the guard's scope
/// ends; guards nest, and each restores what it found. Gradients (backward(), grad()) are always
/// computed with autocast off: each gradient rule runs in the dtypes its forward op saw.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  /// On (with the current dtype) or off.
  explicit AutocastGuard(bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

}  // namespace kiln
