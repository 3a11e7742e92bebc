// kiln._C.optim: SGD, Adam, AdamW, RMSprop in both forms (eager: constructed with parameters,
// step(); graph: constructed without, minimize(loss)), the schedules, LRScheduler and gradient
// clipping. python/kiln/optim.py gives them torch.optim's signatures.
#include "common.h"

namespace kiln::python {
namespace {

using optim::Optimizer;

std::vector<Tensor> params_of(py::handle h) {
  std::vector<Tensor> out;
  for (py::handle e : py::iter(h)) {
    if (!py::isinstance<Tensor>(e)) raise(type_error_type(), "[optim] parameters must be tensors");
    out.push_back(e.cast<Tensor>());
  }
  return out;
}

py::list pairs(const std::vector<std::pair<std::string, Tensor>>& v) {
  py::list l;
  for (const auto& [n, t] : v) l.append(py::make_tuple(n, t));
  return l;
}

}  // namespace

void init_optim(py::module_& parent) {
  py::module_ m = parent.def_submodule("optim", "The C++ optimizers; use them through kiln.optim.");
  py::class_<Optimizer>(m, "Optimizer")
      .def(
          "step",
          [](Optimizer& o) {
            MaybeNoGil g(true);
            o.step();
          },
          "One eager update from each parameter's .grad.")
      .def("zero_grad", &Optimizer::zero_grad)
      .def(
          "minimize",
          [](Optimizer& o, const Tensor& loss, py::object var_list) {
            return o.minimize(loss,
                              var_list.is_none() ? std::vector<Tensor>{} : params_of(var_list));
          },
          py::arg("loss"), py::arg("var_list") = py::none(),
          "Graph form: adds gradients() and assign nodes; returns one node that performs a step.")
      .def_property("lr", &Optimizer::lr, &Optimizer::set_lr)
      .def_property_readonly("params", &Optimizer::params)
      .def("state_dict", [](const Optimizer& o) { return pairs(o.state_dict()); })
      .def(
          "load_state_dict",
          [](Optimizer& o, const optim::OptimizerState& s) { o.load_state_dict(s); },
          py::arg("state_dict"));

  py::class_<optim::SGD, Optimizer>(m, "SGD").def(
      py::init([](py::object params, double lr, double momentum, double wd, bool nesterov) {
        optim::SGDOptions o{lr, momentum, wd, nesterov};
        if (params.is_none()) return new optim::SGD(o);
        return new optim::SGD(params_of(params), o);
      }),
      py::arg("params") = py::none(), py::kw_only(), py::arg("lr") = 0.01,
      py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  py::class_<optim::Adam, Optimizer>(m, "Adam").def(
      py::init([](py::object params, double lr, py::tuple betas, double eps, py::object wd) {
        optim::AdamOptions o{lr, betas[0].cast<double>(), betas[1].cast<double>(), eps};
        if (!wd.is_none()) o.weight_decay = wd.cast<double>();
        if (params.is_none()) return new optim::Adam(o);
        return new optim::Adam(params_of(params), o);
      }),
      py::arg("params") = py::none(), py::kw_only(), py::arg("lr") = 1e-3,
      py::arg("betas") = py::make_tuple(0.9, 0.999), py::arg("eps") = 1e-8,
      py::arg("weight_decay") = py::none());
  py::class_<optim::AdamW, optim::Adam>(m, "AdamW")
      .def(py::init([](py::object params, double lr, py::tuple betas, double eps, double wd) {
             optim::AdamOptions o{lr,  betas[0].cast<double>(), betas[1].cast<double>(), eps, wd,
                                  true};
             if (params.is_none()) return new optim::AdamW(o);
             return new optim::AdamW(params_of(params), o);
           }),
           py::arg("params") = py::none(), py::kw_only(), py::arg("lr") = 1e-3,
           py::arg("betas") = py::make_tuple(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.01);
  py::class_<optim::RMSprop, Optimizer>(m, "RMSprop")
      .def(py::init([](py::object params, double lr, double alpha, double eps, double wd,
                       double mom, bool centered) {
             optim::RMSpropOptions o{lr, alpha, eps, wd, mom, centered};
             if (params.is_none()) return new optim::RMSprop(o);
             return new optim::RMSprop(params_of(params), o);
           }),
           py::arg("params") = py::none(), py::kw_only(), py::arg("lr") = 0.01,
           py::arg("alpha") = 0.99, py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0,
           py::arg("momentum") = 0.0, py::arg("centered") = false);

  py::class_<optim::Schedule>(m, "Schedule")
      .def("lr", &optim::Schedule::lr, py::arg("t"), py::arg("base_lr"));
  py::class_<optim::StepLR, optim::Schedule>(m, "StepLR")
      .def(py::init<int64_t, double>(), py::arg("step_size"), py::arg("gamma") = 0.1);
  py::class_<optim::CosineAnnealingLR, optim::Schedule>(m, "CosineAnnealingLR")
      .def(py::init<int64_t, double>(), py::arg("T_max"), py::arg("eta_min") = 0.0);
  py::class_<optim::ExponentialLR, optim::Schedule>(m, "ExponentialLR")
      .def(py::init<double>(), py::arg("gamma"));
  py::class_<optim::OneCycleLR, optim::Schedule>(m, "OneCycleLR")
      .def(py::init<double, int64_t, double, double, double>(), py::arg("max_lr"),
           py::arg("total_steps"), py::arg("pct_start") = 0.3, py::arg("div_factor") = 25.0,
           py::arg("final_div_factor") = 1e4);
  py::class_<optim::LinearWarmup, optim::Schedule>(m, "LinearWarmup")
      .def(py::init<int64_t>(), py::arg("warmup_steps"))
      .def(py::init<int64_t, const optim::Schedule&>(), py::arg("warmup_steps"), py::arg("after"));
  py::class_<optim::LRScheduler>(m, "LRScheduler")
      .def(py::init<Optimizer&, const optim::Schedule&>(), py::arg("optimizer"),
           py::arg("schedule"), py::keep_alive<1, 2>())
      .def("step", &optim::LRScheduler::step)
      .def("get_last_lr", [](const optim::LRScheduler& s) { return std::vector<double>{s.lr()}; })
      .def_property_readonly("last_epoch", &optim::LRScheduler::last_step)
      .def_property_readonly("base_lr", &optim::LRScheduler::base_lr);
  m.def(
      "clip_grad_norm_",
      [](py::object params, double max_norm, double norm_type) {
        return optim::clip_grad_norm(params_of(params), max_norm, norm_type);
      },
      py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0);
  m.def(
      "clip_grad_value_",
      [](py::object params, double v) { optim::clip_grad_value(params_of(params), v); },
      py::arg("parameters"), py::arg("clip_value"));
}

}  // namespace kiln::python
