// Bindings behind kiln's PyTorch-compatible Python layer: the op that records a user's
// kiln.autograd.Function on the tape, so backward() calls the Python backward it defines, and
// the ONNX exporter under kiln.onnx.export (when the extension links kiln_onnx: KILN_PY_ONNX).
#include "common.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/registry/op_def.h"
#if KILN_PY_ONNX
#include "kiln/onnx/onnx_export.h"
#endif

namespace kiln::python {
namespace {

using detail::Attrs;
using detail::GradCtx;
using detail::OpDef;
using detail::TensorList;

// kiln.autograd's dispatcher for backward calls: (ctx_id, grads, needs) -> gradients, one per
// real input. Set once from Python; a strong reference kept for the life of the process.
PyObject* g_backward = nullptr;

// Inputs of a py_function node: [token, outputs (detached)..., inputs...]. The token is a tensor
// whose storage owns the Python ctx (kiln.from_numpy of a holder array), so the ctx lives exactly
// as long as the node keeps its inputs; attrs are (ctx_id, number of outputs).
TensorList py_function_view(std::span<const Tensor> in, const Attrs& a) {
  const int64_t n_out = a.i(1);
  TensorList out;
  for (int64_t k = 0; k < n_out; ++k) out.push_back(in[1 + k].detach());
  return out;
}

detail::MetaList py_function_infer(std::span<const Tensor> in, const Attrs& a) {
  detail::MetaList m;
  for (int64_t k = 0; k < a.i(1); ++k) m.push_back({in[1 + k].dtype(), in[1 + k].shape()});
  return m;
}

TensorList py_function_grad(const GradCtx& c) {
  const int64_t n_out = c.attrs.i(1);
  const size_t first = 1 + static_cast<size_t>(n_out);
  TensorList r(c.inputs.size());
  py::gil_scoped_acquire gil;
  if (!g_backward) throw Error("[autograd.Function] no backward dispatcher is installed");
  try {
    py::list grads, needs;
    for (size_t k = 0; k < c.grads.size(); ++k)
      grads.append(c.grads[k].defined() ? py::cast(c.grads[k]) : py::none());
    for (size_t k = first; k < c.inputs.size(); ++k) needs.append(py::bool_(c.need(k)));
    py::object res = py::reinterpret_borrow<py::object>(g_backward)(c.attrs.i(0), grads, needs);
    size_t k = first;
    for (py::handle h : res) {
      if (k >= r.size()) break;
      if (!h.is_none()) r[k] = h.cast<Tensor>();
      ++k;
    }
  } catch (py::error_already_set& e) {
    // The message without pybind11's traceback; Kiln's own errors keep their [op] prefix.
    const std::string msg = py::str(e.value());
    if (msg.rfind("[", 0) == 0) throw Error(msg);
    throw Error("[autograd.Function] backward raised " +
                py::str(e.type().attr("__name__")).cast<std::string>() + ": " + msg);
  }
  return r;
}

const OpDef& kPyFunction = detail::def_op({
    .name = "py_function",
    .num_inputs = -1,
    .num_outputs = -1,
    .attr_names = {"ctx_id", "num_outputs"},
    .traits = detail::kView | detail::kSideEffect,
    .infer = py_function_infer,
    .view = py_function_view,
    .grad = py_function_grad,
    .doc = "a Python kiln.autograd.Function: outputs computed in Python, backward a Python call",
});

// The in-place write of a value computed out of place, under autograd: kiln's inplace writer
// (engine.cpp) snapshots what r's node saved from self's storage, writes, and gives self r's
// history, as the C++ in-place ops do. Python's exp_, sigmoid_, ... (kiln/_tensor_api.py) use it.
struct CopyInto {
  const Tensor* src;
  Tensor* dst;
};

void copy_into(void* ctx) {
  auto* c = static_cast<CopyInto*>(ctx);
  NoGradGuard ng;
  c->dst->copy_(*c->src);
}

}  // namespace

void init_torch_compat(py::module_& m, TensorClass&) {
  m.def(
      "_set_function_backward",
      [](py::object fn) {
        Py_XDECREF(g_backward);
        g_backward = fn.release().ptr();
      },
      py::arg("fn"));
  m.def(
      "_function_record",
      [](const Tensor& token, const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
         int64_t ctx_id) {
        std::vector<Tensor> in;
        in.reserve(1 + outputs.size() + inputs.size());
        in.push_back(token);
        for (const Tensor& o : outputs) in.push_back(o.detach());
        for (const Tensor& i : inputs) in.push_back(i);
        TensorList r = detail::call(kPyFunction, std::span<const Tensor>(in.data(), in.size()),
                                    Attrs{ctx_id, static_cast<int64_t>(outputs.size())});
        return std::vector<Tensor>(r.begin(), r.end());
      },
      py::arg("token"), py::arg("outputs"), py::arg("inputs"), py::arg("ctx_id"),
      "Records a kiln.autograd.Function call: returns the outputs as new tensors whose grad_fn "
      "calls the Function's backward.");
  m.def(
      "_write_result",
      [](Tensor& self, const Tensor& r, const std::string& name) {
        if (!detail::inplace_writer())
          raise(error_type(), "[" + name + "] autograd is not linked in");
        if (r.shape() != self.shape() || r.dtype() != self.dtype())
          raise(error_type(), str_cat("[", name, "] result ", r.dtype(), r.shape(),
                                      " does not fit the tensor ", self.dtype(), self.shape()));
        CopyInto c{&r, &self};
        detail::inplace_writer()(name.c_str(), self, r, &copy_into, &c);
      },
      py::arg("self"), py::arg("result"), py::arg("name"),
      "Writes `result` (computed from self out of place) into self with autograd, as kiln's "
      "in-place ops do.");
  m.def("_capturing", &detail::capturing,
        "Whether a JIT trace is capturing op calls on this thread.");
#if KILN_PY_ONNX
  m.def(
      "_export_onnx",
      [](const std::string& path, const Graph& g, const std::vector<std::string>& names,
         const std::vector<Tensor>& outputs, const std::map<std::string, std::string>& dims) {
        if (names.size() != outputs.size())
          raise(value_error_type(), "[onnx.export] one name per output");
        onnx::NamedTensors named;
        for (size_t k = 0; k < names.size(); ++k) named.emplace_back(names[k], outputs[k]);
        onnx::SaveOptions options;
        options.dim_names = dims;
        py::gil_scoped_release nogil;
        onnx::export_onnx(path, g, named, nullptr, options);
      },
      py::arg("path"), py::arg("graph"), py::arg("names"), py::arg("outputs"),
      py::arg("dim_names") = std::map<std::string, std::string>{},
      "Writes the part of `graph` computing `outputs` as standard ONNX (opset 17).");
#endif
}

}  // namespace kiln::python
