// kiln._C.nn: the C++ modules (Linear, Conv2d, BatchNorm2d, LSTM, ...) for C++-style use from
// Python. kiln.nn (python/kiln/nn/) wraps TransformerBlock and MoE as Python Modules; its torch
// layers are Python modules over the same ops, so they nest with user-written ones.
#include "common.h"

namespace kiln::python {
namespace {

using nn::Layer;
using nn::Module;

py::list pairs(const std::vector<std::pair<std::string, Tensor>>& v) {
  py::list l;
  for (const auto& [n, t] : v) l.append(py::make_tuple(n, t));
  return l;
}

template <typename L, typename... Init>
py::class_<L, Layer, std::shared_ptr<L>> layer(py::module_& m, const char* name, Init&&... init) {
  py::class_<L, Layer, std::shared_ptr<L>> c(m, name);
  c.def(std::forward<Init>(init)...);
  return c;
}

}  // namespace

void init_nn(py::module_& parent) {
  py::module_ m = parent.def_submodule("nn", "The C++ modules; use them through kiln.nn.");
  py::class_<Module, std::shared_ptr<Module>>(m, "Module")
      .def("named_parameters", [](const Module& mod) { return pairs(mod.named_parameters()); })
      .def("named_buffers", [](const Module& mod) { return pairs(mod.named_buffers()); })
      .def("train", &Module::train, py::arg("mode") = true)
      .def_property_readonly("training", &Module::is_training)
      .def("zero_grad", &Module::zero_grad)
      .def("state_dict", [](const Module& mod) { return pairs(mod.state_dict()); })
      .def(
          "load_state_dict",
          [](Module& mod, const std::vector<std::pair<std::string, Tensor>>& sd, bool strict) {
            mod.load_state_dict(sd, strict);
          },
          py::arg("state_dict"), py::arg("strict") = true)
      .def("num_parameters", &Module::num_parameters)
      .def("to", [](Module& mod, py::object d) { mod.to(dtype_from(d)); })
      .def("type_name", &Module::type_name);
  // Runs a C++ module on other parameter tensors until close() (functional_call; a jitted
  // training step takes the parameters as arguments instead of baking them in as constants).
  struct Swap {
    std::unique_ptr<nn::ParameterSwap> swap;
  };
  py::class_<Swap>(m, "ParameterSwap")
      .def(py::init([](Module& mod, const std::vector<Tensor>& params,
                       const std::vector<Tensor>& buffers) {
             return Swap{std::make_unique<nn::ParameterSwap>(mod, params, buffers)};
           }),
           py::arg("module"), py::arg("params"), py::arg("buffers") = std::vector<Tensor>{},
           py::keep_alive<1, 2>())
      .def("close", [](Swap& s) { s.swap.reset(); });
  py::class_<Layer, Module, std::shared_ptr<Layer>>(m, "Layer")
      .def(
          "forward",
          [](Layer& l, const Tensor& x) {
            MaybeNoGil g(x.is_concrete());
            return l.forward(x);
          },
          py::arg("input"))
      .def(
          "__call__",
          [](Layer& l, const Tensor& x) {
            MaybeNoGil g(x.is_concrete());
            return l.forward(x);
          },
          py::arg("input"));

  layer<nn::Linear>(m, "Linear", py::init<int64_t, int64_t, bool>(), py::arg("in_features"),
                    py::arg("out_features"), py::arg("bias") = true);
  py::class_<nn::Conv2d, Layer, std::shared_ptr<nn::Conv2d>>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, py::object k, py::object s, py::object p,
                       py::object d, int64_t groups, bool bias) {
             auto two = [](py::object h) {
               std::vector<int64_t> v = ints_from(h, "Conv2d");
               if (v.size() == 1) v.push_back(v[0]);
               return v;
             };
             return std::make_shared<nn::Conv2d>(
                 in, out, two(k), nn::Conv2dOptions{two(s), two(p), two(d), groups, bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("groups") = 1, py::arg("bias") = true);
  py::class_<nn::ConvTranspose2d, Layer, std::shared_ptr<nn::ConvTranspose2d>>(m, "ConvTranspose2d")
      .def(py::init([](int64_t in, int64_t out, py::object k, py::object s, py::object p,
                       py::object op, int64_t groups, bool bias, py::object d) {
             auto two = [](py::object h) {
               std::vector<int64_t> v = ints_from(h, "ConvTranspose2d");
               if (v.size() == 1) v.push_back(v[0]);
               return v;
             };
             return std::make_shared<nn::ConvTranspose2d>(
                 in, out, two(k),
                 nn::ConvTranspose2dOptions{two(s), two(p), two(op), two(d), groups, bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("output_padding") = 0,
           py::arg("groups") = 1, py::arg("bias") = true, py::arg("dilation") = 1);
  py::class_<nn::MultiheadAttention, Layer, std::shared_ptr<nn::MultiheadAttention>>(
      m, "MultiheadAttention")
      .def(py::init([](int64_t d, int64_t heads, bool causal, double dropout, bool bias) {
             return std::make_shared<nn::MultiheadAttention>(
                 nn::MultiheadAttentionOptions{d, heads, causal, dropout, bias});
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("causal") = false,
           py::arg("dropout") = 0.0, py::arg("bias") = true)
      .def(
          "__call__",
          [](nn::MultiheadAttention& a, const Tensor& q, py::object k, py::object v,
             py::object mask) {
            Tensor kt = k.is_none() ? q : k.cast<Tensor>(),
                   vt = v.is_none() ? kt : v.cast<Tensor>();
            Tensor mt = mask.is_none() ? Tensor() : mask.cast<Tensor>();
            MaybeNoGil g(q.is_concrete());
            return a.forward(q, kt, vt, mt);
          },
          py::arg("query"), py::arg("key") = py::none(), py::arg("value") = py::none(),
          py::arg("attn_mask") = py::none(),
          "Self-attention on query [B, T, D], or attention to key/value.");
  py::class_<nn::TransformerBlock, Layer, std::shared_ptr<nn::TransformerBlock>>(m,
                                                                                 "TransformerBlock")
      .def(py::init([](int64_t d, int64_t heads, bool causal, double dropout, int64_t ratio,
                       int64_t experts, int64_t top_k, double cap) {
             return std::make_shared<nn::TransformerBlock>(nn::TransformerBlockOptions{
                 d, heads, causal, dropout, ratio, experts, top_k, cap});
           }),
           py::arg("d_model"), py::arg("num_heads"), py::arg("causal") = true,
           py::arg("dropout") = 0.0, py::arg("mlp_ratio") = 4, py::arg("moe_experts") = 0,
           py::arg("moe_top_k") = 2, py::arg("moe_capacity_factor") = 1.25);
  py::class_<nn::MoE, Layer, std::shared_ptr<nn::MoE>>(m, "MoE")
      .def(py::init([](int64_t d, int64_t hidden, int64_t experts, int64_t top_k, double cap) {
             return std::make_shared<nn::MoE>(nn::MoEOptions{d, hidden, experts, top_k, cap});
           }),
           py::arg("d_model"), py::arg("d_hidden"), py::arg("num_experts"), py::arg("top_k") = 1,
           py::arg("capacity_factor") = 1.25)
      .def(
          "route",
          [](nn::MoE& moe, const Tensor& x) {
            nn::MoEOutput o = moe.route(x);
            return py::make_tuple(o.y, o.aux_loss);
          },
          py::arg("input"), "(output, load-balancing aux loss).");
  py::class_<nn::Conv1d, Layer, std::shared_ptr<nn::Conv1d>>(m, "Conv1d")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d,
                       int64_t groups, bool bias) {
             return std::make_shared<nn::Conv1d>(in, out, k,
                                                 nn::Conv1dOptions{s, p, d, groups, bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("groups") = 1, py::arg("bias") = true);
  py::class_<nn::MaxPool2d, Layer, std::shared_ptr<nn::MaxPool2d>>(m, "MaxPool2d")
      .def(py::init([](py::object k, py::object s, py::object p) {
             auto two = [](py::object h) {
               std::vector<int64_t> v = ints_from(h, "MaxPool2d");
               if (v.size() == 1) v.push_back(v[0]);
               return v;
             };
             return std::make_shared<nn::MaxPool2d>(
                 two(k), s.is_none() ? std::vector<int64_t>{} : two(s), two(p));
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::AvgPool2d, Layer, std::shared_ptr<nn::AvgPool2d>>(m, "AvgPool2d")
      .def(py::init([](py::object k, py::object s, py::object p) {
             auto two = [](py::object h) {
               std::vector<int64_t> v = ints_from(h, "AvgPool2d");
               if (v.size() == 1) v.push_back(v[0]);
               return v;
             };
             return std::make_shared<nn::AvgPool2d>(
                 two(k), s.is_none() ? std::vector<int64_t>{} : two(s), two(p));
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::AdaptiveAvgPool2d, Layer, std::shared_ptr<nn::AdaptiveAvgPool2d>>(
      m, "AdaptiveAvgPool2d")
      .def(py::init([](py::object s) {
             return std::make_shared<nn::AdaptiveAvgPool2d>(ints_from(s, "AdaptiveAvgPool2d"));
           }),
           py::arg("output_size"));
  auto bn_opts = [](double eps, double momentum, bool affine, bool track) {
    return nn::BatchNormOptions{eps, momentum, affine, track};
  };
  py::class_<nn::BatchNorm, Layer, std::shared_ptr<nn::BatchNorm>>(m, "BatchNorm");
  py::class_<nn::BatchNorm1d, nn::BatchNorm, std::shared_ptr<nn::BatchNorm1d>>(m, "BatchNorm1d")
      .def(py::init([bn_opts](int64_t n, double eps, double mom, bool affine, bool track) {
             return std::make_shared<nn::BatchNorm1d>(n, bn_opts(eps, mom, affine, track));
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1,
           py::arg("affine") = true, py::arg("track_running_stats") = true);
  py::class_<nn::BatchNorm2d, nn::BatchNorm, std::shared_ptr<nn::BatchNorm2d>>(m, "BatchNorm2d")
      .def(py::init([bn_opts](int64_t n, double eps, double mom, bool affine, bool track) {
             return std::make_shared<nn::BatchNorm2d>(n, bn_opts(eps, mom, affine, track));
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1,
           py::arg("affine") = true, py::arg("track_running_stats") = true);
  py::class_<nn::LayerNorm, Layer, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm")
      .def(py::init([](py::object s, double eps, bool affine) {
             return std::make_shared<nn::LayerNorm>(shape_from(s), eps, affine);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5,
           py::arg("elementwise_affine") = true);
  layer<nn::GroupNorm>(m, "GroupNorm", py::init<int64_t, int64_t, double, bool>(),
                       py::arg("num_groups"), py::arg("num_channels"), py::arg("eps") = 1e-5,
                       py::arg("affine") = true);
  layer<nn::Embedding>(m, "Embedding", py::init<int64_t, int64_t>(), py::arg("num_embeddings"),
                       py::arg("embedding_dim"));
  layer<nn::Dropout>(m, "Dropout", py::init<double>(), py::arg("p") = 0.5);
  layer<nn::ReLU>(m, "ReLU", py::init<>());
  layer<nn::Tanh>(m, "Tanh", py::init<>());
  layer<nn::Sigmoid>(m, "Sigmoid", py::init<>());
  layer<nn::SiLU>(m, "SiLU", py::init<>());
  layer<nn::GELU>(m, "GELU", py::init<bool>(), py::arg("approximate") = false);
  layer<nn::LeakyReLU>(m, "LeakyReLU", py::init<double>(), py::arg("negative_slope") = 0.01);
  layer<nn::ELU>(m, "ELU", py::init<double>(), py::arg("alpha") = 1.0);
  layer<nn::Softplus>(m, "Softplus", py::init<double, double>(), py::arg("beta") = 1.0,
                      py::arg("threshold") = 20.0);
  layer<nn::Flatten>(m, "Flatten", py::init<int64_t, int64_t>(), py::arg("start_dim") = 1,
                     py::arg("end_dim") = -1);

  py::class_<nn::RNNBase, Module, std::shared_ptr<nn::RNNBase>>(m, "RNNBase")
      .def(
          "__call__",
          [](nn::RNNBase& r, const Tensor& x, py::object state) {
            nn::RNNState st;
            if (!state.is_none()) {
              if (py::isinstance<Tensor>(state)) {
                st.h = state.cast<Tensor>();
              } else {
                auto t = state.cast<py::tuple>();
                st.h = t[0].cast<Tensor>();
                if (t.size() > 1) st.c = t[1].cast<Tensor>();
              }
            }
            std::pair<Tensor, nn::RNNState> out;
            {
              MaybeNoGil g(x.is_concrete());
              out = r.forward(x, st);
            }
            py::object s = out.second.c.defined()
                               ? py::object(py::make_tuple(out.second.h, out.second.c))
                               : py::cast(out.second.h);
            return py::make_tuple(out.first, s);
          },
          py::arg("input"), py::arg("state") = py::none());
  auto rnn_opts = [](int64_t in, int64_t hidden, int64_t layers, bool bias, bool batch_first,
                     const std::string& nl) {
    return nn::RNNOptions{in, hidden, layers, batch_first, bias, nl};
  };
  py::class_<nn::RNN, nn::RNNBase, std::shared_ptr<nn::RNN>>(m, "RNN").def(
      py::init(
          [rnn_opts](int64_t in, int64_t h, int64_t l, const std::string& nl, bool bias, bool bf) {
            return std::make_shared<nn::RNN>(rnn_opts(in, h, l, bias, bf, nl));
          }),
      py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1,
      py::arg("nonlinearity") = "tanh", py::arg("bias") = true, py::arg("batch_first") = false);
  py::class_<nn::LSTM, nn::RNNBase, std::shared_ptr<nn::LSTM>>(m, "LSTM").def(
      py::init([rnn_opts](int64_t in, int64_t h, int64_t l, bool bias, bool bf) {
        return std::make_shared<nn::LSTM>(rnn_opts(in, h, l, bias, bf, "tanh"));
      }),
      py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1,
      py::arg("bias") = true, py::arg("batch_first") = false);
  py::class_<nn::GRU, nn::RNNBase, std::shared_ptr<nn::GRU>>(m, "GRU").def(
      py::init([rnn_opts](int64_t in, int64_t h, int64_t l, bool bias, bool bf) {
        return std::make_shared<nn::GRU>(rnn_opts(in, h, l, bias, bf, "tanh"));
      }),
      py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1,
      py::arg("bias") = true, py::arg("batch_first") = false);
}

}  // namespace kiln::python
