// Attention family: scaled_dot_product_attention (torch.nn.functional.scaled_dot_product_attention
// without attn_mask and dropout) and its gradient op. One fused kernel per direction (the loops
// are in kernels/cpu/attention.cpp) replaces matmul, scale, mask, softmax and matmul forward
// and the five ops of their gradients: in W7 (B 16, H 4, T 64, head dim 32) those cost ~3.9 ms of
// a 26.7 ms step at 1 thread, mostly batched 64 x 64 x 32 GEMMs at ~80 GFLOP/s.
//
// Layout. q, k, v are read through their strides (the permuted [B, H, T, hd] views of a qkv
// projection, no copies). For rank >= 3 the results are written in [..., T, H, E] memory order
// (dims -3 and -2 swapped: "raw" below) and the public wrapper returns the [..., H, T, E] view,
// so that the usual permute(0, 2, 1, 3) + reshape back to [B, T, H*E] is a view both ways: in
// the forward for the output, in the backward for dq, dk and dv.
//
// Outputs of scaled_dot_product_attention: 0: the attention result (raw), 1: the probabilities
// P [..., Tq, Tk] (exact zeros where causally masked), which the gradient reads.
#include "kiln/kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr const char* kGradName = "scaled_dot_product_attention_grad";

bool dim_eq(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

// q [..., Tq, E], k [..., Tk, E], v [..., Tk, Ev] with equal batch dims; float, one dtype.
void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  op_util::require_float(op, q, "q");
  op_util::require_float(op, k, "k");
  op_util::require_float(op, v, "v");
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    fail(op, "q, k and v must have one dtype, got q ", q.dtype(), " ", q.shape(), ", k ", k.dtype(),
         " ", k.shape(), ", v ", v.dtype(), " ", v.shape());
  const int64_t r = q.dim();
  if (r < 2 || k.dim() != r || v.dim() != r)
    fail(op, "q, k and v must be [..., T, E] of one rank >= 2, got q ", q.shape(), ", k ",
         k.shape(), ", v ", v.shape());
  for (int64_t d = 0; d < r - 2; ++d)
    if (!dim_eq(q.shape()[d], k.shape()[d]) || !dim_eq(q.shape()[d], v.shape()[d]))
      fail(op, "batch dims differ: q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
  if (!dim_eq(q.shape()[r - 1], k.shape()[r - 1]))
    fail(op, "q and k must have the same last dim (E), got q ", q.shape(), ", k ", k.shape());
  if (!dim_eq(k.shape()[r - 2], v.shape()[r - 2]))
    fail(op, "k and v must have the same length (dim -2), got k ", k.shape(), ", v ", v.shape());
}

// [..., rows, cols] with the batch dims of q.
Shape batch_shape(const Tensor& q, int64_t rows, int64_t cols) {
  Shape s(q.shape().begin(), q.shape().end() - 2);
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// Dims -3 and -2 swapped (rank >= 3): the memory order of the results.
Shape swap_hd(Shape s) {
  if (s.rank() >= 3) std::swap(s[s.rank() - 3], s[s.rank() - 2]);
  return s;
}

// The logical [..., H, T, E] view of a raw result, for gradient rules and the wrapper.
Tensor logical(const Tensor& raw) { return raw.dim() >= 3 ? transpose(raw, -3, -2) : raw; }

double eff_scale(double scale, int64_t e) {
  if (scale != 0) return scale;
  return e > 0 ? 1.0 / std::sqrt(static_cast<double>(e)) : 1.0;
}

cpu::AttnDims dims_of(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& a) {
  cpu::AttnDims s;
  const int64_t r = q.dim();
  s.bh = op_util::prod(q.shape(), 0, r - 2);
  s.tq = q.shape()[r - 2];
  s.tk = k.shape()[r - 2];
  s.d = q.shape()[r - 1];
  s.dv = v.shape()[r - 1];
  s.causal = a.b(0);
  s.scale = eff_scale(a.f(1), s.d);
  return s;
}

// A batch of strided matrices over the batch dims of t (offsets kept alive in `off`).
template <typename T, typename P>
cpu::AttnMat<P> mat(const Tensor& t, std::vector<int64_t>& off) {
  const int64_t r = t.dim();
  off = op_util::dim_offsets(t.shape(), t.strides(), 0, r - 2);
  return {t.data_ptr<T>(), off.data(), t.strides()[r - 2], t.strides()[r - 1]};
}
// The logical [..., H, T, E] matrices of a contiguous raw result.
template <typename T>
cpu::AttnMat<T> raw_mat(const Tensor& raw, std::vector<int64_t>& off) {
  const int64_t r = raw.dim();
  Shape s = raw.shape();
  Strides st = raw.strides();
  if (r >= 3) {
    std::swap(s[r - 3], s[r - 2]);
    std::swap(st[r - 3], st[r - 2]);
  }
  off = op_util::dim_offsets(s, st, 0, r - 2);
  return {raw.data_ptr<T>(), off.data(), st[r - 2], 1};
}

// causal (bool) and a finite scale (0: 1/sqrt(E)), also when the op is called through the
// registry rather than the wrapper.
void check_attrs(const char* op, const Attrs& a) {
  (void)a.b(0);
  if (!std::isfinite(a.f(1))) fail(op, "scale must be finite (0 for 1/sqrt(E)), got ", a.f(1));
}

MetaList infer_sdpa(std::span<const Tensor> in, const Attrs& a) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  check_attrs(kOp, a);
  check_qkv(kOp, q, k, v);
  const int64_t r = q.dim();
  MetaList m;
  m.push_back(TensorMeta{q.dtype(), swap_hd(batch_shape(q, q.shape()[r - 2], v.shape()[r - 1]))});
  m.push_back(TensorMeta{q.dtype(), batch_shape(q, q.shape()[r - 2], k.shape()[r - 2])});
  return m;
}

void sdpa_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const cpu::AttnDims s = dims_of(q, k, v, a);
  if (s.bh == 0 || s.tq == 0) return;
  KILN_DISPATCH_FLOAT(q.dtype(), kOp, [&] {
    using T = scalar_t;
    std::vector<int64_t> oq, ok, ov, oo;
    cpu::attention_forward<T>(s, mat<T, const T>(q, oq), mat<T, const T>(k, ok),
                              mat<T, const T>(v, ov), raw_mat<T>(out[0], oo), out[1].data_ptr<T>());
  });
}

