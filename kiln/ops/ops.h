// The public op functions. Each is a thin wrapper that calls the dispatcher with its OpDef, so
// it works eagerly, while building a graph and while tracing. Definitions live in the family
// files beside this header, one per concept, each opening with a line on what it holds
// (elementwise.cpp, activation.cpp, shape_ops.cpp, reduce.cpp, linalg.cpp, conv.cpp,
// max_pool.cpp, avg_pool.cpp, nn_ops.cpp, norm.cpp, gather_scatter.cpp, attention.cpp, ...;
// docs/architecture.md lists them; fused.cpp for the fusion pass's `fused` op). Two parts live in
// headers of their own, included below: linalg_conv_ops.h (linear algebra, convolution,
// pooling) and index_shape_ops.h (indexing, torch's shape helpers, host-read ops).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/core/promotion.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/sym_int.h"

namespace kiln {

// ---- elementwise arithmetic (NumPy broadcasting, dtype promotion) --------------------------
// Result dtypes follow kiln/core/promotion.h (torch.result_type): a host Scalar promotes by its
// kind (int32 tensor + 2 is int32, + 2.0 is float32), and true division always gives a float.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
/// a - b and a / b with the host scalar on the left.
Tensor sub(const Scalar& a, const Tensor& b);
Tensor div(const Scalar& a, const Tensor& b);
/// torch.div(a, b, rounding_mode=): "" (true division), "trunc" or "floor". Integer operands
/// with a rounding mode stay integers; integer division by zero raises.
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode);
/// a // b (torch.floor_divide): div with rounding_mode "floor".
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);
Tensor erf(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
/// log(1 + x), accurate for small x.
Tensor log1p(const Tensor& a);
/// exp(x) - 1, accurate for small x.
Tensor expm1(const Tensor& a);
/// Clamps to [lo, hi]; pass -inf/+inf for one-sided.
Tensor clamp(const Tensor& a, double lo, double hi);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// comparisons (bool out)
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
// ---- more elementwise math (elementwise_math.cpp; the bool-valued and bitwise ops:
// bitwise_ops.cpp), PyTorch semantics ------------------------------------------------------
/// Rounding: integer inputs come back unchanged (a copy); the gradient is zero, as torch's.
Tensor floor(const Tensor& a);
Tensor ceil(const Tensor& a);
Tensor trunc(const Tensor& a);
/// Half to even (torch.round); decimals != 0 rounds at 10^-decimals.
Tensor round(const Tensor& a, int64_t decimals = 0);
/// x - trunc(x) (floats only).
Tensor frac(const Tensor& a);
/// C's fmod: the result has the dividend's sign (torch.fmod). Integer division by zero raises.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Scalar& b);
/// Python's %: the result has the divisor's sign (torch.remainder).
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor reciprocal(const Tensor& a);
Tensor square(const Tensor& a);
Tensor log2(const Tensor& a);
Tensor log10(const Tensor& a);
Tensor exp2(const Tensor& a);
Tensor tan(const Tensor& a);
Tensor asin(const Tensor& a);
Tensor acos(const Tensor& a);
Tensor atan(const Tensor& a);
/// atan(a / b) in the quadrant of (b, a).
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor sinh(const Tensor& a);
Tensor cosh(const Tensor& a);
Tensor asinh(const Tensor& a);
Tensor acosh(const Tensor& a);
Tensor atanh(const Tensor& a);
/// Bool results; integer inputs are never NaN or infinite.
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);
Tensor isfinite(const Tensor& a);
/// NaN -> nan, +inf -> posinf, -inf -> neginf (defaults: the dtype's largest / lowest finite).
Tensor nan_to_num(const Tensor& a, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
Tensor logical_xor(const Tensor& a, const Tensor& b);
/// Bitwise ops on integer and bool tensors (shifts: integers only).
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& a);
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b);
/// a + weight (b - a).
Tensor lerp(const Tensor& a, const Tensor& b, double weight);
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight);
/// input + value t1 t2, input + value t1 / t2.
Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, double value = 1.0);
Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, double value = 1.0);
/// torch.clamp with tensor bounds (broadcast); an undefined bound leaves that side open.
Tensor clamp(const Tensor& a, const Tensor& lo, const Tensor& hi);
Tensor clamp_min(const Tensor& a, double lo);
Tensor clamp_max(const Tensor& a, double hi);
Tensor clamp_min(const Tensor& a, const Tensor& lo);
Tensor clamp_max(const Tensor& a, const Tensor& hi);
/// cond ? a : b, broadcasting all three; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// a with `value` where mask (bool, broadcast to a) is true: where(mask, value, a).
Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value);

