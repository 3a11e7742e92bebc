// Internal: the hooks that answer host reads (item, to_vector, bool) of symbolic tensors, which
// graph building and JIT tracing install. kiln/graph/node.h includes it for the graph and JIT
// layers; kiln.h does not reach it.
#pragma once
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::detail {

/// Hook that graph building and JIT tracing install to answer host reads of symbolic tensors
/// (in a graph: an error; under jit: a graph break that returns the concrete value). `where` is
/// the user's call site, `file:line` where C++ gives it.
using HostReadHook = Tensor (*)(const Tensor& t, const char* what, const std::string& where);
/// "function+0x2c in ./prog" for a return address: where a conversion or operator was called.
std::string call_site(const void* ret);
void set_host_read_hook(HostReadHook h);
/// A hook for this thread only, tried before the process-wide one (the JIT tracer installs it
/// while tracing to turn host reads into graph breaks). Returns the previous one.
HostReadHook set_thread_host_read_hook(HostReadHook h);

}  // namespace kiln::detail
