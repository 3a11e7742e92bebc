// Layer implementations: shape checks that name the module, then the public ops. BatchNorm is
// written from primitives (mean/var over every dim but the channels) so that its running
// statistics are new tensors a traced step can return, not in-place writes.
#include "kiln/nn/layers.h"

#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "kiln/nn/init.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::nn {
namespace {

// 1 value (square) or 2 values, each checked against `min`.
std::vector<int64_t> pair_of(const char* module, const char* what, std::vector<int64_t> v,
                             int64_t min) {
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2)
    fail(module, what, " must have 1 or 2 values, got ", v.size(), " (", ints_str(v), ")");
  for (int64_t x : v)
    if (x < min) fail(module, what, " must be >= ", min, ", got ", ints_str(v));
  return v;
}

// The layer's parameters fix the input dtype; saying so here beats the kernel's message about
// two tensors the caller never passed.
void require_dtype(const char* module, const Tensor& x, const Tensor& weight) {
  if (x.dtype() != weight.dtype())
    fail(module, "expects a ", weight.dtype(), " input (the dtype of its weight ", weight.shape(),
         "), got ", x.dtype(), " ", x.shape(),
         is_floating(x.dtype()) ? " (cast the input, or the module with to())" : "");
}

void require_positive(const char* module, const char* what, int64_t v) {
  if (v <= 0) fail(module, what, " must be positive, got ", v);
}

void require_defined(const char* module, const Tensor& x) {
  if (!x.defined()) fail(module, "input is undefined");
}

// A dim size check that lets a dynamic (-1) dim through.
bool dim_is(int64_t have, int64_t want) { return have < 0 || have == want; }

// Pooling and convolution take [N, C, H, W] or unbatched [C, H, W].
void require_image(const char* module, const Tensor& x) {
  require_defined(module, x);
  if (x.dim() != 3 && x.dim() != 4)
    fail(module, "expects input [N, C, H, W] or [C, H, W], got shape ", x.shape());
}

// Runs f on a 4-D view of x and drops the batch dim again for unbatched input.
template <typename F>
Tensor batched(const Tensor& x, F&& f) {
  if (x.dim() == 4) return f(x);
  return squeeze(f(unsqueeze(x, 0)), 0);
}

// `t` in dtype `dt`, without a cast node when it already is.
Tensor as_dtype(const Tensor& t, DType dt) { return t.dtype() == dt ? t : cast(t, dt); }

// PyTorch's default for Linear and Conv: kaiming_uniform_(a = sqrt(5)) on the weight, which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void default_init(Tensor& weight, Tensor* bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias && bias->defined()) {
    int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(*bias, -bound, bound);
  }
}

}  // namespace

// ---- Linear ---------------------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_(in_features), out_(out_features) {
  require_positive("Linear", "in_features", in_features);
  require_positive("Linear", "out_features", out_features);
  weight_ = empty({out_, in_});
  if (bias) bias_ = empty({out_});
  default_init(weight_, bias ? &bias_ : nullptr);
  register_parameter("weight", &weight_);
  if (bias) register_parameter("bias", &bias_);
}

Tensor Linear::forward(const Tensor& x) {
  require_defined("Linear", x);
  if (x.dim() < 1 || !dim_is(x.size(-1), in_))
    fail("Linear", "expects input [..., ", in_, "] (in_features = ", in_, "), got shape ",
         x.shape());
  require_dtype("Linear", x, weight_);
  return linear(x, weight_, bias_);
}

