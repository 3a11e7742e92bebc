// In-place writes: Tensor::copy_ and fill_, and op_util::write_in_place, which runs an op out
// of place and writes its result into the target, with autograd giving the target (and the base
// it views) a new history.
#include <algorithm>
#include <cstring>

#include "kiln/ops/op_util.h"
#include "kiln/ops/traced_write.h"

using namespace kiln::detail;

namespace kiln {

namespace detail {
namespace {
thread_local TracedWriteHook t_traced_write = nullptr;
}
TracedWriteHook traced_write_hook() { return t_traced_write; }
TracedWriteHook set_traced_write_hook(TracedWriteHook h) {
  TracedWriteHook p = t_traced_write;
  t_traced_write = h;
  return p;
}
}  // namespace detail

namespace {
// Whether t is a view of a tensor that requires grad (a write into t then changes a value with
// history, even when t's own identity predates that history).
bool base_requires_grad(const Tensor& t) {
  const auto& b = t.impl()->view_base;
  return b && b->autograd && b->autograd->requires_grad;
}

struct CopyInto {
  const Tensor* src;
  Tensor* dst;
};
void copy_into(void* ctx) {
  auto* c = static_cast<CopyInto*>(ctx);
  NoGradGuard ng;
  op_util::copy_cast_kernel(*c->src, *c->dst);
  c->dst->impl()->storage->bump_version();
}
}  // namespace

namespace detail::op_util {
// With autograd: `r` (computed out of place) becomes `self`'s value and history; see
// engine.cpp's inplace writer (snapshots, then the write, then the new histories).
void write_result(const char* name, Tensor& self, const Tensor& r) {
  if (!inplace_writer()) fail(name, "internal: autograd is not linked in");
  CopyInto c{&r, &self};
  inplace_writer()(name, self, r, &copy_into, &c);
}
}  // namespace detail::op_util

Tensor& Tensor::copy_(const Tensor& src) {
  check_concrete("copy_");
  if (!src.defined()) fail("copy_", "source is undefined");
  if (!broadcastable_to(src.shape(), shape()))
    fail("copy_", "source shape ", src.shape(), " does not broadcast to ", shape());
  // Under a JIT trace the tracer records the write (kiln/ops/traced_write.h).
  if (detail::TracedWriteHook h = detail::traced_write_hook())
    if (h(*this, kiln::expand(kiln::cast(src, dtype()), shape()))) return *this;
  Tensor s = src.is_concrete() ? src : src.host_value("copy_", std::source_location::current());
  if (grad_mode_enabled() && (requires_grad() || s.requires_grad() || base_requires_grad(*this))) {
    // torch: a leaf that requires grad cannot change under autograd.
    if (requires_grad() && is_leaf())
      fail("copy_", "a leaf tensor that requires grad (shape ", shape(),
           ") cannot be written in place in grad mode; wrap the write in NoGradGuard");
    // The source, cast and broadcast, as a fresh recorded value (its gradient flows back).
    Tensor r = kiln::clone(kiln::expand(kiln::cast(s, dtype()), shape()));
    op_util::write_result("copy_", *this, r);
    return *this;
  }
  // Copy through a temporary when the source overlaps this tensor's storage.
  if (s.shares_storage(*this)) s = raw_contiguous_copy(s);
  op_util::copy_cast_kernel(s, *this);
  impl_->storage->bump_version();
  return *this;
}

Tensor& Tensor::fill_(double v) { return copy_(scalar_tensor(v, dtype())); }
Tensor& Tensor::zero_() { return fill_(0.0); }

namespace detail::op_util {

// Whether a result of dtype r may be written into a tensor of dtype s (torch's can_cast for
// in-place ops: no float into an integer tensor, nothing but bool into a bool one).
static bool castable_into(DType r, DType s) {
  if (r == s || is_floating(s)) return true;
  if (s == Bool) return false;
  return !is_floating(r);
}

// Undefined or dead operands refuse the write: a tensor cannot turn dead in place, and a dead
// one has no buffer to write.
static void check_operands(const char* name, const Tensor& self, std::span<const Tensor> inputs) {
  if (!self.defined()) fail(name, "the tensor to write into is undefined");
  for (const auto& t : inputs)
    if (!t.defined()) fail(name, "operand is undefined (tensor shape ", self.shape(), ")");
  if (self.is_dead())
    fail(name, "the tensor to write into (", self.dtype(), self.shape(),
         ") is dead: it lies on the untaken side of an eager switch_");
  for (const auto& t : inputs)
    if (t.is_dead())
      fail(name, "an operand (", t.dtype(), t.shape(),
           ") is dead: it lies on the untaken side of an eager switch_");
}

// With autograd the op runs out of place and its result becomes self's value and history.
static void write_recorded(const char* name, Tensor& self, const OpDef& op,
                           std::span<const Tensor> inputs, const Attrs& attrs) {
  // torch's rule: a leaf that requires grad cannot change under autograd (its gradient would
  // belong to a value that no longer exists). Views are written through (their base gets a
  // new history; see engine.cpp).
  if (self.requires_grad() && self.is_leaf())
    fail(name, "a leaf tensor that requires grad (shape ", self.shape(),
         ") cannot be modified in place in grad mode; use ", op.name,
         "() or wrap the update in NoGradGuard");
  if (!inputs[0].is_same(self))
    fail(name, "with autograd the operands must have the tensor's dtype ", self.dtype(), " (got ",
         inputs[0].dtype(), "); use ", op.name, "()");
  Tensor r;
  try {
    r = call1(op, inputs, attrs);
  } catch (const Error& e) {
    fail(name, e.what());
  }
  if (r.shape() != self.shape())
    fail(name, "result of shape ", r.shape(), " does not fit the tensor of shape ", self.shape(),
         " it would be written into");
  if (r.dtype() != self.dtype())
    fail(name, "result of dtype ", r.dtype(), " cannot be written into a tensor of dtype ",
         self.dtype(), " (shape ", self.shape(), ")");
  write_result(name, self, r);
}

// Without autograd: the op's inference checks the operands, then its kernel writes into self
// directly where it can, else through a temporary.
static void write_unrecorded(const char* name, Tensor& self, const OpDef& op,
                             std::span<const Tensor> inputs, const Attrs& attrs) {
  NoGradGuard ng;
  MetaList metas;
  try {
    metas = with_attr_check(op, attrs, [&] { return op.infer(inputs, attrs); });
  } catch (const Error& e) {  // the out-of-place op's complaint, under the in-place name
    fail(name, e.what());
  }
  if (metas.size() != 1) fail(name, "internal: ", op.name, " has ", metas.size(), " outputs");
  const TensorMeta& m = metas[0];
  if (m.shape != self.shape()) {
    std::ostringstream os;
    for (size_t k = 1; k < inputs.size(); ++k) os << (k > 1 ? ", " : "") << inputs[k].shape();
    fail(name, "result of shape ", m.shape, " does not fit the tensor of shape ", self.shape(),
         " it would be written into (operand shapes ", os.str(), ")");
  }
  if (!castable_into(m.dtype, self.dtype()))
    fail(name, "result of dtype ", m.dtype, " cannot be written into a tensor of dtype ",
         self.dtype(), " (shape ", self.shape(), ")");
  // Straight into self: its own buffer is input 0 with the output's layout, and no other operand
  // overlaps it except as self itself (x.add_(x) reads and writes each element in one place).
  bool direct = !op.view && !op.contiguous_inputs && self.is_contiguous() &&
                m.dtype == self.dtype() && inputs[0].is_same(self);
  for (size_t k = 1; direct && k < inputs.size(); ++k)
    direct = inputs[k].is_same(self) || !inputs[k].shares_storage(self);
  if (direct) {
    Tensor out = self;
    invoke_kernel(op, inputs, std::span<Tensor>(&out, 1), attrs);
  } else {
    Tensor r = run_kernel(op, inputs, attrs)[0];
    op_util::copy_cast_kernel(r, self);
  }
  self.impl()->storage->bump_version();
}

Tensor& write_in_place(const char* name, Tensor& self, const OpDef& op,
                       std::span<const Tensor> inputs, const Attrs& attrs) {
  check_operands(name, self, inputs);
  bool symbolic = self.is_symbolic() || capturing();
  for (const auto& t : inputs) symbolic = symbolic || t.is_symbolic();
  // Under a JIT trace the tracer records a write into a concrete tensor (traced_write.h).
  if (symbolic && !self.is_symbolic())
    if (TracedWriteHook h = traced_write_hook()) {
      Tensor r = call1(op, inputs, attrs);
      if (h(self, r)) return self;
      symbolic = !r.is_concrete();
    }
  if (symbolic)
    fail(name,
         "in-place ops are eager-only; in a graph or a jitted function write the "
         "out-of-place op and rebind (x = ",
         op.name, "(x, ...)), tensor shape ", self.shape());
  bool other_grad = false;
  for (size_t k = 1; k < inputs.size(); ++k) other_grad = other_grad || inputs[k].requires_grad();
  if (grad_mode_enabled() && (self.requires_grad() || other_grad || base_requires_grad(self)))
    write_recorded(name, self, op, inputs, attrs);
  else
    write_unrecorded(name, self, op, inputs, attrs);
  return self;
}

}  // namespace detail::op_util

}  // namespace kiln
