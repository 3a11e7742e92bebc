// Standard layers (torch.nn): Linear, Conv2d, pooling, BatchNorm, LayerNorm, Embedding, Dropout,
// activations, Flatten and Sequential. Each forward is written with the public Kiln ops, so a
// layer runs eagerly, while building a static Graph and under kiln::jit alike; parameters and
// buffers are members registered with the Module base, so ParameterSwap can replace them.
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

/// y = x W^T + b over the last dim. W [out, in] and b [out] start as in PyTorch:
/// U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

/// 2-D convolution over [N, C, H, W] (or unbatched [C, H, W]); weight [out, in/groups, kH, kW],
/// PyTorch's default initialization. Kernel, stride, padding and dilation take 1 value (square)
/// or 2.
class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         Conv2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  int64_t in_, out_;
  std::vector<int64_t> kernel_;
  Conv2dOptions opts_;
  Tensor weight_, bias_;
};

struct ConvTranspose2dOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};
  std::vector<int64_t> output_padding{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

/// Transposed 2-D convolution (torch.nn.ConvTranspose2d): weight [in, out/groups, kH, kW],
/// PyTorch's default initialization; upsamples by the stride.
class ConvTranspose2d : public Layer {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
                  ConvTranspose2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose2d"; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  int64_t in_, out_;
  ConvTranspose2dOptions opts_;
  Tensor weight_, bias_;
};

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

/// 1-D convolution over [N, C, L] (or unbatched [C, L]); weight [out, in/groups, kernel],
/// PyTorch's default initialization.
class Conv1d : public Layer {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv1d"; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  int64_t in_, out_;
  Conv1dOptions opts_;
  Tensor weight_, bias_;
};

/// Average pooling of [N, C, H, W] or [C, H, W] to a fixed output size (1 or 2 values).
class AdaptiveAvgPool2d : public Layer {
 public:
  explicit AdaptiveAvgPool2d(std::vector<int64_t> output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }

 private:
  std::vector<int64_t> size_;
};

/// Max pooling over [N, C, H, W] or [C, H, W]; stride defaults to the kernel.
class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                     std::vector<int64_t> padding = {0, 0});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  std::vector<int64_t> kernel_, stride_, padding_;
};

/// Average pooling over [N, C, H, W] or [C, H, W]; stride defaults to the kernel.
class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                     std::vector<int64_t> padding = {0, 0});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  std::vector<int64_t> kernel_, stride_, padding_;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

/// Batch normalization over every dim but the channel dim 1 (torch.nn.BatchNorm*d). Training
/// normalizes with the batch's biased variance and moves the running statistics towards the
/// batch's mean and unbiased variance; eval normalizes with the running statistics. The update
/// is functional: new running tensors are computed with ops and the buffer members are
/// reassigned (never written in place), so a jitted step that swaps buffers in with
/// ParameterSwap can return the new ones.
class BatchNorm : public Layer {
 public:
  Tensor forward(const Tensor& x) override;
  int64_t num_features() const { return c_; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }
  Tensor& running_mean() { return running_mean_; }
  Tensor& running_var() { return running_var_; }
  Tensor& num_batches_tracked() { return num_batches_tracked_; }

 protected:
  /// Accepted input ranks (BatchNorm1d: 2 or 3; BatchNorm2d: 4).
  BatchNorm(int64_t num_features, BatchNormOptions opts, std::vector<int64_t> ranks);

 private:
  int64_t c_;
  BatchNormOptions opts_;
  std::vector<int64_t> ranks_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

/// Over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions opts = {})
      : BatchNorm(num_features, opts, {2, 3}) {}
  std::string type_name() const override { return "BatchNorm1d"; }
};

/// Over [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions opts = {})
      : BatchNorm(num_features, opts, {4}) {}
  std::string type_name() const override { return "BatchNorm2d"; }
};

/// Normalizes over the trailing `normalized_shape` dims, with an elementwise affine map
/// (weight ones, bias zeros) unless disabled.
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  Shape shape_;
  double eps_;
  Tensor weight_, bias_;
};

/// torch.nn.GroupNorm: x [N, C, *] normalized over each group of C / num_groups channels and
/// all positions (biased variance), then a per-channel affine map (weight ones, bias zeros)
/// unless disabled. num_groups = C is instance norm, 1 is a layer norm over [C, *].
class GroupNorm : public Layer {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GroupNorm"; }
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  int64_t groups_, channels_;
  double eps_;
  Tensor weight_, bias_;
};

/// A lookup table [num_embeddings, embedding_dim], N(0, 1) at start; integer indices of any
/// shape give indices.shape + [embedding_dim].
class Embedding : public Layer {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  Tensor& weight() { return weight_; }

 private:
  int64_t num_, dim_;
  Tensor weight_;
};

/// Zeroes elements with probability p while training (scaling the rest by 1/(1-p)); the
/// identity in eval mode.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }

 private:
  double p_;
};

class ReLU : public Layer {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Layer {
 public:
  /// approximate: the tanh form.
  explicit GELU(bool approximate = false) : approximate_(approximate) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }

 private:
  bool approximate_;
};

class Tanh : public Layer {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public Layer {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

class SiLU : public Layer {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SiLU"; }
};

class LeakyReLU : public Layer {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LeakyReLU"; }

 private:
  double slope_;
};

class ELU : public Layer {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ELU"; }

 private:
  double alpha_;
};

class Softplus : public Layer {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta_(beta), thr_(threshold) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Softplus"; }

 private:
  double beta_, thr_;
};

/// Flattens dims start_dim..end_dim (default: all but the batch dim).
class Flatten : public Layer {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

/// Runs its layers in order. Children are named "0", "1", ... so parameters read "0.weight".
class Sequential : public Layer {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Layer>> layers);
  /// Appends a layer (registered as child number size()).
  void push_back(std::shared_ptr<Layer> layer);
  /// Constructs a layer in place and appends it.
  template <typename L, typename... A>
  std::shared_ptr<L> emplace_back(A&&... args) {
    auto l = std::make_shared<L>(std::forward<A>(args)...);
    push_back(l);
    return l;
  }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return layers_.size(); }
  /// Layer i (kiln::Error when out of range).
  Layer& operator[](size_t i) const;
  const std::shared_ptr<Layer>& at(size_t i) const;

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

/// Holds child modules of any type in order, registered as "0", "1", ... (torch.nn.ModuleList):
/// their parameters, buffers and train/eval follow the parent; calling them is up to the owner.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  /// Appends a module (registered as child number size()).
  void push_back(std::shared_ptr<Module> m);
  /// Constructs a module in place and appends it.
  template <typename M, typename... A>
  std::shared_ptr<M> emplace_back(A&&... args) {
    auto m = std::make_shared<M>(std::forward<A>(args)...);
    push_back(m);
    return m;
  }
  std::string type_name() const override { return "ModuleList"; }
  size_t size() const { return modules_.size(); }
  /// Module i (kiln::Error when out of range).
  Module& operator[](size_t i) const;
  /// Module i as an M (kiln::Error when out of range or of another type).
  template <typename M>
  M& get(size_t i) const {
    M* m = dynamic_cast<M*>(&(*this)[i]);
    if (!m)
      fail("ModuleList", "module ", i, " is a ", (*this)[i].type_name(), ", not the type asked");
    return *m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace kiln::nn
