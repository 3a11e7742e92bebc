// @kiln.jit on Python functions, through kiln::JitCallable (kiln/jit/jit.h): arguments are
// flattened into JitArgs, tensors, tensor lists, numbers and bools (numbers and bools are guarded
// by value: one version per constant, the lecture's case 1), and the Python function is the trace
// callback, called with the GIL held. A Python `if` on a traced tensor calls __bool__, whose
// host read is the C++ graph break (case 2): the piece so far runs and its value is guarded.
#include <map>
#include <memory>

#include "common.h"

namespace kiln::python {
namespace {

// How to rebuild the Python result from the flat outputs: a tensor, or a tuple/list of them.
struct Structure {
  enum Kind { kTensor, kTuple, kList } kind = kTensor;
  size_t n = 1;
};
using Structures = std::map<size_t, Structure>;

// The call's arguments as JitArgs; `ints[i]`: argument i is a Python int (given back as one).
std::vector<JitArg> flatten_args(const py::args& args, std::vector<bool>& ints) {
  std::vector<JitArg> flat;
  for (size_t i = 0; i < args.size(); ++i) {
    py::handle h = args[i];
    ints.push_back(false);
    if (py::isinstance<Tensor>(h)) {
      flat.push_back(JitArg(h.cast<Tensor>()));
    } else if (PyBool_Check(h.ptr())) {
      flat.push_back(JitArg(h.ptr() == Py_True));
    } else if (PyLong_Check(h.ptr())) {
      ints[i] = true;
      flat.push_back(JitArg(h.cast<int64_t>()));
    } else if (PyFloat_Check(h.ptr())) {
      flat.push_back(JitArg(h.cast<double>()));
    } else if (PyList_Check(h.ptr()) || PyTuple_Check(h.ptr())) {
      std::vector<Tensor> ts;
      for (py::handle e : py::reinterpret_borrow<py::sequence>(h)) {
        if (!py::isinstance<Tensor>(e))
          raise(type_error_type(),
                str_cat("[jit] argument ", i, ": a list must hold only tensors"));
        ts.push_back(e.cast<Tensor>());
      }
      flat.push_back(JitArg(ts));
    } else {
      raise(type_error_type(),
            str_cat("[jit] argument ", i,
                    ": expected a Tensor, a list of tensors, a number or a "
                    "bool, got ",
                    py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>(),
                    " (capture other objects in the function instead)"));
    }
  }
  return flat;
}

// The first n arguments the engine passes, as the Python function takes them (GIL held).
py::tuple python_args(const std::vector<JitArg>& a, size_t n, const std::vector<bool>& ints) {
  py::tuple pargs(n);
  for (size_t i = 0; i < n; ++i) {
    switch (a[i].kind) {
      case JitArg::kTensor:
        pargs[i] = py::cast(a[i].t);
        break;
      case JitArg::kTensorList: {
        py::list l;
        for (const Tensor& t : a[i].ts) l.append(py::cast(t));
        pargs[i] = l;
        break;
      }
      case JitArg::kBool:
        pargs[i] = py::bool_(a[i].v != 0);
        break;
      case JitArg::kScalar:
        if (a[i].t.defined())  // a runtime scalar: a 0-d tensor
          pargs[i] = py::cast(a[i].t);
        else if (ints[i])
          pargs[i] = py::int_(static_cast<int64_t>(a[i].v));
        else
          pargs[i] = py::float_(a[i].v);
        break;
    }
  }
  return pargs;
}

// The Python function's result flattened, its structure noted by output count (GIL held).
std::vector<Tensor> flat_result(const py::object& r, Structures& structures) {
  std::vector<Tensor> out;
  if (py::isinstance<Tensor>(r)) {
    structures[1] = {Structure::kTensor, 1};
    out.push_back(r.cast<Tensor>());
  } else if (PyTuple_Check(r.ptr()) || PyList_Check(r.ptr())) {
    size_t n = py::len(r);
    structures[n] = {PyTuple_Check(r.ptr()) ? Structure::kTuple : Structure::kList, n};
    for (py::handle e : r) {
      if (!py::isinstance<Tensor>(e))
        raise(type_error_type(),
              "[jit] the function must return a tensor or a tuple/list of tensors");
      out.push_back(e.cast<Tensor>());
    }
  } else {
    raise(type_error_type(), "[jit] the function must return a tensor or a tuple/list of tensors");
  }
  return out;
}

// The Python result from the flat outputs: the structure traced with this many outputs
// (versions that return differently shaped results are told apart by their output count; a
// tuple when none matches).
py::object python_result(const std::vector<Tensor>& outs, const Structures& structures) {
  Structure st{Structure::kTuple, outs.size()};
  auto it = structures.find(outs.size());
  if (it != structures.end()) st = it->second;
  if (st.kind == Structure::kTensor && outs.size() == 1) return py::cast(outs[0]);
  py::tuple t(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) t[i] = py::cast(outs[i]);
  if (st.kind == Structure::kList) return py::list(t);
  return t;
}

class PyJit {
 public:
  PyJit(py::function fn, JitOptions opts) : fn_(std::move(fn)), jit_(std::move(opts)) {}

