// The public API: everything a Kiln program is written with. Tensors and ops, autograd,
// Graph/Session with cond and while_loop (request_interrupt stops a long run), jit, nn, optim
// and io, in namespaces kiln, kiln::nn, kiln::optim, kiln::io and kiln::linalg. Internals (the
// dispatcher, the op registry, graph nodes, passes, the JIT engine) live in kiln::detail and the
// loops in kiln::cpu, behind headers this one does not include. The layers: docs/architecture.md.
#pragma once
#include <iostream>  // tensors print with operator<<

#include "kiln/autograd/autograd.h"
#include "kiln/core/cancellation.h"
#include "kiln/core/tensor.h"
#include "kiln/core/threads.h"
#include "kiln/dispatch/autocast.h"
#include "kiln/dispatch/grad_mode.h"
#include "kiln/dispatch/profiler.h"
#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"
#include "kiln/io/data_loader.h"
#include "kiln/io/idx.h"
#include "kiln/io/progress.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/text.h"
#include "kiln/jit/jit.h"
#include "kiln/nn/nn.h"
#include "kiln/ops/ops.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/optim.h"
#include "kiln/optim/schedule.h"