// Inputs g (dL/d the logical output, any strides), q, k, v, p (the saved probabilities).
MetaList infer_sdpa_grad(std::span<const Tensor> in, const Attrs& a) {
  const Tensor &g = in[0], &q = in[1], &k = in[2], &v = in[3], &p = in[4];
  check_attrs(kGradName, a);
  check_qkv(kGradName, q, k, v);
  const int64_t r = q.dim();
  if (g.dtype() != q.dtype() || p.dtype() != q.dtype())
    fail(kGradName, "the gradient g and the probabilities p must have q's dtype ", q.dtype(),
         ", got g ", g.dtype(), " ", g.shape(), " and p ", p.dtype(), " ", p.shape());
  const Shape gs = batch_shape(q, q.shape()[r - 2], v.shape()[r - 1]);
  const Shape ps = batch_shape(q, q.shape()[r - 2], k.shape()[r - 2]);
  auto fits = [](const Shape& a, const Shape& b) {
    if (a.rank() != b.rank()) return false;
    for (int64_t d = 0; d < a.rank(); ++d)
      if (!dim_eq(a[d], b[d])) return false;
    return true;
  };
  if (!fits(g.shape(), gs))
    fail(kGradName, "gradient shape ", g.shape(), " must be ", gs, " (q ", q.shape(), ", k ",
         k.shape(), ", v ", v.shape(), ")");
  if (!fits(p.shape(), ps))
    fail(kGradName, "probabilities shape ", p.shape(), " must be ", ps, " (q ", q.shape(), ", k ",
         k.shape(), ")");
  MetaList m;
  m.push_back(TensorMeta{q.dtype(), swap_hd(q.shape())});
  m.push_back(TensorMeta{q.dtype(), swap_hd(k.shape())});
  m.push_back(TensorMeta{q.dtype(), swap_hd(v.shape())});
  return m;
}

void sdpa_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &g = in[0], &q = in[1], &k = in[2], &v = in[3];
  const cpu::AttnDims s = dims_of(q, k, v, a);
  if (s.bh == 0) return;  // (empty lengths: the products over them write zeros)
  const Tensor p = in[4].is_contiguous() ? in[4] : raw_contiguous_copy(in[4]);
  KILN_DISPATCH_FLOAT(q.dtype(), kGradName, [&] {
    using T = scalar_t;
    std::vector<int64_t> og, oq, ok, ov, odq, odk, odv;
    cpu::attention_backward<T>(s, mat<T, const T>(g, og), mat<T, const T>(q, oq),
                               mat<T, const T>(k, ok), mat<T, const T>(v, ov), p.data_ptr<T>(),
                               raw_mat<T>(out[0], odq), raw_mat<T>(out[1], odk),
                               raw_mat<T>(out[2], odv));
  });
}

// The scale the kernels use; the rules need it as a number.
double rule_scale(const char* op, const Attrs& a, const Tensor& q) {
  if (a.f(1) == 0 && q.size(-1) < 0)
    fail(op, "gradients with the default scale need a static head dim, got q ", q.shape());
  return eff_scale(a.f(1), q.size(-1));
}

