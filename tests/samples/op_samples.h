// Registry-driven op tests: every registered OpDef needs at least one OpSample here. A sample
// builds float64 inputs, calls the public wrapper, and gives an independent float64 reference
// (naive loops), so one description drives forward checks (float32 and float64), gradcheck on
// contiguous / non-contiguous / broadcast layouts, and the "every op has a sample" check.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/ops/grad_ops.h"
#include "kiln/ops/handles.h"
#include "kiln/passes/passes.h"
#include "kiln/registry/op_def.h"

using namespace kiln::detail;

namespace kiln::testing {

struct OpSample {
  /// Registry op names this sample exercises (forward or through its gradient).
  std::vector<std::string> ops;
  /// Case label, e.g. "broadcast_row".
  std::string name;
  /// Inputs in float64 (integer inputs keep their dtype). Called fresh for each check.
  std::function<std::vector<Tensor>()> inputs;
  /// Runs the op through the public API.
  std::function<Tensor(const std::vector<Tensor>&)> run;
  /// Independent float64 reference computed with plain loops on to_vector() data; returns a
  /// Float64 tensor of the expected shape. Null only for ops whose output is random (dropout),
  /// which then need a `check` instead.
  std::function<Tensor(const std::vector<Tensor>&)> reference;
  /// Extra property check for samples without a reference (returns "" when fine).
  std::function<std::string(const std::vector<Tensor>& in, const Tensor& out)> check;
  /// Whether gradcheck applies (floating inputs only are perturbed).
  bool differentiable = true;
  /// Which input indices may be made non-contiguous for the layout check (by storing them
  /// transposed and transposing back); empty = all floating inputs of rank >= 2.
  std::vector<int> noncontig_inputs;
  /// The run is eager code around the op (it builds and runs a graph of its own, or checks
  /// aliasing of concrete buffers): the compiled modes of the mode-agreement suite skip it.
  bool eager_only = false;
  /// float32 tolerance relative to the reference.
  double tol32 = 1e-5;
  double gc_atol = 1e-5, gc_rtol = 1e-3;
};

std::vector<OpSample>& sample_registry();

struct SampleRegistrar {
  explicit SampleRegistrar(std::vector<OpSample> s) {
    for (auto& x : s) sample_registry().push_back(std::move(x));
  }
};

// ---- helpers for writing samples ----------------------------------------------------------

/// randn in float64, seeded by `seed`.
Tensor rnd(const Shape& s, uint64_t seed, double scale = 1.0);
/// Uniform in [lo, hi), float64.
Tensor uni(const Shape& s, uint64_t seed, double lo, double hi);
/// Applies f elementwise with NumPy broadcasting over float64 data of the inputs.
Tensor ref_elementwise(const std::vector<Tensor>& in,
                       const std::function<double(const std::vector<double>&)>& f);
/// Row-major float64 values of t.
std::vector<double> vals(const Tensor& t);
/// A Float64 tensor from values.
Tensor from_vals(const std::vector<double>& v, const Shape& s);

}  // namespace kiln::testing
