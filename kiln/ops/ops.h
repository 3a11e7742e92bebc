// The public op functions. Each is a thin wrapper that calls the dispatcher with its OpDef, so
// it works eagerly, while building a graph and while tracing. Definitions live in the family
// files beside this header, one per concept, each opening with a line on what it holds
// (elementwise.cpp, activation.cpp, shape_ops.cpp, reduce.cpp, linalg.cpp, conv.cpp,
// max_pool.cpp, avg_pool.cpp, nn_ops.cpp, norm.cpp, gather_scatter.cpp, attention.cpp, ...;
// docs/architecture.md lists them; fused.cpp for the fusion pass's `fused` op).
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

// ---- linear algebra, convolution, pooling --------------------------------------------------
/// torch.matmul semantics: 1-D, 2-D, batched with broadcasting of batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// torch.addmm: beta * input + alpha * (a @ b) for 2-D a [m, k] and b [k, n], with input
/// broadcast to [m, n]; one GEMM accumulates the product onto the input. beta = 0 ignores
/// input (NaN included).
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta = 1,
             double alpha = 1);
/// torch.einsum: "bij,bjk->bik", implicit output ("ij,jk"), "..." for broadcast dims; sums over
/// labels missing from the output. Operands are contracted left to right with batched GEMMs.
/// Repeated labels within one operand (diagonals) are not supported.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
/// torch.mm ([n, k] @ [k, m]), torch.bmm ([b, n, k] @ [b, k, m]), torch.mv ([n, k] @ [k]):
/// matmul restricted to those ranks, without broadcasting.
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& a, const Tensor& v);
/// beta * input + alpha * (mat @ vec) (torch.addmv); input broadcasts to [n].
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, double beta = 1,
             double alpha = 1);
/// beta * input + alpha * bmm(b1, b2) (torch.baddbmm); input broadcasts to [b, n, m].
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1,
               double alpha = 1);
/// beta * input + alpha * sum_i b1[i] @ b2[i] (torch.addbmm); input broadcasts to [n, m].
Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1,
              double alpha = 1);
/// Inner product of two 1-D tensors of equal size (torch.dot; vdot is the same for reals).
Tensor dot(const Tensor& a, const Tensor& b);
Tensor vdot(const Tensor& a, const Tensor& b);
/// a[i] b[j] for 1-D a, b (torch.outer).
Tensor outer(const Tensor& a, const Tensor& b);
/// Sum over the last dims of a and b (torch.inner); a scalar operand multiplies.
Tensor inner(const Tensor& a, const Tensor& b);
/// torch.diag: a 1-D tensor becomes a square matrix with it on diagonal `diagonal`; a 2-D one
/// gives that diagonal as 1-D.
Tensor diag(const Tensor& a, int64_t diagonal = 0);
/// The diagonal `offset` of the (dim1, dim2) planes, moved last (torch.diagonal); a view of
/// contiguous inputs.
Tensor diagonal(const Tensor& a, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
/// The last dim of `a` placed on diagonal `offset` of new dims dim1, dim2 (torch.diag_embed).
Tensor diag_embed(const Tensor& a, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);
/// Sum of the main diagonal of a 2-D tensor (torch.trace).
Tensor trace(const Tensor& a);
/// torch.tensordot: contracts the last `dims` dims of a with the first of b, or the listed dims.
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a,
                 const std::vector<int64_t>& dims_b);
/// Kronecker product (torch.kron): the ranks are aligned by prepending 1s.
Tensor kron(const Tensor& a, const Tensor& b);
/// Cross product along dim (of size 3), broadcasting (torch.linalg.cross).
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1);