// Second derivatives: the rule of the gradient op, differentiating the formulas of sdpa_grad
// (below). They hold with causal masking as they stand, because the op's p is zero past the
// diagonal (as the forward writes it; the kernel reads p in whole blocks and relies on that).
// With cotangents A, B, C of dq, dk, dv, s the scale and Y = dP - rowsum(P * dP) (dS = s P Y):
//   dv = P^T G:   gP += G C^T,       gG += P C
//   dq = dS K:    gdS += A K^T,      gK += dS^T A
//   dk = dS^T Q:  gdS += Q B^T,      gQ += dS B
//   dS = s P Y:   gP += s gdS * Y,   gY = s gdS * P
//   Y:            gdP = gY - rowsum(gY) P,   gP -= rowsum(gY) dP   (r = rowsum(P dP) feeds both)
//   dP = G V^T:   gG += gdP V,       gV += gdP^T G
TensorList sdpa_grad_grad(const GradCtx& c) {
  const Tensor &g = c.in(0), &q = c.in(1), &k = c.in(2), &v = c.in(3);
  const Tensor& p = c.in(4);
  const double s = rule_scale(kGradName, c.attrs, q);
  auto tr = [](const Tensor& t) { return transpose(t, -1, -2); };
  auto acc = [](const Tensor& a, const Tensor& b) { return a.defined() ? add(a, b) : b; };
  // The outputs are raw (see Layout): so are their cotangents.
  const Tensor A = c.flowed(0) ? logical(c.g(0)) : Tensor();
  const Tensor B = c.flowed(1) ? logical(c.g(1)) : Tensor();
  const Tensor C = c.flowed(2) ? logical(c.g(2)) : Tensor();
  Tensor gg, gq, gk, gv, gp;
  if (C.defined()) {
    gp = matmul(g, tr(C));
    gg = matmul(p, C);
  }
  if (A.defined() || B.defined()) {
    const Tensor dp = matmul(g, tr(v));
    const Tensor y = sub(dp, sum(mul(p, dp), {-1}, true));
    const Tensor ds = mul(mul(p, y), s);
    Tensor gds;
    if (A.defined()) {
      gds = matmul(A, tr(k));
      gk = matmul(tr(ds), A);
    }
    if (B.defined()) {
      gds = acc(gds, matmul(q, tr(B)));
      gq = matmul(ds, B);
    }
    const Tensor gy = mul(mul(gds, p), s);
    const Tensor rg = sum(gy, {-1}, true);
    gp = acc(gp, sub(mul(mul(gds, y), s), mul(rg, dp)));
    const Tensor gdp = sub(gy, mul(rg, p));
    gg = acc(gg, matmul(gdp, v));
    gv = matmul(tr(gdp), g);
  }
  return TensorList{c.need(0) ? gg : Tensor(), c.need(1) ? gq : Tensor(), c.need(2) ? gk : Tensor(),
                    c.need(3) ? gv : Tensor(), c.need(4) ? gp : Tensor()};
}

// Differentiable through sdpa_grad_grad, so gradients of gradients work eagerly, in graphs and
// under jit with the fused kernel in the first derivative.
const OpDef& kSdpaGrad =
    def_op({.name = kGradName,
            .num_inputs = 5,
            .num_outputs = 3,
            .attr_names = {"causal", "scale"},
            .infer = infer_sdpa_grad,
            .kernel = sdpa_grad_kernel,
            .grad = sdpa_grad_grad,
            .doc = "gradients (dq, dk, dv; [..., T, H, E] memory order for rank >= 3) of "
                   "scaled_dot_product_attention from g, q, k, v and the saved probabilities"});

// With S = scale q k^T (masked: -inf), P = softmax(S), O = P v and G = dL/dO (plus dL/dP when
// a gradient flowed into the probabilities output):
//   dv = P^T G;  dP = G v^T;  dS = P * (dP - rowsum(P * dP));  dq = scale dS k;
//   dk = scale dS^T q.
TensorList sdpa_grad(const GradCtx& c) {
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2), &p = c.out(1);
  const Tensor g = logical(c.g(0));  // output 0 is raw: its gradient too
  // The gradient op is differentiable (sdpa_grad_grad), so it also serves create_graph; only a
  // gradient into the probabilities (from a second derivative) needs the formulas as ops.
  if (!c.flowed(1)) {
    TensorList r = call(kSdpaGrad, {g, q, k, v, p}, c.attrs);
    return TensorList{c.need(0) ? logical(r[0]) : Tensor(), c.need(1) ? logical(r[1]) : Tensor(),
                      c.need(2) ? logical(r[2]) : Tensor()};
  }
  const double scale = rule_scale(kOp, c.attrs, q);
  Tensor dp = matmul(g, transpose(v, -1, -2));
  if (c.flowed(1)) dp = add(dp, c.g(1));
  Tensor ds = mul(mul(p, sub(dp, sum(mul(p, dp), {-1}, true))), scale);
  return TensorList{c.need(0) ? matmul(ds, k) : Tensor(),
                    c.need(1) ? matmul(transpose(ds, -1, -2), q) : Tensor(),
                    c.need(2) ? matmul(transpose(p, -1, -2), g) : Tensor()};
}

