// Mixture of experts (Switch Transformer / GShard style): a linear router, softmax, top-k
// selection, fixed-capacity expert buffers filled by gather/scatter (tokens past an expert's
// capacity are dropped: they get zero expert output), expert MLPs Linear-GELU-Linear run as one
// batched GEMM over experts, and the load-balancing auxiliary loss. All shapes are static, so a
// traced or graph-built MoE has no graph breaks.
#pragma once
#include <cstdint>
#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct MoEOptions {
  int64_t d_model = 0;
  int64_t d_hidden = 0;
  int64_t num_experts = 0;
  int64_t top_k = 1;
  /// Slots per expert = ceil(capacity_factor * tokens * top_k / num_experts).
  double capacity_factor = 1.25;
};

/// One MoE forward: the output and what the router did.
struct MoEOutput {
  Tensor y;  ///< same shape as the input
  /// Switch Transformer load-balancing loss: num_experts * sum_e f_e * P_e, where f_e is the
  /// fraction of the tokens * top_k assignments that chose expert e (before capacity) and P_e
  /// is the mean router probability of expert e. 1.0 when perfectly balanced.
  Tensor aux_loss;
  Tensor expert_assigned;  ///< [E] assignments each expert received (float, before capacity)
  Tensor expert_kept;      ///< [E] assignments each expert processed (<= capacity)
  Tensor dropped;          ///< scalar: assignments dropped for lack of capacity
  int64_t capacity = 0;
};

class MoE : public Layer {
 public:
  explicit MoE(MoEOptions opts);
  /// x [..., d_model] -> y of the same shape (routing details dropped).
  Tensor forward(const Tensor& x) override { return route(x).y; }
  /// x [..., d_model]: the output with the aux loss and load statistics.
  MoEOutput route(const Tensor& x);
  /// Expert capacity for a batch of `tokens` tokens.
  int64_t capacity(int64_t tokens) const;
  const MoEOptions& options() const { return opts_; }
  std::string type_name() const override { return "MoE"; }

 private:
  MoEOptions opts_;
  Tensor router_w_;  // [E, D] (no bias, as Switch)
  Tensor w1_, b1_;   // [E, H, D], [E, H]   (each expert's fc1 in Linear layout)
  Tensor w2_, b2_;   // [E, D, H], [E, D]
};

}  // namespace kiln::nn
