// Argument errors that pybind11 raises itself ("f(): incompatible function arguments", "Unable to
// cast Python instance ...") become kiln.TypeError naming the function, so bad input from Python
// never reaches a binding-layer message. Every function of the module and every method of its
// classes is wrapped once, at import, by a C function that only looks at the error on failure.
#include <deque>
#include <string>

#include "common.h"

namespace kiln::python {
namespace {

struct Target {
  PyObject* fn;      // the pybind11 function (a strong reference, kept for the process's life)
  std::string name;  // module-level name, or Class.method
  PyMethodDef def;
};
std::deque<Target> g_targets;  // stable addresses: each wrapper's capsule points into it

std::string str_of(PyObject* o) {
  PyObject* s = PyObject_Str(o);
  if (!s) {
    PyErr_Clear();
    return "?";
  }
  const char* c = PyUnicode_AsUTF8(s);
  std::string r = c ? c : "?";
  Py_DECREF(s);
  return r;
}

// Rewrites a pending pybind11 argument error as kiln.TypeError("[name] ..."); leaves any other
// error (kiln's own included) as it is.
void translate(const std::string& name) {
  if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_RuntimeError))
    return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (!value || PyErr_GivenExceptionMatches(value, error_type())) {
    PyErr_Restore(type, value, tb);
    return;
  }
  const std::string msg = str_of(value);
  std::string what;
  const size_t inc = msg.find("incompatible function arguments");
  if (inc != std::string::npos) {
    // Keep pybind11's list of signatures and what it was called with: it says what to pass.
    const size_t rest = msg.find('.', inc);
    what = "the arguments do not match any signature" +
           (rest == std::string::npos ? std::string() : msg.substr(rest + 1));
  } else if (msg.rfind("Unable to cast", 0) == 0) {
    what = "an argument has a type this function cannot take (" + msg + ")";
  } else {
    PyErr_Restore(type, value, tb);
    return;
  }
  PyErr_SetString(type_error_type(), ("[" + name + "] " + what).c_str());
  // The original stays reachable as __cause__ for whoever debugs the binding.
  PyObject *t2, *v2, *tb2;
  PyErr_Fetch(&t2, &v2, &tb2);
  PyErr_NormalizeException(&t2, &v2, &tb2);
  PyException_SetCause(v2, value);  // steals value
  Py_XDECREF(type);
  Py_XDECREF(tb);
  PyErr_Restore(t2, v2, tb2);
}

PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* t = static_cast<Target*>(PyCapsule_GetPointer(self, nullptr));
  PyObject* r = PyObject_Vectorcall(t->fn, args, static_cast<size_t>(nargs), kwnames);
  if (!r) translate(t->name);
  return r;
}

// A pybind11 function: a builtin whose __self__ is pybind11's capsule. (fast_ops' functions are
// made after this runs and fall back to the wrapped functions, so they stay unwrapped: no extra
// call on the hottest path.)
bool is_pybind_function(PyObject* o) {
  if (!PyCFunction_Check(o)) return false;
  PyObject* self = PyCFunction_GET_SELF(o);
  return self && PyCapsule_CheckExact(self);
}

PyObject* wrap(PyObject* fn, const std::string& name, PyObject* module_name) {
  Target& t = g_targets.emplace_back();
  Py_INCREF(fn);
  t.fn = fn;
  t.name = name;
  PyObject* doc = PyObject_GetAttrString(fn, "__doc__");
  const char* d = doc && PyUnicode_Check(doc) ? PyUnicode_AsUTF8(doc) : nullptr;
  PyErr_Clear();
  const std::string short_name = name.substr(name.rfind('.') + 1);
  t.def = PyMethodDef{strdup(short_name.c_str()),
                      reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(call)),
                      METH_FASTCALL | METH_KEYWORDS, d ? strdup(d) : nullptr};
  Py_XDECREF(doc);
  PyObject* cap = PyCapsule_New(&t, nullptr, nullptr);
  if (!cap) throw py::error_already_set();
  PyObject* w = PyCFunction_NewEx(&t.def, cap, module_name);
  Py_DECREF(cap);
  if (!w) throw py::error_already_set();
  return w;
}

void wrap_class(py::handle cls, const std::string& cls_name, PyObject* module_name) {
  py::dict d =
      py::reinterpret_borrow<py::dict>(reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_dict);
  std::vector<std::pair<std::string, py::object>> repl;
  for (auto [k, v] : d) {
    const std::string name = py::str(k);
    // Dunder methods stay: operators answer NotImplemented, __init__ belongs to pybind11.
    if (name.rfind("__", 0) == 0) continue;
    PyObject* f = v.ptr();
    if (PyInstanceMethod_Check(f)) {
      PyObject* inner = PyInstanceMethod_GET_FUNCTION(f);
      if (!is_pybind_function(inner)) continue;
      PyObject* w = wrap(inner, cls_name + "." + name, module_name);
      PyObject* m = PyInstanceMethod_New(w);
      Py_DECREF(w);
      repl.emplace_back(name, py::reinterpret_steal<py::object>(m));
    } else if (PyObject_TypeCheck(f, &PyStaticMethod_Type)) {
      py::object inner = py::reinterpret_borrow<py::object>(f).attr("__func__");
      if (!is_pybind_function(inner.ptr())) continue;
      PyObject* w = wrap(inner.ptr(), cls_name + "." + name, module_name);
      PyObject* sm = PyStaticMethod_New(w);
      Py_DECREF(w);
      repl.emplace_back(name, py::reinterpret_steal<py::object>(sm));
    }
  }
  for (auto& [name, obj] : repl) py::setattr(cls, name.c_str(), obj);
}

void wrap_module(py::module_ m, const std::string& prefix) {
  PyObject* module_name = m.attr("__name__").ptr();
  std::vector<std::pair<std::string, py::object>> repl;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(m.attr("__dict__"))) {
    const std::string name = py::str(k);
    if (name.rfind("__", 0) == 0) continue;
    if (is_pybind_function(v.ptr())) {
      repl.emplace_back(
          name, py::reinterpret_steal<py::object>(wrap(v.ptr(), prefix + name, module_name)));
    } else if (PyType_Check(v.ptr()) &&
               !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(v.ptr()),
                                 reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) {
      // Classes defined here only (an alias such as kiln.Tensor under two names once).
      py::object mod = py::getattr(v, "__module__", py::none());
      if (!mod.is_none() && py::str(mod).cast<std::string>().rfind("kiln", 0) == 0 &&
          py::str(v.attr("__name__")).cast<std::string>() == name)
        wrap_class(v, name, module_name);
    }
  }
  for (auto& [name, obj] : repl) m.attr(name.c_str()) = obj;
}

}  // namespace

void init_binding_errors(py::module_& m) {
  wrap_module(m, "");
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(m.attr("__dict__")))
    if (py::isinstance<py::module_>(v)) {
      const std::string name = py::str(k);
      wrap_module(py::reinterpret_borrow<py::module_>(v), name + ".");
    }
}

}  // namespace kiln::python