// ---- activations ---------------------------------------------------------------------------
Tensor relu(const Tensor& a);
Tensor leaky_relu(const Tensor& a, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
/// approximate = false: x * Phi(x) with erf; true: the tanh form.
Tensor gelu(const Tensor& a, bool approximate = false);
Tensor silu(const Tensor& a);
/// log(1 + exp(beta x)) / beta; x itself where beta x > threshold (torch.nn.functional.softplus).
Tensor softplus(const Tensor& a, double beta = 1.0, double threshold = 20.0);
/// x for x > 0, alpha (exp(x) - 1) otherwise.
Tensor elu(const Tensor& a, double alpha = 1.0);
/// clamp(x, min_val, max_val) with zero gradient at and beyond the bounds (as torch).
Tensor hardtanh(const Tensor& a, double min_val = -1.0, double max_val = 1.0);
/// x relu6(x + 3) / 6.
Tensor hardswish(const Tensor& a);
/// relu6(x + 3) / 6.
Tensor hardsigmoid(const Tensor& a);
/// x tanh(softplus(x)).
Tensor mish(const Tensor& a);
/// scale (max(0, x) + min(0, alpha (exp(x) - 1))) with torch's constants.
Tensor selu(const Tensor& a);
/// max(0, x) + min(0, alpha (exp(x / alpha) - 1)).
Tensor celu(const Tensor& a, double alpha = 1.0);
/// log(sigmoid(x)), computed without overflow.
Tensor logsigmoid(const Tensor& a);
/// First half of dim times sigmoid of the second half.
Tensor glu(const Tensor& a, int64_t dim = -1);

// ---- operators -----------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);

// ---- shape and copy ops (views where possible) ---------------------------------------------
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
/// Sizes may be symbolic (sym_int.h): under jit `slice(x, 0, 0, sym_size(y, 1))` serves every
/// length with one compiled version.
Tensor slice(const Tensor& a, int64_t dim, SymInt start, SymInt end, SymInt step = 1);
/// reshape / expand to sizes of which some may be symbols.
Tensor reshape_symint(const Tensor& a, const std::vector<SymInt>& shape);
Tensor expand_symint(const Tensor& a, const std::vector<SymInt>& shape);
/// Integer range [start, end) whose bounds may be symbols.
Tensor arange_symint(const SymInt& start, const SymInt& end, const SymInt& step = 1,
                     DType dtype = Int64);
/// A tensor filled with `value` whose shape may hold symbols.
Tensor full_symint(const std::vector<SymInt>& shape, double value, DType dtype = Float32);
Tensor expand(const Tensor& a, const Shape& shape);
/// Broadcasts `a` to the (run-time) shape of `like`, without a copy.
Tensor expand_as(const Tensor& a, const Tensor& like);
Tensor squeeze(const Tensor& a, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& a);
Tensor clone(const Tensor& a);
/// Cast; the gradient casts back.
Tensor cast(const Tensor& a, DType dtype);
/// Same data, no gradient flows back (stop_gradient).
Tensor detach(const Tensor& a);
/// Constant padding, torch.nn.functional.pad's order: {left, right} of the last dim, then
/// {top, bottom} of the one before, ...; negative amounts crop.
Tensor pad(const Tensor& a, const std::vector<int64_t>& pads, double value = 0.0);
/// torch.nn.functional.pad with mode "constant", "reflect", "replicate" or "circular" (the last
/// three over up to 3 trailing dims, as torch); gathers along each padded dim, differentiable.
Tensor pad(const Tensor& a, const std::vector<int64_t>& pads, const std::string& mode,
           double value = 0.0);
/// A view of contiguous `a` with the given sizes and element strides, starting `offset`
/// elements after a's first (torch.as_strided with the offset relative to a). Positions must
/// not overlap (no stride-0 repeats): the gradient is a scatter.
Tensor as_strided(const Tensor& a, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides, int64_t offset = 0);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
/// Pieces of `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
/// Pieces of the given sizes along dim.
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
/// The order of elements reversed along each of dims (a copy, as torch.flip).
Tensor flip(const Tensor& a, const std::vector<int64_t>& dims);
/// Elements shifted by `shift` along dim, wrapping around (torch.roll with one dim).
Tensor roll(const Tensor& a, int64_t shift, int64_t dim);
/// torch.Tensor.repeat: the tensor tiled reps[d] times along each dim (extra leading counts add
/// dims).
Tensor repeat(const Tensor& a, const std::vector<int64_t>& reps);

// ---- reductions ----------------------------------------------------------------------------
/// Empty dims: reduce all.
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false,
           int64_t correction = 1);