/// torch.linalg. Square-matrix ops work on the last two dims, batched over the leading ones,
/// float32 and float64 (LAPACK). A singular / non-positive-definite batch element raises a
/// kiln::Error naming the op and the element.
namespace linalg {
/// Vector norms (torch.linalg.vector_norm, same as kiln::vector_norm).
Tensor vector_norm(const Tensor& a, double ord = 2, const std::vector<int64_t>& dims = {},
                   bool keepdim = false);
/// Matrix norms over dims (two of them): ord "fro", "nuc", or +-1, +-2, +-inf.
Tensor matrix_norm(const Tensor& a, double ord, const std::vector<int64_t>& dims = {-2, -1},
                   bool keepdim = false);
Tensor matrix_norm(const Tensor& a, const std::string& ord = "fro",
                   const std::vector<int64_t>& dims = {-2, -1}, bool keepdim = false);
/// torch.linalg.norm: with ord unset the 2-norm of the flattened input (dims empty) or the
/// vector / Frobenius norm of the 1 or 2 dims given; a number ord with two dims is a matrix
/// norm, with one dim (or a 1-D input) a vector norm.
Tensor norm(const Tensor& a, std::optional<double> ord = std::nullopt,
            const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor norm(const Tensor& a, const std::string& ord, const std::vector<int64_t>& dims = {},
            bool keepdim = false);
Tensor det(const Tensor& a);
/// {sign, log|det|}.
std::pair<Tensor, Tensor> slogdet(const Tensor& a);
Tensor inv(const Tensor& a);
/// X with A X = B (left) or X A = B; B [..., n] is a batch of vectors when its rank is one less
/// than A's (as torch).
Tensor solve(const Tensor& a, const Tensor& b, bool left = true);
/// L with A = L L^T (upper: U with A = U^T U).
Tensor cholesky(const Tensor& a, bool upper = false);
/// {Q, R}; mode "reduced", "complete" or "r" (Q empty).
std::pair<Tensor, Tensor> qr(const Tensor& a, const std::string& mode = "reduced");
/// {U, S, Vh} with A = U diag(S) Vh, S descending.
std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& a, bool full_matrices = true);
Tensor svdvals(const Tensor& a);
/// {eigenvalues ascending, eigenvectors as columns} of a symmetric matrix; UPLO "L" or "U" says
/// which triangle is read.
std::pair<Tensor, Tensor> eigh(const Tensor& a, const std::string& uplo = "L");
Tensor eigvalsh(const Tensor& a, const std::string& uplo = "L");
/// Pseudo-inverse through the SVD (eigh when hermitian); singular values <= rtol * max are
/// dropped (rtol < 0: max(m, n) * eps of the dtype).
Tensor pinv(const Tensor& a, double rtol = -1, bool hermitian = false);
/// The number of singular values > max(atol, rtol * largest) (rtol < 0: max(m, n) * eps), int64.
Tensor matrix_rank(const Tensor& a, double atol = 0, double rtol = -1, bool hermitian = false);
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1);
}  // namespace linalg
/// x @ w^T + b, w is [out, in] (PyTorch layout).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
/// x [N, C, H, W], w [O, C/groups, kH, kW].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
/// Inference conv2d with its epilogue in one kernel, what the conv_epilogue and block_layout
/// passes make: relu?(conv2d(x, w) + bias + residual) (bias 1-D [O] and residual optional, not
/// differentiable). in_block / out_block 8 or 16: x and the output (and the residual) are
/// channel-blocked [N, C/b, H, W, b] (oneDNN's nChw{b}c); w_blocked: w is
/// conv_weight_to_blocks(w, in_block). Needs groups = 1 for any blocked layout.
Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
                    const Tensor& residual = Tensor(), std::vector<int64_t> stride = {1, 1},
                    std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1},
                    int64_t groups = 1, bool relu = false, int64_t in_block = 0,
                    int64_t out_block = 0, bool w_blocked = false);
/// [N, C, H, W] -> [N, C/b, H, W, b] (channel blocks of b, innermost), and back.
Tensor to_channel_blocks(const Tensor& x, int64_t b);
Tensor from_channel_blocks(const Tensor& x);
/// [O, C, kH, kW] -> [O/b, C/b, kH, kW, b(in), b(out)], conv2d_fused's blocked weights.
Tensor conv_weight_to_blocks(const Tensor& w, int64_t b);
/// Transposed convolution (torch.nn.functional.conv_transpose2d): x [N, C_in, H, W] (or
/// [C_in, H, W]), w [C_in, C_out/groups, kH, kW]; output size (H - 1) stride - 2 padding +
/// dilation (kH - 1) + output_padding + 1. conv2d's input gradient, and differentiable as it.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                        std::vector<int64_t> output_padding = {0, 0},
                        std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
/// x [N, C, L] (or [C, L]), w [O, C/groups, K]: conv2d over a height of 1.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
/// x [N, C, D, H, W] (or unbatched [C, D, H, W]), w [O, C/groups, kD, kH, kW]
/// (torch.nn.functional.conv3d): the kD depth taps fold into conv2d's channels, so one conv2d
/// (oneDNN) does the work and gives both gradients.
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              std::vector<int64_t> stride = {1, 1, 1}, std::vector<int64_t> padding = {0, 0, 0},
              std::vector<int64_t> dilation = {1, 1, 1}, int64_t groups = 1);
