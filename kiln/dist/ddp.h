// Data-parallel training of an nn::Module, as PyTorch's DistributedDataParallel: every rank holds
// a replica, trains on its shard of each global batch, and backward() leaves every parameter's
// .grad() averaged over the ranks before optimizer.step(). Gradients travel in buckets of about
// 25 MB; a bucket's all-reduce starts on the communication thread as soon as its last gradient is
// final, while backward computes the rest.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/dist/dist.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

struct DDPOptions {
  /// Bucket size in MiB (PyTorch's bucket_cap_mb); one parameter larger than it has a bucket
  /// of its own.
  double bucket_cap_mb = 25.0;
  /// Start each bucket's all-reduce during backward (true), or all of them after it (false: for
  /// measuring what the overlap buys).
  bool overlap = true;
  /// Broadcast rank 0's buffers (BatchNorm's running statistics) at construction too.
  bool broadcast_buffers = true;
};

class DistributedDataParallel {
 public:
  /// Checks that every rank's module has the same parameters (names, shapes, dtypes; a
  /// mismatch raises on every rank, naming the first differing parameter and the ranks), then
  /// copies rank 0's parameters (and buffers) to every rank. Collective: every rank constructs
  /// it at the same point. The module must outlive the wrapper.
  explicit DistributedDataParallel(nn::Module& module, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() const { return module_; }

  /// While a NoSync lives, backward() only accumulates gradients locally (gradient
  /// accumulation); the first backward after it averages the accumulated gradients.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(&d), prev_(d.no_sync_) { d.no_sync_ = true; }
    ~NoSync() {
      if (d_) d_->no_sync_ = prev_;
    }
    NoSync(NoSync&& o) noexcept : d_(o.d_), prev_(o.prev_) { o.d_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DistributedDataParallel* d_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  void set_overlap(bool on) { options_.overlap = on; }
  bool overlap() const { return options_.overlap; }

  /// The functional form, for training steps written with kiln::grad (and jitted ones):
  /// `grads[i]` is the gradient of parameters()[i]; each is replaced by its mean over the ranks,
  /// bucket by bucket. On symbolic gradients (under jit or in a graph) it adds one all_reduce
  /// node per bucket (a side effect the passes keep in order); on concrete ones it reduces now.
  /// An undefined gradient counts as zeros.
  void average_gradients(std::vector<Tensor>& grads) const;

  /// Parameter indices (parameters() order) per bucket, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const { return bucket_params_; }
  /// Buckets whose all-reduce started before backward's last gradient was final, over the
  /// wrapper's life (what the overlap switch changes; tests read it).
  int64_t buckets_started_during_backward() const { return started_early_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
    DType dtype = Float32;
    int64_t numel = 0;
  };
  void check_replicas() const;
  void on_leaf_ready(const std::shared_ptr<TensorImpl>& leaf);
  void on_end(bool ok);
  void launch_ready();
  void launch(size_t b);
  void finish(size_t b);

  nn::Module& module_;
  DDPOptions options_;
  std::vector<Tensor> params_;
  std::unordered_map<const TensorImpl*, size_t> index_of_;  // the hook's leaf -> parameter
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> bucket_params_;
  std::vector<size_t> bucket_of_;
  int hooks_id_ = 0;
  bool no_sync_ = false;
  // One backward pass's state.
  bool active_ = false;
  std::vector<char> param_ready_;
  std::vector<int> pending_;
  std::vector<Tensor> flat_;
  std::vector<Work> work_;
  size_t next_launch_ = 0;
  int64_t started_early_ = 0;
};

using DDP = DistributedDataParallel;

}  // namespace kiln::dist
