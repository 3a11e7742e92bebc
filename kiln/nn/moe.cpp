// MoE routing and dispatch. The router's top-k choices come from topk (ties: lower expert
// first); positions inside an expert's buffer are a cumsum over the tokens. First choices of all
// tokens are placed before second choices, so capacity drops hit the lower-priority assignments
// first (GShard's order).
#include "kiln/nn/moe.h"

#include <cmath>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::nn {

namespace {
// torch.nn.Linear's default init bound for both weight and bias: 1/sqrt(fan_in).
Tensor uniform_init(const Shape& s, double bound) {
  NoGradGuard ng;
  return sub(mul(rand(s), 2.0 * bound), bound);
}
}  // namespace

MoE::MoE(MoEOptions opts) : opts_(opts) {
  if (opts_.d_model <= 0 || opts_.d_hidden <= 0 || opts_.num_experts <= 0)
    fail("MoE", "d_model, d_hidden and num_experts must be positive, got ", opts_.d_model, ", ",
         opts_.d_hidden, ", ", opts_.num_experts);
  if (opts_.top_k < 1 || opts_.top_k > opts_.num_experts)
    fail("MoE", "top_k must be in [1, num_experts = ", opts_.num_experts, "], got ", opts_.top_k);
  // Finite: capacity() converts ceil(capacity_factor * ...) to an integer.
  if (!(opts_.capacity_factor > 0 && std::isfinite(opts_.capacity_factor)))
    fail("MoE", "capacity_factor must be positive and finite, got ", opts_.capacity_factor);
  // Bounds that keep E * H * D and the capacity arithmetic below int64 overflow.
  constexpr int64_t kLimit = int64_t(1) << 40;
  if (opts_.d_model > kLimit || opts_.d_hidden > kLimit || opts_.num_experts > kLimit)
    fail("MoE", "d_model, d_hidden and num_experts must each be at most 2^40, got ", opts_.d_model,
         ", ", opts_.d_hidden, ", ", opts_.num_experts);
  const int64_t E = opts_.num_experts, D = opts_.d_model, H = opts_.d_hidden;
  const double bd = 1.0 / std::sqrt(static_cast<double>(D));
  const double bh = 1.0 / std::sqrt(static_cast<double>(H));
  router_w_ = uniform_init({E, D}, bd);
  w1_ = uniform_init({E, H, D}, bd);
  b1_ = uniform_init({E, H}, bd);
  w2_ = uniform_init({E, D, H}, bh);
  b2_ = uniform_init({E, D}, bh);
  register_parameter("router.weight", &router_w_);
  register_parameter("experts.fc1.weight", &w1_);
  register_parameter("experts.fc1.bias", &b1_);
  register_parameter("experts.fc2.weight", &w2_);
  register_parameter("experts.fc2.bias", &b2_);
}

int64_t MoE::capacity(int64_t tokens) const {
  if (tokens < 0) fail("MoE", "capacity: tokens must be >= 0, got ", tokens);
  double c = std::ceil(opts_.capacity_factor * static_cast<double>(tokens) *
                       static_cast<double>(opts_.top_k) / static_cast<double>(opts_.num_experts));
  // The expert buffers hold num_experts * capacity rows; past 2^62 that count (and the
  // conversion of c) would overflow.
  if (!(c * static_cast<double>(opts_.num_experts) <= 0x1p62))
    fail("MoE", "capacity for ", tokens, " tokens (capacity_factor ", opts_.capacity_factor,
         ", top_k ", opts_.top_k, ", ", opts_.num_experts, " experts) is too large: ", c);
  return std::max<int64_t>(1, static_cast<int64_t>(c));
}

