// Samples for the elementwise family (kiln/ops/elementwise.cpp): arithmetic, math, comparisons,
// logic, where and activations. References are plain double math through ref_elementwise.
#include <cmath>

#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using F1 = std::function<double(double)>;
using F2 = std::function<double(double, double)>;
const std::vector<int> kNoNoncontig = {-1};  // none of the inputs (size-1 dims stay contiguous)

// Values in [lo, hi) kept at least `gap` away from every point in `avoid` (kinks, ties), so that
// central differences never straddle a kink.
Tensor uni_avoid(const Shape& s, uint64_t seed, double lo, double hi,
                 const std::vector<double>& avoid, double gap = 0.05) {
  auto v = vals(uni(s, seed, lo, hi));
  for (auto& x : v)
    for (double a : avoid)
      if (std::fabs(x - a) < gap) x = a + (x < a ? -gap : gap);
  return from_vals(v, s);
}

OpSample unary(const std::string& op, const std::string& name, std::function<Tensor()> make,
               std::function<Tensor(const Tensor&)> run, F1 ref, double tol32 = 1e-5) {
  OpSample s;
  s.ops = {op};
  s.name = name;
  s.inputs = [make] { return In{make()}; };
  s.run = [run](const In& in) { return run(in[0]); };
  s.reference = [ref](const In& in) {
    return ref_elementwise(in, [ref](const std::vector<double>& a) { return ref(a[0]); });
  };
  s.tol32 = tol32;
  return s;
}

OpSample binary(const std::string& op, const std::string& name, std::function<In()> make,
                std::function<Tensor(const Tensor&, const Tensor&)> run, F2 ref,
                bool differentiable = true, std::vector<int> noncontig = {}) {
  OpSample s;
  s.ops = {op};
  s.name = name;
  s.inputs = std::move(make);
  s.run = [run](const In& in) { return run(in[0], in[1]); };
  s.reference = [ref](const In& in) {
    return ref_elementwise(in, [ref](const std::vector<double>& a) { return ref(a[0], a[1]); });
  };
  s.differentiable = differentiable;
  s.noncontig_inputs = std::move(noncontig);
  return s;
}

// Same-shape, [3,1] x [1,4], 0-d x [2,3] (both orders) and [2,3,4] x [3,4] cases of one op.
// `lo0/hi0` and `lo1/hi1` are the value ranges of the two operands.
std::vector<OpSample> binary_family(const std::string& op,
                                    std::function<Tensor(const Tensor&, const Tensor&)> run, F2 ref,
                                    double lo0, double hi0, double lo1, double hi1, uint64_t seed) {
  std::vector<OpSample> v;
  v.push_back(binary(
      op, "same_shape",
      [=] {
        return In{uni({2, 3}, seed, lo0, hi0), uni({2, 3}, seed + 1, lo1, hi1)};
      },
      run, ref));
  v.push_back(binary(
      op, "broadcast_row_col",
      [=] {
        return In{uni({3, 1}, seed + 2, lo0, hi0), uni({1, 4}, seed + 3, lo1, hi1)};
      },
      run, ref, true, kNoNoncontig));
  v.push_back(binary(
      op, "broadcast_scalar_lhs",
      [=] {
        return In{uni({}, seed + 4, lo0, hi0), uni({2, 3}, seed + 5, lo1, hi1)};
      },
      run, ref));
  v.push_back(binary(
      op, "broadcast_scalar_rhs",
      [=] {
        return In{uni({2, 3}, seed + 6, lo0, hi0), uni({}, seed + 7, lo1, hi1)};
      },
      run, ref));
  v.push_back(binary(
      op, "broadcast_rank",
      [=] {
        return In{uni({2, 3, 4}, seed + 8, lo0, hi0), uni({3, 4}, seed + 9, lo1, hi1)};
      },
      run, ref));
  return v;
}

// Small integer-valued float64 data so that comparisons have ties in float32 and float64 alike.
Tensor ints_f64(const Shape& s, uint64_t seed, int64_t lo, int64_t hi) {
  manual_seed(seed);
  return randint(lo, hi, s).to(Float64);
}

