// Loss family beyond nn_ops.cpp's plain nll_loss, cross_entropy and mse_loss, with torch 1.13's
// formulas: cross_entropy with class weights, label smoothing and probability targets; weighted
// nll_loss; l1_loss; binary_cross_entropy (a pointwise primitive, for torch's clamped logs and
// its gradient); kl_div; and the composites cosine_embedding, margin_ranking, hinge_embedding,
// soft_margin, multilabel_soft_margin, poisson_nll, gaussian_nll and triplet_margin losses.
#include <cmath>

#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

constexpr char kBceN[] = "binary_cross_entropy";

Tensor reduce(const Tensor& l, Reduction r) {
  if (r == Reduction::None) return l;
  return r == Reduction::Sum ? sum(l) : mean(l);
}
void need(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->defined()) fail(op, "an input is an undefined tensor");
}
void need_float(const char* op, const Tensor& t, const char* what) {
  if (!is_floating(t.dtype()))
    fail(op, what, " must be floating point, got ", t.dtype(), " ", t.shape());
}
// Equal shapes, a dynamic dim (graph mode) matching anything.
bool same_shape(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (a[d] != b[d] && a[d] >= 0 && b[d] >= 0) return false;
  return true;
}
// weight [C] as [1, C, 1, ...] against an input of rank `rank` with classes on dim 1.
Tensor class_view(const Tensor& w, int64_t rank) {
  Tensor v = unsqueeze(w, 0);
  for (int64_t d = 2; d < rank; ++d) v = unsqueeze(v, -1);
  return v;
}
void check_weight(const char* op, const Tensor& w, int64_t C) {
  need_float(op, w, "weight");
  if (w.dim() != 1 || (C >= 0 && w.shape()[0] >= 0 && w.shape()[0] != C))
    fail(op, "weight must be 1-D with one entry per class (", C, "), got shape ", w.shape());
}

// Pointwise binary cross-entropy on probabilities: torch's kernel, logs clamped to >= -100,
// and its gradient g (p - t) / max(p (1 - p), 1e-12) (finite at p = 0 and 1).
struct BceF {
  template <class T>
  T operator()(T p, T t) const {
    const T lp = std::max(std::log(p), T(-100)), l1p = std::max(std::log1p(-p), T(-100));
    return (t - T(1)) * l1p - t * lp;
  }
};
const OpDef& kBce =
    def_op({.name = kBceN,
            .num_inputs = 2,
            .traits = kElementwise,
            .infer = infer_binary_float<kBceN>,
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                  KILN_DISPATCH_FLOAT(in[0].dtype(), kBceN, [&] {
                    // torch refuses probabilities outside [0, 1] (NaN included).
                    const Tensor p = in[0].contiguous();
                    const scalar_t* P = p.data_ptr<scalar_t>();
                    for (int64_t i = 0, n = p.numel(); i < n; ++i)
                      if (!(P[i] >= 0 && P[i] <= 1))
                        fail(kBceN, "all elements of input should be between 0 and 1, got ", P[i],
                             " (input ", in[0].shape(), ")");
                    cpu::binary_loop<scalar_t, scalar_t, scalar_t>(in[0], in[1], out[0], BceF{});
                  });
                },
            .grad =
                [](const GradCtx& c) {
                  const Tensor &p = c.in(0), &t = c.in(1);
                  Tensor gp, gt;
                  if (c.need(0))
                    gp = div(mul(c.g(), sub(p, t)), clamp(mul(sub(1.0, p), p), 1e-12, INFINITY));
                  if (c.need(1))
                    gt = mul(c.g(), sub(clamp(log1p(neg(p)), -100, INFINITY),
                                        clamp(log(p), -100, INFINITY)));
                  return TensorList{gp, gt};
                },
            .doc = "pointwise -(t log p + (1 - t) log(1 - p)), logs clamped to >= -100"});

// nll_loss with class weights: -w[t] lp[n, t] over non-ignored targets; 'mean' divides by the
// summed weights of those targets (torch). lp [N, C, d...], target [N, d...].
Tensor weighted_nll(const char* op, const Tensor& lp, const Tensor& target, const Tensor& weight,
                    Reduction reduction, int64_t ignore_index) {
  check_weight(op, weight, lp.shape()[1]);
  Tensor t = target.dtype() == Int64 ? target : cast(target, Int64);
  Tensor valid = ne(t, ignore_index);
  Tensor safe = where(valid, t, scalar_tensor(0, Int64));
  Tensor picked = squeeze(gather(lp, 1, unsqueeze(safe, 1)), 1);
  Tensor w =
      where(valid, reshape(index_select(cast(weight, lp.dtype()), 0, flatten(safe)), safe.shape()),
            scalar_tensor(0, lp.dtype()));
  Tensor l = where(valid, neg(mul(picked, w)), scalar_tensor(0, lp.dtype()));
  if (reduction == Reduction::None) return l;
  if (reduction == Reduction::Sum) return sum(l);
  return div(sum(l), sum(w));
}

