// Conversions between Python objects and Kiln values, and the exception classes (kiln.Error and
// its ValueError/TypeError/IndexError subclasses) with the translator that maps kiln::Error.
#include "common.h"

#include <cmath>
#include <cstring>

#include "kiln/registry/op_def.h"

namespace kiln::python {
namespace {

PyObject* g_error = nullptr;
PyObject* g_value_error = nullptr;
PyObject* g_type_error = nullptr;
PyObject* g_index_error = nullptr;

PyObject* new_error(py::module_& m, const char* name, PyObject* base2, const char* doc) {
  std::string full = std::string("kiln.") + name;
  PyObject* bases = base2 ? PyTuple_Pack(2, g_error, base2) : PyTuple_Pack(1, PyExc_RuntimeError);
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!t) throw py::error_already_set();
  m.attr(name) = py::handle(t);
  return t;
}

// Element type of a buffer format ("f", "<d", "=q", ...); nullopt for types Kiln lacks.
std::optional<DType> dtype_of_format(const std::string& fmt, py::ssize_t itemsize) {
  std::string f = fmt;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '!' || f[0] == '>')) {
    if (f[0] == '>' || f[0] == '!') return std::nullopt;  // big-endian data
    f = f.substr(1);
  }
  if (f.size() != 1) return std::nullopt;
  switch (f[0]) {
    case 'f':
      return Float32;
    case 'd':
      return Float64;
    case '?':
      return Bool;
    case 'e':
      return Float16;
    case 'b':
      return Int8;
    case 'B':
      return UInt8;
    case 'q':
    case 'l':
    case 'i':
    case 'n':
    case 'h':
      if (itemsize == 8) return Int64;
      if (itemsize == 4) return Int32;
      if (itemsize == 2) return Int16;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// Shape and dtype of nested lists; values flattened as doubles (ints kept exact as int64).
struct Nested {
  std::vector<int64_t> shape;
  std::vector<double> f;
  std::vector<int64_t> i;
  bool any_float = false, all_bool = true;
};

void walk(py::handle h, size_t depth, Nested& n) {
  if (PyList_Check(h.ptr()) || PyTuple_Check(h.ptr())) {
    py::sequence s = py::reinterpret_borrow<py::sequence>(h);
    int64_t len = static_cast<int64_t>(py::len(s));
    if (depth == n.shape.size()) {
      if (!n.f.empty() || !n.i.empty())
        raise(value_error_type(), "[tensor] nested lists have inconsistent depth");
      n.shape.push_back(len);
    } else if (depth > n.shape.size() || n.shape[depth] != len) {
      raise(value_error_type(), str_cat("[tensor] nested lists are ragged: expected length ",
                                        depth < n.shape.size() ? n.shape[depth] : -1, " at depth ",
                                        depth, ", got ", len));
    }
    for (py::handle e : s) walk(e, depth + 1, n);
    return;
  }
  if (depth != n.shape.size())
    raise(value_error_type(), "[tensor] nested lists are ragged: a number where a list belongs");
  if (PyBool_Check(h.ptr())) {
    n.i.push_back(h.ptr() == Py_True);
    n.f.push_back(h.ptr() == Py_True);
    return;
  }
  n.all_bool = false;
  if (PyLong_Check(h.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow) raise(value_error_type(), "[tensor] integer does not fit in int64");
    n.i.push_back(v);
    n.f.push_back(static_cast<double>(v));
    return;
  }
  if (PyFloat_Check(h.ptr())) {
    n.any_float = true;
    double v = PyFloat_AS_DOUBLE(h.ptr());
    n.f.push_back(v);
    n.i.push_back(0);
    return;
  }
  if (py::isinstance<Tensor>(h)) {
    const Tensor& t = h.cast<const Tensor&>();
    if (t.numel() != 1)
      raise(value_error_type(), "[tensor] a list element is a tensor of more than one element");
    if (is_floating(t.dtype())) n.any_float = true;
    const Tensor v = host_read(t, "tensor");
    n.f.push_back(v.item<double>());
    n.i.push_back(is_floating(t.dtype()) ? 0 : v.item<int64_t>());
    return;
  }
  // NumPy scalars and other numbers.
  if (PyIndex_Check(h.ptr())) {
    n.i.push_back(py::int_(py::reinterpret_borrow<py::object>(h)).cast<int64_t>());
    n.f.push_back(static_cast<double>(n.i.back()));
    return;
  }
  if (PyNumber_Check(h.ptr())) {
    n.any_float = true;
    n.f.push_back(py::float_(py::reinterpret_borrow<py::object>(h)).cast<double>());
    n.i.push_back(0);
    return;
  }
  raise(type_error_type(),
        str_cat("[tensor] cannot make a tensor element from ",
                py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>()));
}

// Keeps the exporting object alive (and its buffer locked) while any tensor uses its memory.
struct BufferOwner {
  Py_buffer view;
};
void release_buffer(void*, void* ctx) {
  auto* owner = static_cast<BufferOwner*>(ctx);
  if (!Py_IsInitialized()) return;  // interpreter gone: the memory went with it
  PyGILState_STATE st = PyGILState_Ensure();
  PyBuffer_Release(&owner->view);
  PyGILState_Release(st);
  delete owner;
}

}  // namespace