// ---- Conv2d ---------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
               Conv2dOptions opts)
    : in_(in_channels), out_(out_channels), opts_(std::move(opts)) {
  require_positive("Conv2d", "in_channels", in_channels);
  require_positive("Conv2d", "out_channels", out_channels);
  require_positive("Conv2d", "groups", opts_.groups);
  kernel_ = pair_of("Conv2d", "kernel_size", std::move(kernel_size), 1);
  opts_.stride = pair_of("Conv2d", "stride", opts_.stride, 1);
  opts_.padding = pair_of("Conv2d", "padding", opts_.padding, 0);
  opts_.dilation = pair_of("Conv2d", "dilation", opts_.dilation, 1);
  if (in_ % opts_.groups != 0 || out_ % opts_.groups != 0)
    fail("Conv2d", "groups = ", opts_.groups, " must divide in_channels = ", in_,
         " and out_channels = ", out_);
  // The conv2d op's bound (op_util::kMaxWindowParam), checked here so that a module that could
  // never run is refused when built; kernel * dilation stays within int64 under it.
  constexpr int64_t kLimit = op_util::kMaxWindowParam;
  for (int d = 0; d < 2; ++d)
    if (opts_.padding[d] > kLimit || opts_.dilation[d] > kLimit || kernel_[d] > kLimit ||
        opts_.stride[d] > kLimit)
      fail("Conv2d", "kernel_size ", kernel_[d], ", stride ", opts_.stride[d], ", padding ",
           opts_.padding[d], " and dilation ", opts_.dilation[d], " must each be at most 2^30");
  weight_ = empty({out_, in_ / opts_.groups, kernel_[0], kernel_[1]});
  if (opts_.bias) bias_ = empty({out_});
  default_init(weight_, opts_.bias ? &bias_ : nullptr);
  register_parameter("weight", &weight_);
  if (opts_.bias) register_parameter("bias", &bias_);
}

Tensor Conv2d::forward(const Tensor& x) {
  require_image("Conv2d", x);
  int64_t c = x.size(x.dim() - 3);
  if (!dim_is(c, in_))
    fail("Conv2d", "expects ", in_, " input channels, got input shape ", x.shape(),
         " (weight shape ", weight_.shape(), ")");
  require_dtype("Conv2d", x, weight_);
  return batched(x, [&](const Tensor& x4) {
    return conv2d(x4, weight_, bias_, opts_.stride, opts_.padding, opts_.dilation, opts_.groups);
  });
}

// ---- ConvTranspose2d ------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels,
                                 std::vector<int64_t> kernel_size, ConvTranspose2dOptions opts)
    : in_(in_channels), out_(out_channels), opts_(std::move(opts)) {
  const char* m = "ConvTranspose2d";
  require_positive(m, "in_channels", in_channels);
  require_positive(m, "out_channels", out_channels);
  require_positive(m, "groups", opts_.groups);
  const std::vector<int64_t> k = pair_of(m, "kernel_size", std::move(kernel_size), 1);
  opts_.stride = pair_of(m, "stride", opts_.stride, 1);
  opts_.padding = pair_of(m, "padding", opts_.padding, 0);
  opts_.output_padding = pair_of(m, "output_padding", opts_.output_padding, 0);
  opts_.dilation = pair_of(m, "dilation", opts_.dilation, 1);
  if (in_ % opts_.groups != 0 || out_ % opts_.groups != 0)
    fail(m, "groups = ", opts_.groups, " must divide in_channels = ", in_,
         " and out_channels = ", out_);
  constexpr int64_t kLimit = op_util::kMaxWindowParam;
  for (int d = 0; d < 2; ++d)
    if (opts_.padding[d] > kLimit || opts_.dilation[d] > kLimit || k[d] > kLimit ||
        opts_.stride[d] > kLimit || opts_.output_padding[d] > kLimit)
      fail(m,
           "kernel_size, stride, padding, output_padding and dilation must each be at most "
           "2^30");
  weight_ = empty({in_, out_ / opts_.groups, k[0], k[1]});
  if (opts_.bias) bias_ = empty({out_});
  default_init(weight_, opts_.bias ? &bias_ : nullptr);
  register_parameter("weight", &weight_);
  if (opts_.bias) register_parameter("bias", &bias_);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  require_image("ConvTranspose2d", x);
  if (!dim_is(x.size(x.dim() - 3), in_))
    fail("ConvTranspose2d", "expects ", in_, " input channels, got input shape ", x.shape(),
         " (weight shape ", weight_.shape(), ")");
  require_dtype("ConvTranspose2d", x, weight_);
  return conv_transpose2d(x, weight_, bias_, opts_.stride, opts_.padding, opts_.output_padding,
                          opts_.dilation, opts_.groups);
}

