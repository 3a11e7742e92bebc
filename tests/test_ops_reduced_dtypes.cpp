// Every OpSample on bfloat16 and float16 inputs: the floating inputs are rounded to the reduced
// dtype, and the op must run (natively or through the dispatcher's compute-in-float32 path), give
// an output of the reduced dtype where float32 inputs give float32, and agree with the float32 run
// on the same (rounded) values within what the dtype's rounding explains. The suite prints
// samples run and fails listing every sample that raised or disagreed.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <sstream>

#include "samples/op_samples.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

using In = std::vector<Tensor>;
constexpr uint64_t kSeed = 1234;

In with_floats_as(const In& in, DType dt) {
  In out;
  for (const auto& t : in) out.push_back(t.defined() && is_floating(t.dtype()) ? cast(t, dt) : t);
  return out;
}

// |got - want| within the dtype's relative precision of the output's scale: one rounding of the
// result, plus the roundings of the intermediates a composite keeps in the reduced dtype.
std::string compare(const Tensor& got, const Tensor& want, DType dt) {
  if (got.shape() != want.shape())
    return "shape " + got.shape().str() + " vs float32 " + want.shape().str();
  if (got.dtype() != want.dtype() && !(want.dtype() == Float32 && got.dtype() == dt))
    return std::string("dtype ") + dtype_name(got.dtype()) + " where float32 inputs give " +
           dtype_name(want.dtype());
  const double eps = dt == BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double x : w)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    // A value past the dtype's range overflows to inf in float16 only.
    if (std::isinf(g[i]) && dt == Float16 && std::fabs(w[i]) > 65504) continue;
    if (!(std::fabs(g[i] - w[i]) <= 16 * eps * (std::fabs(w[i]) + scale) + 1e-6)) {
      std::ostringstream o;
      o.precision(9);
      o << "element " << i << " is " << g[i] << ", float32 gives " << w[i];
      return o.str();
    }
  }
  return "";
}

TEST(ReducedDtypes, EverySampleRunsOnBFloat16AndFloat16) {
  int run = 0, compared = 0;
  std::vector<std::string> failures;
  for (const auto& s : sample_registry()) {
    if (!s.reference) continue;  // random outputs: nothing to compare
    for (DType dt : {BF16, Float16}) {
      const In base = s.inputs();
      bool has_float = false;
      for (const auto& t : base) has_float = has_float || (t.defined() && is_floating(t.dtype()));
      if (!has_float) continue;
      const std::string what = s.name + " (" + dtype_name(dt) + ")";
      const In reduced = with_floats_as(base, dt);
      In wide;
      for (const auto& t : reduced)
        wide.push_back(t.defined() && t.dtype() == dt ? cast(t, Float32) : t);
      Tensor want, got;
      try {
        manual_seed(kSeed);
        want = s.run(wide);
      } catch (const Error&) {
        continue;  // the float32 run refuses these inputs too (an error-path sample)
      }
      ++run;
      try {
        manual_seed(kSeed);
        got = s.run(reduced);
      } catch (const Error& e) {
        failures.push_back(what + ": raised " + e.what());
        continue;
      }
      if (!want.defined() || !got.defined()) continue;
      ++compared;
      std::string f = compare(got, want, dt);
      if (!f.empty()) failures.push_back(what + ": " + f);
    }
  }
  std::cout << "[reduced dtypes] " << run << " sample runs, " << compared << " compared, "
            << failures.size() << " failures\n";
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(compared, 100);
}

}  // namespace
