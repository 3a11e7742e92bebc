// Umbrella header: everything a Kiln user needs.
#pragma once
#include <iostream>  // tensors print with operator<<

#include "kiln/autograd/autograd.h"
#include "kiln/core/tensor.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/dispatch/profile.h"
#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"
#include "kiln/jit/jit.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_def.h"
#include "kiln/ops/ops.h"