PyObject* error_type() { return g_error; }
PyObject* value_error_type() { return g_value_error; }
PyObject* type_error_type() { return g_type_error; }
PyObject* index_error_type() { return g_index_error; }

void raise(PyObject* type, const std::string& msg) {
  PyErr_SetString(type, msg.c_str());
  throw py::error_already_set();
}

void init_errors(py::module_& m) {
  g_error = new_error(m, "Error", nullptr,
                      "Every Kiln failure; the message starts with [op_name] and names the shapes "
                      "and dtypes involved.");
  g_value_error = new_error(m, "ValueError", PyExc_ValueError, "A bad value (kiln.Error).");
  g_type_error = new_error(m, "TypeError", PyExc_TypeError, "A bad type or dtype (kiln.Error).");
  g_index_error =
      new_error(m, "IndexError", PyExc_IndexError, "An index out of range (kiln.Error).");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
  // The registry's op names, so the Python differential suite can check that it covers every op.
  m.def("_registry_op_names", [] {
    std::vector<std::string> names;
    for (const detail::OpDef* op : detail::OpRegistry::get().all()) names.push_back(op->name);
    return names;
  });
}

DType dtype_from(py::handle h) {
  if (py::isinstance<DType>(h)) return h.cast<DType>();
  if (h.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type)) return Float32;
  if (h.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type)) return Int64;
  if (h.ptr() == reinterpret_cast<PyObject*>(&PyBool_Type)) return Bool;
  std::string name;
  if (py::isinstance<py::str>(h)) {
    name = h.cast<std::string>();
  } else if (py::hasattr(h, "name") && !py::isinstance<py::type>(h)) {
    name = py::str(h.attr("name")).cast<std::string>();  // a numpy.dtype
  } else if (py::hasattr(h, "__name__")) {
    name = py::str(h.attr("__name__")).cast<std::string>();  // numpy.float32 (a type)
  }
  if (name == "float32" || name == "float") return Float32;
  if (name == "float64" || name == "double") return Float64;
  if (name == "int64" || name == "long") return Int64;
  if (name == "int32" || name == "int") return Int32;
  if (name == "bool" || name == "bool_") return Bool;
  if (name == "float16" || name == "half") return Float16;
  if (name == "bfloat16") return BF16;
  if (name == "int8") return Int8;
  if (name == "uint8") return UInt8;
  if (name == "int16" || name == "short") return Int16;
  raise(type_error_type(),
        str_cat("[dtype] not a Kiln dtype: ", py::repr(h).cast<std::string>(),
                " (expected float32, float64, float16, bfloat16, int64, int32, int16, int8, "
                "uint8 or bool)"));
}

// An int-like (int, NumPy integer, 0-d integer tensor with __index__) as int64, or kiln's error
// naming the argument: pybind11's cast would say "Unable to cast" without either.
int64_t int64_of(py::handle e, const char* what) {
  py::int_ i(py::reinterpret_borrow<py::object>(e));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow)
    raise(value_error_type(),
          str_cat("[", what, "] ", py::repr(e).cast<std::string>(), " does not fit in int64"));
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

std::vector<int64_t> ints_from(py::handle h, const char* what) {
  std::vector<int64_t> out;
  if (PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
    out.push_back(int64_of(h, what));
    return out;
  }
  if (!PySequence_Check(h.ptr()) || py::isinstance<py::str>(h))
    raise(type_error_type(),
          str_cat("[", what, "] expected an int or a sequence of ints, got ",
                  py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>()));
  for (py::handle e : py::reinterpret_borrow<py::sequence>(h)) {
    if (!PyIndex_Check(e.ptr()) || PyBool_Check(e.ptr()))
      raise(type_error_type(),
            str_cat("[", what, "] expected ints, got ", py::repr(e).cast<std::string>()));
    out.push_back(int64_of(e, what));
  }
  return out;
}

