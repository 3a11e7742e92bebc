// Shared pieces of the kiln._C extension: argument conversion (shapes, dtypes, Python data to
// tensors), the exception classes, and the rule for when a binding releases the GIL. Each
// binding file registers its part of the module through one init_* function declared here.
#pragma once
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace py = pybind11;

namespace kiln::python {

using TensorClass = py::class_<Tensor>;

// ---- errors ---------------------------------------------------------------------------------
/// kiln.Error (a RuntimeError) and its subclasses that are also ValueError, TypeError and
/// IndexError, so `except IndexError` works where Python users expect it and `except kiln.Error`
/// catches every Kiln failure.
PyObject* error_type();
PyObject* value_error_type();
PyObject* type_error_type();
PyObject* index_error_type();
[[noreturn]] void raise(PyObject* type, const std::string& msg);

// ---- conversions ----------------------------------------------------------------------------
/// A dtype from a kiln.dtype, a name ("float32", "int64", ...), a Python type (float, int,
/// bool) or a NumPy dtype (anything with a `.name`).
DType dtype_from(py::handle h);
/// A shape from a sequence of ints (None or -1: a dynamic dim, where `allow_any`) or an int.
Shape shape_from(py::handle h, bool allow_any = false, const char* what = "shape");
/// A shape given either as one sequence or as several ints (`zeros(2, 3)`, `zeros((2, 3))`).
Shape shape_from_args(const py::args& args, const char* what);
/// Ints from an int or a sequence of ints.
std::vector<int64_t> ints_from(py::handle h, const char* what);
/// A copy of Python data as a tensor: a Tensor (cast when dtype is given), a bool, int or
/// float, a nested list or tuple, or anything with the buffer protocol (NumPy arrays).
Tensor tensor_from_object(py::handle h, std::optional<DType> dtype = std::nullopt);
/// A tensor or a sequence of tensors as a list; anything else is a kiln.TypeError naming `what`.
/// With `none_ok` (autograd's arguments), None is the empty list and a None entry an undefined
/// tensor.
std::vector<Tensor> tensors_from(py::handle h, const char* what, bool none_ok = false);
/// A tensor sharing the memory of a buffer (NumPy array): kiln.from_numpy.
Tensor tensor_from_buffer(py::handle h);
/// Nested lists of the tensor's values (tolist) or a Python number for 0-d tensors.
py::object to_python(const Tensor& t);
/// The Python number of a one-element tensor (item).
py::object item_of(const Tensor& t);
/// `t` itself when concrete; for a traced tensor, the host read (a graph break under jit) with
/// the calling Python line, outside the kiln package, as its `file:line`, which explain() shows.
Tensor host_read(const Tensor& t, const char* what);

// ---- symbolic sizes (sym_int.cpp) ----
void init_sym_int(py::module_& m);
/// Whether `h` is a kiln.SymInt that is a symbol (a dynamic dim's size while tracing).
bool is_symbolic_size(py::handle h);
/// Whether `h` (an int, a SymInt, or a tuple/list of them) holds a symbol.
bool any_symbolic_size(py::handle h);
/// The sizes `h` gives (an int or SymInt, or a tuple/list of them).
std::vector<SymInt> sym_sizes_from(py::handle h, const char* what);
/// x.shape[d] / x.size(d): an int, a SymInt for a dynamic dim while tracing, None in a graph
/// built by hand.
py::object size_object(const Tensor& t, int64_t d);

/// Kernels on at least this many elements run with the GIL released, so other Python threads
/// proceed; below it releasing and re-taking the GIL (~0.1 us) would be most of a small op's
/// cost (W3's per-op budget is 0.5 us).
constexpr int64_t kReleaseGilNumel = 1 << 14;
inline bool big(const Tensor& t) { return t.is_concrete() && t.numel() >= kReleaseGilNumel; }

/// Holds the GIL released for its lifetime when `release` is true.
class MaybeNoGil {
 public:
  explicit MaybeNoGil(bool release) {
    if (release) state_ = PyEval_SaveThread();
  }
  ~MaybeNoGil() {
    if (state_) PyEval_RestoreThread(state_);
  }
  MaybeNoGil(const MaybeNoGil&) = delete;
  MaybeNoGil& operator=(const MaybeNoGil&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

/// Held (with the GIL, outside the released region) around a long call that releases the GIL
/// (Session.run, a jitted call), so Ctrl-C stops it between steps: on the main thread, the
/// call's cancellation points run Python's signal handlers every 50 ms (interrupt.cpp), and
/// what a handler raises (KeyboardInterrupt) ends the call. Nested calls (a Session.run inside
/// a jitted function being traced) go by the outermost one's scope.
class InterruptibleCall {
 public:
  InterruptibleCall();
  ~InterruptibleCall();
  InterruptibleCall(const InterruptibleCall&) = delete;
  InterruptibleCall& operator=(const InterruptibleCall&) = delete;

 private:
  bool counted_ = false;                      // a call of the main thread
  std::optional<InterruptCheckScope> check_;  // the outermost one's
};

/// `a` cast to `dtype` first, as torch's dtype= argument of reductions and softmax does; None
/// leaves it as it is.
inline Tensor with_dtype(const Tensor& a, py::handle dtype) {
  return dtype.is_none() ? a : a.to(dtype_from(dtype));
}
/// Dims of a reduction: None (all), an int or a sequence of ints.
std::vector<int64_t> dims_from(py::handle h);
/// "mean", "sum" or "none".
Reduction reduction_from(const std::string& s);

/// Defines `name` both as kiln.name(input, ...) and as the method Tensor.name(...).
template <typename F, typename... A>
void def_both(py::module_& m, TensorClass& cls, const char* name, const char* doc, F f,
              const A&... rest) {
  m.def(name, f, py::arg("input"), rest..., doc);
  cls.def(name, f, rest..., doc);
}

/// A Tensor argument that also accepts Python numbers, lists and NumPy arrays (copied).
struct TensorLike {
  Tensor t;
};

// ---- the module's parts -----------------------------------------------------------------------
void init_errors(py::module_& m);
void init_interrupt(py::module_& m);
TensorClass init_tensor(py::module_& m);
void init_indexing(TensorClass& cls);
void init_interop(py::module_& m, TensorClass& cls);
void init_ops_math(py::module_& m, TensorClass& cls);
void init_ops_nn(py::module_& m, TensorClass& cls);
void init_ops_shape(py::module_& m, TensorClass& cls);
void init_ops_math_losses(py::module_& m, TensorClass& cls);
void init_ops_reduce_linalg(py::module_& m, TensorClass& cls);
void init_autograd(py::module_& m, TensorClass& cls);
void init_graph(py::module_& m);
void init_nn(py::module_& m);
void init_optim(py::module_& m);
void init_io(py::module_& m);
void init_jit(py::module_& m);
void init_fast_ops(py::module_& m, TensorClass& cls);
void init_binding_errors(py::module_& m);

}  // namespace kiln::python

namespace pybind11::detail {
/// kiln.Tensor arguments (self included): pybind11's own caster, except that an instance made
/// by Tensor.__new__ without __init__ raises TypeError. pybind11 handed such an instance's
/// uninitialized memory to the binding as a Tensor, and the first use crashed the process.
template <>
class type_caster<kiln::Tensor> : public type_caster_base<kiln::Tensor> {
 public:
  bool load(handle src, bool convert) {
    if (src && typeinfo && PyObject_TypeCheck(src.ptr(), typeinfo->type) &&
        !reinterpret_cast<instance*>(src.ptr())->get_value_and_holder().holder_constructed())
      kiln::python::raise(kiln::python::type_error_type(),
                          "[Tensor] this kiln.Tensor holds no tensor: it was made by "
                          "Tensor.__new__ without __init__ (use kiln.tensor(data) or "
                          "kiln.Tensor(data))");
    return type_caster_base<kiln::Tensor>::load(src, convert);
  }
};

/// A Python bool, int or float (or a NumPy scalar of those kinds) as a kiln::Scalar that keeps
/// its kind, which dtype promotion reads: int32 tensor + 2 is int32, + 2.0 float32.
template <>
struct type_caster<kiln::Scalar> {
  PYBIND11_TYPE_CASTER(kiln::Scalar, const_name("float | int | bool"));
  bool load(handle src, bool convert) {
    PyObject* o = src.ptr();
    if (!o) return false;
    if (PyBool_Check(o)) {
      value = kiln::Scalar(o == Py_True);
      return true;
    }
    if (PyFloat_Check(o)) {
      value = kiln::Scalar(PyFloat_AS_DOUBLE(o));
      return true;
    }
    if (PyLong_Check(o)) {
      int overflow = 0;
      const long long i = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow)
        kiln::python::raise(
            kiln::python::value_error_type(),
            "[scalar] the Python int " + std::string(py::str(src)) + " does not fit in int64");
      if (i == -1 && PyErr_Occurred()) throw error_already_set();
      value = kiln::Scalar(static_cast<int64_t>(i));
      return true;
    }
    if (!convert) return false;
    // NumPy scalars (np.float32(2), np.int64(3), np.bool_(True)) keep their kind.
    if (PyObject_HasAttrString(o, "dtype") && PyObject_HasAttrString(o, "item") &&
        !PyObject_HasAttrString(o, "shape")) {
      object item = reinterpret_borrow<object>(src).attr("item")();
      return load(item, false);
    }
    if (PyObject_HasAttrString(o, "dtype") && PyObject_HasAttrString(o, "ndim") &&
        reinterpret_borrow<object>(src).attr("ndim").cast<int>() == 0 &&
        !PyObject_HasAttrString(o, "requires_grad")) {
      object item = reinterpret_borrow<object>(src).attr("item")();
      return load(item, false);
    }
    return false;
  }
  static handle cast(const kiln::Scalar& s, return_value_policy, handle) {
    if (s.is_bool()) return PyBool_FromLong(s.to_int());
    if (s.is_integral()) return PyLong_FromLongLong(s.to_int());
    return PyFloat_FromDouble(s.to_double());
  }
};

template <>
struct type_caster<kiln::python::TensorLike> {
  PYBIND11_TYPE_CASTER(kiln::python::TensorLike, const_name("Tensor | ArrayLike"));
  bool load(handle src, bool convert) {
    make_caster<kiln::Tensor> c;
    if (c.load(src, false)) {
      value.t = cast_op<kiln::Tensor&>(c);
      return true;
    }
    if (!convert || src.is_none()) return false;
    try {
      value.t = kiln::python::tensor_from_object(src);
    } catch (const kiln::Error&) {
      return false;
    } catch (const error_already_set&) {
      return false;
    }
    return true;
  }
};
}  // namespace pybind11::detail
