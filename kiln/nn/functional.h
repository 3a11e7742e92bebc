// Small helpers beside the losses in kiln/ops (cross_entropy, nll_loss, mse_loss live there):
// classification accuracy written with ops, so it runs eagerly, in a graph and under jit.
#pragma once
#include "kiln/ops/ops.h"

namespace kiln::nn {

namespace detail {
// Bool [N]: whether row i's argmax is labels[i]. Checks shapes and dtypes first.
inline Tensor hits(const char* op, const Tensor& logits, const Tensor& labels) {
  if (!logits.defined() || !labels.defined()) fail(op, "undefined input");
  if (logits.dim() != 2 || labels.dim() != 1 ||
      (logits.size(0) >= 0 && labels.size(0) >= 0 && logits.size(0) != labels.size(0)))
    fail(op, "expects logits [N, C] and labels [N], got ", logits.shape(), " and ", labels.shape());
  if (labels.dtype() != Int64 && labels.dtype() != Int32)
    fail(op, "labels must be int64 or int32, got ", labels.dtype(), " ", labels.shape());
  return eq(argmax(logits, 1), cast(labels, Int64));
}
}  // namespace detail

/// Number of rows of logits [N, C] whose argmax equals labels [N] (int64 0-d tensor).
inline Tensor num_correct(const Tensor& logits, const Tensor& labels) {
  return sum(cast(detail::hits("num_correct", logits, labels), Int64));
}

/// Fraction of rows of logits [N, C] whose argmax equals labels [N] (float32 0-d tensor).
inline Tensor accuracy(const Tensor& logits, const Tensor& labels) {
  return mean(cast(detail::hits("accuracy", logits, labels), Float32));
}

}  // namespace kiln::nn
