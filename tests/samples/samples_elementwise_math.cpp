// Samples for the ops of kiln/ops/elementwise_math.cpp, bitwise_ops.cpp, activation_piecewise.cpp
// and losses.cpp's binary_cross_entropy: rounding, fmod / remainder, trigonometric and
// hyperbolic functions, classification (isnan ...), nan_to_num, bitwise ops, lerp and the extra
// activations. References are plain double math through ref_elementwise.
#include <cmath>
#include <cstdint>

#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using F1 = std::function<double(double)>;
using F2 = std::function<double(double, double)>;

// Values in [lo, hi) kept at least `gap` away from the points in `avoid` (kinks, jumps).
Tensor uni_avoid(const Shape& s, uint64_t seed, double lo, double hi,
                 const std::vector<double>& avoid, double gap = 0.05) {
  auto v = vals(uni(s, seed, lo, hi));
  for (auto& x : v)
    for (double a : avoid)
      if (std::fabs(x - a) < gap) x = a + (x < a ? -gap : gap);
  return from_vals(v, s);
}
// Values kept away from integers and half-integers (the jumps of the rounding ops).
Tensor off_grid(const Shape& s, uint64_t seed, double lo, double hi) {
  auto v = vals(uni(s, seed, lo, hi));
  for (auto& x : v) {
    const double f = x * 2 - std::floor(x * 2);  // position within a half-unit cell
    if (f < 0.1) x += 0.05;
    if (f > 0.9) x -= 0.05;
  }
  return from_vals(v, s);
}

OpSample unary(const std::string& op, const std::string& name, std::function<Tensor()> make,
               std::function<Tensor(const Tensor&)> run, F1 ref, bool differentiable = true,
               double tol32 = 1e-5) {
  OpSample s;
  s.ops = {op};
  s.name = name;
  s.inputs = [make] { return In{make()}; };
  s.run = [run](const In& in) { return run(in[0]); };
  s.reference = [ref](const In& in) {
    return ref_elementwise(in, [ref](const std::vector<double>& a) { return ref(a[0]); });
  };
  s.differentiable = differentiable;
  s.tol32 = tol32;
  return s;
}
OpSample binary(const std::string& op, const std::string& name, std::function<In()> make,
                std::function<Tensor(const Tensor&, const Tensor&)> run, F2 ref,
                bool differentiable = true) {
  OpSample s;
  s.ops = {op};
  s.name = name;
  s.inputs = std::move(make);
  s.run = [run](const In& in) { return run(in[0], in[1]); };
  s.reference = [ref](const In& in) {
    return ref_elementwise(in, [ref](const std::vector<double>& a) { return ref(a[0], a[1]); });
  };
  s.differentiable = differentiable;
  return s;
}
Tensor ints(const Shape& s, uint64_t seed, int64_t lo, int64_t hi) {
  manual_seed(seed);
  return randint(lo, hi, s);
}

