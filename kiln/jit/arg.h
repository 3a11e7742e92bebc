// A jitted call's flattened arguments under the JIT engine's names (namespace
// kiln::detail::jit_engine): the public JitArg and JitCallable::Fn of jit.h as the engine's
// files, kiln::onnx's save_jit and tests of internals call them. Internal.
#pragma once
#include "kiln/jit/jit.h"

namespace kiln::detail::jit_engine {

using Arg = JitArg;
/// The function a call runs: it takes the flattened arguments and returns the flat outputs.
using TraceFn = JitCallable::Fn;

template <typename T>
Arg to_arg(const T& x) {
  return Arg(x);
}

}  // namespace kiln::detail::jit_engine