/// torch.nn.functional.conv_transpose1d: x [N, C_in, L] (or [C_in, L]), w [C_in, C_out/groups,
/// K]; conv_transpose2d over a height of 1.
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                        int64_t dilation = 1, int64_t groups = 1);
/// torch.nn.functional.conv_transpose3d: x [N, C_in, D, H, W] (or unbatched), w [C_in,
/// C_out/groups, kD, kH, kW]; per depth tap a conv_transpose2d placed at its strided depths.
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        std::vector<int64_t> stride = {1, 1, 1},
                        std::vector<int64_t> padding = {0, 0, 0},
                        std::vector<int64_t> output_padding = {0, 0, 0},
                        std::vector<int64_t> dilation = {1, 1, 1}, int64_t groups = 1);
/// Average pooling to a fixed output size (torch's bins: output i covers
/// [floor(i L / n), ceil((i + 1) L / n))); {1, 1} is global average pooling.
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size);
Tensor adaptive_avg_pool1d(const Tensor& x, std::vector<int64_t> output_size);
Tensor adaptive_avg_pool3d(const Tensor& x, std::vector<int64_t> output_size);
/// Adaptive max pooling (torch's bins) over 1, 2 or 3 trailing dims of [N, C, ...] (or
/// unbatched [C, ...]); the _with_indices forms also give the int64 argmax, a flat index into
/// each input plane as torch.
Tensor adaptive_max_pool1d(const Tensor& x, std::vector<int64_t> output_size);
Tensor adaptive_max_pool2d(const Tensor& x, std::vector<int64_t> output_size);
Tensor adaptive_max_pool3d(const Tensor& x, std::vector<int64_t> output_size);
std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size);
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size);
std::pair<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size);
/// Resizes [N, C, L], [N, C, H, W] or [N, C, D, H, W] (or unbatched [C, H, W]) as
/// torch.nn.functional.interpolate: `size` (1 value or one per spatial dim), or, when size is
/// empty, scale_factor (1 value or one per dim; the output is floor(in * scale) and the kernels
/// use 1/scale unless recompute_scale_factor). Modes "nearest", "nearest-exact", "linear",
/// "bilinear", "bicubic" (a = -0.75), "trilinear", "area"; align_corners as torch. Separable:
/// one small GEMM per resized axis, differentiable.
Tensor interpolate(const Tensor& x, std::vector<int64_t> size, const std::string& mode = "nearest",
                   bool align_corners = false, std::vector<double> scale_factor = {},
                   bool recompute_scale_factor = false);
/// Max pooling over the 1, 2 or 3 trailing dims of [N, C, ...] (or [C, ...]), as
/// torch.nn.functional.max_pool{1,2,3}d: stride {} means the kernel; ceil_mode and dilation as
/// torch. The _with_indices forms also give the int64 argmax (flat index into each input plane).
Tensor max_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
                  bool ceil_mode = false);
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1},
                  bool ceil_mode = false);
/// Inference max pooling of channel-blocked x [N, C/b, H, W, b] (b = 8 or 16; see
/// to_channel_blocks): values only, not differentiable.
Tensor max_pool2d_blocked(const Tensor& x, std::vector<int64_t> kernel,
                          std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0, 0});
Tensor max_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0, 0},
                  std::vector<int64_t> dilation = {1, 1, 1}, bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                                  std::vector<int64_t> stride = {},
                                                  std::vector<int64_t> padding = {0},
                                                  std::vector<int64_t> dilation = {1},
                                                  bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                                  std::vector<int64_t> stride = {},
                                                  std::vector<int64_t> padding = {0, 0},
                                                  std::vector<int64_t> dilation = {1, 1},
                                                  bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                                  std::vector<int64_t> stride = {},
                                                  std::vector<int64_t> padding = {0, 0, 0},
                                                  std::vector<int64_t> dilation = {1, 1, 1},
                                                  bool ceil_mode = false);
