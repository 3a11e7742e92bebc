// Public op functions, part of ops.h (which includes it): indexing, torch's shape helpers and
// host-read ops (gather_scatter.cpp, index_select.cpp, advanced_index.cpp, mask_ops.cpp, ...).
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
/// The distinct rows of x (its elements when dim is none, else its slices along dim), as ONNX's
/// Unique: `values` (sorted, or in the order they first occur), the index of each one's first
/// occurrence, each row's position in `values` (inverse) and the counts. Unlike unique(), which
/// reads the values on the host, it holds in a graph: the distinct count is a size read at run
/// (kiln/ops/unique_rows.cpp).
struct UniqueRows {
  Tensor values, indices, inverse, counts;
};
UniqueRows unique_rows(const Tensor& x, std::optional<int64_t> dim = std::nullopt,
                       bool sorted = true);
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

}  // namespace kiln
