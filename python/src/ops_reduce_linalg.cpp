// Reductions beyond sum/mean/max (prod, cumprod, cummax/cummin, logcumsumexp, median, mode,
// any/all, aminmax, std_mean/var_mean, count_nonzero, nansum/nanmean), the products and diagonals
// of torch (mm, bmm, mv, addmv, baddbmm, addbmm, dot, outer, inner, diag, diagonal, diag_embed,
// trace, tensordot, kron, cross) and the kiln.linalg submodule (torch.linalg's names), with Tensor
// methods where torch has them and named-tuple results as torch.return_types.
#include <cmath>

#include "common.h"

namespace kiln::python {
namespace {

py::object rtype(const char* name) {
  static py::object* types = new py::object(py::module_::import("kiln._C").attr("return_types"));
  return types->attr(name);
}
[[maybe_unused]] bool concrete(const Tensor& t) { return t.is_concrete(); }
std::optional<int64_t> opt_int(py::handle h) {
  if (h.is_none()) return std::nullopt;
  return h.cast<int64_t>();
}
// torch's `unbiased` / `correction` pair: correction wins when given.
int64_t correction_of(py::handle unbiased, py::handle correction) {
  if (!correction.is_none()) return correction.cast<int64_t>();
  if (!unbiased.is_none()) return unbiased.cast<bool>() ? 1 : 0;
  return 1;
}
// A number ord (inf and -inf as floats), or a string ('fro', 'nuc').
[[maybe_unused]] bool is_str(py::handle h) { return py::isinstance<py::str>(h); }

}  // namespace

void init_ops_reduce_linalg(py::module_& m, TensorClass& cls) {
  py::module_ rt = m.attr("return_types").cast<py::module_>();
  py::object namedtuple = py::module_::import("collections").attr("namedtuple");
  auto add_type = [&](const char* n, py::tuple fields) {
    rt.attr(n) = namedtuple(n, fields, py::arg("module") = "kiln.return_types");
  };
  for (const char* n : {"median", "mode", "cummax", "cummin"})
    add_type(n, py::make_tuple("values", "indices"));
  add_type("aminmax", py::make_tuple("min", "max"));
  add_type("slogdet", py::make_tuple("sign", "logabsdet"));
  add_type("qr", py::make_tuple("Q", "R"));
  add_type("svd", py::make_tuple("U", "S", "Vh"));
  add_type("eigh", py::make_tuple("eigenvalues", "eigenvectors"));

  // ---- reductions ------------------------------------------------------------------------------
  def_both(
      m, cls, "prod", "Product of all elements, or over dim (torch.prod).",
      [](const Tensor& a, py::object dim, bool keepdim, py::object dt) {
        const Tensor x = with_dtype(a, dt);
        MaybeNoGil g(big(a));
        return prod(x, dims_from(dim), keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("dtype") = py::none());
  def_both(
      m, cls, "cumprod", "Running products along dim.",
      [](const Tensor& a, int64_t dim, py::object dt) { return cumprod(with_dtype(a, dt), dim); },
      py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  def_both(
      m, cls, "cummax", "Running max along dim and its index: (values, indices).",
      [](const Tensor& a, int64_t dim) {
        auto [v, i] = cummax(a, dim);
        return rtype("cummax")(v, i);
      },
      py::arg("dim"));
  def_both(
      m, cls, "cummin", "Running min along dim and its index: (values, indices).",
      [](const Tensor& a, int64_t dim) {
        auto [v, i] = cummin(a, dim);
        return rtype("cummin")(v, i);
      },
      py::arg("dim"));
  def_both(
      m, cls, "logcumsumexp", "log(cumsum(exp(x))) along dim, computed stably.",
      [](const Tensor& a, int64_t dim) { return logcumsumexp(a, dim); }, py::arg("dim"));
  def_both(
      m, cls, "median",
      "median(input): the lower median of all elements; median(input, dim, keepdim=False): "
      "(values, indices) along dim.",
      [](const Tensor& a, py::object dim, bool keepdim) -> py::object {
        if (dim.is_none()) return py::cast(median(a));
        auto [v, i] = median(a, dim.cast<int64_t>(), keepdim);
        return rtype("median")(v, i);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "mode", "The most frequent value along dim (the smallest of ties) and its index.",
      [](const Tensor& a, int64_t dim, bool keepdim) {
        auto [v, i] = mode(a, dim, keepdim);
        return rtype("mode")(v, i);
      },
      py::arg("dim") = -1, py::arg("keepdim") = false);
  def_both(
      m, cls, "any", "Whether any element (over dim) is nonzero; bool.",
      [](const Tensor& a, py::object dim, bool keepdim) { return any(a, dims_from(dim), keepdim); },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "all", "Whether all elements (over dim) are nonzero; bool.",
      [](const Tensor& a, py::object dim, bool keepdim) { return all(a, dims_from(dim), keepdim); },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_both(
      m, cls, "aminmax", "(min, max) over all elements or along dim.",
      [](const Tensor& a, py::object dim, bool keepdim) {
        auto [lo, hi] = aminmax(a, opt_int(dim), keepdim);
        return rtype("aminmax")(lo, hi);
      },
      py::kw_only(), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  // std_mean / var_mean: torch's signature (dim, unbiased, keepdim, *, correction); a bool in
  // dim's place is `unbiased` (torch.std_mean(x, False)).
  auto moments = [](bool is_std) {
    return [is_std](const Tensor& a, py::object dim, py::object unbiased, bool keepdim,
                    py::object correction) {
      if (PyBool_Check(dim.ptr())) {
        unbiased = dim;
        dim = py::none();
      }
      const int64_t c = correction_of(unbiased, correction);
      auto r = is_std ? std_mean(a, dims_from(dim), keepdim, c)
                      : var_mean(a, dims_from(dim), keepdim, c);
      return py::make_tuple(r.first, r.second);
    };
  };
  m.def("std_mean", moments(true), py::arg("input"), py::arg("dim") = py::none(),
        py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("correction") = py::none(), "(std, mean) over dim.");
  m.def("var_mean", moments(false), py::arg("input"), py::arg("dim") = py::none(),
        py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
        py::arg("correction") = py::none(), "(var, mean) over dim.");
  def_both(
      m, cls, "count_nonzero", "The number of nonzero elements over dim (None: all), int64.",
      [](const Tensor& a, py::object dim) { return count_nonzero(a, dims_from(dim)); },
      py::arg("dim") = py::none());
  def_both(
      m, cls, "nansum", "Sum over dim treating NaN as zero.",
      [](const Tensor& a, py::object dim, bool keepdim, py::object dt) {
        return nansum(with_dtype(a, dt), dims_from(dim), keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("dtype") = py::none());
  def_both(
      m, cls, "nanmean", "Mean over dim of the elements that are not NaN.",
      [](const Tensor& a, py::object dim, bool keepdim, py::object dt) {
        return nanmean(with_dtype(a, dt), dims_from(dim), keepdim);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("dtype") = py::none());

  // ---- products, diagonals ---------------------------------------------------------------------
  auto mat2 = [](Tensor (*f)(const Tensor&, const Tensor&)) {
    return [f](const Tensor& a, const Tensor& b) {
      MaybeNoGil g(concrete(a) && concrete(b));
      return f(a, b);
    };
  };
  def_both(m, cls, "mm", "[n, k] @ [k, m] (2-D only).",
           mat2([](const Tensor& a, const Tensor& b) { return mm(a, b); }), py::arg("mat2"));
  def_both(m, cls, "bmm", "[b, n, k] @ [b, k, m] (3-D only).",
           mat2([](const Tensor& a, const Tensor& b) { return bmm(a, b); }), py::arg("mat2"));
  def_both(m, cls, "mv", "[n, k] @ [k].",
           mat2([](const Tensor& a, const Tensor& b) { return mv(a, b); }), py::arg("vec"));
  def_both(m, cls, "dot", "Inner product of two 1-D tensors.",
           mat2([](const Tensor& a, const Tensor& b) { return dot(a, b); }), py::arg("tensor"));
  def_both(m, cls, "vdot", "Inner product of two 1-D tensors (real: as dot).",
           mat2([](const Tensor& a, const Tensor& b) { return vdot(a, b); }), py::arg("other"));
  def_both(m, cls, "outer", "a[i] * b[j] of two 1-D tensors.",
           mat2([](const Tensor& a, const Tensor& b) { return outer(a, b); }), py::arg("vec2"));
  def_both(m, cls, "ger", "Alias of outer.",
           mat2([](const Tensor& a, const Tensor& b) { return outer(a, b); }), py::arg("vec2"));
  def_both(m, cls, "inner", "Sum of products over the last dims.",
           mat2([](const Tensor& a, const Tensor& b) { return inner(a, b); }), py::arg("other"));
  def_both(m, cls, "kron", "Kronecker product.",
           mat2([](const Tensor& a, const Tensor& b) { return kron(a, b); }), py::arg("other"));
  auto addprod = [](Tensor (*f)(const Tensor&, const Tensor&, const Tensor&, double, double)) {
    return [f](const Tensor& in, const Tensor& a, const Tensor& b, double beta, double alpha) {
      MaybeNoGil g(concrete(a) && concrete(b));
      return f(in, a, b, beta, alpha);
    };
  };
  def_both(m, cls, "addmv", "beta * input + alpha * (mat @ vec).",
           addprod([](const Tensor& i, const Tensor& a, const Tensor& b, double be, double al) {
             return addmv(i, a, b, be, al);
           }),
           py::arg("mat"), py::arg("vec"), py::kw_only(), py::arg("beta") = 1.0,
           py::arg("alpha") = 1.0);
  def_both(m, cls, "baddbmm", "beta * input + alpha * bmm(batch1, batch2).",
           addprod([](const Tensor& i, const Tensor& a, const Tensor& b, double be, double al) {
             return baddbmm(i, a, b, be, al);
           }),
           py::arg("batch1"), py::arg("batch2"), py::kw_only(), py::arg("beta") = 1.0,
           py::arg("alpha") = 1.0);
  def_both(m, cls, "addbmm", "beta * input + alpha * sum_i batch1[i] @ batch2[i].",
           addprod([](const Tensor& i, const Tensor& a, const Tensor& b, double be, double al) {
             return addbmm(i, a, b, be, al);
           }),
           py::arg("batch1"), py::arg("batch2"), py::kw_only(), py::arg("beta") = 1.0,
           py::arg("alpha") = 1.0);
  def_both(
      m, cls, "diag", "1-D: a matrix with it on diagonal `diagonal`; 2-D: that diagonal.",
      [](const Tensor& a, int64_t d) { return diag(a, d); }, py::arg("diagonal") = 0);
  def_both(
      m, cls, "diagonal", "The diagonal `offset` of the (dim1, dim2) planes, as the last dim.",
      [](const Tensor& a, int64_t o, int64_t d1, int64_t d2) { return diagonal(a, o, d1, d2); },
      py::arg("offset") = 0, py::arg("dim1") = 0, py::arg("dim2") = 1);
  def_both(
      m, cls, "diag_embed", "The last dim placed on a diagonal of new dims dim1, dim2.",
      [](const Tensor& a, int64_t o, int64_t d1, int64_t d2) { return diag_embed(a, o, d1, d2); },
      py::arg("offset") = 0, py::arg("dim1") = -2, py::arg("dim2") = -1);
  def_both(m, cls, "trace", "Sum of the main diagonal of a 2-D tensor.",
           [](const Tensor& a) { return trace(a); });
  m.def(
      "tensordot",
      [](const Tensor& a, const Tensor& b, py::object dims) {
        // dims is read before the GIL goes: touching it without the GIL crashed the process
        if (PyIndex_Check(dims.ptr())) {
          const int64_t n = dims.cast<int64_t>();
          MaybeNoGil g(concrete(a) && concrete(b));
          return tensordot(a, b, n);
        }
        if (!py::isinstance<py::sequence>(dims) || py::isinstance<py::str>(dims) ||
            py::len(dims) != 2)
          raise(value_error_type(), "[tensordot] dims must be an int or a pair of dim lists");
        py::sequence s = dims.cast<py::sequence>();
        const auto da = ints_from(s[0], "dims"), db = ints_from(s[1], "dims");
        MaybeNoGil g(concrete(a) && concrete(b));
        return tensordot(a, b, da, db);
      },
      py::arg("a"), py::arg("b"), py::arg("dims") = 2,
      "Contracts the last `dims` dims of a with the first of b, or the dims listed.");
  // torch.cross's dim=None: the first dim of size 3 (torch.linalg.cross defaults to -1).
  def_both(
      m, cls, "cross", "Cross product along dim (None: the first dim of size 3).",
      [](const Tensor& a, const Tensor& b, py::object dim) {
        int64_t d = -1;
        if (dim.is_none()) {
          d = -100;
          const Shape s = broadcast_shapes(a.shape(), b.shape(), "cross");
          for (int64_t i = 0; i < s.rank() && d == -100; ++i)
            if (s[i] == 3) d = i;
          if (d == -100)
            raise(value_error_type(),
                  str_cat("[cross] no dim of size 3 in shapes ", a.shape(), " and ", b.shape()));
        } else {
          d = dim.cast<int64_t>();
        }
        return cross(a, b, d);
      },
      py::arg("other"), py::arg("dim") = py::none());

  // ---- torch-level names of linalg ops ---------------------------------------------------------
  def_both(m, cls, "det", "Determinant of square matrices (batched).",
           [](const Tensor& a) { return linalg::det(a); });
  def_both(m, cls, "slogdet", "(sign, log|det|).", [](const Tensor& a) {
    auto [s, l] = linalg::slogdet(a);
    return rtype("slogdet")(s, l);
  });
  def_both(m, cls, "logdet", "log(det): NaN for a negative determinant.", [](const Tensor& a) {
    auto [s, l] = linalg::slogdet(a);
    return where(lt(s, 0.0), full_like(l, NAN), l);
  });
  def_both(m, cls, "inverse", "Inverse of square matrices (batched).",
           [](const Tensor& a) { return linalg::inv(a); });
  def_both(
      m, cls, "pinverse", "Pseudo-inverse (singular values below rcond * max dropped).",
      [](const Tensor& a, double rcond) { return linalg::pinv(a, rcond); },
      py::arg("rcond") = 1e-15);

  // ---- kiln.linalg
  // -------------------------------------------------------------------------------
  py::module_ la = m.def_submodule("linalg", "torch.linalg's names; use them as kiln.linalg.");
  la.def(
      "vector_norm",
      [](const Tensor& a, double ord, py::object dim, bool keepdim) {
        return linalg::vector_norm(a, ord, dims_from(dim), keepdim);
      },
      py::arg("x"), py::arg("ord") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false,
      "(sum |x|^ord)^(1/ord) over dim (None: all).");
  la.def(
      "matrix_norm",
      [](const Tensor& a, py::object ord, py::object dim, bool keepdim) {
        const std::vector<int64_t> d = ints_from(dim, "dim");
        if (is_str(ord)) return linalg::matrix_norm(a, ord.cast<std::string>(), d, keepdim);
        return linalg::matrix_norm(a, ord.cast<double>(), d, keepdim);
      },
      py::arg("A"), py::arg("ord") = "fro", py::arg("dim") = py::make_tuple(-2, -1),
      py::arg("keepdim") = false, "Matrix norm: 'fro', 'nuc', inf, -inf, 1, -1, 2, -2.");
  la.def(
      "norm",
      [](const Tensor& a, py::object ord, py::object dim, bool keepdim) {
        const std::vector<int64_t> d = dims_from(dim);
        if (is_str(ord)) return linalg::norm(a, ord.cast<std::string>(), d, keepdim);
        std::optional<double> o;
        if (!ord.is_none()) o = ord.cast<double>();
        return linalg::norm(a, o, d, keepdim);
      },
      py::arg("A"), py::arg("ord") = py::none(), py::arg("dim") = py::none(),
      py::arg("keepdim") = false, "Vector or matrix norm, as torch.linalg.norm.");
  la.def(
      "det", [](const Tensor& a) { return linalg::det(a); }, py::arg("A"));
  la.def(
      "slogdet",
      [](const Tensor& a) {
        auto [s, l] = linalg::slogdet(a);
        return rtype("slogdet")(s, l);
      },
      py::arg("A"));
  la.def(
      "inv",
      [](const Tensor& a) {
        MaybeNoGil g(concrete(a));
        return linalg::inv(a);
      },
      py::arg("A"));
  la.def(
      "solve",
      [](const Tensor& a, const Tensor& b, bool left) {
        MaybeNoGil g(concrete(a) && concrete(b));
        return linalg::solve(a, b, left);
      },
      py::arg("A"), py::arg("B"), py::kw_only(), py::arg("left") = true);
  la.def(
      "cholesky",
      [](const Tensor& a, bool upper) {
        MaybeNoGil g(concrete(a));
        return linalg::cholesky(a, upper);
      },
      py::arg("A"), py::kw_only(), py::arg("upper") = false);
  la.def(
      "qr",
      [](const Tensor& a, const std::string& mode) {
        auto [q, r] = linalg::qr(a, mode);
        return rtype("qr")(q, r);
      },
      py::arg("A"), py::arg("mode") = "reduced");
  la.def(
      "svd",
      [](const Tensor& a, bool full) {
        auto [u, s, vh] = linalg::svd(a, full);
        return rtype("svd")(u, s, vh);
      },
      py::arg("A"), py::arg("full_matrices") = true);
  la.def(
      "svdvals", [](const Tensor& a) { return linalg::svdvals(a); }, py::arg("A"));
  la.def(
      "eigh",
      [](const Tensor& a, const std::string& uplo) {
        auto [w, v] = linalg::eigh(a, uplo);
        return rtype("eigh")(w, v);
      },
      py::arg("A"), py::arg("UPLO") = "L");
  la.def(
      "eigvalsh",
      [](const Tensor& a, const std::string& uplo) { return linalg::eigvalsh(a, uplo); },
      py::arg("A"), py::arg("UPLO") = "L");
  la.def(
      "pinv",
      [](const Tensor& a, py::object rtol, bool hermitian, py::object rcond) {
        double r = -1;
        if (!rcond.is_none()) r = rcond.cast<double>();
        if (!rtol.is_none()) r = rtol.cast<double>();
        return linalg::pinv(a, r, hermitian);
      },
      py::arg("A"), py::kw_only(), py::arg("rtol") = py::none(), py::arg("hermitian") = false,
      py::arg("rcond") = py::none());
  la.def(
      "matrix_rank",
      [](const Tensor& a, py::object atol, py::object rtol, bool hermitian, py::object tol) {
        double at = 0, r = -1;
        if (!tol.is_none()) {
          at = tol.cast<double>();
          r = 0;
        }
        if (!atol.is_none()) at = atol.cast<double>();
        if (!rtol.is_none()) r = rtol.cast<double>();
        return linalg::matrix_rank(a, at, r, hermitian);
      },
      py::arg("A"), py::kw_only(), py::arg("atol") = py::none(), py::arg("rtol") = py::none(),
      py::arg("hermitian") = false, py::arg("tol") = py::none());
  la.def(
      "cross",
      [](const Tensor& a, const Tensor& b, int64_t dim) { return linalg::cross(a, b, dim); },
      py::arg("input"), py::arg("other"), py::kw_only(), py::arg("dim") = -1);
  la.def(
      "diagonal",
      [](const Tensor& a, int64_t o, int64_t d1, int64_t d2) { return diagonal(a, o, d1, d2); },
      py::arg("A"), py::kw_only(), py::arg("offset") = 0, py::arg("dim1") = -2,
      py::arg("dim2") = -1);
  la.def(
      "matmul",
      [](const Tensor& a, const Tensor& b) {
        MaybeNoGil g(concrete(a) && concrete(b));
        return matmul(a, b);
      },
      py::arg("input"), py::arg("other"));
}

}  // namespace kiln::python