/// The inverse of max pooling (torch.nn.functional.max_unpool{1,2,3}d): x scattered to the flat
/// plane positions `indices` of a zero output of output_size (1 value per spatial dim, or the
/// full shape; {}: from kernel, stride and padding).
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, std::vector<int64_t> kernel,
                    std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0},
                    std::vector<int64_t> output_size = {});
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, std::vector<int64_t> kernel,
                    std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0, 0},
                    std::vector<int64_t> output_size = {});
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, std::vector<int64_t> kernel,
                    std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0, 0, 0},
                    std::vector<int64_t> output_size = {});
/// Average pooling (torch.nn.functional.avg_pool{1,2,3}d) with ceil_mode, count_include_pad and
/// divisor_override (0: none) as torch.
Tensor avg_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false,
                  bool count_include_pad = true, int64_t divisor_override = 0);
Tensor avg_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0, 0}, bool ceil_mode = false,
                  bool count_include_pad = true, int64_t divisor_override = 0);
/// Power-average pooling (torch.nn.functional.lp_pool{1,2}d): (sum over the window x^p)^(1/p).
Tensor lp_pool1d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride = {}, bool ceil_mode = false);
Tensor lp_pool2d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride = {}, bool ceil_mode = false);
/// [*, C r^2, H, W] -> [*, C, H r, W r] (torch.nn.functional.pixel_shuffle) and its inverse.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
/// torch.nn.functional.unfold (im2col): [N, C, H, W] (or [C, H, W]) -> [N, C kH kW, L] sliding
/// blocks; fold (col2im) sums blocks back into [N, C, output_size]. Each is a grouped
/// convolution with a 0/1 kernel, so both are differentiable.
Tensor unfold(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> dilation = {1, 1},
              std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> stride = {1, 1});
Tensor fold(const Tensor& x, std::vector<int64_t> output_size, std::vector<int64_t> kernel,
            std::vector<int64_t> dilation = {1, 1}, std::vector<int64_t> padding = {0, 0},
            std::vector<int64_t> stride = {1, 1});

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

// ---- indexing, shape helpers and host-read ops with torch's names (gather_scatter.cpp,
// advanced_index.cpp, mask_ops.cpp, sort_search.cpp, shape_ops.cpp, join_ops.cpp). Index
// tensors are int64 or int32; an index out of range raises
// `[op] index i is out of range ... size n`. ---------------------------------------------------
/// torch.scatter: a copy of `a` with src[i][j][k] written at a[index[i][j][k]][j][k] (dim = 0);
/// reduce "" overwrites (a repeated index: the last write in row-major order wins), "add" and
/// "multiply" combine with a's values, as torch 1.13's reduce argument. Differentiable in a and
/// src when reduce is "" (torch has no gradient for the reduce forms; Kiln's is scatter_reduce's).
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
               const std::string& reduce = "");
/// The same with every written value equal to `value` (torch.scatter's value form).
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, double value,
               const std::string& reduce = "");