MoEOutput MoE::route(const Tensor& x) {
  const int64_t E = opts_.num_experts, D = opts_.d_model, K = opts_.top_k;
  if (!x.defined() || x.dim() < 1 || x.size(-1) != D)
    fail("MoE", "input must be [..., d_model = ", D, "], got shape ",
         x.defined() ? x.shape() : Shape{});
  if (!is_floating(x.dtype())) fail("MoE", "input must be floating point, got ", x.dtype());
  if (x.dtype() != router_w_.dtype())
    fail("MoE", "input must be ", router_w_.dtype(), " (the dtype of its weights), got ", x.dtype(),
         x.shape());
  // The capacity per expert, and so every buffer's size, is a function of the token count.
  if (!x.shape().is_static())
    fail("MoE", "needs a static size: the token count of input ", x.shape(),
         " sets the experts' capacity (under jit the call is compiled for the concrete shape)");
  const DType dt = x.dtype();
  const int64_t N = x.numel() / D;
  if (N == 0) fail("MoE", "input has no tokens (shape ", x.shape(), ")");
  const int64_t C = capacity(N);
  Tensor xf = reshape(x, {N, D});

  Tensor probs = softmax(linear(xf, router_w_), -1);                // [N, E]
  Tensor choice = topk(detach(probs), K, 1).second;                 // [N, K], best first
  Tensor gate_all = gather(probs, 1, choice);                       // [N, K], differentiable
  Tensor expert_ids = arange(0, static_cast<double>(E), 1, Int64);  // [E]
  Tensor token_ids = arange(1, static_cast<double>(N + 1), 1, dt);  // 1-based; 0 = empty slot

  Tensor assigned = zeros({E}, dt);  // assignments so far per expert (also the priority offset)
  Tensor kept_count = zeros({E}, dt);
  std::vector<Tensor> slots, gates;
  Tensor slot_token = zeros({E * C + 1}, dt);  // last entry collects dropped tokens
  for (int64_t j = 0; j < K; ++j) {
    Tensor idx = choice.select(1, j);                           // [N]
    Tensor mask = cast(eq(unsqueeze(idx, 1), expert_ids), dt);  // [N, E] one-hot
    gates.push_back(gate_all.select(1, j));                     // [N]
    // Position of each token in its expert's buffer, after all earlier choices.
    Tensor pos_all = add(sub(cumsum(mask, 0), 1.0), assigned);  // [N, E]
    Tensor pos = sum(mul(pos_all, mask), {1});                  // [N]
    Tensor keep = lt(pos, static_cast<double>(C));              // [N] bool
    Tensor slot_f = add(mul(cast(idx, dt), static_cast<double>(C)), pos);
    Tensor slot = cast(where(keep, slot_f, full_like(slot_f, static_cast<double>(E * C))), Int64);
    slots.push_back(slot);
    slot_token = scatter_add(slot_token, 0, slot, token_ids);
    assigned = add(assigned, sum(mask, {0}));
    kept_count = add(kept_count, sum(mul(mask, unsqueeze(cast(keep, dt), 1)), {0}));
  }
  // Gather each expert's tokens into [E, C, D]; empty slots read the zero row 0.
  Tensor ids = cast(slice(slot_token, 0, 0, E * C), Int64);
  Tensor x_pad = cat({zeros({1, D}, dt), xf}, 0);
  Tensor xe = reshape(index_select(x_pad, 0, ids), {E, C, D});
  Tensor h = gelu(add(matmul(xe, transpose(w1_, 1, 2)), unsqueeze(b1_, 1)));  // [E, C, H]
  Tensor ye = add(matmul(h, transpose(w2_, 1, 2)), unsqueeze(b2_, 1));        // [E, C, D]
  // Combine: each token adds gate * its slot's output; dropped tokens read the zero row E*C.
  Tensor ye_pad = cat({reshape(ye, {E * C, D}), zeros({1, D}, dt)}, 0);
  Tensor y;
  for (int64_t j = 0; j < K; ++j) {
    Tensor yj = mul(index_select(ye_pad, 0, slots[j]), unsqueeze(gates[j], 1));
    y = y.defined() ? add(y, yj) : yj;
  }
  MoEOutput out;
  out.y = reshape(y, x.shape());
  Tensor frac = div(assigned, static_cast<double>(N * K));
  out.aux_loss = mul(sum(mul(frac, mean(probs, {0}))), static_cast<double>(E));
  out.expert_assigned = assigned;
  out.expert_kept = kept_count;
  out.dropped = sum(sub(assigned, kept_count));
  out.capacity = C;
  return out;
}

}  // namespace kiln::nn
