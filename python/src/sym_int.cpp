// kiln.SymInt: the size of a dynamic dim while kiln.jit traces (x.shape, x.size(d)). It behaves
// as an int: arithmetic (+ - * // % and their reflections) records into the trace, and the
// ops that take sizes (view/reshape, expand, slicing, narrow, arange, zeros/ones/full) take it.
// Using it as a plain number (int(), range(), an index, printing) guards on its value;
// comparing it guards on the relation only (kiln/ops/sym_int.h).
#include "python/src/common.h"

namespace kiln::python {
namespace {

int64_t value_of(const SymInt& s) {
  if (!s.is_symbolic()) return s.hint();
  return host_read(s.value(), "int").item<int64_t>();
}

// The comparison as a host read: a symbolic one is a guard on the relation at the Python line.
bool compare(const SymInt& a, const char* op, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt::compare(a, op, b);
  const std::string o = op;
  const Tensor x = a.as_tensor(), y = b.as_tensor();
  const Tensor r = o == "<"    ? lt(x, y)
                   : o == "<=" ? le(x, y)
                   : o == ">"  ? gt(x, y)
                   : o == ">=" ? ge(x, y)
                   : o == "==" ? eq(x, y)
                               : ne(x, y);
  return host_read(r, "compare").item<bool>();
}

bool is_int_like(py::handle h) {
  return (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) || py::isinstance<SymInt>(h);
}

SymInt as_sym(py::handle h) {
  if (py::isinstance<SymInt>(h)) return h.cast<SymInt>();
  return SymInt(h.cast<int64_t>());
}

}  // namespace

bool is_symbolic_size(py::handle h) {
  return py::isinstance<SymInt>(h) && h.cast<const SymInt&>().is_symbolic();
}

bool any_symbolic_size(py::handle h) {
  if (is_symbolic_size(h)) return true;
  if (!PyTuple_Check(h.ptr()) && !PyList_Check(h.ptr())) return false;
  for (py::handle e : py::reinterpret_borrow<py::sequence>(h))
    if (is_symbolic_size(e)) return true;
  return false;
}

std::vector<SymInt> sym_sizes_from(py::handle h, const char* what) {
  std::vector<SymInt> out;
  if (!PyTuple_Check(h.ptr()) && !PyList_Check(h.ptr())) {
    out.push_back(as_sym(h));
    return out;
  }
  for (py::handle e : py::reinterpret_borrow<py::sequence>(h)) {
    if (!is_int_like(e))
      raise(type_error_type(),
            str_cat("[", what, "] expected ints, got ", py::repr(e).cast<std::string>()));
    out.push_back(as_sym(e));
  }
  return out;
}

py::object size_object(const Tensor& t, int64_t d) {
  const int64_t n = t.size(d);
  if (n >= 0) return py::int_(n);
  SymInt s = sym_size(t, d);
  // A graph built by hand has no traced sizes: its dynamic dims stay None, as in TF1.
  if (s.hint() == SymInt::kNoHint) return py::none();
  return py::cast(s);
}

void init_sym_int(py::module_& m) {
  using S = const SymInt&;
  py::class_<SymInt>(m, "SymInt",
                     "The size of a dynamic dim while kiln.jit traces: an int that records its "
                     "arithmetic (see docs/jit.md, Symbolic sizes).")
      .def(py::init<int64_t>(), py::arg("value"))
      .def_property_readonly("is_symbolic", &SymInt::is_symbolic)
      .def_property_readonly(
          "hint", [](S s) { return s.hint(); },
          "Its value in the trace (reading it adds no guard).")
      .def("__int__", &value_of)
      .def("__index__", &value_of)
      .def("__float__", [](S s) { return static_cast<double>(value_of(s)); })
      .def("__bool__", [](S s) { return compare(s, "!=", SymInt(0)); })
      .def("__hash__", [](S s) { return py::hash(py::int_(value_of(s))); })
      // repr (debuggers, tracebacks) reads no value; str (print, f-strings) guards on it.
      .def("__repr__",
           [](S s) {
             if (!s.is_symbolic()) return std::to_string(s.hint());
             return s.hint() == SymInt::kNoHint ? std::string("SymInt(?)")
                                                : str_cat("SymInt(", s.hint(), ")");
           })
      .def("__str__", [](S s) { return std::to_string(value_of(s)); })
      .def(
          "__add__", [](S a, S b) { return a + b; }, py::is_operator())
      .def(
          "__radd__", [](S a, S b) { return b + a; }, py::is_operator())
      .def(
          "__sub__", [](S a, S b) { return a - b; }, py::is_operator())
      .def(
          "__rsub__", [](S a, S b) { return b - a; }, py::is_operator())
      .def(
          "__mul__", [](S a, S b) { return a * b; }, py::is_operator())
      .def(
          "__rmul__", [](S a, S b) { return b * a; }, py::is_operator())
      .def(
          "__floordiv__", [](S a, S b) { return floordiv(a, b); }, py::is_operator())
      .def(
          "__rfloordiv__", [](S a, S b) { return floordiv(b, a); }, py::is_operator())
      .def(
          "__mod__", [](S a, S b) { return mod(a, b); }, py::is_operator())
      .def(
          "__rmod__", [](S a, S b) { return mod(b, a); }, py::is_operator())
      // With a float the result is a float: the size's value is needed (a guard on it).
      .def(
          "__mul__", [](S a, double b) { return static_cast<double>(value_of(a)) * b; },
          py::is_operator())
      .def(
          "__rmul__", [](S a, double b) { return b * static_cast<double>(value_of(a)); },
          py::is_operator())
      .def(
          "__truediv__", [](S a, double b) { return static_cast<double>(value_of(a)) / b; },
          py::is_operator())
      .def(
          "__rtruediv__", [](S a, double b) { return b / static_cast<double>(value_of(a)); },
          py::is_operator())
      // With a tensor the size is a 0-d int64 tensor (promotes as a Python int would).
      .def(
          "__add__", [](S a, const Tensor& t) { return add(a.as_tensor(), t); }, py::is_operator())
      .def(
          "__radd__", [](S a, const Tensor& t) { return add(t, a.as_tensor()); }, py::is_operator())
      .def(
          "__sub__", [](S a, const Tensor& t) { return sub(a.as_tensor(), t); }, py::is_operator())
      .def(
          "__rsub__", [](S a, const Tensor& t) { return sub(t, a.as_tensor()); }, py::is_operator())
      .def(
          "__mul__", [](S a, const Tensor& t) { return mul(a.as_tensor(), t); }, py::is_operator())
      .def(
          "__rmul__", [](S a, const Tensor& t) { return mul(t, a.as_tensor()); }, py::is_operator())
      .def(
          "__truediv__", [](S a, const Tensor& t) { return div(a.as_tensor(), t); },
          py::is_operator())
      .def(
          "__rtruediv__", [](S a, const Tensor& t) { return div(t, a.as_tensor()); },
          py::is_operator())
      .def("__neg__", [](S a) { return -a; })
      .def("__pos__", [](S a) { return a; })
      .def(
          "__lt__", [](S a, S b) { return compare(a, "<", b); }, py::is_operator())
      .def(
          "__le__", [](S a, S b) { return compare(a, "<=", b); }, py::is_operator())
      .def(
          "__gt__", [](S a, S b) { return compare(a, ">", b); }, py::is_operator())
      .def(
          "__ge__", [](S a, S b) { return compare(a, ">=", b); }, py::is_operator())
      .def(
          "__eq__", [](S a, S b) { return compare(a, "==", b); }, py::is_operator())
      .def(
          "__ne__", [](S a, S b) { return compare(a, "!=", b); }, py::is_operator());
  py::implicitly_convertible<py::int_, SymInt>();
  m.def(
      "sym_max", [](S a, S b) { return sym_max(a, b); },
      "max of two sizes without a guard (torch.sym_max).");
  m.def(
      "sym_min", [](S a, S b) { return sym_min(a, b); },
      "min of two sizes without a guard (torch.sym_min).");
  m.def(
      "mark_dynamic", [](const Tensor& t, int64_t dim) { mark_dynamic(t, dim); }, py::arg("t"),
      py::arg("index"),
      "torch._dynamo.mark_dynamic: dim `index` of t is dynamic from a jitted function's first "
      "version on (its size a kiln.SymInt while tracing).");
  m.def(
      "mark_static", [](const Tensor& t, int64_t dim) { mark_static(t, dim); }, py::arg("t"),
      py::arg("index"),
      "torch._dynamo.mark_static: dim `index` of t is never made dynamic (a version per size).");
  m.def(
      "_arange_symint",
      [](S start, S end, S step, DType dtype) { return arange_symint(start, end, step, dtype); },
      py::arg("start"), py::arg("end"), py::arg("step"), py::arg("dtype"));
  m.def(
      "_full_symint",
      [](py::handle shape, double value, DType dtype) {
        return full_symint(sym_sizes_from(shape, "full"), value, dtype);
      },
      py::arg("size"), py::arg("value"), py::arg("dtype"));
}

}  // namespace kiln::python