Shape shape_from(py::handle h, bool allow_any, const char* what) {
  py::object held;  // keeps a tensor's shape tuple alive while h points at it
  if (py::isinstance<Tensor>(h)) {
    held = py::tuple(h.attr("shape"));
    h = held;
  }
  Shape s;
  if (PySequence_Check(h.ptr()) && !py::isinstance<py::str>(h)) {
    for (py::handle e : py::reinterpret_borrow<py::sequence>(h)) {
      if (allow_any && e.is_none()) {
        s.push_back(Dim::any());
        continue;
      }
      if (!PyIndex_Check(e.ptr()) || PyBool_Check(e.ptr()))
        raise(type_error_type(),
              str_cat("[", what, "] expected ints, got ", py::repr(e).cast<std::string>()));
      int64_t d = int64_of(e, what);
      if (d < 0 && !(allow_any && d == -1))
        raise(value_error_type(), str_cat("[", what, "] negative dimension ", d));
      s.push_back(d);
    }
    return s;
  }
  std::vector<int64_t> v = ints_from(h, what);
  if (v[0] < 0) raise(value_error_type(), str_cat("[", what, "] negative dimension ", v[0]));
  return Shape(v);
}

Shape shape_from_args(const py::args& args, const char* what) {
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) return shape_from(args[0], false, what);
  return shape_from(args, false, what);
}

std::vector<int64_t> dims_from(py::handle h) {
  if (h.is_none()) return {};
  return ints_from(h, "dim");
}

Reduction reduction_from(const std::string& s) {
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  if (s == "none") return Reduction::None;
  raise(value_error_type(), str_cat("[reduction] expected 'mean', 'sum' or 'none', got '", s, "'"));
}

Tensor tensor_from_buffer(py::handle h) {
  auto owner = std::make_unique<BufferOwner>();
  if (PyObject_GetBuffer(h.ptr(), &owner->view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    raise(type_error_type(),
          str_cat("[from_numpy] expected an array (an object with the buffer "
                  "protocol), got ",
                  py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>()));
  }
  Py_buffer& v = owner->view;
  std::string fmt = v.format ? v.format : "B";
  std::optional<DType> dt = dtype_of_format(fmt, v.itemsize);
  if (!dt) {
    PyBuffer_Release(&v);
    raise(type_error_type(), str_cat("[from_numpy] unsupported element type '", fmt,
                                     "' (Kiln has float32, float64, float16, int64, int32, int16, "
                                     "int8, uint8 and bool)"));
  }
  Shape shape;
  Strides strides;
  int64_t lo = 0, hi = 0;  // byte span relative to buf
  for (int d = 0; d < v.ndim; ++d) {
    shape.push_back(v.shape[d]);
    int64_t st = v.strides ? v.strides[d] : 0;
    if (st % v.itemsize != 0 || st < 0) {
      PyBuffer_Release(&v);
      raise(value_error_type(),
            "[from_numpy] negative or unaligned strides are not supported; "
            "pass a copy (numpy.ascontiguousarray)");
    }
    strides.push_back(st / v.itemsize);
    if (v.shape[d] == 0) lo = hi = 0;
    hi += (v.shape[d] - 1) * st;
  }
  if (!v.strides) strides = contiguous_strides(shape);
  size_t nbytes = shape.numel() == 0 ? 0 : static_cast<size_t>(hi - lo + v.itemsize);
  void* data = v.buf;
  BufferOwner* raw = owner.release();
  auto storage = std::make_shared<Storage>(data, nbytes, release_buffer, raw);
  auto impl = make_tensor_impl();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = *dt;
  impl->offset = 0;
  impl->recompute_contiguous();
  return Tensor(std::move(impl));
}

std::vector<Tensor> tensors_from(py::handle h, const char* what, bool none_ok) {
  if (none_ok && h.is_none()) return {};
  if (py::isinstance<Tensor>(h)) return {h.cast<Tensor>()};
  if (!none_ok && !PySequence_Check(h.ptr()))
    raise(type_error_type(), str_cat("[", what, "] expected a tensor or a sequence of tensors"));
  std::vector<Tensor> out;
  for (py::handle e : py::reinterpret_borrow<py::sequence>(h)) {
    if (none_ok && e.is_none()) {
      out.emplace_back();
      continue;
    }
    if (!py::isinstance<Tensor>(e))
      raise(type_error_type(),
            str_cat("[", what, "] expected tensors, got ",
                    py::str(py::type::handle_of(e).attr("__name__")).cast<std::string>()));
    out.push_back(e.cast<Tensor>());
  }
  return out;
}

Tensor tensor_from_object(py::handle h, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(h)) {
    const Tensor& t = h.cast<const Tensor&>();
    return dtype && *dtype != t.dtype() ? t.to(*dtype) : t;
  }
  if (PyBool_Check(h.ptr())) return scalar_tensor(h.ptr() == Py_True, dtype.value_or(Bool));
  if (PyLong_Check(h.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow) raise(value_error_type(), "[tensor] integer does not fit in int64");
    DType dt = dtype.value_or(Int64);
    if (dt == Int64) return tensor(std::vector<int64_t>{v}).reshape(Shape{});  // exact past 2^53
    return scalar_tensor(static_cast<double>(v), dt);
  }
  if (PyFloat_Check(h.ptr()))
    return scalar_tensor(PyFloat_AS_DOUBLE(h.ptr()), dtype.value_or(Float32));
  if (PyObject_CheckBuffer(h.ptr()) && !PyBytes_Check(h.ptr())) {
    Tensor shared = tensor_from_buffer(h);
    Tensor copy = raw_contiguous_copy(shared);
    return dtype && *dtype != copy.dtype() ? copy.to(*dtype) : copy;
  }
  if (PyList_Check(h.ptr()) || PyTuple_Check(h.ptr())) {
    Nested n;
    walk(h, 0, n);
    Shape s(n.shape);
    DType dt = dtype.value_or(n.any_float ? Float32 : (n.all_bool && !n.i.empty()) ? Bool : Int64);
    if (n.f.empty() && !dtype) dt = Float32;  // torch.tensor([]) is float32
    if (dt == Int64 && !n.any_float) return tensor(n.i, s);
    Tensor t = tensor(n.f, s);  // float64, exact for float data and ints up to 2^53
    return t.to(dt);
  }
  if (PyNumber_Check(h.ptr())) {
    if (PyIndex_Check(h.ptr()))
      return tensor_from_object(py::int_(py::reinterpret_borrow<py::object>(h)), dtype);
    return tensor_from_object(py::float_(py::reinterpret_borrow<py::object>(h)), dtype);
  }
  raise(type_error_type(),
        str_cat("[tensor] cannot make a tensor from ",
                py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>()));
}