// ---- Conv1d ---------------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions opts)
    : in_(in_channels), out_(out_channels), opts_(opts) {
  require_positive("Conv1d", "in_channels", in_channels);
  require_positive("Conv1d", "out_channels", out_channels);
  require_positive("Conv1d", "kernel_size", kernel_size);
  require_positive("Conv1d", "stride", opts_.stride);
  require_positive("Conv1d", "dilation", opts_.dilation);
  require_positive("Conv1d", "groups", opts_.groups);
  if (opts_.padding < 0) fail("Conv1d", "padding must be >= 0, got ", opts_.padding);
  if (in_ % opts_.groups != 0 || out_ % opts_.groups != 0)
    fail("Conv1d", "groups = ", opts_.groups, " must divide in_channels = ", in_,
         " and out_channels = ", out_);
  constexpr int64_t kLimit = op_util::kMaxWindowParam;
  if (opts_.padding > kLimit || opts_.dilation > kLimit || kernel_size > kLimit ||
      opts_.stride > kLimit)
    fail("Conv1d", "kernel_size ", kernel_size, ", stride ", opts_.stride, ", padding ",
         opts_.padding, " and dilation ", opts_.dilation, " must each be at most 2^30");
  weight_ = empty({out_, in_ / opts_.groups, kernel_size});
  if (opts_.bias) bias_ = empty({out_});
  default_init(weight_, opts_.bias ? &bias_ : nullptr);
  register_parameter("weight", &weight_);
  if (opts_.bias) register_parameter("bias", &bias_);
}

Tensor Conv1d::forward(const Tensor& x) {
  require_defined("Conv1d", x);
  if (x.dim() != 2 && x.dim() != 3)
    fail("Conv1d", "expects input [N, C, L] or [C, L], got shape ", x.shape());
  if (!dim_is(x.size(x.dim() - 2), in_))
    fail("Conv1d", "expects ", in_, " input channels, got input shape ", x.shape(),
         " (weight shape ", weight_.shape(), ")");
  require_dtype("Conv1d", x, weight_);
  return conv1d(x, weight_, bias_, opts_.stride, opts_.padding, opts_.dilation, opts_.groups);
}

// ---- pooling --------------------------------------------------------------------------------

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::vector<int64_t> output_size) {
  size_ = pair_of("AdaptiveAvgPool2d", "output_size", std::move(output_size), 1);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  require_image("AdaptiveAvgPool2d", x);
  return adaptive_avg_pool2d(x, size_);
}

MaxPool2d::MaxPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                     std::vector<int64_t> padding) {
  kernel_ = pair_of("MaxPool2d", "kernel_size", std::move(kernel_size), 1);
  stride_ = stride.empty() ? kernel_ : pair_of("MaxPool2d", "stride", std::move(stride), 1);
  padding_ = pair_of("MaxPool2d", "padding", std::move(padding), 0);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  require_image("MaxPool2d", x);
  return batched(x, [&](const Tensor& x4) { return max_pool2d(x4, kernel_, stride_, padding_); });
}

AvgPool2d::AvgPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                     std::vector<int64_t> padding) {
  kernel_ = pair_of("AvgPool2d", "kernel_size", std::move(kernel_size), 1);
  stride_ = stride.empty() ? kernel_ : pair_of("AvgPool2d", "stride", std::move(stride), 1);
  padding_ = pair_of("AvgPool2d", "padding", std::move(padding), 0);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  require_image("AvgPool2d", x);
  return batched(x, [&](const Tensor& x4) { return avg_pool2d(x4, kernel_, stride_, padding_); });
}

// ---- BatchNorm ------------------------------------------------------------------------------

