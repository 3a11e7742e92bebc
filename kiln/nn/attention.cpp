// MultiheadAttention and the pre-LayerNorm TransformerBlock, written with Kiln ops. Attention
// without an explicit mask or attention dropout runs as one scaled_dot_product_attention op;
// with them, as matmul, scale, mask, softmax, dropout and matmul.
#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::nn {

namespace {
Tensor uniform_init(const Shape& s, double bound) {
  NoGradGuard ng;
  return sub(mul(rand(s), 2.0 * bound), bound);
}

// [tq, tk] additive mask: -inf where key position > query position.
Tensor causal_mask(int64_t tq, int64_t tk, DType dt) {
  std::vector<double> v(static_cast<size_t>(tq * tk), 0.0);
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = i + 1; j < tk; ++j)
      v[static_cast<size_t>(i * tk + j)] = -std::numeric_limits<double>::infinity();
  return tensor(v, {tq, tk}).to(dt);
}

// Checked before any member is built, so a bad block names TransformerBlock rather than the
// attention or MoE layer it would have failed in, and mlp_ratio * d_model cannot overflow.
TransformerBlockOptions checked(TransformerBlockOptions o) {
  const char* op = "TransformerBlock";
  if (o.d_model <= 0 || o.num_heads <= 0 || o.d_model % o.num_heads != 0)
    fail(op, "d_model (", o.d_model, ") must be positive and divisible by num_heads (", o.num_heads,
         ")");
  if (o.mlp_ratio <= 0) fail(op, "mlp_ratio must be positive, got ", o.mlp_ratio);
  int64_t h = 0;
  if (__builtin_mul_overflow(o.mlp_ratio, o.d_model, &h) || h > (int64_t(1) << 40))
    fail(op, "mlp_ratio * d_model = ", o.mlp_ratio, " * ", o.d_model, " is too large");
  if (!(o.dropout >= 0 && o.dropout <= 1)) fail(op, "dropout must be in [0, 1], got ", o.dropout);
  if (o.moe_experts < 0) fail(op, "moe_experts must be >= 0 (0: a dense MLP), got ", o.moe_experts);
  return o;
}
}  // namespace

MultiheadAttention::MultiheadAttention(MultiheadAttentionOptions opts) : opts_(opts) {
  const int64_t D = opts_.embed_dim;
  if (D <= 0 || opts_.num_heads <= 0 || D % opts_.num_heads != 0)
    fail("MultiheadAttention", "embed_dim (", D, ") must be positive and divisible by num_heads (",
         opts_.num_heads, ")");
  // 3 * D rows of in_proj must be countable.
  if (D > (int64_t(1) << 40))
    fail("MultiheadAttention", "embed_dim (", D, ") must be at most 2^40");
  if (!(opts_.dropout >= 0 && opts_.dropout <= 1))
    fail("MultiheadAttention", "dropout must be in [0, 1], got ", opts_.dropout);
  // PyTorch: xavier_uniform_ on the packed [3D, D] projection, zero biases, out_proj as Linear.
  in_proj_weight_ = uniform_init({3 * D, D}, std::sqrt(6.0 / static_cast<double>(4 * D)));
  out_proj_weight_ = uniform_init({D, D}, 1.0 / std::sqrt(static_cast<double>(D)));
  register_parameter("in_proj_weight", &in_proj_weight_);
  if (opts_.bias) {
    in_proj_bias_ = zeros({3 * D});
    register_parameter("in_proj_bias", &in_proj_bias_);
  }
  register_parameter("out_proj.weight", &out_proj_weight_);
  if (opts_.bias) {
    out_proj_bias_ = zeros({D});
    register_parameter("out_proj.bias", &out_proj_bias_);
  }
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& attn_mask) {
  const int64_t D = opts_.embed_dim, nh = opts_.num_heads, dh = D / nh;
  for (const Tensor* t : {&query, &key, &value})
    if (!t->defined() || t->dim() != 3 || t->size(2) != D || !is_floating(t->dtype()))
      fail("MultiheadAttention", "query, key and value must be floating [B, T, embed_dim = ", D,
           "], got ", t->defined() ? t->shape() : Shape{},
           t->defined() ? dtype_name(t->dtype()) : "undefined");
  const int64_t B = query.size(0), Tq = query.size(1), Tk = key.size(1);
  if (key.size(0) != B || value.size(0) != B || value.size(1) != Tk)
    fail("MultiheadAttention", "batch/length mismatch: query ", query.shape(), ", key ",
         key.shape(), ", value ", value.shape());
  for (const Tensor* t : {&query, &key, &value})
    if (t->dtype() != in_proj_weight_.dtype())
      fail("MultiheadAttention", "query, key and value must be ", in_proj_weight_.dtype(),
           " (the dtype of its weights), got ", query.dtype(), query.shape(), ", ", key.dtype(),
           key.shape(), ", ", value.dtype(), value.shape());
  if (attn_mask.defined() && attn_mask.shape() != Shape{Tq, Tk})
    fail("MultiheadAttention", "attn_mask must be [", Tq, ", ", Tk, "], got ", attn_mask.shape());
  // As PyTorch: a bool mask says where not to attend, a floating one is added; an integer mask
  // is neither.
  if (attn_mask.defined() && attn_mask.dtype() != Bool && !is_floating(attn_mask.dtype()))
    fail("MultiheadAttention", "attn_mask must be bool or floating, got ", attn_mask.dtype(),
         attn_mask.shape());
  const DType dt = query.dtype();
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    auto qkv = chunk(linear(query, in_proj_weight_, in_proj_bias_), 3, -1);  // one GEMM
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto part = [&](const Tensor& t, int64_t i) {
      Tensor b = in_proj_bias_.defined() ? slice(in_proj_bias_, 0, i * D, (i + 1) * D) : Tensor();
      return linear(t, slice(in_proj_weight_, 0, i * D, (i + 1) * D), b);
    };
    q = part(query, 0), k = part(key, 1), v = part(value, 2);
  }
  auto heads = [&](const Tensor& t, int64_t len) {  // [B, T, D] -> [B, nh, T, dh]
    return permute(reshape(t, {B, len, nh, dh}), {0, 2, 1, 3});
  };
  q = heads(q, Tq), k = heads(k, Tk), v = heads(v, Tk);
  if (!attn_mask.defined() && !(opts_.dropout > 0 && is_training())) {
    // The fused op (same math: scale 1/sqrt(dh), causal = key j > query i masked); its result
    // is laid out [B, Tq, nh, dh], so the permute and reshape below are views.
    Tensor o = permute(scaled_dot_product_attention(q, k, v, opts_.causal), {0, 2, 1, 3});
    return linear(reshape(o, {B, Tq, D}), out_proj_weight_, out_proj_bias_);
  }
  Tensor scores = mul(matmul(q, transpose(k, 2, 3)), 1.0 / std::sqrt(static_cast<double>(dh)));
  if (opts_.causal) scores = add(scores, causal_mask(Tq, Tk, dt));
  if (attn_mask.defined()) {
    if (attn_mask.dtype() == Bool)
      scores =
          add(scores, where(attn_mask, full({Tq, Tk}, -std::numeric_limits<double>::infinity(), dt),
                            zeros({Tq, Tk}, dt)));
    else
      scores = add(scores, cast(attn_mask, dt));
  }
  Tensor p = softmax(scores, -1);
  if (opts_.dropout > 0 && is_training()) p = dropout(p, opts_.dropout, true);
  Tensor o = permute(matmul(p, v), {0, 2, 1, 3});  // [B, Tq, nh, dh]
  return linear(reshape(o, {B, Tq, D}), out_proj_weight_, out_proj_bias_);
}