namespace {
// `file:line` of the innermost Python frame outside the kiln package (kiln.nn's own reads name
// the user's line that called into it). Only traced reads pay for it.
std::string python_call_site() {
  static const std::string pkg = [] {
    std::string f = py::str(py::module_::import("kiln").attr("__file__")).cast<std::string>();
    return f.substr(0, f.find_last_of('/') + 1);
  }();
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  std::string where = "<python>";
  while (f) {
    PyCodeObject* code = PyFrame_GetCode(f);
    std::string file = py::str(py::handle(reinterpret_cast<PyObject*>(code)).attr("co_filename"))
                           .cast<std::string>();
    Py_DECREF(code);
    const bool ours = !pkg.empty() && file.compare(0, pkg.size(), pkg) == 0;
    if (!ours) {
      where = str_cat(file, ":", PyFrame_GetLineNumber(f));
      Py_DECREF(f);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  return where;
}
}  // namespace

Tensor host_read(const Tensor& t, const char* what) {
  if (!t.defined() || t.is_concrete()) return t;
  return t.host_value(what, python_call_site());
}

py::object item_of(const Tensor& t0) {
  const Tensor t = host_read(t0, "item");
  if (is_floating(t.dtype())) return py::float_(t.item<double>());
  if (is_integral(t.dtype())) return py::int_(t.item<int64_t>());
  return py::bool_(t.item<bool>());
}

namespace {
template <typename T, typename Make>
py::object nest(const std::vector<T>& v, const Shape& s, size_t d, size_t& i, Make make) {
  if (d == s.size()) return make(v[i++]);
  py::list l(static_cast<size_t>(s[d]));
  for (int64_t k = 0; k < s[d]; ++k) l[static_cast<size_t>(k)] = nest(v, s, d + 1, i, make);
  return l;
}
}  // namespace

py::object to_python(const Tensor& t0) {
  const Tensor t = host_read(t0, "tolist");
  size_t i = 0;
  const Shape& s = t.shape();
  if (is_floating(t.dtype()))
    return nest(t.to_vector<double>(), s, 0, i, [](double x) { return py::float_(x); });
  if (t.dtype() == Bool)
    return nest(t.to_vector<int64_t>(), s, 0, i, [](int64_t x) { return py::bool_(x != 0); });
  return nest(t.to_vector<int64_t>(), s, 0, i, [](int64_t x) { return py::int_(x); });
}

}  // namespace kiln::python