/// Index of the max along dim (int64); dim = nullopt: over the flattened tensor.
Tensor argmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
/// torch.linalg.vector_norm: (sum |a|^ord)^(1/ord) over dims (empty: all); ord 2, 1, inf, -inf,
/// 0 (nonzero count) or any p. The gradient where the norm is 0 is 0, as torch.
Tensor vector_norm(const Tensor& a, double ord = 2, const std::vector<int64_t>& dims = {},
                   bool keepdim = false);
/// a / max(||a||_p over dim, eps) (torch.nn.functional.normalize).
Tensor normalize(const Tensor& a, double p = 2, int64_t dim = 1, double eps = 1e-12);
/// a . b / max(||a|| ||b||, eps) over dim (torch.nn.functional.cosine_similarity).
Tensor cosine_similarity(const Tensor& a, const Tensor& b, int64_t dim = 1, double eps = 1e-8);
/// Standard deviation: sqrt(var(a, dims, keepdim, correction)).
Tensor std_dev(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false,
               int64_t correction = 1);
/// log(sum(exp(a))) over dims (empty: all), computed without overflow.
Tensor logsumexp(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Running sums along dim (integers and bools sum as int64); reverse = true sums from the end.
Tensor cumsum(const Tensor& a, int64_t dim, bool reverse = false);
Tensor argmin(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
/// Sums a broadcast tensor back down to `shape` (the gradient of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);
Tensor softmax(const Tensor& a, int64_t dim = -1);
Tensor log_softmax(const Tensor& a, int64_t dim = -1);
/// Product over dims (empty: all), torch.prod; integers and bools multiply as int64. The
/// gradient is exact where inputs are zero (products of the other elements).
Tensor prod(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Running products along dim (torch.cumprod); integers and bools as int64.
Tensor cumprod(const Tensor& a, int64_t dim);
/// Running max (min) along dim and the int64 index where it was reached (the last of ties, as
/// torch.cummax / cummin).
std::pair<Tensor, Tensor> cummax(const Tensor& a, int64_t dim);
std::pair<Tensor, Tensor> cummin(const Tensor& a, int64_t dim);
/// log(cumsum(exp(a))) along dim, computed stably (torch.logcumsumexp).
Tensor logcumsumexp(const Tensor& a, int64_t dim);
/// torch.median: the lower median of all elements; along dim (values, int64 indices).
Tensor median(const Tensor& a);
std::pair<Tensor, Tensor> median(const Tensor& a, int64_t dim, bool keepdim = false);
/// torch.mode: the most frequent value along dim (the smallest of equally frequent ones) and an
/// index where it occurs.
std::pair<Tensor, Tensor> mode(const Tensor& a, int64_t dim = -1, bool keepdim = false);
/// Whether any (all) element over dims (empty: all) is nonzero; a bool tensor.
Tensor any(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor all(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// torch.amax / amin: max and min over dims, the gradient shared evenly among ties.
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// torch.aminmax: {min, max} over all elements or along dim.
std::pair<Tensor, Tensor> aminmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt,
                                  bool keepdim = false);
/// {std, mean} and {var, mean} over dims in one call (torch.std_mean, torch.var_mean).
std::pair<Tensor, Tensor> std_mean(const Tensor& a, const std::vector<int64_t>& dims = {},
                                   bool keepdim = false, int64_t correction = 1);
std::pair<Tensor, Tensor> var_mean(const Tensor& a, const std::vector<int64_t>& dims = {},
                                   bool keepdim = false, int64_t correction = 1);
/// The number of nonzero elements over dims (empty: all), int64.
Tensor count_nonzero(const Tensor& a, const std::vector<int64_t>& dims = {});
/// sum and mean treating NaN as absent (torch.nansum, torch.nanmean).
Tensor nansum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor nanmean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);

}  // namespace kiln

#include "kiln/ops/linalg_conv_ops.h"

namespace kiln {

// ---- normalization, embedding, losses, dropout ---------------------------------------------
/// Normalizes over the trailing dims given by normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
/// x [N, C, ...]. In training, uses batch statistics and updates running_mean/var in place
/// (when given) with `momentum`; in eval, uses the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = true, double momentum = 0.1, double eps = 1e-5);
/// torch.nn.functional.group_norm: x [N, C, *] normalized over each of num_groups groups of
/// channels (biased variance), then the per-channel affine.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
/// torch.nn.functional.instance_norm: each (n, c) plane normalized over its own positions
/// (use_input_stats), updating the running stats in place when given; else the running stats.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = Tensor(),
                     const Tensor& running_var = Tensor(), const Tensor& weight = Tensor(),
                     const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);
/// torch.nn.functional.local_response_norm across channels of [N, C, *].
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75,
                           double k = 1.0);
/// Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention without
/// attn_mask and dropout: softmax(scale q k^T) v, one fused kernel each way. q [..., Tq, E],
/// k [..., Tk, E], v [..., Tk, Ev] with equal batch dims, float32 or float64, any strides (read
/// in place, e.g. permuted head views of a qkv projection). causal: query i attends to keys
/// j <= i only (top-left aligned, as is_causal). scale 0: 1/sqrt(E). Returns [..., Tq, Ev];
/// for rank >= 3 laid out as [..., Tq, H, Ev] in memory (H = dim -3), so that permute(0, 2, 1, 3)
/// and a reshape to [B, Tq, H*Ev] are views.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, double scale = 0);
/// torch.nn.functional.scaled_dot_product_attention with attn_mask (bool: true = attend; or an
/// additive float mask) broadcastable to [..., Tq, Tk] and dropout_p applied to the attention
/// weights when `training`. Without a mask and dropout this is the fused op above.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p = 0,
                                    bool is_causal = false, double scale = 0, bool training = true);
