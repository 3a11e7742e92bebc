// The compiled backward of a version that records gradients (version.h): gradients() of the
// traced forward in the same graph, run by a Session that recomputes the forward, and, saving
// activations, a backward graph of its own fed the forward values it reads. jit_call.cpp runs
// them. Internal to the JIT engine.
#pragma once
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/jit/version.h"

namespace kiln::detail::jit_engine {

/// Gives `v` its backward for the trace `g` with placeholders `phs` and outputs `outs` (the
/// function's own first, v.num_user_outputs of them: no gradient flows back through the state
/// it writes after them). With `save_activations` (JitOptions) it also builds the backward fed
/// the saved values (v.saved_ok); where that cannot be built the recomputing one serves.
void build_backward(Version& v, Graph& g, const std::vector<Tensor>& phs,
                    const std::vector<Tensor>& outs, bool save_activations);

}  // namespace kiln::detail::jit_engine