BatchNorm::BatchNorm(int64_t num_features, BatchNormOptions opts, std::vector<int64_t> ranks)
    : c_(num_features), opts_(opts), ranks_(std::move(ranks)) {
  require_positive("BatchNorm", "num_features", num_features);
  if (!(opts_.eps > 0)) fail("BatchNorm", "eps must be positive, got ", opts_.eps);
  if (!(opts_.momentum >= 0 && opts_.momentum <= 1))
    fail("BatchNorm", "momentum must be in [0, 1], got ", opts_.momentum);
  if (opts_.affine) {
    weight_ = ones({c_});
    bias_ = zeros({c_});
    register_parameter("weight", &weight_);
    register_parameter("bias", &bias_);
  }
  if (opts_.track_running_stats) {
    running_mean_ = zeros({c_});
    running_var_ = ones({c_});
    num_batches_tracked_ = scalar_tensor(0.0, Int64);
    register_buffer("running_mean", &running_mean_);
    register_buffer("running_var", &running_var_);
    register_buffer("num_batches_tracked", &num_batches_tracked_);
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  const std::string name = type_name();
  const char* op = name.c_str();
  require_defined(op, x);
  bool rank_ok = false;
  for (int64_t r : ranks_) rank_ok = rank_ok || x.dim() == r;
  if (!rank_ok)
    fail(op, "expects input ", ranks_.size() == 1 ? "[N, C, H, W]" : "[N, C] or [N, C, L]",
         ", got shape ", x.shape());
  if (!is_floating(x.dtype())) fail(op, "expects a floating input, got ", x.dtype(), x.shape());
  if (!dim_is(x.size(1), c_))
    fail(op, "expects ", c_, " channels (dim 1), got input shape ", x.shape());

  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = c_;
  std::vector<int64_t> dims{0}, inner;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d), inner.push_back(d);
  // Values per channel, or -1 when a reduced dim is only known at run time.
  int64_t per = 1;
  for (int64_t d : dims) per = (per < 0 || x.size(d) < 0) ? -1 : per * x.size(d);
  // Mean over {0, 2, 3} as a mean over the contiguous spatial dims, then over the batch: the
  // same value (equal counts), and a strided reduction over {0, 2, 3} is far slower.
  auto channel_mean = [&](const Tensor& t) {
    return mean(inner.empty() ? t : mean(t, inner, true), {0}, true);
  };

  const bool use_batch = is_training() || !opts_.track_running_stats;
  Tensor centered, inv;
  if (use_batch) {
    const char* kFew = "expected more than 1 value per channel when training, got input shape ";
    if (per >= 0 && per <= 1) fail(op, kFew, x.shape());
    // A size known only at run time (a graph's dynamic batch) is checked when the graph runs.
    Tensor mu = channel_mean(per < 0 ? op_util::check_numel(x, dims, 2, op, kFew) : x);
    centered = sub(x, mu);
    Tensor v = channel_mean(mul(centered, centered));  // biased variance normalizes (PyTorch)
    inv = rsqrt(add(v, opts_.eps));
    if (is_training() && opts_.track_running_stats) {
      // running = (1 - m) running + m stat, with the unbiased variance; new tensors replace the
      // buffers (see the class comment).
      NoGradGuard ng;
      Tensor m1 = reshape(detach(mu), Shape{c_});
      Tensor vu = per >= 0 ? mul(detach(v), static_cast<double>(per) / static_cast<double>(per - 1))
                           : var(detach(x), dims, true, 1);
      Tensor v1 = reshape(vu, Shape{c_});
      const double m = opts_.momentum;
      DType bt = running_mean_.dtype();
      assign_buffer(running_mean_,
                    as_dtype(add(mul(running_mean_, 1.0 - m), mul(as_dtype(m1, bt), m)), bt));
      assign_buffer(running_var_,
                    as_dtype(add(mul(running_var_, 1.0 - m), mul(as_dtype(v1, bt), m)), bt));
      assign_buffer(num_batches_tracked_, add(num_batches_tracked_, scalar_tensor(1.0, Int64)));
    }
  } else {
    centered = sub(x, reshape(as_dtype(running_mean_, x.dtype()), bshape));
    inv = rsqrt(add(reshape(as_dtype(running_var_, x.dtype()), bshape), opts_.eps));
  }
  // The per-channel factors are folded first so the full-size tensor sees one mul and one add.
  Tensor scale = opts_.affine ? mul(inv, reshape(as_dtype(weight_, x.dtype()), bshape)) : inv;
  Tensor y = mul(centered, scale);
  if (opts_.affine) y = add(y, reshape(as_dtype(bias_, x.dtype()), bshape));
  return y;
}

