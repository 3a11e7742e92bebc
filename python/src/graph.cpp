// Static graphs from Python: kiln.Graph (placeholder, variable, constant, printers) and
// kiln.Session.run(fetches, feed_dict) with NumPy feeds; the GIL is released while a run computes.
#include <cmath>

#include "common.h"

namespace kiln::python {
namespace {

// A feed for placeholder `ph`: a tensor as it is; NumPy data shared when its dtype matches,
// else converted (ints to floats, float64 to float32 as TF1 does; NaN or fractional floats for
// an integer placeholder raise).
Tensor feed_value(const Tensor& ph, py::handle v) {
  if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
  DType want = ph.dtype();
  Tensor t = PyObject_CheckBuffer(v.ptr()) && !PyBytes_Check(v.ptr()) ? tensor_from_buffer(v)
                                                                      : tensor_from_object(v);
  if (t.dtype() == want) return t;
  if (is_integral(want) && is_floating(t.dtype())) {
    Tensor bad = logical_or(ne(t, t), ne(t, cast(cast(t, Int64), t.dtype())));
    if (t.numel() > 0 && max(bad.to(Int64)).item<int64_t>() != 0)
      raise(value_error_type(), str_cat("[Session.run] feed for an ", want,
                                        " placeholder holds NaN or fractional values"));
  }
  return t.to(want);
}

}  // namespace

void init_graph(py::module_& m) {
  py::class_<Graph>(m, "Graph",
                    "A TensorFlow-1 style graph: build it with placeholders, variables and Kiln "
                    "ops, then run it with "
                    "a Session.")
      .def(py::init<>())
      .def(
          "placeholder",
          [](Graph& g, py::object dtype, py::object shape, py::object name) {
            std::string n =
                name.is_none() ? g.unique_name("placeholder") : name.cast<std::string>();
            return g.placeholder(n, dtype_from(dtype), shape_from(shape, true, "placeholder"));
          },
          py::arg("dtype"), py::arg("shape"), py::arg("name") = py::none(),
          "A named input fed at run time; None in the shape is a dim of any size.")
      .def(
          "set_hint",
          [](Graph& g, const Tensor& ph, py::object sizes) {
            g.set_hint(ph, shape_from(sizes, false, "set_hint"));
          },
          py::arg("placeholder"), py::arg("sizes"),
          "The sizes an example input has: its dynamic dims read as kiln.SymInt while the graph "
          "is built, and comparisons of sizes are taken at these (as an exporter's trace).")
      .def(
          "variable",
          [](Graph& g, const TensorLike& init, py::object name) {
            std::string n = name.is_none() ? g.unique_name("variable") : name.cast<std::string>();
            return g.variable(n, init.t);
          },
          py::arg("initial_value"), py::arg("name") = py::none(),
          "A named piece of state, initialized from initial_value in each Session.")
      .def(
          "constant",
          [](Graph& g, const TensorLike& v, const std::string& name) {
            return g.constant(v.t, name);
          },
          py::arg("value"), py::arg("name") = "")
      .def("to_text", &Graph::to_text, "One line per node: %3 = matmul(%0, %1) : float32[?, 10].")
      .def("to_dot", &Graph::to_dot, "Graphviz DOT.")
      .def("to_mermaid", &Graph::to_mermaid, "Mermaid `graph LR`, as in the lecture.")
      .def("verify", &Graph::verify)
      .def_property_readonly("num_nodes", [](const Graph& g) { return g.nodes().size(); })
      .def_static("of", &Graph::of, py::arg("tensor"), "The graph a symbolic tensor belongs to.")
      .def("__eq__", [](const Graph& a, const Graph& b) { return a == b; })
      .def("__hash__", [](const Graph& g) { return reinterpret_cast<intptr_t>(g.impl().get()); });

  py::class_<Session>(
      m, "Session",
      "Runs a Graph: per set of fetches and fed placeholders it prunes, optimizes and "
      "plans once, then replays the plan. Variables live in the Session.")
      .def(py::init<const Graph&>(), py::arg("graph"))
      .def(
          "run",
          [](Session& s, py::object fetches, py::object feed_dict) -> py::object {
            bool one = py::isinstance<Tensor>(fetches);
            std::vector<Tensor> fs;
            if (one)
              fs.push_back(fetches.cast<Tensor>());
            else
              for (py::handle h : py::reinterpret_borrow<py::sequence>(fetches))
                fs.push_back(h.cast<Tensor>());
            FeedDict feeds;
            if (!feed_dict.is_none()) {
              for (auto kv : py::reinterpret_borrow<py::dict>(feed_dict)) {
                if (!py::isinstance<Tensor>(kv.first))
                  raise(type_error_type(), "[Session.run] feed_dict keys must be placeholders");
                const Tensor& ph = kv.first.cast<const Tensor&>();
                feeds.emplace_back(ph, feed_value(ph, kv.second));
              }
            }
            std::vector<Tensor> out;
            {
              InterruptibleCall ctrl_c;  // outlives the released GIL: restored with it held
              MaybeNoGil g(true);
              out = s.run(fs, feeds);
            }
            if (one) return py::cast(out[0]);
            py::list l;
            for (const Tensor& t : out) l.append(py::cast(t));
            return l;
          },
          py::arg("fetches"), py::arg("feed_dict") = py::none(),
          "Computes fetches (a tensor, or a list of tensors) given feed_dict {placeholder: value}; "
          "values may be tensors, NumPy arrays, lists or numbers.")
      .def("variable", &Session::variable, py::arg("name"), "Current value of a variable (a copy).")
      .def(
          "set_variable",
          [](Session& s, const std::string& n, const TensorLike& v) { s.set_variable(n, v.t); },
          py::arg("name"), py::arg("value"))
      .def_property_readonly("plans_built", &Session::plans_built)
      .def("last_run", [](const Session& s) {
        RunStats r = s.last_run();
        py::dict d;
        d["nodes_executed"] = r.nodes_executed;
        d["plan_steps"] = r.plan_steps;
        d["passes"] = r.passes;
        d["arena_bytes"] = r.arena_bytes;
        return d;
      });
}

}  // namespace kiln::python
