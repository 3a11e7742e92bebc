// Handles to the ops that passes, the Session, the JIT and autograd rewrite or build by hand.
// Code outside kiln/ops refers to an op through its handle (or a trait), never by comparing
// names: a renamed or removed op then fails the registry test that resolves every handle,
// instead of silently skipping a rewrite.
#pragma once
#include <atomic>
#include <vector>

#include "kiln/registry/op_def.h"

namespace kiln::detail {

/// A registered op, looked up once by name on first use (ops register at static-init time).
class OpHandle {
 public:
  /// Joins the list all_op_handles() walks (handles are namespace-scope objects, built once).
  explicit OpHandle(const char* name);
  OpHandle(const OpHandle&) = delete;
  OpHandle& operator=(const OpHandle&) = delete;
  /// The op (kiln::Error naming it if no family registered it).
  const OpDef& def() const {
    const OpDef* d = def_.load(std::memory_order_acquire);
    return d ? *d : resolve();
  }
  const OpDef& operator*() const { return def(); }
  const OpDef* operator->() const { return &def(); }
  const char* name() const { return name_; }
  friend bool operator==(const OpDef* d, const OpHandle& h) { return d == &h.def(); }
  friend bool operator==(const OpDef& d, const OpHandle& h) { return &d == &h.def(); }

 private:
  friend std::vector<const OpHandle*> all_op_handles();
  const OpDef& resolve() const;
  const char* name_;
  const OpHandle* next_;
  mutable std::atomic<const OpDef*> def_{nullptr};
};

/// Every handle defined (the registry test resolves each one).
std::vector<const OpHandle*> all_op_handles();

namespace ops {
extern const OpHandle add, sub, mul, div, neg;
extern const OpHandle cast, clone, expand, expand_as, reshape, transpose, permute, cat;
extern const OpHandle matmul, addmm;
extern const OpHandle relu, conv2d, conv2d_grad_input, conv2d_grad_weight, conv2d_fused,
    conv2d_fused_add, max_pool2d, max_pool2d_blocked;
extern const OpHandle as_strided, as_strided_scatter;
extern const OpHandle sym_size;
}  // namespace ops

}  // namespace kiln::detail
