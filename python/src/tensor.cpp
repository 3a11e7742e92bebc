// kiln.Tensor: metadata, host reads, views, casts, in-place ops and Python operators, plus the
// dtype enum and the factories (tensor, zeros, randn, arange, ...).
#include <sstream>

#include "common.h"
#include "kiln/dispatch/dispatch.h"

namespace kiln::python {
namespace {

std::string repr_of(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  if (t.is_symbolic() && !t.is_concrete()) {
    std::ostringstream os;
    os << "tensor(<symbolic>, shape=" << t.shape() << ", dtype=" << t.dtype() << ")";
    return os.str();
  }
  std::ostringstream os;
  os << t;
  return os.str();
}

py::tuple shape_tuple(const Tensor& t) {
  const Shape& s = t.shape();
  py::tuple r(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    r[i] = s[i] < 0 ? size_object(t, static_cast<int64_t>(i)) : py::object(py::int_(s[i]));
  return r;
}

// The target of view/reshape from *args: a SymInt-aware form when a size is a symbol.
Tensor reshape_args(const Tensor& t, const py::args& s, const char* what) {
  py::handle h = s.size() == 1 && !PyIndex_Check(s[0].ptr()) ? py::handle(s[0]) : py::handle(s);
  if (any_symbolic_size(h)) return reshape_symint(t, sym_sizes_from(h, what));
  return t.reshape(Shape(ints_from(h, what)));
}

std::optional<DType> opt_dtype(py::handle h) {
  if (h.is_none()) return std::nullopt;
  return dtype_from(h);
}

Tensor maybe_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// Binary ops with a tensor or a Python number on the other side; the GIL is released for big
// operands (common.h).
template <typename F>
Tensor bin(const Tensor& a, const Tensor& b, F f) {
  MaybeNoGil g(big(a) || big(b));
  return f(a, b);
}
template <typename F>
Tensor un(const Tensor& a, F f) {
  MaybeNoGil g(big(a));
  return f(a);
}

}  // namespace

TensorClass init_tensor(py::module_& m) {
  py::enum_<DType>(m, "dtype",
                   "Element types: float32, float64, float16, bfloat16, int64, int32, int16, "
                   "int8, uint8, bool.")
      .value("float32", Float32)
      .value("float64", Float64)
      .value("int64", Int64)
      .value("int32", Int32)
      .value("bool", Bool)
      .value("float16", Float16)
      .value("bfloat16", BF16)
      .value("int8", Int8)
      .value("uint8", UInt8)
      .value("int16", Int16)
      .def_property_readonly("is_signed", [](DType d) { return d != UInt8 && d != Bool; })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); })
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); })
      .def("__repr__", [](DType d) { return std::string("kiln.") + dtype_name(d); })
      .def("__str__", [](DType d) { return std::string("kiln.") + dtype_name(d); });
  m.attr("float32") = Float32;
  m.attr("float64") = Float64;
  m.attr("int64") = Int64;
  m.attr("int32") = Int32;
  m.attr("bool") = Bool;
  m.attr("float") = Float32;
  m.attr("double") = Float64;
  m.attr("long") = Int64;
  m.attr("int") = Int32;
  m.attr("float16") = Float16;
  m.attr("half") = Float16;
  m.attr("bfloat16") = BF16;
  m.attr("int8") = Int8;
  m.attr("uint8") = UInt8;
  m.attr("int16") = Int16;
  m.attr("short") = Int16;
  m.def("promote_types", &promote, py::arg("type1"), py::arg("type2"),
        "The dtype an op on tensors of these two dtypes computes in (torch.promote_types).");

  TensorClass cls(m, "Tensor", py::buffer_protocol(),
                  "A strided view of memory (concrete), a symbolic value of a graph being built or "
                  "traced, or a dead value; see docs/design.md section 3.");
  cls.def(py::init([](py::object data, py::object dtype, bool requires_grad) {
            return maybe_grad(tensor_from_object(data, opt_dtype(dtype)), requires_grad);
          }),
          py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false)
      // ---- metadata ----
      .def_property_readonly("shape", &shape_tuple, "The sizes, a tuple (None for a dynamic dim).")
      .def(
          "size",
          [](const Tensor& t, py::object d) -> py::object {
            if (d.is_none()) return shape_tuple(t);
            return size_object(t, d.cast<int64_t>());
          },
          py::arg("dim") = py::none(), "The shape, or the size of one dim.")
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def(
          "stride",
          [](const Tensor& t, py::object d) -> py::object {
            if (d.is_none())
              return py::cast(std::vector<int64_t>(t.strides().begin(), t.strides().end()));
            return py::int_(t.stride(d.cast<int64_t>()));
          },
          py::arg("dim") = py::none())
      .def("is_contiguous", &Tensor::is_contiguous)
      .def_property_readonly("is_symbolic", &Tensor::is_symbolic)
      .def_property_readonly("is_dead", &Tensor::is_dead)
      .def("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def("shares_storage", &Tensor::shares_storage, py::arg("other"))
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) raise(type_error_type(), "[len] len() of a 0-d tensor");
             // A dynamic dim under jit: len() needs the number (a guard on its value).
             if (t.size(0) < 0) return host_read(sym_size(t, 0).as_tensor(), "len").item<int64_t>();
             return t.size(0);
           })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.impl()); })
      .def("__repr__", &repr_of)
      // ---- host reads ----
      .def("item", &item_of, "The value of a one-element tensor as a Python number.")
      .def("tolist", &to_python, "Nested lists of Python numbers (a number for a 0-d tensor).")
      .def("__bool__",
           [](const Tensor& t) {
             if (t.numel() != 1)
               raise(value_error_type(), str_cat("[bool] the truth value of a tensor of shape ",
                                                 t.shape(), " is ambiguous"));
             return host_read(t, "bool").item<bool>();
           })
      .def("__float__", [](const Tensor& t) { return host_read(t, "float").item<double>(); })
      .def("__int__", [](const Tensor& t) { return host_read(t, "int").item<int64_t>(); })
      .def("__index__",
           [](const Tensor& t) {
             if (is_floating(t.dtype()) || t.numel() != 1)
               raise(type_error_type(), "[index] only one-element integer tensors can be an index");
             return host_read(t, "index").item<int64_t>();
           })
      // ---- autograd ----
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def(
          "requires_grad_", [](Tensor& t, bool on) -> Tensor { return t.requires_grad_(on); },
          py::arg("requires_grad") = true)
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            if (!g.defined()) return py::none();
            return py::cast(g);
          },
          [](const Tensor& t, py::object g) {
            if (g.is_none())
              t.zero_grad();
            else
              t.set_grad(g.cast<const Tensor&>());
          })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def("retain_grad", &Tensor::retain_grad)
      .def(
          "backward",
          [](const Tensor& t, py::object gradient, bool retain_graph, bool create_graph) {
            Tensor g = gradient.is_none() ? Tensor() : tensor_from_object(gradient);
            MaybeNoGil ng(true);
            t.backward(g, retain_graph, create_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
          py::arg("create_graph") = false,
          "Backpropagates from this tensor into the .grad of leaves (torch.Tensor.backward).")
      .def("detach", &Tensor::detach)
      .def("detach_", [](Tensor& t) { return t.detach(); })
      // ---- views and copies ----
      .def("reshape", [](const Tensor& t, py::args s) { return reshape_args(t, s, "reshape"); })
      .def("view", [](const Tensor& t, py::args s) { return reshape_args(t, s, "view"); })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("t", &Tensor::t)
      .def_property_readonly("T",
                             [](const Tensor& t) {
                               std::vector<int64_t> d;
                               for (int64_t i = t.dim() - 1; i >= 0; --i) d.push_back(i);
                               return t.permute(d);
                             })
      .def_property_readonly("mT", [](const Tensor& t) { return t.transpose(-2, -1); })
      .def("permute",
           [](const Tensor& t, py::args dims) {
             return t.permute(dims.size() == 1 && !PyIndex_Check(dims[0].ptr())
                                  ? ints_from(dims[0], "permute")
                                  : ints_from(dims, "permute"));
           })
      .def(
          "narrow",
          [](const Tensor& t, int64_t dim, const SymInt& start, const SymInt& length) {
            return kiln::narrow(t, dim, start, length);
          },
          py::arg("dim"), py::arg("start"), py::arg("length"))
      .def("select", &Tensor::select, py::arg("dim"), py::arg("index"))
      .def("expand",
           [](const Tensor& t, py::args s) {
             py::handle h =
                 s.size() == 1 && !PyIndex_Check(s[0].ptr()) ? py::handle(s[0]) : py::handle(s);
             if (any_symbolic_size(h)) {
               std::vector<SymInt> v = sym_sizes_from(h, "expand");
               const int64_t off = static_cast<int64_t>(v.size()) - t.dim();
               for (size_t i = 0; i < v.size(); ++i)  // torch: -1 keeps the existing size
                 if (!v[i].is_symbolic() && v[i].hint() == -1 && static_cast<int64_t>(i) >= off)
                   v[i] = sym_size(t, static_cast<int64_t>(i) - off);
               return expand_symint(t, v);
             }
             std::vector<int64_t> v = s.size() == 1 && !PyIndex_Check(s[0].ptr())
                                          ? ints_from(s[0], "expand")
                                          : ints_from(s, "expand");
             // torch: -1 keeps the existing size.
             int64_t off = static_cast<int64_t>(v.size()) - t.dim();
             for (size_t i = 0; i < v.size(); ++i)
               if (v[i] == -1 && static_cast<int64_t>(i) >= off)
                 v[i] = t.size(static_cast<int64_t>(i) - off);
             return t.expand(Shape(v));
           })
      .def("expand_as", [](const Tensor& t, const Tensor& o) { return expand_as(t, o); })
      .def(
          "squeeze",
          [](const Tensor& t, py::object d) {
            return d.is_none() ? t.squeeze() : t.squeeze(d.cast<int64_t>());
          },
          py::arg("dim") = py::none())
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("contiguous", &Tensor::contiguous)
      .def("clone",
           [](const Tensor& t) { return un(t, [](const Tensor& a) { return a.clone(); }); })
      .def(
          "to", [](const Tensor& t, py::object d) { return t.to(dtype_from(d)); }, py::arg("dtype"))
      .def(
          "type", [](const Tensor& t, py::object d) { return t.to(dtype_from(d)); },
          py::arg("dtype"))
      .def("float", [](const Tensor& t) { return t.to(Float32); })
      .def("double", [](const Tensor& t) { return t.to(Float64); })
      .def("long", [](const Tensor& t) { return t.to(Int64); })
      .def("int", [](const Tensor& t) { return t.to(Int32); })
      .def("bool", [](const Tensor& t) { return t.to(Bool); })
      .def("half", [](const Tensor& t) { return t.to(Float16); })
      .def("bfloat16", [](const Tensor& t) { return t.to(BF16); })
      .def("char", [](const Tensor& t) { return t.to(Int8); })
      .def("byte", [](const Tensor& t) { return t.to(UInt8); })
      .def("short", [](const Tensor& t) { return t.to(Int16); })
      // ---- in place ----
      .def(
          "copy_",
          [](Tensor& t, py::handle s) -> Tensor {
            return t.copy_(py::isinstance<Tensor>(s) ? s.cast<Tensor>()
                                                     : tensor_from_object(s, t.dtype()));
          },
          py::arg("src"))
      .def(
          "fill_", [](Tensor& t, double v) -> Tensor { return t.fill_(v); }, py::arg("value"))
      .def("zero_", [](Tensor& t) -> Tensor { return t.zero_(); })
      .def("add_", [](Tensor& t, const Tensor& o) -> Tensor { return t.add_(o); })
      .def("add_", [](Tensor& t, const Scalar& o) -> Tensor { return t.add_(o); })
      .def("sub_", [](Tensor& t, const Tensor& o) -> Tensor { return t.sub_(o); })
      .def("sub_", [](Tensor& t, const Scalar& o) -> Tensor { return t.sub_(o); })
      .def("mul_", [](Tensor& t, const Tensor& o) -> Tensor { return t.mul_(o); })
      .def("mul_", [](Tensor& t, const Scalar& o) -> Tensor { return t.mul_(o); })
      .def("div_", [](Tensor& t, const Tensor& o) -> Tensor { return t.div_(o); })
      .def("div_", [](Tensor& t, const Scalar& o) -> Tensor { return t.div_(o); })
      .def("neg_", [](Tensor& t) -> Tensor { return t.neg_(); })
      .def("relu_", [](Tensor& t) -> Tensor { return t.relu_(); })
      .def(
          "clamp_",
          [](Tensor& t, py::object lo, py::object hi) -> Tensor {
            double l = lo.is_none() ? -INFINITY : lo.cast<double>();
            double h = hi.is_none() ? INFINITY : hi.cast<double>();
            return t.clamp_(l, h);
          },
          py::arg("min") = py::none(), py::arg("max") = py::none())
      .def(
          "__iadd__", [](Tensor& t, const Tensor& o) -> Tensor { return t.add_(o); },
          py::is_operator())
      .def(
          "__iadd__", [](Tensor& t, const Scalar& o) -> Tensor { return t.add_(o); },
          py::is_operator())
      .def(
          "__isub__", [](Tensor& t, const Tensor& o) -> Tensor { return t.sub_(o); },
          py::is_operator())
      .def(
          "__isub__", [](Tensor& t, const Scalar& o) -> Tensor { return t.sub_(o); },
          py::is_operator())
      .def(
          "__imul__", [](Tensor& t, const Tensor& o) -> Tensor { return t.mul_(o); },
          py::is_operator())
      .def(
          "__imul__", [](Tensor& t, const Scalar& o) -> Tensor { return t.mul_(o); },
          py::is_operator())
      .def(
          "__itruediv__", [](Tensor& t, const Tensor& o) -> Tensor { return t.div_(o); },
          py::is_operator())
      .def(
          "__itruediv__", [](Tensor& t, const Scalar& o) -> Tensor { return t.div_(o); },
          py::is_operator())
      // ---- operators: a tensor first, then a Python number (the cheaper match first) ----
      .def(
          "__add__",
          [](const Tensor& a, const Tensor& b) {
            return bin(a, b, [](auto& x, auto& y) { return add(x, y); });
          },
          py::is_operator())
      .def(
          "__add__", [](const Tensor& a, const Scalar& b) { return add(a, b); }, py::is_operator())
      .def(
          "__radd__", [](const Tensor& a, const Scalar& b) { return add(a, b); }, py::is_operator())
      .def(
          "__sub__",
          [](const Tensor& a, const Tensor& b) {
            return bin(a, b, [](auto& x, auto& y) { return sub(x, y); });
          },
          py::is_operator())
      .def(
          "__sub__", [](const Tensor& a, const Scalar& b) { return sub(a, b); }, py::is_operator())
      .def(
          "__rsub__", [](const Tensor& a, const Scalar& b) { return sub(b, a); }, py::is_operator())
      .def(
          "__mul__",
          [](const Tensor& a, const Tensor& b) {
            return bin(a, b, [](auto& x, auto& y) { return mul(x, y); });
          },
          py::is_operator())
      .def(
          "__mul__", [](const Tensor& a, const Scalar& b) { return mul(a, b); }, py::is_operator())
      .def(
          "__rmul__", [](const Tensor& a, const Scalar& b) { return mul(a, b); }, py::is_operator())
      .def(
          "__truediv__",
          [](const Tensor& a, const Tensor& b) {
            return bin(a, b, [](auto& x, auto& y) { return div(x, y); });
          },
          py::is_operator())
      .def(
          "__truediv__", [](const Tensor& a, const Scalar& b) { return div(a, b); },
          py::is_operator())
      .def(
          "__rtruediv__", [](const Tensor& a, const Scalar& b) { return div(b, a); },
          py::is_operator())
      .def(
          "__pow__", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, py::is_operator())
      .def(
          "__pow__", [](const Tensor& a, const Scalar& b) { return pow(a, b); }, py::is_operator())
      .def(
          "__rpow__", [](const Tensor& a, const Scalar& b) { return pow(b, a); }, py::is_operator())
      .def(
          "__floordiv__", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); },
          py::is_operator())
      .def(
          "__floordiv__",
          [](const Tensor& a, const Scalar& b) {
            return floor_divide(a, scalar_tensor(b.to_double(), result_type(a, b)));
          },
          py::is_operator())
      .def(
          "__rfloordiv__",
          [](const Tensor& a, const Scalar& b) {
            return floor_divide(scalar_tensor(b.to_double(), result_type(a, b)), a);
          },
          py::is_operator())
      .def(
          "__matmul__",
          [](const Tensor& a, const Tensor& b) {
            MaybeNoGil g(a.is_concrete() && b.is_concrete());
            return matmul(a, b);
          },
          py::is_operator())
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__pos__",
           [](const Tensor& a) {
             if (a.dtype() == Bool)
               raise(type_error_type(),
                     "[pos] the + operator on a bool tensor is not supported (as torch)");
             return a;
           })
      .def("__abs__", [](const Tensor& a) { return abs(a); })
      // Bitwise on integers, logical on bool (the same thing there), as torch.
      .def("__invert__", [](const Tensor& a) { return bitwise_not(a); })
      .def(
          "__and__", [](const Tensor& a, const TensorLike& b) { return bitwise_and(a, b.t); },
          py::is_operator())
      .def(
          "__or__", [](const Tensor& a, const TensorLike& b) { return bitwise_or(a, b.t); },
          py::is_operator())
      // A Python number on the left: 2 & t, True | t (a Scalar of its kind, promoting as t & 2).
      .def(
          "__rand__",
          [](const Tensor& a, const Scalar& b) {
            return bitwise_and(scalar_tensor(b.to_double(), result_type(a, b)), a);
          },
          py::is_operator())
      .def(
          "__ror__",
          [](const Tensor& a, const Scalar& b) {
            return bitwise_or(scalar_tensor(b.to_double(), result_type(a, b)), a);
          },
          py::is_operator())
      .def(
          "__rxor__",
          [](const Tensor& a, const Scalar& b) {
            return bitwise_xor(scalar_tensor(b.to_double(), result_type(a, b)), a);
          },
          py::is_operator())
      .def(
          "__rlshift__",
          [](const Tensor& a, const Scalar& b) {
            return bitwise_left_shift(scalar_tensor(b.to_double(), result_type(a, b)), a);
          },
          py::is_operator())
      .def(
          "__rrshift__",
          [](const Tensor& a, const Scalar& b) {
            return bitwise_right_shift(scalar_tensor(b.to_double(), result_type(a, b)), a);
          },
          py::is_operator())
      .def(
          "__lt__", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, py::is_operator())
      .def(
          "__lt__", [](const Tensor& a, const Scalar& b) { return lt(a, b); }, py::is_operator())
      .def(
          "__le__", [](const Tensor& a, const Tensor& b) { return le(a, b); }, py::is_operator())
      .def(
          "__le__", [](const Tensor& a, const Scalar& b) { return le(a, b); }, py::is_operator())
      .def(
          "__gt__", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, py::is_operator())
      .def(
          "__gt__", [](const Tensor& a, const Scalar& b) { return gt(a, b); }, py::is_operator())
      .def(
          "__ge__", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, py::is_operator())
      .def(
          "__ge__", [](const Tensor& a, const Scalar& b) { return ge(a, b); }, py::is_operator())
      .def(
          "__eq__", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, py::is_operator())
      .def(
          "__eq__", [](const Tensor& a, const Scalar& b) { return eq(a, b); }, py::is_operator())
      .def(
          "__ne__", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, py::is_operator())
      .def(
          "__ne__", [](const Tensor& a, const Scalar& b) { return ne(a, b); }, py::is_operator());

  // NumPy defers to Tensor's reflected operators (np.float64(2) * t is a Tensor, as in torch).
  cls.attr("__array_priority__") = 1000;

  // ---- factories ----
  m.def(
      "tensor",
      [](py::object data, py::object dtype, bool requires_grad) {
        return maybe_grad(tensor_from_object(data, opt_dtype(dtype)), requires_grad);
      },
      py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false,
      "A tensor holding a copy of `data` (a number, nested lists, a NumPy array or a tensor). "
      "Floats give float32, ints int64, bools bool unless `dtype` says otherwise.");
  m.def(
      "as_tensor",
      [](py::object data, py::object dtype) {
        if (py::isinstance<Tensor>(data)) {
          const Tensor& t = data.cast<const Tensor&>();
          return dtype.is_none() ? t : t.to(dtype_from(dtype));
        }
        if (PyObject_CheckBuffer(data.ptr()) && dtype.is_none()) return tensor_from_buffer(data);
        return tensor_from_object(data, opt_dtype(dtype));
      },
      py::arg("data"), py::arg("dtype") = py::none(),
      "Like tensor(), but shares memory with a tensor or a NumPy array when it can.");
  auto factory = [&m](const char* name, auto make, const char* doc) {
    m.def(
        name,
        [make](py::args shape, py::object dtype, bool requires_grad) {
          Shape s = shape_from_args(shape, "shape");
          return maybe_grad(make(s, dtype.is_none() ? Float32 : dtype_from(dtype)), requires_grad);
        },
        py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false, doc);
  };
  factory(
      "zeros", [](const Shape& s, DType d) { return zeros(s, d); }, "zeros(*shape, dtype=float32)");
  factory(
      "ones", [](const Shape& s, DType d) { return ones(s, d); }, "ones(*shape, dtype=float32)");
  factory(
      "empty", [](const Shape& s, DType d) { return empty(s, d); }, "empty(*shape): uninitialized");
  factory(
      "rand", [](const Shape& s, DType d) { return rand(s, d); },
      "Uniform [0, 1) from the seeded generator.");
  factory(
      "randn", [](const Shape& s, DType d) { return randn(s, d); },
      "Standard normal from the seeded generator.");
  m.def(
      "full",
      // Without a dtype the fill value's kind decides (torch: full((2,), 7) is int64).
      [](py::object shape, const Scalar& value, py::object dtype, bool requires_grad) {
        const DType t = dtype.is_none() ? scalar_dtype(value.kind()) : dtype_from(dtype);
        return maybe_grad(full(shape_from(shape), value.to_double(), t), requires_grad);
      },
      py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("requires_grad") = false);
  m.def(
      "scalar_tensor",
      [](double v, py::object dtype) {
        return scalar_tensor(v, dtype.is_none() ? Float32 : dtype_from(dtype));
      },
      py::arg("value"), py::kw_only(), py::arg("dtype") = py::none());
  m.def(
      "zeros_like",
      [](const Tensor& t, py::object d) {
        return d.is_none() ? zeros_like(t) : zeros(t.shape(), dtype_from(d));
      },
      py::arg("input"), py::kw_only(), py::arg("dtype") = py::none());
  m.def(
      "ones_like",
      [](const Tensor& t, py::object d) {
        return d.is_none() ? ones_like(t) : ones(t.shape(), dtype_from(d));
      },
      py::arg("input"), py::kw_only(), py::arg("dtype") = py::none());
  m.def(
      "full_like", [](const Tensor& t, double v) { return full_like(t, v); }, py::arg("input"),
      py::arg("fill_value"));
  m.def(
      "empty_like", [](const Tensor& t) { return empty_like(t); }, py::arg("input"));
  m.def(
      "randint",
      [](int64_t low, py::object high, py::object size, py::object dtype) {
        int64_t lo = 0, hi = low;
        if (!high.is_none()) lo = low, hi = high.cast<int64_t>();
        return randint(lo, hi, shape_from(size), dtype.is_none() ? Int64 : dtype_from(dtype));
      },
      py::arg("low"), py::arg("high") = py::none(), py::arg("size") = py::tuple(), py::kw_only(),
      py::arg("dtype") = py::none(), "randint(low, high, size) or randint(high, size=...).");
  m.def(
      "arange",
      [](py::object start, py::object end, py::object step, py::object dtype) {
        bool ints = PyLong_Check(start.ptr()) && (end.is_none() || PyLong_Check(end.ptr())) &&
                    PyLong_Check(step.ptr());
        double s = start.cast<double>(), e = 0, st = step.cast<double>();
        if (end.is_none())
          std::swap(s, e);
        else
          e = end.cast<double>();
        DType dt = dtype.is_none() ? (ints ? Int64 : Float32) : dtype_from(dtype);
        // Under a trace an integer range is a node (arange_symint): the same for every trace,
        // where a fresh tensor would be captured state that changes each time.
        if (ints && kiln::detail::capturing())
          return arange_symint(static_cast<int64_t>(s), static_cast<int64_t>(e),
                               static_cast<int64_t>(st), dt);
        return arange(s, e, st, dt);
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(),
      py::arg("dtype") = py::none(), "[start, end) by step; int64 for ints, else float32.");
  m.def(
      "linspace",
      [](double a, double b, int64_t n, py::object d) {
        return linspace(a, b, n, d.is_none() ? Float32 : dtype_from(d));
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(),
      py::arg("dtype") = py::none());
  m.def(
      "eye",
      [](int64_t n, py::object mm, py::object d) {
        return eye(n, mm.is_none() ? -1 : mm.cast<int64_t>(),
                   d.is_none() ? Float32 : dtype_from(d));
      },
      py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none());
  m.def("manual_seed", &manual_seed, py::arg("seed"), "Seeds the global generator.");
  m.def("get_rng_state", &get_rng_state);
  m.def("set_rng_state", &set_rng_state, py::arg("state"));
  m.def("get_num_threads", &get_num_threads, "Threads Kiln's kernels and oneDNN use.");
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
  return cls;
}

}  // namespace kiln::python