const OpDef& kSdpa =
    def_op({.name = kOp,
            .num_inputs = 3,
            .num_outputs = 2,
            .attr_names = {"causal", "scale"},
            .infer = infer_sdpa,
            .kernel = sdpa_kernel,
            .grad = sdpa_grad,
            .autocast = AutocastPolicy::kLower,
            .doc = "softmax(scale q k^T, causal mask) v; output 0 in [..., T, H, E] memory order "
                   "(rank >= 3), output 1 the probabilities"});

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale) {
  if (!q.defined() || !k.defined() || !v.defined()) fail(kOp, "undefined input");
  if (!std::isfinite(scale)) fail(kOp, "scale must be finite, got ", scale, " (q ", q.shape(), ")");
  check_qkv(kOp, q, k, v);
  if (scale == 0 && q.shape()[q.dim() - 1] >= 0) scale = eff_scale(0, q.shape()[q.dim() - 1]);
  return logical(call(kSdpa, {q, k, v}, {causal, scale})[0]);
}

}  // namespace kiln

namespace kiln {

// With a mask or dropout the attention is composed from matmul, where / add, softmax and
// dropout (their gradients flow to q, k, v and a float mask); without either it is the fused op.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    double scale, bool training) {
  if (!q.defined() || !k.defined() || !v.defined()) fail(kOp, "undefined input");
  if (!(dropout_p >= 0 && dropout_p <= 1))
    fail(kOp, "dropout_p must be in [0, 1], got ", dropout_p);
  const bool drop = training && dropout_p > 0;
  if (!attn_mask.defined() && !drop) return scaled_dot_product_attention(q, k, v, is_causal, scale);
  if (!std::isfinite(scale)) fail(kOp, "scale must be finite, got ", scale, " (q ", q.shape(), ")");
  if (attn_mask.defined() && is_causal)
    fail(kOp, "explicit attn_mask should not be set when is_causal=True (mask ", attn_mask.shape(),
         ")");
  op_util::require_float(kOp, q, "q");
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    fail(kOp, "q, k and v must have one dtype, got q ", q.dtype(), " ", q.shape(), ", k ",
         k.dtype(), " ", k.shape(), ", v ", v.dtype(), " ", v.shape());
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail(kOp, "q, k and v must be [..., T, E], got q ", q.shape(), ", k ", k.shape(), ", v ",
         v.shape());
  const int64_t E = q.size(-1), Tq = q.size(-2), Tk = k.size(-2);
  if (!dim_eq(E, k.size(-1)) || !dim_eq(Tk, v.size(-2)))
    fail(kOp, "shapes do not fit: q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
  if (E < 0 && scale == 0) fail(kOp, "needs a static head dim (or a scale), got q ", q.shape());
  const double sc = eff_scale(scale, E);
  Tensor s = mul(matmul(q, transpose(k, -2, -1)), sc);
  if (attn_mask.defined()) {
    const Tensor& m = attn_mask;
    if (m.dtype() != Bool && !is_floating(m.dtype()))
      fail(kOp, "attn_mask must be bool or floating, got ", m.dtype(), " ", m.shape());
    if (m.dim() > s.dim() || m.dim() < 1 || (!dim_eq(m.size(-1), Tk) && m.size(-1) != 1) ||
        (m.dim() >= 2 && !dim_eq(m.size(-2), Tq) && m.size(-2) != 1))
      fail(kOp, "attn_mask ", m.shape(), " does not broadcast to the attention weights ", s.shape(),
           " (q ", q.shape(), ", k ", k.shape(), ")");
    // bool: true = take part (torch); float: added to the scores.
    s = m.dtype() == Bool ? where(m, s, scalar_tensor(-INFINITY, s.dtype()))
                          : add(s, m.dtype() == s.dtype() ? m : cast(m, s.dtype()));
  } else if (is_causal) {
    if (Tq < 0 || Tk < 0)
      fail(kOp, "is_causal needs static lengths, got q ", q.shape(), ", k ", k.shape());
    const Tensor keep = cast(tril(ones(Shape{Tq, Tk}, Float32)), Bool);
    s = where(keep, s, scalar_tensor(-INFINITY, s.dtype()));
  }
  Tensor p = softmax(s, -1);
  if (drop) p = dropout(p, dropout_p, true);
  return matmul(p, v);
}

}  // namespace kiln
