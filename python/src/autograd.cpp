// Autograd from Python: kiln.backward, kiln.grad (torch.autograd.grad, also symbolic in graphs
// and under jit), grad mode (kiln.no_grad is built on it in python/kiln/autograd.py), gradcheck
// with a Python function, and symbolic gradients().
#include "common.h"
#include "kiln/dispatch/dispatch.h"

namespace kiln::python {
namespace {

// Autograd's tensor arguments: None is no tensors, a None entry an undefined tensor.
std::vector<Tensor> tensor_list(py::handle h, const char* what) {
  return tensors_from(h, what, /*none_ok=*/true);
}

py::tuple with_none(const std::vector<Tensor>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = v[i].defined() ? py::cast(v[i]) : py::none();
  return t;
}

// Calls a Python function of tensors that returns a tensor or a sequence of tensors.
std::vector<Tensor> call_py(const py::function& fn, const std::vector<Tensor>& xs) {
  py::gil_scoped_acquire gil;
  py::tuple args(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
  py::object r = fn(*args);
  return tensor_list(r, "gradcheck");
}

}  // namespace

void init_autograd(py::module_& m, TensorClass&) {
  m.def(
      "backward",
      [](py::object tensors, py::object grads, bool retain_graph, bool create_graph) {
        std::vector<Tensor> outs = tensor_list(tensors, "backward");
        std::vector<Tensor> gs = tensor_list(grads, "backward");
        MaybeNoGil g(true);
        backward(outs, gs, retain_graph, create_graph);
      },
      py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = false,
      py::arg("create_graph") = false,
      "Backpropagates from `tensors` into the .grad of leaves (torch.autograd.backward).");
  m.def(
      "grad",
      [](py::object outputs, py::object inputs, py::object grad_outputs, py::object retain_graph,
         bool create_graph, bool allow_unused) {
        std::vector<Tensor> outs = tensor_list(outputs, "grad");
        std::vector<Tensor> ins = tensor_list(inputs, "grad");
        std::vector<Tensor> gos = tensor_list(grad_outputs, "grad");
        bool retain = retain_graph.is_none() ? create_graph : retain_graph.cast<bool>();
        std::vector<Tensor> r;
        {
          MaybeNoGil g(!outs.empty() && outs[0].is_concrete());
          r = grad(outs, ins, gos, retain, create_graph, allow_unused);
        }
        return with_none(r);
      },
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(),
      py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
      py::arg("allow_unused") = false,
      "Gradients of outputs with respect to inputs, as a tuple (torch.autograd.grad). With "
      "create_graph the results are differentiable (second derivatives). On symbolic tensors "
      "(in a Graph or under jit) it adds gradient nodes.");
  m.def(
      "gradients",
      [](py::object ys, py::object xs, py::object gys) {
        return with_none(gradients(tensor_list(ys, "gradients"), tensor_list(xs, "gradients"),
                                   tensor_list(gys, "gradients")));
      },
      py::arg("ys"), py::arg("xs"), py::arg("grad_ys") = py::none(),
      "Symbolic gradients in a Graph (TF1 tf.gradients); None where xs do not influence ys.");
  m.def("is_grad_enabled", &grad_mode_enabled, "Whether eager ops record autograd history.");
  m.def("_set_grad_enabled", &set_grad_mode, py::arg("mode"));
  m.def("is_autocast_enabled", &autocast_enabled,
        "Whether autocast (kiln.autocast) is on for this thread.");
  m.def("get_autocast_dtype", &autocast_dtype, "The dtype autocast casts to (bfloat16 default).");
  m.def(
      "_set_autocast",
      [](bool enabled, py::object dtype) {
        detail::set_autocast_state(enabled, dtype.is_none() ? autocast_dtype() : dtype_from(dtype));
      },
      py::arg("enabled"), py::arg("dtype") = py::none());
  m.def(
      "gradcheck",
      [](py::function fn, py::object inputs, double eps, double atol, double rtol) {
        // By pointer: gradcheck may copy the std::function with the GIL released, and a
        // copied py::function would touch its reference count without the GIL.
        const py::function* fp = &fn;
        TensorsFn f = [fp](const std::vector<Tensor>& xs) { return call_py(*fp, xs); };
        std::vector<Tensor> xs = tensor_list(inputs, "gradcheck");
        GradcheckResult r;
        {
          MaybeNoGil g(true);
          r = gradcheck(f, xs, eps, atol, rtol);
        }
        return py::make_tuple(r.ok, r.message, r.max_abs_err);
      },
      py::arg("fn"), py::arg("inputs"), py::arg("eps") = 1e-6, py::arg("atol") = 1e-5,
      py::arg("rtol") = 1e-3,
      "(ok, message, max_abs_err): analytic gradients of <v, fn(x)> against central "
      "differences in float64.");
}

}  // namespace kiln::python