/// torch.scatter_reduce: reduce "sum", "prod", "mean" (integer means floor), "amax" or "amin"
/// of src's values at each index, together with a's own value when include_self. Gradients as
/// torch for sum, mean, amax and amin (ties share the gradient evenly); prod has none.
Tensor scatter_reduce(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self = true);
/// torch.index_put: a copy of `a` with a[indices[0], indices[1], ...] = values (accumulate:
/// +=, repeated indices add up). The index tensors (int64/int32, negative counts from the end,
/// or bool masks) index a's leading dims and broadcast together; values broadcast to the
/// indexed shape. Differentiable in a and values.
Tensor index_put(const Tensor& a, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate = false);
/// a[indices[0], indices[1], ...] (advanced indexing of the leading dims, as index_put reads).
Tensor index(const Tensor& a, const std::vector<Tensor>& indices);
/// torch.index_fill: `value` in the slices along dim that the 1-D index names.
Tensor index_fill(const Tensor& a, int64_t dim, const Tensor& index, double value);
/// torch.index_copy: src's slices along dim written at the positions index (1-D) names.
Tensor index_copy(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
/// torch.take: the elements of flattened `a` at `index` (any shape; negative from the end).
Tensor take(const Tensor& a, const Tensor& index);
/// torch.take_along_dim: gather along dim after broadcasting a and indices (except along dim);
/// dim = nullopt: take on the flattened a.
Tensor take_along_dim(const Tensor& a, const Tensor& indices,
                      std::optional<int64_t> dim = std::nullopt);
/// torch.masked_scatter: a with the positions where mask (bool, broadcast) is true filled, in
/// row-major order, with source's first elements. Reads the mask on the host, as nonzero.
Tensor masked_scatter(const Tensor& a, const Tensor& mask, const Tensor& source,
                      const std::source_location& loc = std::source_location::current());
/// torch.unbind: the slices along dim, each without that dim.
std::vector<Tensor> unbind(const Tensor& a, int64_t dim = 0);
/// torch.movedim / moveaxis: dims `source` moved to positions `destination`, the others keep
/// their order.
Tensor movedim(const Tensor& a, const std::vector<int64_t>& source,
               const std::vector<int64_t>& destination);
Tensor movedim(const Tensor& a, int64_t source, int64_t destination);
/// torch.swapaxes / swapdims (transpose).
Tensor swapaxes(const Tensor& a, int64_t axis0, int64_t axis1);
/// torch.tile: repeat with reps padded with leading 1s to a's rank.
Tensor tile(const Tensor& a, const std::vector<int64_t>& reps);
/// torch.narrow: `length` elements from `start` (negative from the end) along dim (a view).
Tensor narrow(const Tensor& a, int64_t dim, SymInt start, SymInt length);
/// torch.repeat_interleave: each element (slice along dim) repeated `repeats` times; dim =
/// nullopt flattens first.
Tensor repeat_interleave(const Tensor& a, int64_t repeats,
                         std::optional<int64_t> dim = std::nullopt);
/// Per-element counts (a 1-D or one-element int tensor; read on the host).
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats,
                         std::optional<int64_t> dim = std::nullopt,
                         const std::source_location& loc = std::source_location::current());
/// The repeats-only form: i repeated repeats[i] times (int64).
Tensor repeat_interleave(const Tensor& repeats,
                         const std::source_location& loc = std::source_location::current());
/// torch.fliplr (dim 1), flipud (dim 0), rot90 (k quarter turns from dims[0] towards dims[1]).
Tensor fliplr(const Tensor& a);
Tensor flipud(const Tensor& a);
Tensor rot90(const Tensor& a, int64_t k = 1, const std::vector<int64_t>& dims = {0, 1});
/// torch.tensor_split: `sections` nearly equal pieces (the first size % sections one longer),
/// or pieces cut before each of `indices`; views.
std::vector<Tensor> tensor_split(const Tensor& a, int64_t sections, int64_t dim = 0);
std::vector<Tensor> tensor_split(const Tensor& a, const std::vector<int64_t>& indices,
                                 int64_t dim = 0);
/// torch.hsplit / vsplit / dsplit: tensor_split along dim 1 (0 for 1-D) / 0 / 2; an int must
/// divide the size.
std::vector<Tensor> hsplit(const Tensor& a, int64_t sections);
std::vector<Tensor> hsplit(const Tensor& a, const std::vector<int64_t>& indices);
std::vector<Tensor> vsplit(const Tensor& a, int64_t sections);
std::vector<Tensor> vsplit(const Tensor& a, const std::vector<int64_t>& indices);
std::vector<Tensor> dsplit(const Tensor& a, int64_t sections);
std::vector<Tensor> dsplit(const Tensor& a, const std::vector<int64_t>& indices);
/// torch.atleast_1d / 2d / 3d (views).
Tensor atleast_1d(const Tensor& a);
Tensor atleast_2d(const Tensor& a);
Tensor atleast_3d(const Tensor& a);
/// torch.broadcast_to (expand) and broadcast_tensors (each expanded to the common shape).
Tensor broadcast_to(const Tensor& a, const Shape& shape);
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& xs);
/// torch.meshgrid: indexing "ij" (matrix) or "xy" (Cartesian: the first two dims swapped).
std::vector<Tensor> meshgrid(const std::vector<Tensor>& xs, const std::string& indexing = "ij");
/// torch.hstack / vstack / dstack / column_stack.
Tensor hstack(const std::vector<Tensor>& xs);
Tensor vstack(const std::vector<Tensor>& xs);
Tensor dstack(const std::vector<Tensor>& xs);
Tensor column_stack(const std::vector<Tensor>& xs);
/// torch.triu_indices / tril_indices: [2, n] int64 coordinates of the kept entries of a
/// row x col matrix, row-major.
Tensor triu_indices(int64_t row, int64_t col, int64_t offset = 0);
Tensor tril_indices(int64_t row, int64_t col, int64_t offset = 0);
/// torch.argwhere (nonzero); nonzero(as_tuple=True) and torch.where(cond): one int64 1-D
/// tensor of coordinates per dim.
Tensor argwhere(const Tensor& a, const std::source_location& loc = std::source_location::current());
std::vector<Tensor> nonzero_tuple(
    const Tensor& a, const std::source_location& loc = std::source_location::current());