/// Rows of `weight` [V, D] picked by integer `indices` (any shape) -> indices.shape + [D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
/// Out-of-place: a copy of `a` with `src` added at `index` along dim.
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
/// Out-of-place torch.index_add: a copy of `a` with the slices of `src` along dim added at the
/// positions `index` (1-D) names; repeated indices accumulate.
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
/// Coordinates [n, rank] (int64) of the nonzero (true) elements in row-major order, as
/// torch.nonzero. The result's size depends on the values: they are read on the host (under jit
/// a graph break guarded on them; refused in a static graph).
Tensor nonzero(const Tensor& a, const std::source_location& loc = std::source_location::current());
/// The elements of a where mask (bool, broadcast together) is true, as a 1-D tensor in
/// row-major order; differentiable in a. Reads the mask on the host, as nonzero.
Tensor masked_select(const Tensor& a, const Tensor& mask,
                     const std::source_location& loc = std::source_location::current());
/// int64 indices (any shape) -> indices.shape + [num_classes] of 0/1 (int64), as
/// torch.nn.functional.one_hot; indices must lie in [0, num_classes).
Tensor one_hot(const Tensor& indices, int64_t num_classes);
/// The k largest (largest = false: smallest) entries along dim, sorted, and their int64
/// indices. Equal values keep index order; NaN counts as larger than every number (as torch).
/// Differentiable in the values.
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true);
/// Values along dim in ascending (descending) order and their indices; stable.
std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim = -1, bool descending = false);
/// The indices of sort.
Tensor argsort(const Tensor& a, int64_t dim = -1, bool descending = false);
/// Lower triangle of the last two dims: x[..., i, j] where j - i <= diagonal, else 0.
Tensor tril(const Tensor& a, int64_t diagonal = 0);
/// Upper triangle: x[..., i, j] where j - i >= diagonal, else 0.
Tensor triu(const Tensor& a, int64_t diagonal = 0);

}  // namespace kiln

