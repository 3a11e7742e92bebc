// JitCallable (jit.h), the public face of the JIT engine: what a call does is the engine's
// (engine.h); each method here takes the engine's lock where it reads its state.
#include "kiln/jit/jit.h"

#include <algorithm>

#include "kiln/dispatch/dispatch.h"
#include "kiln/jit/engine.h"

namespace kiln {
namespace {

const char* kind_name(JitArg::Kind k) {
  switch (k) {
    case JitArg::kTensor:
      return "a Tensor";
    case JitArg::kTensorList:
      return "a std::vector<Tensor>";
    case JitArg::kScalar:
      return "a number";
    case JitArg::kBool:
      return "a bool";
  }
  return "?";
}

}  // namespace

JitCallable::JitCallable(JitOptions opts) : impl_(std::make_shared<Impl>(std::move(opts))) {}

std::vector<Tensor> JitCallable::call(const std::vector<JitArg>& args, const Fn& fn) {
  return impl_->call(args, fn);
}

std::string JitCallable::explain() const { return impl_->explain(); }

namespace {
uint32_t dim_bit(const Tensor& t, int64_t dim, const char* op) {
  if (!t.defined()) fail(op, "tensor is undefined");
  const int64_t d = wrap_dim(dim, t.shape(), op);
  if (d >= 32) fail(op, "dim ", d, " of shape ", t.shape(), ": only dims 0..31 can be marked");
  return 1u << d;
}
}  // namespace

void mark_dynamic(const Tensor& t, int64_t dim) {
  const uint32_t b = dim_bit(t, dim, "mark_dynamic");
  t.impl()->dynamic_marks |= b;
  t.impl()->static_marks &= ~b;
}

void mark_static(const Tensor& t, int64_t dim) {
  const uint32_t b = dim_bit(t, dim, "mark_static");
  t.impl()->static_marks |= b;
  t.impl()->dynamic_marks &= ~b;
}
std::string JitCallable::to_mermaid() const { return impl_->to_mermaid(); }
JitStats JitCallable::stats() const { return impl_->stats_now(); }

void JitCallable::check_arg(size_t i, JitArg::Kind got, JitArg::Kind want) const {
  const bool number = got == JitArg::kScalar || got == JitArg::kBool;
  const bool wants_number = want == JitArg::kScalar || want == JitArg::kBool;
  if (got == want || (number && wants_number)) return;
  // A runtime scalar reaches fn as a 0-d tensor.
  const auto& rs = impl_->opts.runtime_scalars;
  if (number && want == JitArg::kTensor &&
      std::find(rs.begin(), rs.end(), static_cast<int>(i)) != rs.end())
    return;
  fail("jit", "'", impl_->opts.name, "': argument ", i, " is ", kind_name(got),
       ", but the function's parameter ", i, " takes ", kind_name(want));
}

bool JitCallable::guards_accept(const std::vector<JitArg>& args) const {
  std::lock_guard<std::recursive_mutex> lk(impl_->mu);
  const detail::jit_engine::Key k = detail::jit_engine::key_of(args, impl_->opts.runtime_scalars);
  for (const auto& v : impl_->versions)
    if (detail::jit_engine::mismatch(v->key, k).empty()) return true;
  return false;
}

bool is_tracing() { return detail::capturing(); }

}  // namespace kiln