double round_half_even(double x) { return std::nearbyint(x); }
double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((b < 0) != (r < 0))) ? r + b : r;
}

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;

  // ---- rounding (zero gradients, checked away from the jumps) ----------------------------
  struct R {
    const char* op;
    Tensor (*f)(const Tensor&);
    double (*ref)(double);
  };
  const R rounds[] = {
      {"floor", [](const Tensor& a) { return floor(a); }, [](double x) { return std::floor(x); }},
      {"ceil", [](const Tensor& a) { return ceil(a); }, [](double x) { return std::ceil(x); }},
      {"trunc", [](const Tensor& a) { return trunc(a); }, [](double x) { return std::trunc(x); }},
      {"round", [](const Tensor& a) { return round(a); }, round_half_even},
      {"frac", [](const Tensor& a) { return frac(a); }, [](double x) { return x - std::trunc(x); }},
  };
  uint64_t seed = 5000;
  for (const R& r : rounds) {
    auto f = r.f;
    v.push_back(unary(
        r.op, "off_grid",
        [seed] {
          return off_grid({3, 4}, seed, -4, 4);
        },
        f, r.ref));
    // Ties (exact in float32): round goes to even; the others at and between integers.
    v.push_back(unary(
        r.op, "ties_and_integers",
        [] {
          return from_vals({0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, -3.0, 0.0, 4.5, -7.25, 7.75},
                           {2, 6});
        },
        f, r.ref, false));
    seed += 2;
  }
  v.push_back(unary(
      "round", "decimals_2",
      [] {
        return from_vals({1.234, -5.678, 0.125, 2.0}, {2, 2});
      },
      [](const Tensor& a) { return round(a, 2); },
      [](double x) { return std::nearbyint(x * 100) / 100; }, false));
  v.push_back(unary(
      "round", "decimals_minus_1",
      [] {
        return from_vals({15.0, 25.0, -34.0, 123.4}, {2, 2});
      },
      [](const Tensor& a) { return round(a, -1); },
      [](double x) { return std::nearbyint(x / 10) * 10; }, false));

  // ---- fmod / remainder (gradients in both operands, away from the jumps) --------------
  auto mod_in = [](uint64_t s) {
    return [s] {
      Tensor b = uni_avoid({2, 3}, s + 1, -2, 2, {0}, 0.6);
      auto av = vals(uni({2, 3}, s, -5, 5)), bv = vals(b);
      for (size_t i = 0; i < av.size(); ++i) {  // keep a / b away from integers
        double q = av[i] / bv[i], f = q - std::floor(q);
        if (f < 0.1 || f > 0.9) av[i] = (std::floor(q) + 0.5) * bv[i];
      }
      return In{from_vals(av, {2, 3}), b};
    };
  };
  v.push_back(binary(
      "fmod", "float", mod_in(5100), [](const Tensor& a, const Tensor& b) { return fmod(a, b); },
      [](double a, double b) { return std::fmod(a, b); }));
  v.push_back(binary(
      "remainder", "float", mod_in(5110),
      [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, py_mod));
  auto row_ok = [](uint64_t s) {  // b's first row against every row of a, away from jumps
    return [s] {
      Tensor b = uni_avoid({1, 3}, s + 1, -2, 2, {0}, 0.6);
      auto av = vals(uni({2, 3}, s, -5, 5)), bv = vals(b);
      for (size_t i = 0; i < av.size(); ++i) {
        double q = av[i] / bv[i % 3], f = q - std::floor(q);
        if (f < 0.1 || f > 0.9) av[i] = (std::floor(q) + 0.5) * bv[i % 3];
      }
      return In{from_vals(av, {2, 3}), b};
    };
  };
  v.push_back(binary(
      "fmod", "broadcast_row", row_ok(5140),
      [](const Tensor& a, const Tensor& b) { return fmod(a, b); },
      [](double a, double b) { return std::fmod(a, b); }));
  v.back().noncontig_inputs = {0};
  v.push_back(binary(
      "remainder", "broadcast_row", row_ok(5150),
      [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, py_mod));
  v.back().noncontig_inputs = {0};
  v.push_back(binary(
      "fmod", "int64",
      [] {
        return In{ints({2, 3}, 5120, -9, 9), ints({1, 3}, 5121, 1, 4)};
      },
      [](const Tensor& a, const Tensor& b) { return fmod(a, neg(b)); },
      [](double a, double b) { return std::fmod(a, -b); }, false));
  v.push_back(binary(
      "remainder", "int64",
      [] {
        return In{ints({2, 3}, 5130, -9, 9), ints({1, 3}, 5131, 1, 4)};
      },
      [](const Tensor& a, const Tensor& b) { return remainder(a, neg(b)); },
      [](double a, double b) { return py_mod(a, -b); }, false));

  // ---- powers, logs, trigonometric and hyperbolic functions ------------------------------
  struct U {
    const char* op;
    Tensor (*f)(const Tensor&);
    double (*ref)(double);
    double lo, hi;
  };
  const U us[] = {
      {"reciprocal", [](const Tensor& a) { return reciprocal(a); }, [](double x) { return 1 / x; },
       0.5, 3},
      {"square", [](const Tensor& a) { return square(a); }, [](double x) { return x * x; }, -3, 3},
      {"log2", [](const Tensor& a) { return log2(a); }, [](double x) { return std::log2(x); }, 0.2,
       4},
      {"log10", [](const Tensor& a) { return log10(a); }, [](double x) { return std::log10(x); },
       0.2, 4},
      {"exp2", [](const Tensor& a) { return exp2(a); }, [](double x) { return std::exp2(x); }, -3,
       3},
      {"tan", [](const Tensor& a) { return tan(a); }, [](double x) { return std::tan(x); }, -1.2,
       1.2},
      {"asin", [](const Tensor& a) { return asin(a); }, [](double x) { return std::asin(x); }, -0.9,
       0.9},
      {"acos", [](const Tensor& a) { return acos(a); }, [](double x) { return std::acos(x); }, -0.9,
       0.9},
      {"atan", [](const Tensor& a) { return atan(a); }, [](double x) { return std::atan(x); }, -4,
       4},
      {"sinh", [](const Tensor& a) { return sinh(a); }, [](double x) { return std::sinh(x); }, -3,
       3},
      {"cosh", [](const Tensor& a) { return cosh(a); }, [](double x) { return std::cosh(x); }, -3,
       3},
      {"asinh", [](const Tensor& a) { return asinh(a); }, [](double x) { return std::asinh(x); },
       -4, 4},
      {"acosh", [](const Tensor& a) { return acosh(a); }, [](double x) { return std::acosh(x); },
       1.2, 4},
      {"atanh", [](const Tensor& a) { return atanh(a); }, [](double x) { return std::atanh(x); },
       -0.9, 0.9},
  };
  seed = 5200;
  for (const U& u : us) {
    double lo = u.lo, hi = u.hi;
    v.push_back(unary(
        u.op, "basic",
        [=] {
          return uni({3, 4}, seed, lo, hi);
        },
        u.f, u.ref));
    ++seed;
  }
  v.push_back(unary(
      "square", "int64",
      [] {
        return ints({2, 3}, 5250, -5, 5);
      },
      [](const Tensor& a) { return square(a); }, [](double x) { return x * x; }, false));
  v.push_back(binary(
      "atan2", "all_quadrants",
      [] {
        return In{uni_avoid({2, 3}, 5260, -2, 2, {0}, 0.1),
                  uni_avoid({2, 3}, 5261, -2, 2, {0}, 0.1)};
      },
      [](const Tensor& a, const Tensor& b) { return atan2(a, b); },
      [](double a, double b) { return std::atan2(a, b); }));
  v.push_back(binary(
      "atan2", "broadcast_row_col",
      [] {
        return In{uni_avoid({3, 1}, 5262, -2, 2, {0}, 0.1),
                  uni_avoid({1, 4}, 5263, -2, 2, {0}, 0.1)};
      },
      [](const Tensor& a, const Tensor& b) { return atan2(a, b); },
      [](double a, double b) { return std::atan2(a, b); }));
  v.back().noncontig_inputs = {-1};  // size-1 dims stay contiguous

  // ---- classification, nan_to_num ---------------------------------------------------------
  auto specials = [] {
    return from_vals({NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.5, -2.0, 1e30}, {2, 4});
  };
  v.push_back(unary(
      "isnan", "specials", specials, [](const Tensor& a) { return isnan(a); },
      [](double x) { return std::isnan(x) ? 1.0 : 0.0; }, false));
  v.push_back(unary(
      "isinf", "specials", specials, [](const Tensor& a) { return isinf(a); },
      [](double x) { return std::isinf(x) ? 1.0 : 0.0; }, false));
  v.push_back(unary(
      "isfinite", "specials",
      [] {
        return from_vals({NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.5, -2.0, 1e30}, {2, 4});
      },
      [](const Tensor& a) { return isfinite(a); },
      [](double x) { return std::isfinite(x) ? 1.0 : 0.0; }, false));
  v.push_back(unary(
      "isnan", "int64",
      [] {
        return ints({2, 3}, 5300, -5, 5);
      },
      [](const Tensor& a) { return isnan(a); }, [](double) { return 0.0; }, false));
  v.push_back(unary(
      "nan_to_num", "specials",
      [] {
        return from_vals({NAN, INFINITY, -INFINITY, 0.0, 1.5, -2.0}, {2, 3});
      },
      [](const Tensor& a) { return nan_to_num(a, 0.5, 100.0, -100.0); },
      [](double x) {
        return std::isnan(x) ? 0.5 : (x == INFINITY ? 100.0 : (x == -INFINITY ? -100.0 : x));
      },
      false));
  v.push_back(unary(
      "nan_to_num", "finite",
      [] {
        return rnd({3, 4}, 5301);
      },
      [](const Tensor& a) { return nan_to_num(a); }, [](double x) { return x; }));

  // ---- logical_xor and bitwise ops (not differentiable) -----------------------------------
  v.push_back(binary(
      "logical_xor", "bool",
      [] {
        return In{tensor(std::vector<bool>{true, false, true, false, true, true}, {2, 3}),
                  tensor(std::vector<bool>{true, true, false, false, false, true}, {2, 3})};
      },
      [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); },
      [](double a, double b) { return (a != 0) != (b != 0) ? 1.0 : 0.0; }, false));
  v.push_back(binary(
      "logical_xor", "numbers",
      [] {
        return In{ints({2, 3}, 5310, -2, 2), ints({1, 3}, 5311, 0, 2)};
      },
      [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); },
      [](double a, double b) { return (a != 0) != (b != 0) ? 1.0 : 0.0; }, false));
  struct B {
    const char* op;
    Tensor (*f)(const Tensor&, const Tensor&);
    int64_t (*ref)(int64_t, int64_t);
    int64_t lo1, hi1;
  };
  const B bs[] = {
      {"bitwise_and", [](const Tensor& a, const Tensor& b) { return bitwise_and(a, b); },
       [](int64_t a, int64_t b) { return a & b; }, -50, 50},
      {"bitwise_or", [](const Tensor& a, const Tensor& b) { return bitwise_or(a, b); },
       [](int64_t a, int64_t b) { return a | b; }, -50, 50},
      {"bitwise_xor", [](const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); },
       [](int64_t a, int64_t b) { return a ^ b; }, -50, 50},
      {"bitwise_left_shift",
       [](const Tensor& a, const Tensor& b) { return bitwise_left_shift(a, b); },
       [](int64_t a, int64_t b) {
         return b >= 64 ? int64_t(0) : static_cast<int64_t>(static_cast<uint64_t>(a) << b);
       },
       0, 70},
      {"bitwise_right_shift",
       [](const Tensor& a, const Tensor& b) { return bitwise_right_shift(a, b); },
       [](int64_t a, int64_t b) { return b >= 64 ? (a < 0 ? int64_t(-1) : int64_t(0)) : a >> b; },
       0, 70},
  };
  seed = 5400;
  for (const B& b : bs) {
    auto ref = b.ref;
    int64_t lo1 = b.lo1, hi1 = b.hi1;
    v.push_back(binary(
        b.op, "int64",
        [=] {
          return In{ints({2, 3}, seed, -100, 100), ints({1, 3}, seed + 1, lo1, hi1)};
        },
        b.f,
        [ref](double x, double y) {
          return static_cast<double>(ref(static_cast<int64_t>(x), static_cast<int64_t>(y)));
        },
        false));
    seed += 2;
  }
  v.push_back(binary(
      "bitwise_and", "bool",
      [] {
        return In{tensor(std::vector<bool>{true, false, true, false}, {2, 2}),
                  tensor(std::vector<bool>{true, true, false, false}, {2, 2})};
      },
      [](const Tensor& a, const Tensor& b) { return bitwise_and(a, b); },
      [](double a, double b) { return (a != 0 && b != 0) ? 1.0 : 0.0; }, false));
  v.push_back(unary(
      "bitwise_not", "int64",
      [] {
        return ints({2, 3}, 5420, -100, 100);
      },
      [](const Tensor& a) { return bitwise_not(a); },
      [](double x) { return static_cast<double>(~static_cast<int64_t>(x)); }, false));
  v.push_back(unary(
      "bitwise_not", "bool",
      [] {
        return tensor(std::vector<bool>{true, false, false, true}, {2, 2});
      },
      [](const Tensor& a) { return bitwise_not(a); }, [](double x) { return x != 0 ? 0.0 : 1.0; },
      false));

  // ---- lerp ---------------------------------------------------------------------------------
  auto lerp_ref = [](const In& in) {
    return ref_elementwise(
        in, [](const std::vector<double>& a) { return a[0] + a[2] * (a[1] - a[0]); });
  };
  {
    OpSample s;
    s.ops = {"lerp"};
    s.name = "tensor_weight";
    s.inputs = [] {
      return In{rnd({2, 3}, 5500), rnd({2, 3}, 5501), uni({2, 3}, 5502, -0.5, 1.5)};
    };
    s.run = [](const In& in) { return lerp(in[0], in[1], in[2]); };
    s.reference = lerp_ref;
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"lerp"};
    s.name = "broadcast_weight";
    s.inputs = [] { return In{rnd({3, 1}, 5503), rnd({1, 4}, 5504), uni({}, 5505, 0, 1)}; };
    s.run = [](const In& in) { return lerp(in[0], in[1], in[2]); };
    s.reference = lerp_ref;
    s.noncontig_inputs = {-1};
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"lerp"};
    s.name = "scalar_weight";
    s.inputs = [] { return In{rnd({2, 3}, 5506), rnd({2, 3}, 5507)}; };
    s.run = [](const In& in) { return lerp(in[0], in[1], 0.75); };
    s.reference = [](const In& in) {
      return ref_elementwise(
          in, [](const std::vector<double>& a) { return a[0] + 0.75 * (a[1] - a[0]); });
    };
    v.push_back(std::move(s));
  }

  // ---- activations --------------------------------------------------------------------------
  const double kAlpha = 1.6732632423543772848170429916717;
  const double kScale = 1.0507009873554804934193349852946;
  v.push_back(unary(
      "hardtanh", "default",
      [] {
        return uni_avoid({3, 4}, 5600, -2, 2, {-1, 1});
      },
      [](const Tensor& a) { return hardtanh(a); },
      [](double x) { return std::min(std::max(x, -1.0), 1.0); }));
  v.push_back(unary(
      "hardtanh", "relu6",
      [] {
        return uni_avoid({3, 4}, 5601, -2, 8, {0, 6});
      },
      [](const Tensor& a) { return hardtanh(a, 0, 6); },
      [](double x) { return std::min(std::max(x, 0.0), 6.0); }));
  v.push_back(unary(
      "hardswish", "basic",
      [] {
        return uni_avoid({3, 4}, 5602, -5, 5, {-3, 3});
      },
      [](const Tensor& a) { return hardswish(a); },
      [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }));
  v.push_back(unary(
      "hardsigmoid", "basic",
      [] {
        return uni_avoid({3, 4}, 5603, -5, 5, {-3, 3});
      },
      [](const Tensor& a) { return hardsigmoid(a); },
      [](double x) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; }));
  v.push_back(unary(
      "mish", "basic",
      [] {
        return uni({3, 4}, 5604, -5, 5);
      },
      [](const Tensor& a) { return mish(a); },
      [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }));
  v.push_back(unary(
      "selu", "basic",
      [] {
        return uni_avoid({3, 4}, 5605, -3, 3, {0});
      },
      [](const Tensor& a) { return selu(a); },
      [=](double x) { return x > 0 ? kScale * x : kScale * kAlpha * std::expm1(x); }));
  v.push_back(unary(
      "celu", "alpha",
      [] {
        return uni_avoid({3, 4}, 5606, -3, 3, {0});
      },
      [](const Tensor& a) { return celu(a, 0.7); },
      [](double x) { return x > 0 ? x : 0.7 * std::expm1(x / 0.7); }));
  v.push_back(unary(
      "logsigmoid", "wide",
      [] {
        return uni({3, 4}, 5607, -30, 30);
      },
      [](const Tensor& a) { return logsigmoid(a); },
      [](double x) { return -std::log1p(std::exp(-x)); }));

  // ---- binary_cross_entropy (pointwise, reduced in the wrapper) ---------------------------
  v.push_back(binary(
      "binary_cross_entropy", "none",
      [] {
        return In{uni({2, 3}, 5700, 0.05, 0.95), uni({2, 3}, 5701, 0, 1)};
      },
      [](const Tensor& p, const Tensor& t) { return binary_cross_entropy(p, t, Reduction::None); },
      [](double p, double t) { return -(t * std::log(p) + (1 - t) * std::log1p(-p)); }));
  v.push_back(binary(
      "binary_cross_entropy", "broadcast_target_expanded",
      [] {
        return In{uni({2, 3}, 5704, 0.05, 0.95), uni({1, 3}, 5705, 0, 1)};
      },
      [](const Tensor& p, const Tensor& t) {
        return binary_cross_entropy(p, expand_as(t, p), Reduction::None);
      },
      [](double p, double t) { return -(t * std::log(p) + (1 - t) * std::log1p(-p)); }));
  v.back().noncontig_inputs = {0};
  {
    OpSample s = binary(
        "binary_cross_entropy", "mean_weighted",
        [] {
          return In{uni({2, 3}, 5702, 0.05, 0.95), uni({2, 3}, 5703, 0, 1)};
        },
        [](const Tensor& p, const Tensor& t) {
          return binary_cross_entropy(
              p, t, Reduction::Mean, tensor(std::vector<double>{0.5, 1.0, 2.0}, {3}).to(p.dtype()));
        },
        nullptr);
    s.reference = [](const In& in) {
      auto p = vals(in[0]), t = vals(in[1]);
      const double w[3] = {0.5, 1.0, 2.0};
      double acc = 0;
      for (size_t i = 0; i < p.size(); ++i)
        acc += -w[i % 3] * (t[i] * std::log(p[i]) + (1 - t[i]) * std::log1p(-p[i]));
      return from_vals({acc / static_cast<double>(p.size())}, {});
    };
    v.push_back(std::move(s));
  }
  return v;
}

static SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