TransformerBlock::TransformerBlock(TransformerBlockOptions opts)
    : opts_(checked(opts)),
      attn_(MultiheadAttentionOptions{.embed_dim = opts.d_model,
                                      .num_heads = opts.num_heads,
                                      .causal = opts.causal,
                                      .dropout = opts.dropout}) {
  const int64_t D = opts_.d_model, H = opts_.mlp_ratio * opts_.d_model;
  ln1_w_ = ones({D}), ln1_b_ = zeros({D}), ln2_w_ = ones({D}), ln2_b_ = zeros({D});
  register_parameter("ln1.weight", &ln1_w_);
  register_parameter("ln1.bias", &ln1_b_);
  register_parameter("ln2.weight", &ln2_w_);
  register_parameter("ln2.bias", &ln2_b_);
  register_module("attn", &attn_);
  if (opts_.moe_experts > 0) {
    moe_ = std::make_unique<MoE>(MoEOptions{.d_model = D,
                                            .d_hidden = H,
                                            .num_experts = opts_.moe_experts,
                                            .top_k = opts_.moe_top_k,
                                            .capacity_factor = opts_.moe_capacity_factor});
    register_module("moe", moe_.get());
  } else {
    const double bd = 1.0 / std::sqrt(static_cast<double>(D));
    const double bh = 1.0 / std::sqrt(static_cast<double>(H));
    fc1_w_ = uniform_init({H, D}, bd), fc1_b_ = uniform_init({H}, bd);
    fc2_w_ = uniform_init({D, H}, bh), fc2_b_ = uniform_init({D}, bh);
    register_parameter("mlp.fc1.weight", &fc1_w_);
    register_parameter("mlp.fc1.bias", &fc1_b_);
    register_parameter("mlp.fc2.weight", &fc2_w_);
    register_parameter("mlp.fc2.bias", &fc2_b_);
  }
}

Tensor TransformerBlock::forward(const Tensor& x) {
  const int64_t D = opts_.d_model;
  if (!x.defined() || x.dim() != 3 || x.size(2) != D)
    fail("TransformerBlock", "input must be [B, T, d_model = ", D, "], got ",
         x.defined() ? x.shape() : Shape{});
  if (x.dtype() != ln1_w_.dtype())
    fail("TransformerBlock", "input must be ", ln1_w_.dtype(), " (the dtype of its weights), got ",
         x.dtype(), x.shape());
  Tensor h = add(x, attn_(layer_norm(x, {D}, ln1_w_, ln1_b_)));
  Tensor n2 = layer_norm(h, {D}, ln2_w_, ln2_b_);
  Tensor m;
  if (moe_) {
    last_moe_ = moe_->route(n2);
    m = last_moe_.y;
  } else {
    m = linear(gelu(linear(n2, fc1_w_, fc1_b_)), fc2_w_, fc2_b_);
  }
  Tensor y = add(h, m);
  return y;
}

}  // namespace kiln::nn
