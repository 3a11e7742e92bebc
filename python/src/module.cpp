// The kiln._C extension module: registers every part (tensors, ops, autograd, graphs, nn, optim,
// io, jit) in dependency order. The pure-Python package python/kiln re-exports it.
#include "common.h"

namespace kiln::python {
void init_ops_conv_pool(py::module_& m, TensorClass& cls);  // ops_conv_pool.cpp
void init_torch_compat(py::module_& m, TensorClass& cls);   // torch_compat.cpp
}  // namespace kiln::python

PYBIND11_MODULE(_C, m) {
  using namespace kiln::python;
  m.doc() = "Kiln's C++ core (tensors, ops, autograd, graphs, jit); import kiln instead.";
  init_errors(m);
  init_interrupt(m);
  init_sym_int(m);
  TensorClass cls = init_tensor(m);
  init_indexing(cls);
  init_interop(m, cls);
  init_ops_math(m, cls);
  init_ops_nn(m, cls);
  init_ops_shape(m, cls);
  init_ops_math_losses(m, cls);
  init_ops_conv_pool(m, cls);
  init_ops_reduce_linalg(m, cls);
  init_autograd(m, cls);
  init_graph(m);
  init_nn(m);
  init_optim(m);
  init_io(m);
  init_jit(m);
  init_torch_compat(m, cls);
  // pybind11's argument errors become kiln.TypeError; before fast_ops, whose fast functions
  // fall back to the wrapped ones and stay unwrapped themselves (no extra call per add).
  init_binding_errors(m);
  init_fast_ops(m, cls);  // last: it wraps functions and methods defined above
}
