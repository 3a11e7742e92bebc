// torch.nn.functional for Kiln: the functional forms of activations, layers and losses where a
// PyTorch user looks for them (`namespace F = kiln::nn::functional; F::relu(x)`). Each is the one
// op of kiln/ops/ops.h, named again here; the metrics below are written with ops, so they run
// eagerly, in a graph and under jit.
#pragma once
#include "kiln/ops/ops.h"

namespace kiln::nn::functional {

// Activations.
using kiln::elu;
using kiln::gelu;
using kiln::leaky_relu;
using kiln::log_softmax;
using kiln::relu;
using kiln::sigmoid;
using kiln::silu;
using kiln::softmax;
using kiln::softplus;
using kiln::tanh;

// Layers.
using kiln::adaptive_avg_pool2d;
using kiln::avg_pool2d;
using kiln::batch_norm;
using kiln::conv1d;
using kiln::conv2d;
using kiln::conv_transpose2d;
using kiln::cosine_similarity;
using kiln::dropout;
using kiln::embedding;
using kiln::interpolate;
using kiln::layer_norm;
using kiln::linear;
using kiln::max_pool2d;
using kiln::normalize;
using kiln::one_hot;
using kiln::pad;
using kiln::scaled_dot_product_attention;

// Losses.
using kiln::binary_cross_entropy_with_logits;
using kiln::cross_entropy;
using kiln::huber_loss;
using kiln::mse_loss;
using kiln::nll_loss;
using kiln::smooth_l1_loss;

namespace metrics_impl {
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
}  // namespace metrics_impl

/// Number of rows of logits [N, C] whose argmax equals labels [N] (int64 0-d tensor).
inline Tensor num_correct(const Tensor& logits, const Tensor& labels) {
  return sum(cast(metrics_impl::hits("num_correct", logits, labels), Int64));
}

/// Fraction of rows of logits [N, C] whose argmax equals labels [N] (float32 0-d tensor).
inline Tensor accuracy(const Tensor& logits, const Tensor& labels) {
  return mean(cast(metrics_impl::hits("accuracy", logits, labels), Float32));
}

}  // namespace kiln::nn::functional

namespace kiln::nn {
using functional::accuracy;
using functional::num_correct;
}  // namespace kiln::nn