#include "kiln/ops/index_shape_ops.h"

namespace kiln {

// ---- state and side effects (graphs; also work eagerly) ----------------------------------
/// Identity that prints `message` and the value each time it executes (TF1's tf.Print).
Tensor print(const Tensor& t, const std::string& message = "");
/// Writes `value` (broadcast, cast) into `var` in place when executed; returns `var`. In a graph
/// `var` is a variable; eagerly any tensor that does not require grad.
Tensor assign(const Tensor& var, const Tensor& value);
/// One node that depends on all `deps` (TF1 tf.group); fetching it runs them. Returns a 0-d
/// float32 zero.
Tensor group(const std::vector<Tensor>& deps);

// ---- control flow as dataflow (switch/merge: control_flow.cpp; cond, while_loop:
// kiln/exec/control_flow.cpp). Eagerly a dead value is a dead Tensor (Tensor::is_dead()); in
// the executors an unset slot. -----------------------------------------------------------------
/// Routes `data` to output 1 when `pred` (bool, one element) is true, else to output 0; the
/// other output is dead. Eagerly the dead output is a dead tensor of data's shape and dtype
/// and the live one is `data` itself; a dead `data` or `pred` makes both outputs dead.
/// Returns {false_out, true_out}.
std::vector<Tensor> switch_(const Tensor& data, const Tensor& pred);
/// Forwards the live input: {out, value_index (int64 scalar)}. Dead only when every input is
/// dead. Inputs must agree on dtype and rank; dims that differ become dynamic. An undefined
/// input is an error (dead is not undefined).
std::vector<Tensor> merge(const std::vector<Tensor>& inputs);
/// pred ? true_fn() : false_fn(). Eagerly (concrete pred) runs one branch. With a symbolic pred
/// it builds both branches into the graph: a Switch on every tensor a branch captures from
/// outside, a Merge per result; only the taken branch executes. Branches must agree on dtypes;
/// shapes may differ (differing dims become dynamic).
Tensor cond(const Tensor& pred, const std::function<Tensor()>& true_fn,
            const std::function<Tensor()>& false_fn);
/// Several results.
std::vector<Tensor> cond(const Tensor& pred, const std::function<std::vector<Tensor>()>& true_fn,
                         const std::function<std::vector<Tensor>()>& false_fn);

struct WhileOptions {
  /// Stops after this many iterations even if cond is still true; -1: no limit.
  int64_t max_iterations = -1;
};
/// while (cond_fn(vars)) vars = body_fn(vars); returns the final vars. Eagerly a plain C++ loop
/// (autograd records every iteration). In a graph (a symbolic loop var or a symbolic cond) one
/// structured `while` node holding the cond and body as a subgraph, run by the executor;
/// differentiable through gradients() (each iteration's loop vars are saved).
std::vector<Tensor> while_loop(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body_fn,
    const std::vector<Tensor>& loop_vars, const WhileOptions& options = {});

}  // namespace kiln
