// Fast paths for the arithmetic Python code calls most: the number slots of kiln.Tensor (a + b,
// a - 1.0, 2.0 * a, a / b) and kiln.add/sub/mul/div on two tensors or a tensor and a number. They
// skip pybind11's overload dispatch (argument loaders, function_call records), which was most of
// an eager op's cost from Python (W3: ~0.3 of ~0.45 us per add); every other call falls back to
// the pybind11 overloads defined in tensor.cpp and ops_math.cpp, which keep the signatures that
// help() and the stubs show.
#include "common.h"

namespace kiln::python {
namespace {

PyTypeObject* g_tensor_type = nullptr;

// The Tensor held by a kiln.Tensor instance (exact type; nobody subclasses it), else null.
const Tensor* tensor_of(PyObject* o) {
  if (Py_TYPE(o) != g_tensor_type) return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(o);
  py::detail::value_and_holder vh = inst->get_value_and_holder();
  // Tensor.__new__ without __init__ leaves no value: the pybind11 path then raises.
  if (!vh.holder_constructed()) return nullptr;
  return static_cast<const Tensor*>(vh.value_ptr());
}

// A Python bool, int or float as a Scalar of that kind (promotion reads the kind); ints past
// int64 fall through to the pybind11 overloads, which raise.
bool number_of(PyObject* o, Scalar* v) {
  if (PyFloat_Check(o)) {
    *v = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  if (PyBool_Check(o)) {
    *v = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (i == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    *v = Scalar(static_cast<int64_t>(i));
    return true;
  }
  return false;
}

PyObject* wrap(Tensor&& t) {
  return py::cast(std::move(t), py::return_value_policy::move).release().ptr();
}

// Runs f, turning C++ exceptions into Python ones as pybind11's translators would.
template <typename F>
PyObject* guarded(F f) {
  try {
    return f();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const kiln::Error& e) {
    PyErr_SetString(error_type(), e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

struct BinOp {
  Tensor (*tt)(const Tensor&, const Tensor&);
  Tensor (*ts)(const Tensor&, const Scalar&);  // tensor op number
  Tensor (*st)(const Scalar&, const Tensor&);  // number op tensor
  const char* fwd_name;                        // the pybind11 methods for every other case
  const char* rev_name;
  mutable PyObject* fwd = nullptr;
  mutable PyObject* rev = nullptr;
};

const BinOp kAdd{[](const Tensor& a, const Tensor& b) { return add(a, b); },
                 [](const Tensor& a, const Scalar& b) { return add(a, b); },
                 [](const Scalar& a, const Tensor& b) { return add(b, a); }, "__add__", "__radd__"};
const BinOp kSub{[](const Tensor& a, const Tensor& b) { return sub(a, b); },
                 [](const Tensor& a, const Scalar& b) { return sub(a, b); },
                 [](const Scalar& a, const Tensor& b) { return sub(a, b); }, "__sub__", "__rsub__"};
const BinOp kMul{[](const Tensor& a, const Tensor& b) { return mul(a, b); },
                 [](const Tensor& a, const Scalar& b) { return mul(a, b); },
                 [](const Scalar& a, const Tensor& b) { return mul(b, a); }, "__mul__", "__rmul__"};
const BinOp kDiv{[](const Tensor& a, const Tensor& b) { return div(a, b); },
                 [](const Tensor& a, const Scalar& b) { return div(a, b); },
                 [](const Scalar& a, const Tensor& b) { return div(a, b); }, "__truediv__",
                 "__rtruediv__"};

// a op b for the cases the fast path takes; NotImplemented (a new reference) otherwise.
PyObject* binary(const BinOp& op, PyObject* a, PyObject* b) {
  return guarded([&]() -> PyObject* {
    const Tensor* ta = tensor_of(a);
    const Tensor* tb = tensor_of(b);
    Scalar v(0.0);
    if (ta && tb) {
      MaybeNoGil g(big(*ta) || big(*tb));
      return wrap(op.tt(*ta, *tb));
    }
    if (ta && number_of(b, &v)) {
      MaybeNoGil g(big(*ta));
      return wrap(op.ts(*ta, v));
    }
    if (tb && number_of(a, &v)) {
      MaybeNoGil g(big(*tb));
      return wrap(op.st(v, *tb));
    }
    // NumPy scalars, lists, ...: the pybind11 overloads decide (NotImplemented if none fits).
    if (ta) return PyObject_CallFunctionObjArgs(op.fwd, a, b, nullptr);
    if (tb) return PyObject_CallFunctionObjArgs(op.rev, b, a, nullptr);
    Py_RETURN_NOTIMPLEMENTED;
  });
}

PyObject* nb_add(PyObject* a, PyObject* b) { return binary(kAdd, a, b); }
PyObject* nb_sub(PyObject* a, PyObject* b) { return binary(kSub, a, b); }
PyObject* nb_mul(PyObject* a, PyObject* b) { return binary(kMul, a, b); }
PyObject* nb_div(PyObject* a, PyObject* b) { return binary(kDiv, a, b); }

// kiln.add(a, b) and friends: the fast path for two positional tensor/number arguments, else
// the pybind11 function (kept as the fallback, with its signatures and docstring).
struct FastFn {
  const BinOp* op;
  PyObject* slow;
  PyMethodDef def;
};
FastFn g_fns[4];

PyObject* fast_call(FastFn& f, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 2 && !kwnames && (tensor_of(args[0]) || tensor_of(args[1]))) {
    PyObject* r = binary(*f.op, args[0], args[1]);
    if (r != Py_NotImplemented) return r;
    Py_DECREF(r);
  }
  return PyObject_Vectorcall(f.slow, args, static_cast<size_t>(nargs), kwnames);
}
template <int I>
PyObject* fast_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return fast_call(g_fns[I], args, nargs, kwnames);
}

}  // namespace

void init_fast_ops(py::module_& m, TensorClass& cls) {
  g_tensor_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  // The pybind11 __add__ etc. stay in the class dict (explicit calls, stubs); the slots the
  // interpreter calls for operators go straight to the fast path. Nothing sets those attributes
  // again later, which would recompute the slots.
  for (const BinOp* op : {&kAdd, &kSub, &kMul, &kDiv}) {
    op->fwd = py::object(cls.attr(op->fwd_name)).release().ptr();
    op->rev = py::object(cls.attr(op->rev_name)).release().ptr();
  }
  PyNumberMethods* nm = g_tensor_type->tp_as_number;
  nm->nb_add = nb_add;
  nm->nb_subtract = nb_sub;
  nm->nb_multiply = nb_mul;
  nm->nb_true_divide = nb_div;
  PyType_Modified(g_tensor_type);

  const char* names[4] = {"add", "sub", "mul", "div"};
  const BinOp* ops[4] = {&kAdd, &kSub, &kMul, &kDiv};
  _PyCFunctionFastWithKeywords entries[4] = {fast_entry<0>, fast_entry<1>, fast_entry<2>,
                                             fast_entry<3>};
  for (int i = 0; i < 4; ++i) {
    py::object slow = m.attr(names[i]);
    FastFn& f = g_fns[i];
    f.op = ops[i];
    f.slow = slow.release().ptr();  // lives as long as the process, as the module does
    std::string doc = py::str(py::handle(f.slow).attr("__doc__")).cast<std::string>();
    f.def =
        PyMethodDef{names[i], reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(entries[i])),
                    METH_FASTCALL | METH_KEYWORDS, strdup(doc.c_str())};
    PyObject* fn = PyCFunction_NewEx(&f.def, nullptr, m.attr("__name__").ptr());
    if (!fn) throw py::error_already_set();
    m.attr(names[i]) = py::reinterpret_steal<py::object>(fn);
  }
  m.attr("subtract") = m.attr("sub");
  m.attr("multiply") = m.attr("mul");
  m.attr("divide") = m.attr("div");
  m.attr("true_divide") = m.attr("div");
}

}  // namespace kiln::python