  py::object call(const py::args& args, const py::kwargs& kwargs) {
    if (kwargs.size() > 0)
      raise(type_error_type(),
            "[jit] keyword arguments are bound by kiln.jit's Python wrapper; pass them "
            "positionally to JitFunction");
    auto ints = std::make_shared<std::vector<bool>>();  // a number came as a Python int
    std::vector<JitArg> flat = flatten_args(args, *ints);
    // Captured by pointer: the jitted function may copy this callback with the GIL released,
    // and a copied py::function would touch its reference count without the GIL.
    auto* structures = structures_.get();
    const py::function* fn = &fn_;
    // The jitted function passes captured state (module buffers, captured tensors) after the
    // caller's arguments: the function takes only the caller's.
    const size_t arity = flat.size();
    auto trace = [fn, ints, structures, arity](const std::vector<JitArg>& a) {
      py::gil_scoped_acquire gil;
      const size_t n = std::min(arity, a.size());
      py::tuple pargs = python_args(a, n, *ints);
      py::object r;
      try {
        r = (*fn)(*pargs);
      } catch (py::error_already_set& e) {
        // Raised while tracing (the inputs are graph values): a kiln::Error that kiln::jit
        // answers as for C++ code, by compiling for the concrete shape or running eagerly, where
        // the function raises its own error again if it fails there too. Interrupts pass
        // through.
        bool tracing = is_tracing();
        for (size_t i = 0; i < n; ++i)
          tracing = tracing || (a[i].kind == JitArg::kTensor && a[i].t.is_symbolic());
        if (!tracing || !e.matches(PyExc_Exception)) throw;
        throw Error(str_cat("[jit] the function raised while tracing: ", e.what()));
      }
      return flat_result(r, *structures);
    };
    std::vector<Tensor> outs;
    {
      InterruptibleCall ctrl_c;
      py::gil_scoped_release nogil;
      outs = jit_.call(flat, trace);
    }
    return python_result(outs, *structures_);
  }

  std::string explain() const { return jit_.explain(); }
  py::dict stats() const {
    JitStats s = jit_.stats();
    py::dict d;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["compiles"] = s.compiles;
    d["graph_breaks"] = s.graph_breaks;
    d["pieces"] = s.pieces;
    d["eager_fallback"] = s.eager_fallback;
    d["reruns"] = s.reruns;
    d["piece_compiles"] = s.piece_compiles;
    d["max_piece_compiles"] = s.max_piece_compiles;
    return d;
  }
  const py::function& fn() const { return fn_; }

 private:
  py::function fn_;
  JitCallable jit_;
  // Written by the trace callback (GIL held), read after each call.
  std::shared_ptr<Structures> structures_ = std::make_shared<Structures>();
};

}  // namespace

void init_jit(py::module_& m) {
  py::class_<PyJit>(
      m, "JitFunction",
      "A jitted Python function: traced on a miss, replayed from compiled pieces on a "
      "hit; see kiln.jit.")
      .def(py::init([](py::function fn, const std::string& name, int max_recompiles,
                       bool dynamic_dims, std::vector<int> runtime_scalars,
                       std::vector<int> donate) {
             JitOptions o;
             o.name = name;
             o.max_recompiles = max_recompiles;
             o.dynamic_dims = dynamic_dims;
             o.runtime_scalars = std::move(runtime_scalars);
             o.donate = std::move(donate);
             return std::make_unique<PyJit>(std::move(fn), std::move(o));
           }),
           py::arg("fn"), py::arg("name") = "fn", py::arg("max_recompiles") = 8,
           py::arg("dynamic_dims") = true, py::arg("runtime_scalars") = std::vector<int>{},
           py::arg("donate") = std::vector<int>{})
      .def("__call__", &PyJit::call)
      .def("explain", &PyJit::explain,
           "Versions and their guards, pieces, graph breaks, recompiles with the failed guard, "
           "compile times, hits and misses.")
      .def_property_readonly("stats", &PyJit::stats)
      .def_property_readonly("__wrapped__", &PyJit::fn);
}

}  // namespace kiln::python
