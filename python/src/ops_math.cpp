// Elementwise ops, activations and reductions as kiln.<op>(...) and, where PyTorch has them,
// as Tensor methods. Each releases the GIL when its operands are big (common.h).
#include <cmath>

#include "common.h"

namespace kiln::python {
namespace {

#define KILN_PY_UNARY(fn) \
  [](const Tensor& a) {   \
    MaybeNoGil g(big(a)); \
    return fn(a);         \
  }
#define KILN_PY_BINARY(fn)                   \
  [](const Tensor& a, const TensorLike& b) { \
    MaybeNoGil g(big(a) || big(b.t));        \
    return fn(a, b.t);                       \
  }

double lo_of(py::handle h) { return h.is_none() ? -INFINITY : h.cast<double>(); }
double hi_of(py::handle h) { return h.is_none() ? INFINITY : h.cast<double>(); }
std::optional<int64_t> opt_dim(py::handle h) {
  if (h.is_none()) return std::nullopt;
  return h.cast<int64_t>();
}

}  // namespace

void init_ops_math(py::module_& m, TensorClass& cls) {
  // Arithmetic with a Python number on either side keeps the tensor's dtype (an int tensor and
  // a float number give float32), as in PyTorch.
  struct Arith {
    const char* name;
    Tensor (*tt)(const Tensor&, const Tensor&);
    Tensor (*ts)(const Tensor&, const Scalar&);
    const char* doc;
  };
  static const Arith arith[] = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](const Tensor& a, const Scalar& b) { return add(a, b); },
       "a + b (NumPy broadcasting, promotion)"},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
       [](const Tensor& a, const Scalar& b) { return sub(a, b); }, "a - b"},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](const Tensor& a, const Scalar& b) { return mul(a, b); }, "a * b"},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
       [](const Tensor& a, const Scalar& b) { return div(a, b); }, "a / b (true division)"},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](const Tensor& a, const Scalar& b) { return pow(a, b); }, "a ** b"},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
       [](const Tensor& a, const Scalar& b) { return lt(a, b); }, "a < b (bool)"},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
       [](const Tensor& a, const Scalar& b) { return le(a, b); }, "a <= b (bool)"},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
       [](const Tensor& a, const Scalar& b) { return gt(a, b); }, "a > b (bool)"},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
       [](const Tensor& a, const Scalar& b) { return ge(a, b); }, "a >= b (bool)"},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](const Tensor& a, const Scalar& b) { return eq(a, b); }, "a == b (bool)"},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
       [](const Tensor& a, const Scalar& b) { return ne(a, b); }, "a != b (bool)"},
  };
  for (const Arith& op : arith) {
    auto tt = op.tt;
    auto ts = op.ts;
    auto f_tt = [tt](const Tensor& a, const Tensor& b) {
      MaybeNoGil g(big(a) || big(b));
      return tt(a, b);
    };
    auto f_ts = [ts](const Tensor& a, const Scalar& b) {
      MaybeNoGil g(big(a));
      return ts(a, b);
    };
    auto f_like = [tt](const TensorLike& a, const TensorLike& b) { return tt(a.t, b.t); };
    m.def(op.name, f_tt, py::arg("input"), py::arg("other"), op.doc);
    m.def(op.name, f_ts, py::arg("input"), py::arg("other"), op.doc);
    m.def(op.name, f_like, py::arg("input"), py::arg("other"), op.doc);
    cls.def(op.name, f_tt, py::arg("other"), op.doc);
    cls.def(op.name, f_ts, py::arg("other"), op.doc);
  }
  m.attr("subtract") = m.attr("sub");
  m.attr("multiply") = m.attr("mul");
  m.attr("divide") = m.attr("div");
  // torch.div(..., rounding_mode="trunc" | "floor") and floor_divide (//): integers stay
  // integers there; plain division is always true division.
  auto div_mode = [](const Tensor& a, const TensorLike& b, py::object mode) {
    if (mode.is_none()) return div(a, b.t);
    return div(a, b.t, mode.cast<std::string>());
  };
  m.def("div", div_mode, py::arg("input"), py::arg("other"), py::kw_only(),
        py::arg("rounding_mode"), "a / b with rounding_mode None, 'trunc' or 'floor'");
  cls.def("div", div_mode, py::arg("other"), py::kw_only(), py::arg("rounding_mode"),
          "a / b with rounding_mode None, 'trunc' or 'floor'");
  def_both(
      m, cls, "floor_divide", "a // b: division rounded toward -inf (integers stay integers).",
      [](const Tensor& a, py::object b) {
        // A Python number promotes by its kind (torch: bf16 // 2.5 is bf16), not as a tensor.
        if (PyFloat_Check(b.ptr()) || PyLong_Check(b.ptr())) {
          const Scalar s = b.cast<Scalar>();
          return floor_divide(a, scalar_tensor(s.to_double(), result_type(a, s)));
        }
        return floor_divide(a, b.cast<TensorLike>().t);
      },
      py::arg("other"));
  // torch.add/sub(input, other, *, alpha=1, out=None): input +- alpha * other (the plain
  // two-argument call takes fast_ops' path; keywords come here).
  for (const char* name : {"add", "sub"}) {
    const bool is_add = name[0] == 'a';
    auto f = [is_add, name](const Tensor& a, const TensorLike& b, const Scalar& alpha,
                            py::object out) {
      // torch: a float alpha needs a floating result, a bool alpha a bool one; on bools,
      // a + alpha * b is a or (b and alpha).
      const DType rt = result_type(a, b.t);
      if (alpha.is_floating() && !is_floating(rt))
        raise(type_error_type(), std::string("[") + name +
                                     "] a float alpha needs floating tensors, got " +
                                     dtype_name(rt));
      if (alpha.is_bool() && rt != Bool)
        raise(type_error_type(), std::string("[") + name +
                                     "] a bool alpha is only for bool tensors, got " +
                                     dtype_name(rt));
      if (rt == Bool && is_add) {
        Tensor r = alpha.to_int() != 0 ? add(a, b.t) : a.clone();
        if (out.is_none()) return r;
        Tensor dst = out.cast<Tensor>();
        dst.copy_(r);
        return dst;
      }
      const Tensor o = alpha.is_integral() && alpha.to_int() == 1 ? b.t : mul(b.t, alpha);
      Tensor r = is_add ? add(a, o) : sub(a, o);
      if (out.is_none()) return r;
      Tensor dst = out.cast<Tensor>();
      dst.copy_(r);
      return dst;
    };
    m.def(name, f, py::arg("input"), py::arg("other"), py::kw_only(), py::arg("alpha") = 1,
          py::arg("out") = py::none());
    cls.def(name, f, py::arg("other"), py::kw_only(), py::arg("alpha") = 1,
            py::arg("out") = py::none());
  }
  // torch.rsub(input, other, alpha=1): other - alpha * input.
  m.def(
      "rsub",
      [](const Tensor& a, py::object b, const Scalar& alpha) {
        const Tensor x = alpha.is_integral() && alpha.to_int() == 1 ? a : mul(a, alpha);
        if (py::isinstance<Tensor>(b)) return sub(b.cast<Tensor>(), x);
        if (PyBool_Check(b.ptr()) || PyLong_Check(b.ptr()) || PyFloat_Check(b.ptr()))
          return sub(b.cast<Scalar>(), x);
        return sub(b.cast<TensorLike>().t, x);
      },
      py::arg("input"), py::arg("other"), py::arg("alpha") = 1, "other - alpha * input");

  def_both(m, cls, "maximum", "Elementwise max (NaN propagates).", KILN_PY_BINARY(maximum),
           py::arg("other"));
  def_both(m, cls, "minimum", "Elementwise min (NaN propagates).", KILN_PY_BINARY(minimum),
           py::arg("other"));
  def_both(m, cls, "logical_and", "a and b (bool).", KILN_PY_BINARY(logical_and), py::arg("other"));
  def_both(m, cls, "logical_or", "a or b (bool).", KILN_PY_BINARY(logical_or), py::arg("other"));
  m.def(
      "where",
      [](const Tensor& c, const TensorLike& a, const TensorLike& b) {
        MaybeNoGil g(big(c));
        return where(c, a.t, b.t);
      },
      py::arg("condition"), py::arg("input"), py::arg("other"),
      "condition ? input : other, broadcasting all three; condition is bool.");
  def_both(
      m, cls, "masked_fill", "input with `value` where mask (bool) is true.",
      [](const Tensor& a, const Tensor& mask, double v) { return masked_fill(a, mask, v); },
      py::arg("mask"), py::arg("value"));

  struct Unary {
    const char* name;
    Tensor (*f)(const Tensor&);
    const char* doc;
  };
  static const Unary unary[] = {
      {"neg", [](const Tensor& a) { return neg(a); }, "-x"},
      {"exp", [](const Tensor& a) { return exp(a); }, "e^x"},
      {"log", [](const Tensor& a) { return log(a); }, "natural logarithm"},
      {"sqrt", [](const Tensor& a) { return sqrt(a); }, "square root"},
      {"rsqrt", [](const Tensor& a) { return rsqrt(a); }, "1 / sqrt(x)"},
      {"abs", [](const Tensor& a) { return abs(a); }, "|x|"},
      {"sign", [](const Tensor& a) { return sign(a); }, "-1, 0 or 1"},
      {"erf", [](const Tensor& a) { return erf(a); }, "the error function"},
      {"sin", [](const Tensor& a) { return sin(a); }, "sine"},
      {"cos", [](const Tensor& a) { return cos(a); }, "cosine"},
      {"log1p", [](const Tensor& a) { return log1p(a); }, "log(1 + x), accurate for small x"},
      {"expm1", [](const Tensor& a) { return expm1(a); }, "exp(x) - 1, accurate for small x"},
      {"logical_not", [](const Tensor& a) { return logical_not(a); }, "not x (bool)"},
      {"relu", [](const Tensor& a) { return relu(a); }, "max(x, 0)"},
      {"sigmoid", [](const Tensor& a) { return sigmoid(a); }, "1 / (1 + e^-x)"},
      {"tanh", [](const Tensor& a) { return tanh(a); }, "hyperbolic tangent"},
      {"silu", [](const Tensor& a) { return silu(a); }, "x * sigmoid(x)"},
  };
  for (const Unary& op : unary) {
    auto fn = op.f;
    def_both(m, cls, op.name, op.doc, [fn](const Tensor& a) {
      MaybeNoGil g(big(a));
      return fn(a);
    });
  }
  m.attr("negative") = m.attr("neg");
  def_both(
      m, cls, "clamp", "Clamps to [min, max] (numbers or tensors); None leaves a side open.",
      [](const Tensor& a, py::object lo, py::object hi) {
        if (lo.is_none() && hi.is_none())
          raise(value_error_type(), "[clamp] at least one of 'min' or 'max' must not be None");
        if (py::isinstance<Tensor>(lo) || py::isinstance<Tensor>(hi)) {
          auto bound = [&a](py::handle h) {
            if (h.is_none()) return Tensor();
            if (py::isinstance<Tensor>(h)) return h.cast<Tensor>();
            return scalar_tensor(h.cast<double>(), a.dtype());
          };
          return clamp(a, bound(lo), bound(hi));
        }
        // A float bound promotes an integer tensor (torch: clamp(int, min=2.5) is float32).
        const bool float_bound = PyFloat_Check(lo.ptr()) || PyFloat_Check(hi.ptr());
        if (float_bound && !is_floating(a.dtype()))
          return clamp(a.to(kDefaultFloat), lo_of(lo), hi_of(hi));
        // A bool tensor with an integer bound clamps as int64 (torch's result type).
        const bool int_bound = (PyLong_Check(lo.ptr()) && !PyBool_Check(lo.ptr())) ||
                               (PyLong_Check(hi.ptr()) && !PyBool_Check(hi.ptr()));
        if (int_bound && a.dtype() == Bool) return clamp(a.to(Int64), lo_of(lo), hi_of(hi));
        return clamp(a, lo_of(lo), hi_of(hi));
      },
      py::arg("min") = py::none(), py::arg("max") = py::none());
  m.attr("clip") = m.attr("clamp");
  def_both(
      m, cls, "leaky_relu", "x for x > 0, negative_slope * x otherwise.",
      [](const Tensor& a, double s) { return leaky_relu(a, s); }, py::arg("negative_slope") = 0.01);
  def_both(
      m, cls, "gelu", "x * Phi(x) (approximate: the tanh form).",
      [](const Tensor& a, py::object approx) {
        bool ap = py::isinstance<py::str>(approx) ? approx.cast<std::string>() == "tanh"
                                                  : approx.cast<bool>();
        MaybeNoGil g(big(a));
        return gelu(a, ap);
      },
      py::arg("approximate") = false);
  def_both(
      m, cls, "softplus", "log(1 + exp(beta x)) / beta.",
      [](const Tensor& a, double b, double t) { return softplus(a, b, t); }, py::arg("beta") = 1.0,
      py::arg("threshold") = 20.0);
  def_both(
      m, cls, "elu", "x for x > 0, alpha (exp(x) - 1) otherwise.",
      [](const Tensor& a, double al) { return elu(a, al); }, py::arg("alpha") = 1.0);

  // ---- reductions ----
  def_both(
      m, cls, "sum", "Sum over dim (None: all).",
      [](const Tensor& a, py::object dim, bool keepdim, py::object dt) {
        std::vector<int64_t> d = dims_from(dim);
        const Tensor x = with_dtype(a, dt);
        MaybeNoGil g(big(a));
        return sum(x, d, keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("dtype") = py::none());
  def_both(
      m, cls, "mean", "Mean over dim (None: all).",
      [](const Tensor& a, py::object dim, bool keepdim, py::object dt) {
        std::vector<int64_t> d = dims_from(dim);
        const Tensor x = with_dtype(a, dt);
        MaybeNoGil g(big(a));
        return mean(x, d, keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("dtype") = py::none());
  // torch.max/min: over everything a tensor; along one dim (values, indices), a named tuple
  // like torch.return_types.max; with a tensor as second argument the elementwise maximum.
  // A list of dims (amax) gives the values only.
  py::module_ rt = m.def_submodule("return_types", "Named tuples of ops with several results.");
  py::object namedtuple = py::module_::import("collections").attr("namedtuple");
  for (const char* n : {"max", "min", "topk", "sort"})
    rt.attr(n) =
        namedtuple(n, py::make_tuple("values", "indices"), py::arg("module") = "kiln.return_types");
  auto extreme = [](bool is_max, const char* name) {
    return [is_max, name](const Tensor& a, py::object dim, bool keepdim) -> py::object {
      if (dim.is_none()) return py::cast(is_max ? max(a, {}, keepdim) : min(a, {}, keepdim));
      if (py::isinstance<Tensor>(dim)) {
        const Tensor& b = dim.cast<const Tensor&>();
        return py::cast(is_max ? maximum(a, b) : minimum(a, b));
      }
      if (PyIndex_Check(dim.ptr()) && !PyBool_Check(dim.ptr())) {
        const int64_t d = dim.cast<int64_t>();
        Tensor values = is_max ? max(a, {d}, keepdim) : min(a, {d}, keepdim);
        Tensor indices = is_max ? argmax(a, d, keepdim) : argmin(a, d, keepdim);
        // With autograd the gradient goes to the returned index only (torch), where amax's
        // splits it among ties: the values are gathered at the indices.
        if (a.requires_grad() && grad_mode_enabled()) {
          const Tensor at = keepdim ? indices : unsqueeze(indices, d);
          values = gather(a, d, at);
          if (!keepdim) values = squeeze(values, d);
        }
        static py::object* types =
            new py::object(py::module_::import("kiln._C").attr("return_types"));
        return types->attr(name)(values, indices);
      }
      return py::cast(is_max ? max(a, dims_from(dim), keepdim) : min(a, dims_from(dim), keepdim));
    };
  };
  def_both(m, cls, "max",
           "max(input): the largest value; max(input, dim, keepdim=False): (values, indices) "
           "along dim; max(input, other): the elementwise maximum.",
           extreme(true, "max"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(m, cls, "min",
           "min(input): the smallest value; min(input, dim, keepdim=False): (values, indices) "
           "along dim; min(input, other): the elementwise minimum.",
           extreme(false, "min"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "amax", "Max values over dim.",
      [](const Tensor& a, py::object dim, bool keepdim) { return max(a, dims_from(dim), keepdim); },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "amin", "Min values over dim.",
      [](const Tensor& a, py::object dim, bool keepdim) { return min(a, dims_from(dim), keepdim); },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  // torch's (dim, unbiased, keepdim, *, correction); a bool in dim's place is `unbiased`
  // (x.std(False)); correction wins over unbiased.
  auto moment = [](bool is_std) {
    return [is_std](const Tensor& a, py::object dim, py::object unbiased, bool keepdim,
                    py::object correction) {
      if (PyBool_Check(dim.ptr())) {
        unbiased = dim;
        dim = py::none();
      }
      int64_t c = 1;
      if (!correction.is_none())
        c = correction.cast<int64_t>();
      else if (!unbiased.is_none())
        c = unbiased.cast<bool>() ? 1 : 0;
      return is_std ? std_dev(a, dims_from(dim), keepdim, c) : var(a, dims_from(dim), keepdim, c);
    };
  };
  def_both(m, cls, "var", "Variance (correction 1: Bessel's) over dim.", moment(false),
           py::arg("dim") = py::none(), py::arg("unbiased") = py::none(),
           py::arg("keepdim") = false, py::kw_only(), py::arg("correction") = py::none());
  def_both(m, cls, "std", "Standard deviation (correction 1) over dim.", moment(true),
           py::arg("dim") = py::none(), py::arg("unbiased") = py::none(),
           py::arg("keepdim") = false, py::kw_only(), py::arg("correction") = py::none());
  m.attr("std_dev") = m.attr("std");
  def_both(
      m, cls, "argmax", "Index of the max along dim (None: flattened), int64.",
      [](const Tensor& a, py::object dim, bool keepdim) {
        return argmax(a, opt_dim(dim), keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "argmin", "Index of the min along dim (None: flattened), int64.",
      [](const Tensor& a, py::object dim, bool keepdim) {
        return argmin(a, opt_dim(dim), keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "logsumexp", "log(sum(exp(x))) over dim, without overflow.",
      [](const Tensor& a, py::object dim, bool keepdim) {
        return logsumexp(a, dims_from(dim), keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "cumsum", "Running sums along dim.",
      [](const Tensor& a, int64_t dim, bool rev, py::object dt) {
        return cumsum(with_dtype(a, dt), dim, rev);
      },
      py::arg("dim"), py::arg("reverse") = false, py::kw_only(), py::arg("dtype") = py::none());
  def_both(
      m, cls, "vector_norm", "(sum |x|^ord)^(1/ord) over dim (None: all).",
      [](const Tensor& a, double ord, py::object dim, bool keepdim) {
        return vector_norm(a, ord, dims_from(dim), keepdim);
      },
      py::arg("ord") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "norm", "The p-norm over dim (None: all).",
      [](const Tensor& a, double p, py::object dim, bool keepdim) {
        return vector_norm(a, p, dims_from(dim), keepdim);
      },
      py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "normalize",
      [](const Tensor& a, double p, int64_t dim, double eps) { return normalize(a, p, dim, eps); },
      py::arg("input"), py::arg("p") = 2.0, py::arg("dim") = 1, py::arg("eps") = 1e-12,
      "x / max(||x||_p over dim, eps).");
  m.def(
      "cosine_similarity",
      [](const Tensor& a, const Tensor& b, int64_t dim, double eps) {
        return cosine_similarity(a, b, dim, eps);
      },
      py::arg("x1"), py::arg("x2"), py::arg("dim") = 1, py::arg("eps") = 1e-8);
  def_both(
      m, cls, "softmax", "exp(x) / sum(exp(x)) along dim.",
      [](const Tensor& a, int64_t dim, py::object dt) {
        const Tensor x = with_dtype(a, dt);
        MaybeNoGil g(big(a));
        return softmax(x, dim);
      },
      py::arg("dim") = -1, py::arg("dtype") = py::none());
  def_both(
      m, cls, "log_softmax", "log(softmax(x)) along dim, computed stably.",
      [](const Tensor& a, int64_t dim, py::object dt) {
        const Tensor x = with_dtype(a, dt);
        MaybeNoGil g(big(a));
        return log_softmax(x, dim);
      },
      py::arg("dim") = -1, py::arg("dtype") = py::none());
  m.def(
      "sum_to", [](const Tensor& a, py::object s) { return sum_to(a, shape_from(s)); },
      py::arg("input"), py::arg("shape"), "Sums a broadcast tensor back down to `shape`.");
}

}  // namespace kiln::python