std::vector<Tensor> where(const Tensor& cond,
                          const std::source_location& loc = std::source_location::current());
/// torch.searchsorted: for each value, the index in sorted_sequence (1-D, or N-D with the
/// values' leading dims) where it would be inserted keeping the order; right: after equal
/// entries. int64 (int32 with out_int32). `sorter` (optional): the indices that sort
/// sorted_sequence along its last dim.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false,
                    bool right = false, const Tensor& sorter = Tensor());
/// torch.bucketize: searchsorted in the 1-D `boundaries`.
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32 = false,
                 bool right = false);
/// torch.unique with dim = None: the distinct values (ascending; torch leaves the order of
/// sorted = false unspecified, and Kiln sorts then too), the index of each input element in
/// them (input's shape) and the count of each. Read on the host (a graph break under jit, as
/// nonzero).
struct UniqueResult {
  Tensor values, inverse, counts;
};
UniqueResult unique(const Tensor& a, bool sorted = true,
                    const std::source_location& loc = std::source_location::current());
/// torch.unique_consecutive (dim = None): one value per run of equal consecutive elements.
UniqueResult unique_consecutive(const Tensor& a,
                                const std::source_location& loc = std::source_location::current());
/// torch.logspace: base ** linspace(start, end, steps).
Tensor logspace(double start, double end, int64_t steps, double base = 10.0, DType dtype = Float32);

// Losses: the plain cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits,
// smooth_l1_loss and huber_loss in nn_ops.cpp, the rest (weighted forms, torch's other
// losses) in losses.cpp.
enum class Reduction { None, Mean, Sum };
/// logits [N, C] (or [N, C, d...]) and class indices [N] (int64).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
/// log-probabilities [N, C] and class indices [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::Mean);
/// Binary cross-entropy on logits (sigmoid folded in, exact for large |logits|); target of the
/// logits' shape, values in [0, 1]; pos_weight (broadcast) scales the positive term.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean,
                                        const Tensor& pos_weight = Tensor());
/// 0.5 d^2 / beta for |d| < beta, |d| - beta / 2 beyond (d = a - b); beta 0 is the L1 loss.
Tensor smooth_l1_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
/// 0.5 d^2 for |d| < delta, delta (|d| - delta / 2) beyond.
Tensor huber_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);
/// cross_entropy with class weights (undefined: none) and label smoothing; `target` is class
/// indices [N, d...] or class probabilities of the logits' shape (float). Weighted 'mean'
/// divides by the summed weights of the non-ignored targets, as torch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
/// nll_loss with class weights (undefined: none).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor l1_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::Mean);
/// -w (t log p + (1 - t) log(1 - p)) on probabilities, each log clamped to >= -100 (as torch).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            Reduction reduction = Reduction::Mean, const Tensor& weight = Tensor());
/// target (log target - input) pointwise; reduction "none", "mean", "sum" or "batchmean".
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
              bool log_target = false);
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                             double margin = 0.0, Reduction reduction = Reduction::Mean);
/// max(0, -y (x1 - x2) + margin).
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                           double margin = 0.0, Reduction reduction = Reduction::Mean);
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::Mean);
Tensor soft_margin_loss(const Tensor& input, const Tensor& target,
                        Reduction reduction = Reduction::Mean);
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                   const Tensor& weight = Tensor(),
                                   Reduction reduction = Reduction::Mean);
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true,
                        bool full = false, double eps = 1e-8,
                        Reduction reduction = Reduction::Mean);
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         bool full = false, double eps = 1e-6,
                         Reduction reduction = Reduction::Mean);
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin = 1.0, double p = 2.0, double eps = 1e-6,
                           bool swap = false, Reduction reduction = Reduction::Mean);
/// Zeroes elements with probability p and scales the rest by 1/(1-p), from the seeded generator;
/// p = 1 gives zeros (PyTorch's rule).
Tensor dropout(const Tensor& a, double p = 0.5, bool training = true);

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
