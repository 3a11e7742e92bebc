// Linear algebra, convolution, pooling, normalization, indexing ops and losses as kiln.<op>(...)
// (and Tensor methods where PyTorch has them). These are the ops with real work per call, so each
// releases the GIL while its kernel runs when its inputs are concrete.
#include "common.h"

namespace kiln::python {
namespace {

// (values, indices) as kiln.return_types.<name> (made in ops_math.cpp), as torch names them.
py::object named_pair(const char* name, const Tensor& values, const Tensor& indices) {
  static py::object* types = new py::object(py::module_::import("kiln._C").attr("return_types"));
  return types->attr(name)(values, indices);
}

Tensor opt_tensor(py::handle h) { return h.is_none() ? Tensor() : h.cast<Tensor>(); }
bool concrete(const Tensor& t) { return t.is_concrete(); }
// A pair of ints from an int or a sequence (torch's kernel_size=3 or (3, 3)).
std::vector<int64_t> pair_of(py::handle h, const char* what) {
  std::vector<int64_t> v = ints_from(h, what);
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

}  // namespace

void init_ops_nn(py::module_& m, TensorClass& cls) {
  def_both(
      m, cls, "matmul", "torch.matmul: 1-D, 2-D and batched products with broadcasting.",
      [](const Tensor& a, const Tensor& b) {
        MaybeNoGil g(concrete(a) && concrete(b));
        return matmul(a, b);
      },
      py::arg("other"));
  m.def(
      "addmm",
      [](const Tensor& in, const Tensor& a, const Tensor& b, double beta, double alpha) {
        MaybeNoGil g(concrete(a) && concrete(b));
        return addmm(in, a, b, beta, alpha);
      },
      py::arg("input"), py::arg("mat1"), py::arg("mat2"), py::kw_only(), py::arg("beta") = 1.0,
      py::arg("alpha") = 1.0, "beta * input + alpha * (mat1 @ mat2).");
  m.def(
      "einsum",
      [](const std::string& eq, py::args ops) {
        std::vector<Tensor> ts;
        if (ops.size() == 1 && !py::isinstance<Tensor>(ops[0]))
          ts = ops[0].cast<std::vector<Tensor>>();
        else
          ts = ops.cast<std::vector<Tensor>>();
        MaybeNoGil g(true);
        return einsum(eq, ts);
      },
      py::arg("equation"), "torch.einsum(\"bij,bjk->bik\", a, b).");
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, py::object b) {
        Tensor bt = opt_tensor(b);
        MaybeNoGil g(concrete(x));
        return linear(x, w, bt);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), "x @ w^T + b.");
  m.def(
      "rnn_sequence",
      [](const Tensor& xw, const Tensor& w_hh, py::object b_hh, py::object h0, py::object c0,
         const std::string& mode, bool reverse) {
        const Tensor b = opt_tensor(b_hh), h = opt_tensor(h0), c = opt_tensor(c0);
        RnnSequenceOut r;
        {
          MaybeNoGil g(concrete(xw));  // (the tuple below needs the GIL again)
          r = rnn_sequence(xw, w_hh, b, h, c, mode, reverse);
        }
        return py::make_tuple(r.h, r.c.defined() ? py::cast(r.c) : py::none());
      },
      py::arg("xw"), py::arg("w_hh"), py::arg("b_hh") = py::none(), py::arg("h0") = py::none(),
      py::arg("c0") = py::none(), py::arg("mode") = "lstm", py::arg("reverse") = false,
      "A recurrent layer's time loop in one op, after its input projection xw [T, B, G H] (x @ "
      "w_ih^T + b_ih): (every step's h [T, B, H], every step's c for an LSTM else None). mode "
      "'lstm', 'gru', 'rnn_tanh' or 'rnn_relu' (torch's gate orders); w_hh [G H, H].");
  m.def(
      "conv_transpose2d",
      [](const Tensor& x, const Tensor& w, py::object b, py::object stride, py::object padding,
         py::object output_padding, int64_t groups, py::object dilation) {
        Tensor bt = opt_tensor(b);
        auto s = pair_of(stride, "conv_transpose2d"), p = pair_of(padding, "conv_transpose2d");
        auto op = pair_of(output_padding, "conv_transpose2d"),
             d = pair_of(dilation, "conv_transpose2d");
        MaybeNoGil g(concrete(x));
        return conv_transpose2d(x, w, bt, s, p, op, d, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1,
      py::arg("dilation") = 1);
  m.def(
      "layer_norm",
      [](const Tensor& x, py::object ns, py::object w, py::object b, double eps) {
        Tensor wt = opt_tensor(w), bt = opt_tensor(b);
        Shape s = shape_from(ns);  // Python objects are read before the GIL is released
        MaybeNoGil g(concrete(x));
        return layer_norm(x, s, wt, bt, eps);
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  m.def(
      "batch_norm",
      [](const Tensor& x, py::object rm, py::object rv, py::object w, py::object b, bool training,
         double momentum, double eps) {
        return batch_norm(x, opt_tensor(rm), opt_tensor(rv), opt_tensor(w), opt_tensor(b), training,
                          momentum, eps);
      },
      py::arg("input"), py::arg("running_mean"), py::arg("running_var"),
      py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("training") = true,
      py::arg("momentum") = 0.1, py::arg("eps") = 1e-5);
  m.def(
      "embedding", [](const Tensor& idx, const Tensor& w) { return embedding(w, idx); },
      py::arg("input"), py::arg("weight"),
      "Rows of weight [V, D] picked by integer input (torch.nn.functional.embedding order).");
  def_both(
      m, cls, "gather", "Values along dim at index.",
      [](const Tensor& a, int64_t dim, const Tensor& idx) { return gather(a, dim, idx); },
      py::arg("dim"), py::arg("index"));
  def_both(
      m, cls, "index_select", "Slices along dim at the 1-D index.",
      [](const Tensor& a, int64_t dim, const Tensor& idx) { return index_select(a, dim, idx); },
      py::arg("dim"), py::arg("index"));
  def_both(
      m, cls, "scatter_add", "A copy of input with src added at index along dim.",
      [](const Tensor& a, int64_t dim, const Tensor& idx, const Tensor& src) {
        return scatter_add(a, dim, idx, src);
      },
      py::arg("dim"), py::arg("index"), py::arg("src"));
  def_both(
      m, cls, "index_add", "A copy of input with slices of source added at index along dim.",
      [](const Tensor& a, int64_t dim, const Tensor& idx, const Tensor& src) {
        return index_add(a, dim, idx, src);
      },
      py::arg("dim"), py::arg("index"), py::arg("source"));
  def_both(
      m, cls, "nonzero",
      "Coordinates [n, rank] of the nonzero elements (as_tuple: one 1-D tensor per dim).",
      [](const Tensor& a, bool as_tuple) -> py::object {
        if (!as_tuple) return py::cast(nonzero(a));
        const std::vector<Tensor> v = nonzero_tuple(a);
        py::tuple t(v.size());
        for (size_t i = 0; i < v.size(); ++i) t[i] = py::cast(v[i]);
        return t;
      },
      py::kw_only(), py::arg("as_tuple") = false);
  def_both(
      m, cls, "masked_select", "The elements where mask is true, 1-D.",
      [](const Tensor& a, const Tensor& mask) { return masked_select(a, mask); }, py::arg("mask"));
  m.def(
      "one_hot", [](const Tensor& idx, int64_t n) { return one_hot(idx, n); }, py::arg("input"),
      py::arg("num_classes"));
  def_both(
      m, cls, "topk", "The k largest (or smallest) values along dim and their indices.",
      [](const Tensor& a, int64_t k, int64_t dim, bool largest) {
        auto [v, i] = topk(a, k, dim, largest);
        return named_pair("topk", v, i);
      },
      py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true);
  def_both(
      m, cls, "sort", "Sorted values along dim and their indices (stable).",
      [](const Tensor& a, int64_t dim, bool desc) {
        auto [v, i] = sort(a, dim, desc);
        return named_pair("sort", v, i);
      },
      py::arg("dim") = -1, py::arg("descending") = false);
  def_both(
      m, cls, "argsort", "The indices of sort.",
      [](const Tensor& a, int64_t dim, bool desc) { return argsort(a, dim, desc); },
      py::arg("dim") = -1, py::arg("descending") = false);
  def_both(
      m, cls, "tril", "Lower triangle of the last two dims.",
      [](const Tensor& a, int64_t d) { return tril(a, d); }, py::arg("diagonal") = 0);
  def_both(
      m, cls, "triu", "Upper triangle of the last two dims.",
      [](const Tensor& a, int64_t d) { return triu(a, d); }, py::arg("diagonal") = 0);

  // ---- losses ----
  m.def(
      "cross_entropy",
      [](const Tensor& logits, const Tensor& target, py::object w, py::object sa, int64_t ignore,
         py::object rd, const std::string& red, double smoothing) {
        Reduction r = reduction_from(red);
        if (!sa.is_none() || !rd.is_none()) {
          const bool mean_ = sa.is_none() || sa.cast<bool>();
          r = !(rd.is_none() || rd.cast<bool>()) ? Reduction::None
                                                 : (mean_ ? Reduction::Mean : Reduction::Sum);
        }
        Tensor wt = opt_tensor(w);
        MaybeNoGil g(big(logits));
        return cross_entropy(logits, target, wt, r, ignore, smoothing);
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
      py::arg("size_average") = py::none(), py::arg("ignore_index") = -100,
      py::arg("reduce") = py::none(), py::arg("reduction") = "mean",
      py::arg("label_smoothing") = 0.0,
      "logits [N, C, d...] and class indices [N, d...] (int64) or class probabilities (float, "
      "the logits' shape); weight [C], label_smoothing as torch.");
  m.def(
      "nll_loss",
      [](const Tensor& lp, const Tensor& target, py::object w, py::object sa, int64_t ignore,
         py::object rd, const std::string& red) {
        Reduction r = reduction_from(red);
        if (!sa.is_none() || !rd.is_none()) {
          const bool mean_ = sa.is_none() || sa.cast<bool>();
          r = !(rd.is_none() || rd.cast<bool>()) ? Reduction::None
                                                 : (mean_ ? Reduction::Mean : Reduction::Sum);
        }
        return nll_loss(lp, target, opt_tensor(w), r, ignore);
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
      py::arg("size_average") = py::none(), py::arg("ignore_index") = -100,
      py::arg("reduce") = py::none(), py::arg("reduction") = "mean");
  m.def(
      "mse_loss",
      [](const Tensor& a, const TensorLike& b, const std::string& red) {
        return mse_loss(a, b.t, reduction_from(red));
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean");
  m.def(
      "binary_cross_entropy_with_logits",
      [](const Tensor& a, const Tensor& b, const std::string& red, py::object pw) {
        return binary_cross_entropy_with_logits(a, b, reduction_from(red), opt_tensor(pw));
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean",
      py::arg("pos_weight") = py::none());
  m.def(
      "smooth_l1_loss",
      [](const Tensor& a, const Tensor& b, const std::string& red, double beta) {
        return smooth_l1_loss(a, b, reduction_from(red), beta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("beta") = 1.0);
  m.def(
      "huber_loss",
      [](const Tensor& a, const Tensor& b, const std::string& red, double delta) {
        return huber_loss(a, b, reduction_from(red), delta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("delta") = 1.0);
  m.def(
      "dropout", [](const Tensor& a, double p, bool training) { return dropout(a, p, training); },
      py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true);
}

}  // namespace kiln::python