void check_class_target(const char* op, const Tensor& input, const Tensor& target) {
  if (target.dtype() != Int64 && target.dtype() != Int32)
    fail(op,
         "target must hold class indices (int64 or int32) or class probabilities (float of "
         "the input's shape), got ",
         target.dtype(), " ", target.shape(), " for input ", input.shape());
  bool ok = target.dim() == input.dim() - 1 && target.shape()[0] == input.shape()[0];
  for (int64_t d = 1; ok && d < target.dim(); ++d)
    ok = target.shape()[d] == input.shape()[d + 1] || target.shape()[d] < 0 ||
         input.shape()[d + 1] < 0;
  if (!ok)
    fail(op, "target shape ", target.shape(), " does not fit input shape ", input.shape(),
         " (expected [N, d...] for input [N, C, d...])");
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                Reduction reduction, int64_t ignore_index) {
  need("nll_loss", {&log_probs, &target});
  if (!weight.defined()) return nll_loss(log_probs, target, reduction, ignore_index);
  need_float("nll_loss", log_probs, "input");
  if (log_probs.dim() == 1) {
    if (target.dim() != 0)
      fail("nll_loss", "target shape ", target.shape(), " does not match input shape ",
           log_probs.shape(), " (an unbatched [C] input takes a 0-d target)");
    Tensor r =
        nll_loss(unsqueeze(log_probs, 0), unsqueeze(target, 0), weight, reduction, ignore_index);
    return reduction == Reduction::None ? squeeze(r, 0) : r;
  }
  if (log_probs.dim() < 1) fail("nll_loss", "input must be [N, C, d...], got a 0-d tensor");
  check_class_target("nll_loss", log_probs, target);
  return weighted_nll("nll_loss", log_probs, target, weight, reduction, ignore_index);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     Reduction reduction, int64_t ignore_index, double label_smoothing) {
  constexpr const char* op = "cross_entropy";
  need(op, {&logits, &target});
  need_float(op, logits, "input");
  if (logits.dim() < 1) fail(op, "input must be [N, C, d...] or [C], got a 0-d tensor");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    fail(op, "label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  const bool probs = is_floating(target.dtype());
  if (logits.dim() == 1) {  // unbatched [C]
    if (probs ? target.dim() != 1 : target.dim() != 0)
      fail(op, "target shape ", target.shape(), " does not fit an unbatched input ", logits.shape(),
           " (expected ", probs ? "[C]" : "a 0-d class index", ")");
    Tensor r = cross_entropy(unsqueeze(logits, 0), unsqueeze(target, 0), weight, reduction,
                             ignore_index, label_smoothing);
    return reduction == Reduction::None ? squeeze(r, 0) : r;
  }
  const int64_t C = logits.shape()[1];
  if (weight.defined()) check_weight(op, weight, C);
  if (probs) {
    if (!same_shape(target.shape(), logits.shape()))
      fail(op, "probability target shape ", target.shape(), " must equal the input's shape ",
           logits.shape());
    Tensor lp = log_softmax(logits, 1);
    Tensor tg = target.dtype() == lp.dtype() ? target : cast(target, lp.dtype());
    if (label_smoothing > 0)
      tg = add(mul(tg, 1.0 - label_smoothing), label_smoothing / static_cast<double>(C));
    Tensor prod = mul(lp, tg);
    if (weight.defined()) prod = mul(prod, class_view(cast(weight, lp.dtype()), lp.dim()));
    if (reduction == Reduction::None) return neg(sum(prod, {1}));
    if (reduction == Reduction::Sum) return neg(sum(prod));
    // torch: divided by the number of positions (numel / C); NaN for an empty input.
    return div(neg(sum(prod)), static_cast<double>(lp.numel() / (C > 0 ? C : 1)));
  }
  check_class_target(op, logits, target);
  if (!weight.defined() && label_smoothing == 0)
    return cross_entropy(logits, target, reduction, ignore_index);
  Tensor lp = log_softmax(logits, 1);
  Tensor nll = weight.defined() ? weighted_nll(op, lp, target, weight, reduction, ignore_index)
                                : nll_loss(lp, target, reduction, ignore_index);
  if (label_smoothing == 0) return nll;
  // torch's label smoothing: (1 - s) nll + s / C * smooth, smooth = -sum_c w_c lp_c per
  // position (0 where ignored), 'mean' dividing by the same weights as nll.
  Tensor wv = weight.defined() ? class_view(cast(weight, lp.dtype()), lp.dim()) : Tensor();
  Tensor smooth = neg(sum(weight.defined() ? mul(lp, wv) : lp, {1}));
  Tensor t = target.dtype() == Int64 ? target : cast(target, Int64);
  Tensor valid = ne(t, ignore_index);
  smooth = where(valid, smooth, scalar_tensor(0, lp.dtype()));
  Tensor ret;
  if (reduction == Reduction::None) {
    ret = smooth;
  } else if (reduction == Reduction::Sum) {
    ret = sum(smooth);
  } else if (weight.defined()) {
    Tensor safe = where(valid, t, scalar_tensor(0, Int64));
    Tensor w = reshape(index_select(cast(weight, lp.dtype()), 0, flatten(safe)), safe.shape());
    ret = div(sum(smooth), sum(where(valid, w, scalar_tensor(0, lp.dtype()))));
  } else {
    ret = div(sum(smooth), sum(cast(valid, lp.dtype())));
  }
  return add(mul(nll, 1.0 - label_smoothing), mul(ret, label_smoothing / static_cast<double>(C)));
}

Tensor l1_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  need("l1_loss", {&a, &b});
  broadcast_shapes(a.shape(), b.shape(), "l1_loss");
  return reduce(abs(sub(a, b)), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction,
                            const Tensor& weight) {
  need(kBceN, {&input, &target});
  need_float(kBceN, input, "input");
  if (!same_shape(target.shape(), input.shape()))
    fail(kBceN, "target shape ", target.shape(), " must equal the input's shape ", input.shape());
  auto [p, t] = promoted(input, float_in(target));
  Tensor l = call1(kBce, {p, t});
  if (weight.defined()) {
    need_float(kBceN, weight, "weight");
    broadcast_shapes(weight.shape(), input.shape(), kBceN);
    l = mul(l, weight);
  }
  return reduce(l, reduction);
}

Tensor kl_div(const Tensor& input_, const Tensor& target_, const std::string& reduction,
              bool log_target) {
  need("kl_div", {&input_, &target_});
  // Under autocast in float32, as torch.autocast's fp32 list (losses).
  const Tensor input = autocast_arg(AutocastPolicy::kFloat32, input_);
  const Tensor target = autocast_arg(AutocastPolicy::kFloat32, target_);
  if (reduction != "none" && reduction != "mean" && reduction != "sum" && reduction != "batchmean")
    fail("kl_div", "reduction must be 'none', 'mean', 'sum' or 'batchmean', got '", reduction, "'");
  Tensor out;
  if (log_target) {
    out = mul(exp(target), sub(target, input));
  } else {
    // xlogy(t, t) - t x, with 0 log 0 = 0 (and no NaN gradient through the masked log).
    Tensor z = eq(target, 0.0);
    Tensor safe = where(z, ones_like(target.detach()), target);
    Tensor xlogy = where(z, zeros_like(target.detach()), mul(target, log(safe)));
    out = sub(xlogy, mul(target, input));
  }
  if (reduction == "none") return out;
  if (reduction == "mean") return mean(out);
  Tensor s = sum(out);
  if (reduction == "batchmean" && input.dim() != 0)
    return div(s, static_cast<double>(input.shape()[0]));
  return s;
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                             double margin, Reduction reduction) {
  need("cosine_embedding_loss", {&x1, &x2, &target});
  if (x1.dim() != x2.dim() || x1.dim() < 1 || x1.dim() > 2 || target.dim() != x1.dim() - 1)
    fail("cosine_embedding_loss",
         "expected 1-D or 2-D inputs of one rank and a target of one "
         "rank less, got ",
         x1.shape(), ", ", x2.shape(), " and target ", target.shape());
  const int64_t d = x1.dim() == 2 ? 1 : 0;
  const double kEps = 1e-12;  // torch's EPSILON
  Tensor prod = sum(mul(x1, x2), {d});
  Tensor m1 = add(sum(mul(x1, x1), {d}), kEps), m2 = add(sum(mul(x2, x2), {d}), kEps);
  Tensor cosv = div(prod, sqrt(mul(m1, m2)));
  Tensor zero = zeros_like(cosv.detach());
  Tensor pos = where(eq(target, 1.0), sub(1.0, cosv), zero);
  Tensor negv = where(eq(target, -1.0), clamp_min(sub(cosv, margin), 0.0), zero);
  return reduce(add(pos, negv), reduction);
}

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                           Reduction reduction) {
  need("margin_ranking_loss", {&x1, &x2, &target});
  Tensor l = clamp_min(add(mul(neg(target), sub(x1, x2)), margin), 0.0);
  return reduce(l, reduction);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin,
                            Reduction reduction) {
  need("hinge_embedding_loss", {&input, &target});
  Tensor zero = zeros_like(input.detach());
  Tensor m = where(ne(target, 1.0), clamp_min(sub(margin, input), 0.0), zero);
  Tensor s = where(ne(target, -1.0), input, zero);
  return reduce(add(m, s), reduction);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  need("soft_margin_loss", {&input, &target});
  return reduce(log1p(exp(mul(neg(input), target))), reduction);
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                                   Reduction reduction) {
  need("multilabel_soft_margin_loss", {&input, &target});
  if (input.dim() < 1) fail("multilabel_soft_margin_loss", "input must have a class dim");
  Tensor l =
      neg(add(mul(target, logsigmoid(input)), mul(sub(1.0, target), logsigmoid(neg(input)))));
  if (weight.defined()) l = mul(l, weight);
  const int64_t cd = input.dim() - 1;
  l = div(sum(l, {cd}), static_cast<double>(input.shape()[cd]));
  return reduce(l, reduction);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full,
                        double eps, Reduction reduction) {
  need("poisson_nll_loss", {&input, &target});
  Tensor l = log_input ? sub(exp(input), mul(target, input))
                       : sub(input, mul(target, log(add(input, eps))));
  if (full) {
    // Stirling's term t log t - t + 0.5 log(2 pi t), only where t > 1.
    Tensor big = gt(target, 1.0);
    Tensor ts = where(big, target, ones_like(target.detach()) * 2.0);
    Tensor st = add(sub(mul(ts, log(ts)), ts), mul(log(mul(ts, 2 * 3.14159265358979323846)), 0.5));
    l = add(l, where(big, st, zeros_like(st.detach())));
  }
  return reduce(l, reduction);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full,
                         double eps, Reduction reduction) {
  constexpr const char* op = "gaussian_nll_loss";
  need(op, {&input, &target, &var});
  Tensor v = var;
  if (var.shape() != input.shape()) {
    const Shape& is = input.shape();
    const Shape& vs = var.shape();
    bool drop_last = vs.rank() == is.rank() - 1;
    for (int64_t d = 0; drop_last && d < vs.rank(); ++d) drop_last = vs[d] == is[d];
    bool last_one = vs.rank() == is.rank() && vs.rank() > 0 && vs[vs.rank() - 1] == 1;
    for (int64_t d = 0; last_one && d + 1 < vs.rank(); ++d) last_one = vs[d] == is[d];
    if (drop_last)
      v = unsqueeze(var, -1);
    else if (!last_one)
      fail(op, "var is of incorrect size: ", vs, " for input ", is);
  }
  if (v.is_concrete())
    for (double x : v.to_vector<double>())
      if (x < 0) fail(op, "var has negative entry/entries");
  // torch clamps a copy of var to >= eps under no_grad: the gradient passes unclamped.
  Tensor vc = add(v, detach(sub(clamp(v, eps, INFINITY), v)));
  Tensor d = sub(input, target);
  Tensor l = mul(add(log(vc), div(mul(d, d), vc)), 0.5);
  if (full) l = add(l, 0.5 * std::log(2 * 3.14159265358979323846));
  return reduce(l, reduction);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin, double p, double eps, bool swap, Reduction reduction) {
  need("triplet_margin_loss", {&anchor, &positive, &negative});
  if (anchor.dim() != positive.dim() || anchor.dim() != negative.dim())
    fail("triplet_margin_loss", "anchor, positive and negative must have one rank, got ",
         anchor.shape(), ", ", positive.shape(), " and ", negative.shape());
  auto dist = [&](const Tensor& a, const Tensor& b) {
    return vector_norm(add(sub(a, b), eps), p, {-1});
  };
  Tensor dp = dist(anchor, positive), dn = dist(anchor, negative);
  if (swap) dn = minimum(dn, dist(positive, negative));
  return reduce(clamp_min(sub(add(dp, margin), dn), 0.0), reduction);
}

}  // namespace kiln
