// The in-place write hook of a JIT trace: an in-place write into a concrete tensor (copy_, add_,
// ...) while kiln/jit traces goes to the tracer, which records it in the graph (the written
// tensor becomes an input and its new value an output copied back after each call, as torch's
// functionalization does) instead of writing once at trace time.
#pragma once

namespace kiln {
class Tensor;
namespace detail {

/// `self` (concrete) is about to get `value` (its full new value, of self's shape; symbolic or
/// concrete). Returns true when the tracer took the write over (self is left unwritten now).
using TracedWriteHook = bool (*)(Tensor& self, const Tensor& value);
/// This thread's hook (null when no trace runs); defined in kiln/ops/inplace_ops.cpp.
TracedWriteHook traced_write_hook();
/// Installs `h` for this thread; returns the previous hook.
TracedWriteHook set_traced_write_hook(TracedWriteHook h);

}  // namespace detail
}  // namespace kiln