Tensor bools(const std::vector<bool>& v, const Shape& s) { return tensor(v, s); }

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  auto append = [&v](std::vector<OpSample> more) {
    for (auto& s : more) v.push_back(std::move(s));
  };

  // ---- arithmetic -----------------------------------------------------------------------
  append(binary_family(
      "add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
      [](double a, double b) { return a + b; }, -2, 2, -2, 2, 100));
  append(binary_family(
      "sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
      [](double a, double b) { return a - b; }, -2, 2, -2, 2, 110));
  append(binary_family(
      "mul", [](const Tensor& a, const Tensor& b) { return a * b; },
      [](double a, double b) { return a * b; }, -2, 2, -2, 2, 120));
  append(binary_family(
      "div", [](const Tensor& a, const Tensor& b) { return a / b; },
      [](double a, double b) { return a / b; }, -2, 2, 0.5, 2, 130));
  append(binary_family(
      "pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
      [](double a, double b) { return std::pow(a, b); }, 0.5, 2, -1.5, 2, 140));
  append(binary_family(
      "maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
      [](double a, double b) { return std::max(a, b); }, -2, 2, -2, 2, 150));
  append(binary_family(
      "minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
      [](double a, double b) { return std::min(a, b); }, -2, 2, -2, 2, 160));

  // Host-scalar overloads (the scalar becomes a 0-d tensor of the tensor's dtype).
  v.push_back(unary(
      "add", "host_scalar",
      [] {
        return rnd({2, 3}, 1);
      },
      [](const Tensor& a) { return a + 1.5; }, [](double a) { return a + 1.5; }));
  v.push_back(unary(
      "sub", "host_scalar_lhs",
      [] {
        return rnd({2, 3}, 2);
      },
      [](const Tensor& a) { return 1.5 - a; }, [](double a) { return 1.5 - a; }));
  v.push_back(unary(
      "mul", "host_scalar",
      [] {
        return rnd({2, 3}, 3);
      },
      [](const Tensor& a) { return a * -2.5; }, [](double a) { return a * -2.5; }));
  v.push_back(unary(
      "div", "host_scalar_lhs",
      [] {
        return uni({2, 3}, 4, 0.5, 2);
      },
      [](const Tensor& a) { return 3.0 / a; }, [](double a) { return 3.0 / a; }));
  v.push_back(unary(
      "pow", "host_exponent",
      [] {
        return uni({2, 3}, 5, 0.5, 2);
      },
      [](const Tensor& a) { return pow(a, 2.5); }, [](double a) { return std::pow(a, 2.5); }));
  v.push_back(unary(
      "neg", "basic",
      [] {
        return rnd({2, 3}, 6);
      },
      [](const Tensor& a) { return -a; }, [](double a) { return -a; }));

  // ---- math -----------------------------------------------------------------------------
  v.push_back(unary(
      "exp", "basic",
      [] {
        return uni({3, 4}, 10, -2, 2);
      },
      [](const Tensor& a) { return exp(a); }, [](double a) { return std::exp(a); }));
  v.push_back(unary(
      "log", "positive",
      [] {
        return uni({3, 4}, 11, 0.2, 3);
      },
      [](const Tensor& a) { return log(a); }, [](double a) { return std::log(a); }));
  v.push_back(unary(
      "sqrt", "positive",
      [] {
        return uni({3, 4}, 12, 0.2, 3);
      },
      [](const Tensor& a) { return sqrt(a); }, [](double a) { return std::sqrt(a); }));
  v.push_back(unary(
      "rsqrt", "positive",
      [] {
        return uni({3, 4}, 13, 0.2, 3);
      },
      [](const Tensor& a) { return rsqrt(a); }, [](double a) { return 1.0 / std::sqrt(a); }));
  v.push_back(unary(
      "abs", "away_from_zero",
      [] {
        return uni_avoid({3, 4}, 14, -2, 2, {0});
      },
      [](const Tensor& a) { return abs(a); }, [](double a) { return std::fabs(a); }));
  v.push_back(unary(
      "sign", "away_from_zero",
      [] {
        return uni_avoid({3, 4}, 15, -2, 2, {0});
      },
      [](const Tensor& a) { return sign(a); },
      [](double a) { return a > 0 ? 1.0 : (a < 0 ? -1.0 : 0.0); }));
  v.push_back(unary(
      "erf", "basic",
      [] {
        return uni({3, 4}, 16, -2, 2);
      },
      [](const Tensor& a) { return erf(a); }, [](double a) { return std::erf(a); }));
  v.push_back(unary(
      "clamp", "both_sides",
      [] {
        return uni_avoid({3, 4}, 17, -2, 2, {-0.5, 1});
      },
      [](const Tensor& a) { return clamp(a, -0.5, 1.0); },
      [](double a) { return std::min(std::max(a, -0.5), 1.0); }));
  v.push_back(unary(
      "clamp", "one_sided",
      [] {
        return uni_avoid({3, 4}, 18, -2, 2, {0.25});
      },
      [](const Tensor& a) { return clamp(a, 0.25, INFINITY); },
      [](double a) { return std::max(a, 0.25); }));

  // ---- activations ----------------------------------------------------------------------
  v.push_back(unary(
      "relu", "away_from_zero",
      [] {
        return uni_avoid({3, 4}, 20, -2, 2, {0});
      },
      [](const Tensor& a) { return relu(a); }, [](double a) { return a > 0 ? a : 0.0; }));
  v.push_back(unary(
      "leaky_relu", "away_from_zero",
      [] {
        return uni_avoid({3, 4}, 21, -2, 2, {0});
      },
      [](const Tensor& a) { return leaky_relu(a, 0.1); },
      [](double a) { return a > 0 ? a : 0.1 * a; }));
  v.push_back(unary(
      "sigmoid", "basic",
      [] {
        return uni({3, 4}, 22, -4, 4);
      },
      [](const Tensor& a) { return sigmoid(a); },
      [](double a) { return 1.0 / (1.0 + std::exp(-a)); }));
  v.push_back(unary(
      "tanh", "basic",
      [] {
        return uni({3, 4}, 23, -3, 3);
      },
      [](const Tensor& a) { return tanh(a); }, [](double a) { return std::tanh(a); }));
  v.push_back(unary(
      "gelu", "erf",
      [] {
        return uni({3, 4}, 24, -3, 3);
      },
      [](const Tensor& a) { return gelu(a); },
      [](double a) { return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))); }));
  v.push_back(unary(
      "gelu", "tanh_approx",
      [] {
        return uni({3, 4}, 25, -3, 3);
      },
      [](const Tensor& a) { return gelu(a, true); },
      [](double a) {
        double k = std::sqrt(2.0 / M_PI);
        return 0.5 * a * (1 + std::tanh(k * (a + 0.044715 * a * a * a)));
      }));
  // gelu's one-pass gradient against the derivative written out; its gradcheck checks the
  // second-derivative rules.
  v.push_back(binary(
      "gelu_grad", "erf",
      [] {
        return In{uni({3, 4}, 41, -2, 2), uni({3, 4}, 42, -3, 3)};
      },
      [](const Tensor& g, const Tensor& x) { return gelu_grad(g, x); },
      [](double g, double x) {
        return g * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                    x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI));
      }));
  v.push_back(binary(
      "gelu_grad", "tanh_approx",
      [] {
        return In{uni({3, 4}, 43, -2, 2), uni({3, 4}, 44, -3, 3)};
      },
      [](const Tensor& g, const Tensor& x) { return gelu_grad(g, x, true); },
      [](double g, double x) {
        double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x));
      }));
  v.push_back(binary(
      "gelu_grad", "broadcast_grad",
      [] {
        return In{uni({3, 1}, 45, -2, 2), uni({3, 4}, 46, -3, 3)};
      },
      [](const Tensor& g, const Tensor& x) { return gelu_grad(g, x); },
      [](double g, double x) {
        return g * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                    x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI));
      },
      true, kNoNoncontig));
  v.push_back(unary(
      "silu", "basic",
      [] {
        return uni({3, 4}, 26, -4, 4);
      },
      [](const Tensor& a) { return silu(a); }, [](double a) { return a / (1.0 + std::exp(-a)); }));
  v.push_back(unary(
      "softplus", "default",
      [] {
        return uni({3, 4}, 27, -4, 4);
      },
      [](const Tensor& a) { return softplus(a); },
      [](double a) { return std::log1p(std::exp(a)); }));
  // beta 2, threshold 3: values on both sides of beta x = 3, kept away from it (the branches
  // differ there by ~exp(-3)/2 in value, so central differences must not straddle it).
  v.push_back(unary(
      "softplus", "beta_threshold",
      [] {
        return uni_avoid({4, 5}, 28, -3, 3, {1.5}, 0.1);
      },
      [](const Tensor& a) { return softplus(a, 2.0, 3.0); },
      [](double a) { return 2 * a > 3 ? a : std::log1p(std::exp(2 * a)) / 2; }));
  v.push_back(unary(
      "softplus", "large_inputs_stay_finite",
      [] {
        return uni({2, 3}, 29, 30, 90);
      },
      [](const Tensor& a) { return softplus(a); }, [](double a) { return a; }));
  v.push_back(unary(
      "elu", "default",
      [] {
        return uni_avoid({3, 4}, 30, -3, 3, {0});
      },
      [](const Tensor& a) { return elu(a); }, [](double a) { return a > 0 ? a : std::expm1(a); }));
  v.push_back(unary(
      "elu", "alpha",
      [] {
        return uni_avoid({3, 4}, 31, -3, 3, {0});
      },
      [](const Tensor& a) { return elu(a, 0.5); },
      [](double a) { return a > 0 ? a : 0.5 * std::expm1(a); }));
  v.push_back(unary(
      "sin", "basic",
      [] {
        return uni({3, 4}, 32, -4, 4);
      },
      [](const Tensor& a) { return sin(a); }, [](double a) { return std::sin(a); }));
  v.push_back(unary(
      "cos", "basic",
      [] {
        return uni({3, 4}, 33, -4, 4);
      },
      [](const Tensor& a) { return cos(a); }, [](double a) { return std::cos(a); }));
  v.push_back(unary(
      "log1p", "basic",
      [] {
        return uni({3, 4}, 34, -0.5, 3);
      },
      [](const Tensor& a) { return log1p(a); }, [](double a) { return std::log1p(a); }));
  // Near 0, where log(1 + x) would lose the digits the float32 tolerance asks for.
  v.push_back(unary(
      "log1p", "tiny",
      [] {
        return uni({2, 3}, 35, -1e-6, 1e-6);
      },
      [](const Tensor& a) { return log1p(a); }, [](double a) { return std::log1p(a); }));
  v.push_back(unary(
      "expm1", "basic",
      [] {
        return uni({3, 4}, 36, -2, 2);
      },
      [](const Tensor& a) { return expm1(a); }, [](double a) { return std::expm1(a); }));
  v.push_back(unary(
      "expm1", "tiny",
      [] {
        return uni({2, 3}, 37, -1e-6, 1e-6);
      },
      [](const Tensor& a) { return expm1(a); }, [](double a) { return std::expm1(a); }));

  // ---- comparisons (bool out; not differentiable) ----------------------------------------
  struct Cmp {
    const char* op;
    Tensor (*fn)(const Tensor&, const Tensor&);
    Tensor (*fs)(const Tensor&, double);
    bool (*ref)(double, double);
  };
  const Cmp cmps[] = {
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
       [](const Tensor& a, double b) { return lt(a, b); },
       [](double a, double b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
       [](const Tensor& a, double b) { return le(a, b); },
       [](double a, double b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
       [](const Tensor& a, double b) { return gt(a, b); },
       [](double a, double b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
       [](const Tensor& a, double b) { return ge(a, b); },
       [](double a, double b) { return a >= b; }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](const Tensor& a, double b) { return eq(a, b); },
       [](double a, double b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
       [](const Tensor& a, double b) { return ne(a, b); },
       [](double a, double b) { return a != b; }},
  };
  uint64_t seed = 300;
  for (const auto& c : cmps) {
    auto fn = c.fn;
    auto fs = c.fs;
    auto ref = c.ref;
    F2 r2 = [ref](double a, double b) { return ref(a, b) ? 1.0 : 0.0; };
    v.push_back(binary(
        c.op, "same_shape_with_ties",
        [seed] {
          return In{ints_f64({3, 4}, seed, 0, 3), ints_f64({3, 4}, seed + 1, 0, 3)};
        },
        fn, r2, false));
    v.push_back(binary(
        c.op, "broadcast_row_col",
        [seed] {
          return In{ints_f64({3, 1}, seed + 2, 0, 3), ints_f64({1, 4}, seed + 3, 0, 3)};
        },
        fn, r2, false, kNoNoncontig));
    v.push_back(binary(
        c.op, "int64_mixed_float",
        [seed] {
          manual_seed(seed + 4);
          return In{randint(0, 3, {2, 3}), ints_f64({2, 3}, seed + 5, 0, 3)};
        },
        fn, r2, false));
    OpSample hs = unary(
        c.op, "host_scalar",
        [seed] {
          return ints_f64({2, 3}, seed + 6, 0, 4);
        },
        [fs](const Tensor& a) { return fs(a, 2.0); },
        [ref](double a) { return ref(a, 2.0) ? 1.0 : 0.0; });
    hs.differentiable = false;
    v.push_back(std::move(hs));
    // A fractional host scalar next to an integer tensor must not be truncated (PyTorch:
    // torch.tensor([2]) < 2.5 is True).
    OpSample fr = unary(
        c.op, "int_tensor_fractional_scalar",
        [seed] {
          manual_seed(seed + 7);
          return randint(0, 5, {2, 3});
        },
        [fs](const Tensor& a) { return fs(a, 2.5); },
        [ref](double a) { return ref(a, 2.5) ? 1.0 : 0.0; });
    fr.differentiable = false;
    v.push_back(std::move(fr));
    seed += 10;
  }

  // ---- logic ----------------------------------------------------------------------------
  auto bool_pair = [] {
    return In{bools({true, false, true, false, true, true}, {2, 3}),
              bools({true, true, false, false, false, true}, {2, 3})};
  };
  auto bool_bcast = [] {
    return In{bools({true, false, true}, {3, 1}), bools({true, false, false, true}, {1, 4})};
  };
  v.push_back(binary(
      "logical_and", "same_shape", bool_pair, logical_and,
      [](double a, double b) { return (a != 0 && b != 0) ? 1.0 : 0.0; }, false));
  v.push_back(binary(
      "logical_and", "broadcast_row_col", bool_bcast, logical_and,
      [](double a, double b) { return (a != 0 && b != 0) ? 1.0 : 0.0; }, false));
  v.push_back(binary(
      "logical_or", "same_shape", bool_pair, logical_or,
      [](double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; }, false));
  v.push_back(binary(
      "logical_or", "broadcast_row_col", bool_bcast, logical_or,
      [](double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; }, false));
  {
    OpSample s = unary(
        "logical_not", "basic",
        [] {
          return bools({true, false, false, true, true, false}, {2, 3});
        },
        [](const Tensor& a) { return logical_not(a); },
        [](double a) { return a != 0 ? 0.0 : 1.0; });
    s.differentiable = false;
    v.push_back(std::move(s));
  }

  // ---- where ----------------------------------------------------------------------------
  auto where_ref = [](const In& in) {
    return ref_elementwise(in,
                           [](const std::vector<double>& a) { return a[0] != 0 ? a[1] : a[2]; });
  };
  {
    OpSample s;
    s.ops = {"where"};
    s.name = "same_shape";
    s.inputs = [] {
      return In{bools({true, false, true, false, false, true}, {2, 3}), rnd({2, 3}, 40),
                rnd({2, 3}, 41)};
    };
    s.run = [](const In& in) { return where(in[0], in[1], in[2]); };
    s.reference = where_ref;
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"where"};
    s.name = "broadcast_cond_col_a_row_b_scalar";
    s.inputs = [] { return In{bools({true, false, true}, {3, 1}), rnd({1, 4}, 42), rnd({}, 43)}; };
    s.run = [](const In& in) { return where(in[0], in[1], in[2]); };
    s.reference = where_ref;
    s.noncontig_inputs = kNoNoncontig;
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"where"};
    s.name = "broadcast_rank";
    s.inputs = [] {
      return In{bools({true, false, false, true}, {4}), rnd({2, 3, 4}, 44), rnd({3, 4}, 45)};
    };
    s.run = [](const In& in) { return where(in[0], in[1], in[2]); };
    s.reference = where_ref;
    v.push_back(std::move(s));
  }
  return v;
}

static SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
