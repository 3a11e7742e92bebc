// Attention modules: MultiheadAttention (torch.nn.MultiheadAttention with batch_first=True:
// packed q/k/v input projection, scaled dot-product softmax attention, output projection,
// optional causal or explicit mask, attention dropout) and TransformerBlock, the pre-LayerNorm
// GPT block whose MLP can be replaced by a mixture of experts (kiln/nn/moe.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/nn/moe.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;
  /// Position t attends only to positions <= t.
  bool causal = false;
  /// Dropout on the attention weights (training mode only).
  double dropout = 0.0;
  bool bias = true;
};

class MultiheadAttention : public Layer {
 public:
  explicit MultiheadAttention(MultiheadAttentionOptions opts);
  /// Self-attention on x [B, T, D].
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  /// query [B, Tq, D], key/value [B, Tk, D]. attn_mask: [Tq, Tk], either bool (true = may NOT
  /// attend, as PyTorch) or floating (added to the scores). Combined with the causal option.
  /// Without attn_mask and attention dropout it runs as scaled_dot_product_attention.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& attn_mask = Tensor());
  const MultiheadAttentionOptions& options() const { return opts_; }
  std::string type_name() const override { return "MultiheadAttention"; }

 private:
  MultiheadAttentionOptions opts_;
  Tensor in_proj_weight_, in_proj_bias_, out_proj_weight_, out_proj_bias_;
};

struct TransformerBlockOptions {
  int64_t d_model = 0;
  int64_t num_heads = 1;
  bool causal = true;
  /// Dropout on the attention weights (training mode only); there is no residual dropout.
  double dropout = 0.0;
  /// MLP hidden size = mlp_ratio * d_model.
  int64_t mlp_ratio = 4;
  /// > 0: the MLP is a mixture of this many experts (each d_model -> mlp_ratio*d_model ->
  /// d_model) with top-k routing.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 2;
  double moe_capacity_factor = 1.25;
};

/// Pre-LayerNorm GPT block: x + attn(ln1(x)), then x + mlp(ln2(x)) with a GELU MLP (or MoE).
class TransformerBlock : public Layer {
 public:
  explicit TransformerBlock(TransformerBlockOptions opts);
  /// x: [B, T, d_model].
  Tensor forward(const Tensor& x) override;
  /// With an MoE MLP: the routing result of the last forward (aux loss and load statistics; the
  /// tensors are symbolic when the forward was traced). Undefined tensors for a dense block.
  const MoEOutput& last_moe() const { return last_moe_; }
  MultiheadAttention& attn() { return attn_; }
  MoE* moe() { return moe_.get(); }
  std::string type_name() const override { return "TransformerBlock"; }

 private:
  TransformerBlockOptions opts_;
  Tensor ln1_w_, ln1_b_, ln2_w_, ln2_b_;
  MultiheadAttention attn_;
  Tensor fc1_w_, fc1_b_, fc2_w_, fc2_b_;
  std::unique_ptr<MoE> moe_;
  MoEOutput last_moe_;
};

}  // namespace kiln::nn