// ---- LayerNorm ------------------------------------------------------------------------------

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  if (shape_.rank() == 0) fail("LayerNorm", "normalized_shape must have at least one dim");
  for (int64_t i = 0; i < shape_.rank(); ++i)
    if (shape_[i] <= 0) fail("LayerNorm", "normalized_shape must be positive, got ", shape_);
  if (!(eps > 0)) fail("LayerNorm", "eps must be positive, got ", eps);
  if (elementwise_affine) {
    weight_ = ones(shape_);
    bias_ = zeros(shape_);
    register_parameter("weight", &weight_);
    register_parameter("bias", &bias_);
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  require_defined("LayerNorm", x);
  int64_t k = shape_.rank();
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = dim_is(x.size(x.dim() - k + i), shape_[i]);
  if (!ok)
    fail("LayerNorm", "expects input [..., ", shape_, "] (normalized_shape), got shape ",
         x.shape());
  if (weight_.defined())
    require_dtype("LayerNorm", x, weight_);
  else if (!is_floating(x.dtype()))
    fail("LayerNorm", "expects a floating input, got ", x.dtype(), " ", x.shape());
  return layer_norm(x, shape_, weight_, bias_, eps_);
}

// ---- GroupNorm ------------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : groups_(num_groups), channels_(num_channels), eps_(eps) {
  require_positive("GroupNorm", "num_groups", num_groups);
  require_positive("GroupNorm", "num_channels", num_channels);
  if (num_channels % num_groups != 0)
    fail("GroupNorm", "num_channels (", num_channels, ") must be divisible by num_groups (",
         num_groups, ")");
  if (!(eps > 0)) fail("GroupNorm", "eps must be positive, got ", eps);
  if (affine) {
    weight_ = ones({num_channels});
    bias_ = zeros({num_channels});
    register_parameter("weight", &weight_);
    register_parameter("bias", &bias_);
  }
}

// Each group's channels and positions are one contiguous run of x [N, C, *]: normalizing the
// last dim of [N, G, (C / G) * positions] is layer_norm's fused kernel. (In graphs only the
// batch dim may be dynamic: the reshapes need the rest.)
Tensor GroupNorm::forward(const Tensor& x) {
  require_defined("GroupNorm", x);
  if (x.dim() < 2 || !dim_is(x.size(1), channels_))
    fail("GroupNorm", "expects input [N, C = ", channels_, ", *], got shape ", x.shape());
  if (weight_.defined())
    require_dtype("GroupNorm", x, weight_);
  else if (!is_floating(x.dtype()))
    fail("GroupNorm", "expects a floating input, got ", x.dtype(), " ", x.shape());
  int64_t per_group = channels_ / groups_;
  for (int64_t d = 2; d < x.dim(); ++d) {
    if (x.size(d) < 0)
      fail("GroupNorm", "needs static position dims, got shape ", x.shape(),
           " (only the batch dim may be dynamic)");
    per_group *= x.size(d);
  }
  Shape out_shape = x.shape();
  out_shape[1] = channels_;
  const Tensor g = reshape(x.contiguous(), {x.size(0), groups_, per_group});
  const Tensor y = reshape(layer_norm(g, Shape{per_group}, Tensor(), Tensor(), eps_), out_shape);
  if (!weight_.defined()) return y;
  Shape bshape{channels_};
  for (int64_t d = 2; d < x.dim(); ++d) bshape.push_back(1);
  return add(mul(y, reshape(as_dtype(weight_, x.dtype()), bshape)),
             reshape(as_dtype(bias_, x.dtype()), bshape));
}

