// The more elementwise math, the piecewise activations and the losses as kiln.<op>(...) and
// Tensor methods, with torch's names, argument names and defaults: rounding, fmod / remainder,
// trigonometric and hyperbolic functions, isnan & co, bitwise ops, lerp / addcmul / addcdiv,
// clamp_min / max, the extra activations and losses.
#include <cmath>

#include "common.h"

namespace kiln::python {
namespace {

Tensor opt_t(py::handle h) { return h.is_none() ? Tensor() : h.cast<Tensor>(); }
std::optional<double> opt_d(py::handle h) {
  if (h.is_none()) return std::nullopt;
  return h.cast<double>();
}

// torch's legacy size_average / reduce arguments: when either is given it decides the reduction
// ('none' if reduce is False, else 'mean' or 'sum' by size_average), as torch's _Reduction.
Reduction legacy_reduction(py::handle size_average, py::handle reduce, const std::string& red) {
  if (size_average.is_none() && reduce.is_none()) return reduction_from(red);
  const bool sa = size_average.is_none() || size_average.cast<bool>();
  const bool rd = reduce.is_none() || reduce.cast<bool>();
  if (!rd) return Reduction::None;
  return sa ? Reduction::Mean : Reduction::Sum;
}
std::string legacy_reduction_name(py::handle size_average, py::handle reduce,
                                  const std::string& red) {
  if (size_average.is_none() && reduce.is_none()) return red;
  Reduction r = legacy_reduction(size_average, reduce, red);
  return r == Reduction::None ? "none" : (r == Reduction::Sum ? "sum" : "mean");
}

// A Python int (or bool) next to an integer or bool tensor keeps the tensor's dtype, as torch's
// wrapped scalars do.
Tensor int_scalar_like(const Tensor& a, py::handle b) {
  if (py::isinstance<py::bool_>(b) && a.dtype() == Bool)
    return scalar_tensor(b.cast<bool>() ? 1 : 0, Bool);
  DType t = a.dtype() == Bool ? Int64 : a.dtype();
  return scalar_tensor(static_cast<double>(b.cast<int64_t>()), t);
}
// A Python number as a 0-d tensor of a's dtype (float32 for an integer tensor and a float
// number), as torch's wrapped scalars.
bool is_number(py::handle b) {
  return py::isinstance<py::int_>(b) || py::isinstance<py::float_>(b);
}
Tensor number_like(const Tensor& a, py::handle b) {
  if (py::isinstance<py::bool_>(b) || !is_number(b)) return tensor_from_object(b);
  const double v = b.cast<double>();
  if (!is_floating(a.dtype()) && py::isinstance<py::float_>(b)) return scalar_tensor(v, Float32);
  return scalar_tensor(v, a.dtype() == Bool ? Int64 : a.dtype());
}
Tensor other_of(const Tensor& a, py::handle b) {
  if (py::isinstance<Tensor>(b)) return b.cast<Tensor>();
  if ((py::isinstance<py::int_>(b) || py::isinstance<py::bool_>(b)) && !is_floating(a.dtype()))
    return int_scalar_like(a, b);
  return tensor_from_object(b);
}

}  // namespace

void init_ops_math_losses(py::module_& m, TensorClass& cls) {
  struct Unary {
    const char* name;
    Tensor (*f)(const Tensor&);
    const char* doc;
  };
  static const Unary unary[] = {
      {"floor", [](const Tensor& a) { return floor(a); }, "largest integer <= x"},
      {"ceil", [](const Tensor& a) { return ceil(a); }, "smallest integer >= x"},
      {"trunc", [](const Tensor& a) { return trunc(a); }, "x rounded toward zero"},
      {"fix", [](const Tensor& a) { return trunc(a); }, "x rounded toward zero (trunc)"},
      {"frac", [](const Tensor& a) { return frac(a); }, "x - trunc(x)"},
      {"reciprocal", [](const Tensor& a) { return reciprocal(a); }, "1 / x"},
      {"square", [](const Tensor& a) { return square(a); }, "x * x"},
      {"log2", [](const Tensor& a) { return log2(a); }, "base-2 logarithm"},
      {"log10", [](const Tensor& a) { return log10(a); }, "base-10 logarithm"},
      {"exp2", [](const Tensor& a) { return exp2(a); }, "2^x"},
      {"tan", [](const Tensor& a) { return tan(a); }, "tangent"},
      {"asin", [](const Tensor& a) { return asin(a); }, "arcsine"},
      {"acos", [](const Tensor& a) { return acos(a); }, "arccosine"},
      {"atan", [](const Tensor& a) { return atan(a); }, "arctangent"},
      {"arcsin", [](const Tensor& a) { return asin(a); }, "arcsine (asin)"},
      {"arccos", [](const Tensor& a) { return acos(a); }, "arccosine (acos)"},
      {"arctan", [](const Tensor& a) { return atan(a); }, "arctangent (atan)"},
      {"sinh", [](const Tensor& a) { return sinh(a); }, "hyperbolic sine"},
      {"cosh", [](const Tensor& a) { return cosh(a); }, "hyperbolic cosine"},
      {"asinh", [](const Tensor& a) { return asinh(a); }, "inverse hyperbolic sine"},
      {"acosh", [](const Tensor& a) { return acosh(a); }, "inverse hyperbolic cosine"},
      {"atanh", [](const Tensor& a) { return atanh(a); }, "inverse hyperbolic tangent"},
      {"arcsinh", [](const Tensor& a) { return asinh(a); }, "inverse hyperbolic sine (asinh)"},
      {"arccosh", [](const Tensor& a) { return acosh(a); }, "inverse hyperbolic cosine (acosh)"},
      {"arctanh", [](const Tensor& a) { return atanh(a); }, "inverse hyperbolic tangent (atanh)"},
      {"isnan", [](const Tensor& a) { return isnan(a); }, "x is NaN (bool)"},
      {"isinf", [](const Tensor& a) { return isinf(a); }, "x is +inf or -inf (bool)"},
      {"isfinite", [](const Tensor& a) { return isfinite(a); }, "x is finite (bool)"},
      {"bitwise_not", [](const Tensor& a) { return bitwise_not(a); }, "~x (integers, bool)"},
  };
  for (const Unary& op : unary) {
    auto fn = op.f;
    def_both(m, cls, op.name, op.doc, [fn](const Tensor& a) {
      MaybeNoGil g(big(a));
      return fn(a);
    });
  }
  def_both(
      m, cls, "round", "Half to even (as torch); decimals rounds at 10^-decimals.",
      [](const Tensor& a, int64_t d) { return round(a, d); }, py::kw_only(),
      py::arg("decimals") = 0);

  // Binary ops taking a tensor or a Python number.
  struct Binary {
    const char* name;
    Tensor (*tt)(const Tensor&, const Tensor&);
    const char* doc;
  };
  static const Binary binary[] = {
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); },
       "C's fmod: the remainder has the dividend's sign"},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); },
       "Python's %: the remainder has the divisor's sign"},
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); },
       "atan(input / other) in the right quadrant"},
      {"arctan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }, "atan2"},
      {"logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); },
       "a != b as booleans (nonzero is true)"},
      {"bitwise_and", [](const Tensor& a, const Tensor& b) { return bitwise_and(a, b); },
       "a & b (integers, bool)"},
      {"bitwise_or", [](const Tensor& a, const Tensor& b) { return bitwise_or(a, b); },
       "a | b (integers, bool)"},
      {"bitwise_xor", [](const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); },
       "a ^ b (integers, bool)"},
      {"bitwise_left_shift",
       [](const Tensor& a, const Tensor& b) { return bitwise_left_shift(a, b); },
       "a << b (integers)"},
      {"bitwise_right_shift",
       [](const Tensor& a, const Tensor& b) { return bitwise_right_shift(a, b); },
       "a >> b (integers, arithmetic)"},
  };
  for (const Binary& op : binary) {
    auto tt = op.tt;
    const std::string name = op.name;
    auto f = [tt, name](const Tensor& a, py::object b) {
      // fmod / remainder with a number keep a float number's value (an int tensor and 2.5
      // compute in float32), as the arithmetic ops do.
      if ((name == "fmod" || name == "remainder") && !py::isinstance<py::bool_>(b) && is_number(b))
        return name == "fmod" ? fmod(a, b.cast<Scalar>()) : remainder(a, b.cast<Scalar>());
      Tensor o = other_of(a, b);
      MaybeNoGil g(big(a) || big(o));
      return tt(a, o);
    };
    def_both(m, cls, op.name, op.doc, f, py::arg("other"));
  }
  cls.def(
      "__mod__",
      [](const Tensor& a, py::object b) {
        if (!py::isinstance<py::bool_>(b) && is_number(b)) return remainder(a, b.cast<Scalar>());
        return remainder(a, other_of(a, b));
      },
      py::is_operator());
  cls.def(
      "__rmod__", [](const Tensor& a, py::object b) { return remainder(number_like(a, b), a); },
      py::is_operator());
  cls.def(
      "__xor__", [](const Tensor& a, py::object b) { return bitwise_xor(a, other_of(a, b)); },
      py::is_operator());
  cls.def(
      "__lshift__",
      [](const Tensor& a, py::object b) { return bitwise_left_shift(a, other_of(a, b)); },
      py::is_operator());
  cls.def(
      "__rshift__",
      [](const Tensor& a, py::object b) { return bitwise_right_shift(a, other_of(a, b)); },
      py::is_operator());

  def_both(
      m, cls, "nan_to_num", "NaN -> nan, +inf -> posinf, -inf -> neginf (None: dtype extremes).",
      [](const Tensor& a, double nan, py::object pos, py::object negv) {
        return nan_to_num(a, nan, opt_d(pos), opt_d(negv));
      },
      py::arg("nan") = 0.0, py::arg("posinf") = py::none(), py::arg("neginf") = py::none());
  def_both(
      m, cls, "lerp", "input + weight (end - input); weight a number or a tensor.",
      [](const Tensor& a, const TensorLike& end, py::object w) {
        if (py::isinstance<Tensor>(w)) return lerp(a, end.t, w.cast<Tensor>());
        return lerp(a, end.t, w.cast<double>());
      },
      py::arg("end"), py::arg("weight"));
  def_both(
      m, cls, "addcmul", "input + value * tensor1 * tensor2.",
      [](const Tensor& a, const TensorLike& t1, const TensorLike& t2, const Scalar& v) {
        // An integer value keeps integer tensors integers (torch); addcmul's double would not.
        if (v.is_integral() && v.to_int() != 1) {
          const DType t = ResultType().add(a).add(t1.t).add(t2.t).dtype();
          return addcmul(a, mul(t1.t.to(t), v), t2.t, 1.0);
        }
        return addcmul(a, t1.t, t2.t, v.to_double());
      },
      py::arg("tensor1"), py::arg("tensor2"), py::kw_only(), py::arg("value") = 1.0);
  def_both(
      m, cls, "addcdiv", "input + value * tensor1 / tensor2.",
      [](const Tensor& a, const TensorLike& t1, const TensorLike& t2, double v) {
        return addcdiv(a, t1.t, t2.t, v);
      },
      py::arg("tensor1"), py::arg("tensor2"), py::kw_only(), py::arg("value") = 1.0);
  def_both(
      m, cls, "clamp_min", "max(input, min); min a number or a tensor.",
      [](const Tensor& a, py::object lo) {
        if (py::isinstance<Tensor>(lo)) return clamp_min(a, lo.cast<Tensor>());
        // A float bound promotes an integer tensor (torch: clamp_min(int, 1.5) is float32).
        if (PyFloat_Check(lo.ptr()) && !is_floating(a.dtype()))
          return clamp_min(a.to(kDefaultFloat), lo.cast<double>());
        if (a.dtype() == Bool && PyLong_Check(lo.ptr()) && !PyBool_Check(lo.ptr()))
          return clamp_min(a.to(Int64), lo.cast<double>());  // (torch's result type)
        return clamp_min(a, lo.cast<double>());
      },
      py::arg("min"));
  def_both(
      m, cls, "clamp_max", "min(input, max); max a number or a tensor.",
      [](const Tensor& a, py::object hi) {
        if (py::isinstance<Tensor>(hi)) return clamp_max(a, hi.cast<Tensor>());
        if (PyFloat_Check(hi.ptr()) && !is_floating(a.dtype()))
          return clamp_max(a.to(kDefaultFloat), hi.cast<double>());
        if (a.dtype() == Bool && PyLong_Check(hi.ptr()) && !PyBool_Check(hi.ptr()))
          return clamp_max(a.to(Int64), hi.cast<double>());  // (torch's result type)
        return clamp_max(a, hi.cast<double>());
      },
      py::arg("max"));

  // ---- activations (kiln.nn.functional; torch also has torch.selu, torch.celu) ----
  m.def(
      "hardtanh", [](const Tensor& a, double lo, double hi) { return hardtanh(a, lo, hi); },
      py::arg("input"), py::arg("min_val") = -1.0, py::arg("max_val") = 1.0,
      "clamp(x, min_val, max_val); no gradient at or beyond the bounds.");
  m.def(
      "relu6", [](const Tensor& a) { return hardtanh(a, 0.0, 6.0); }, py::arg("input"),
      "min(max(x, 0), 6).");
  m.def(
      "hardswish", [](const Tensor& a) { return hardswish(a); }, py::arg("input"),
      "x relu6(x + 3) / 6.");
  m.def(
      "hardsigmoid", [](const Tensor& a) { return hardsigmoid(a); }, py::arg("input"),
      "relu6(x + 3) / 6.");
  m.def(
      "mish", [](const Tensor& a) { return mish(a); }, py::arg("input"), "x tanh(softplus(x)).");
  m.def(
      "selu", [](const Tensor& a) { return selu(a); }, py::arg("input"),
      "scale (max(0, x) + min(0, alpha (exp(x) - 1))).");
  m.def(
      "celu", [](const Tensor& a, double alpha) { return celu(a, alpha); }, py::arg("input"),
      py::arg("alpha") = 1.0, "max(0, x) + min(0, alpha (exp(x / alpha) - 1)).");
  m.def(
      "logsigmoid", [](const Tensor& a) { return logsigmoid(a); }, py::arg("input"),
      "log(sigmoid(x)), without overflow.");
  m.def(
      "glu", [](const Tensor& a, int64_t dim) { return glu(a, dim); }, py::arg("input"),
      py::arg("dim") = -1, "First half of dim times sigmoid of the second half.");

  // ---- losses (torch.nn.functional's signatures, legacy size_average / reduce included) ----
  m.def(
      "l1_loss",
      [](const Tensor& a, const TensorLike& b, py::object sa, py::object rd,
         const std::string& red) { return l1_loss(a, b.t, legacy_reduction(sa, rd, red)); },
      py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(),
      py::arg("reduce") = py::none(), py::arg("reduction") = "mean", "mean |input - target|.");
  m.def(
      "binary_cross_entropy",
      [](const Tensor& a, const Tensor& b, py::object w, py::object sa, py::object rd,
         const std::string& red) {
        return binary_cross_entropy(a, b, legacy_reduction(sa, rd, red), opt_t(w));
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
      py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean",
      "-w (t log p + (1 - t) log(1 - p)) on probabilities; logs clamped to >= -100.");
  m.def(
      "kl_div",
      [](const Tensor& a, const Tensor& b, py::object sa, py::object rd, const std::string& red,
         bool log_target) { return kl_div(a, b, legacy_reduction_name(sa, rd, red), log_target); },
      py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(),
      py::arg("reduce") = py::none(), py::arg("reduction") = "mean", py::arg("log_target") = false,
      "target (log target - input); reduction 'none', 'mean', 'sum' or 'batchmean'.");
  m.def(
      "cosine_embedding_loss",
      [](const Tensor& a, const Tensor& b, const Tensor& y, double margin, py::object sa,
         py::object rd, const std::string& red) {
        return cosine_embedding_loss(a, b, y, margin, legacy_reduction(sa, rd, red));
      },
      py::arg("input1"), py::arg("input2"), py::arg("target"), py::arg("margin") = 0.0,
      py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean");
  m.def(
      "margin_ranking_loss",
      [](const Tensor& a, const Tensor& b, const Tensor& y, double margin, py::object sa,
         py::object rd, const std::string& red) {
        return margin_ranking_loss(a, b, y, margin, legacy_reduction(sa, rd, red));
      },
      py::arg("input1"), py::arg("input2"), py::arg("target"), py::arg("margin") = 0.0,
      py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean");
  m.def(
      "hinge_embedding_loss",
      [](const Tensor& a, const Tensor& y, double margin, py::object sa, py::object rd,
         const std::string& red) {
        return hinge_embedding_loss(a, y, margin, legacy_reduction(sa, rd, red));
      },
      py::arg("input"), py::arg("target"), py::arg("margin") = 1.0,
      py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean");
  m.def(
      "soft_margin_loss",
      [](const Tensor& a, const Tensor& y, py::object sa, py::object rd, const std::string& red) {
        return soft_margin_loss(a, y, legacy_reduction(sa, rd, red));
      },
      py::arg("input"), py::arg("target"), py::arg("size_average") = py::none(),
      py::arg("reduce") = py::none(), py::arg("reduction") = "mean");
  m.def(
      "multilabel_soft_margin_loss",
      [](const Tensor& a, const Tensor& y, py::object w, py::object sa, py::object rd,
         const std::string& red) {
        return multilabel_soft_margin_loss(a, y, opt_t(w), legacy_reduction(sa, rd, red));
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
      py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean");
  m.def(
      "poisson_nll_loss",
      [](const Tensor& a, const Tensor& y, bool log_input, bool full, py::object sa, double eps,
         py::object rd, const std::string& red) {
        return poisson_nll_loss(a, y, log_input, full, eps, legacy_reduction(sa, rd, red));
      },
      py::arg("input"), py::arg("target"), py::arg("log_input") = true, py::arg("full") = false,
      py::arg("size_average") = py::none(), py::arg("eps") = 1e-8, py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean");
  m.def(
      "gaussian_nll_loss",
      [](const Tensor& a, const Tensor& y, const TensorLike& var, bool full, double eps,
         const std::string& red) {
        return gaussian_nll_loss(a, y, var.t, full, eps, reduction_from(red));
      },
      py::arg("input"), py::arg("target"), py::arg("var"), py::arg("full") = false,
      py::arg("eps") = 1e-6, py::arg("reduction") = "mean");
  m.def(
      "triplet_margin_loss",
      [](const Tensor& a, const Tensor& p, const Tensor& n, double margin, double pn, double eps,
         bool swap, py::object sa, py::object rd, const std::string& red) {
        return triplet_margin_loss(a, p, n, margin, pn, eps, swap, legacy_reduction(sa, rd, red));
      },
      py::arg("anchor"), py::arg("positive"), py::arg("negative"), py::arg("margin") = 1.0,
      py::arg("p") = 2.0, py::arg("eps") = 1e-6, py::arg("swap") = false,
      py::arg("size_average") = py::none(), py::arg("reduce") = py::none(),
      py::arg("reduction") = "mean");
}

}  // namespace kiln::python
