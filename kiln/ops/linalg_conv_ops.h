// Public op functions, part of ops.h (which includes it): linear algebra, convolution and
// pooling (linalg.cpp, einsum.cpp, linalg_*.cpp, conv*.cpp, max_pool.cpp, avg_pool.cpp, ...).
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
/// Every step's hidden state h [T, B, H] and, for an LSTM, cell state c [T, B, H] (undefined
/// otherwise) of rnn_sequence; the final state is the last step's (the first's when reversed).
struct RnnSequenceOut {
  Tensor h, c;
};
/// A recurrent layer's time loop in one op, torch.nn.LSTM / GRU / RNN after the input
/// projection: xw [T, B, G H] = x @ w_ih^T + b_ih for every step, w_hh [G H, H] the recurrent
/// weight (torch's layout; packed for the kernel by ops that a graph folds when it is a
/// constant), b_hh [G H], h0 and c0 [B, H] (undefined: zeros; c0 for an LSTM only).
/// mode "lstm" (G = 4: gates i, f, g, o), "gru" (3: r, z, n with n = tanh(x_n + r (W_hn h +
/// b_hn))), "rnn_tanh" or "rnn_relu" (1); reverse runs the steps from the last. Differentiable
/// once (the gradient op has no gradient of its own).
RnnSequenceOut rnn_sequence(const Tensor& xw, const Tensor& w_hh, const Tensor& b_hh,
                            const Tensor& h0, const Tensor& c0, const std::string& mode,
                            bool reverse = false);
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
/// torch.nn.functional.grid_sample on 4-D input [N, C, H, W] with grid [N, H_out, W_out, 2] of
/// (x, y) in [-1, 1]: mode "bilinear", "nearest" or "bicubic"; padding_mode "zeros", "border"
/// or "reflection". Composed of gather and elementwise ops (vision_ops.cpp): differentiable in
/// input and grid, as torch's.
Tensor grid_sample(const Tensor& input, const Tensor& grid, const std::string& mode = "bilinear",
                   const std::string& padding_mode = "zeros", bool align_corners = false);
/// torchvision.ops.roi_align: the average of bilinear samples over each of output_size bins of
/// each box of `boxes` [K, 5] (batch index, x1, y1, x2, y2, scaled by spatial_scale), as
/// [K, C, PH, PW]. sampling_ratio <= 0 takes ceil(box size / bins) samples per bin, which needs
/// concrete boxes; aligned shifts the boxes by half a pixel. No gradient reaches the boxes.
Tensor roi_align(const Tensor& input, const Tensor& boxes, std::vector<int64_t> output_size,
                 double spatial_scale = 1.0, int64_t sampling_ratio = -1, bool aligned = false);
/// Greedy non-maximum suppression as ONNX's NonMaxSuppression: boxes [B, N, 4] as (y1, x1, y2,
/// x2) corners (either diagonal) or, with center_point_box, (x_center, y_center, width,
/// height); scores [B, C, N]. Per batch and class, boxes scoring above score_threshold are
/// taken by score (ties: the lower index) unless their IoU with one taken exceeds
/// iou_threshold, at most max_output_boxes_per_class: the [num_selected, 3] int64 rows (batch,
/// class, box). The row count depends on the values: in a graph it is a size read at run.
Tensor batched_nms(const Tensor& boxes, const Tensor& scores, int64_t max_output_boxes_per_class,
                   double iou_threshold, std::optional<double> score_threshold = std::nullopt,
                   bool center_point_box = false);
/// torchvision.ops.nms: indices of the boxes [N, 4] (x1, y1, x2, y2) kept, by decreasing score.
Tensor nms(const Tensor& boxes, const Tensor& scores, double iou_threshold);
/// torch.nn.functional.unfold (im2col): [N, C, H, W] (or [C, H, W]) -> [N, C kH kW, L] sliding
/// blocks; fold (col2im) sums blocks back into [N, C, output_size]. Each is a grouped
/// convolution with a 0/1 kernel, so both are differentiable.
Tensor unfold(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> dilation = {1, 1},
              std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> stride = {1, 1});
Tensor fold(const Tensor& x, std::vector<int64_t> output_size, std::vector<int64_t> kernel,
            std::vector<int64_t> dilation = {1, 1}, std::vector<int64_t> padding = {0, 0},
            std::vector<int64_t> stride = {1, 1});

}  // namespace kiln