// ---- Embedding ------------------------------------------------------------------------------

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_(num_embeddings), dim_(embedding_dim) {
  require_positive("Embedding", "num_embeddings", num_embeddings);
  require_positive("Embedding", "embedding_dim", embedding_dim);
  weight_ = empty({num_, dim_});
  init::normal_(weight_);
  register_parameter("weight", &weight_);
}

Tensor Embedding::forward(const Tensor& indices) {
  require_defined("Embedding", indices);
  if (indices.dtype() != Int64 && indices.dtype() != Int32)
    fail("Embedding", "expects int64 or int32 indices, got ", indices.dtype(), " ", indices.shape(),
         " (table [", num_, ", ", dim_, "])");
  return embedding(weight_, indices);
}

// ---- Dropout and activations ----------------------------------------------------------------

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0 && p <= 1)) fail("Dropout", "p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  require_defined("Dropout", x);
  return dropout(x, p_, is_training());
}

Tensor ReLU::forward(const Tensor& x) {
  require_defined("ReLU", x);
  return relu(x);
}
Tensor GELU::forward(const Tensor& x) {
  require_defined("GELU", x);
  return gelu(x, approximate_);
}
Tensor Tanh::forward(const Tensor& x) {
  require_defined("Tanh", x);
  return tanh(x);
}
Tensor Sigmoid::forward(const Tensor& x) {
  require_defined("Sigmoid", x);
  return sigmoid(x);
}

Tensor SiLU::forward(const Tensor& x) {
  require_defined("SiLU", x);
  return silu(x);
}
Tensor LeakyReLU::forward(const Tensor& x) {
  require_defined("LeakyReLU", x);
  return leaky_relu(x, slope_);
}
Tensor ELU::forward(const Tensor& x) {
  require_defined("ELU", x);
  return elu(x, alpha_);
}
Tensor Softplus::forward(const Tensor& x) {
  require_defined("Softplus", x);
  return softplus(x, beta_, thr_);
}

Tensor Flatten::forward(const Tensor& x) {
  require_defined("Flatten", x);
  int64_t r = std::max<int64_t>(x.dim(), 1);
  int64_t s = start_ < 0 ? start_ + r : start_, e = end_ < 0 ? end_ + r : end_;
  if (s < 0 || s >= r || e < 0 || e >= r || s > e)
    fail("Flatten", "dims ", start_, "..", end_, " are out of range for input shape ", x.shape());
  return flatten(x, start_, end_);
}

// ---- Sequential -----------------------------------------------------------------------------

Sequential::Sequential(std::initializer_list<std::shared_ptr<Layer>> layers) {
  for (const auto& l : layers) push_back(l);
}

void Sequential::push_back(std::shared_ptr<Layer> layer) {
  if (!layer) fail("Sequential", "cannot add a null layer at index ", layers_.size());
  register_module(std::to_string(layers_.size()), layer.get());
  layer->train(is_training());
  layers_.push_back(std::move(layer));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    try {
      h = layers_[i]->forward(h);
    } catch (const Error& e) {
      // Say where in the stack the bad shape met its layer.
      throw Error(
          str_cat(e.what(), " (in Sequential layer ", i, ", ", layers_[i]->type_name(), ")"));
    }
  }
  return h;
}

const std::shared_ptr<Layer>& Sequential::at(size_t i) const {
  if (i >= layers_.size())
    fail("Sequential", "index ", i, " is out of range for ", layers_.size(), " layers");
  return layers_[i];
}

Layer& Sequential::operator[](size_t i) const { return *at(i); }

void ModuleList::push_back(std::shared_ptr<Module> m) {
  if (!m) fail("ModuleList", "cannot add a null module at index ", modules_.size());
  register_module(std::to_string(modules_.size()), m.get());
  m->train(is_training());
  modules_.push_back(std::move(m));
}

Module& ModuleList::operator[](size_t i) const {
  if (i >= modules_.size())
    fail("ModuleList", "index ", i, " is out of range for ", modules_.size(), " modules");
  return *modules_[i];
}

}  // namespace kiln::nn
