// DistributedSampler (torch.utils.data.distributed.DistributedSampler): splits a data set's
// indices into one disjoint shard per rank, reshuffled every epoch from (seed, epoch) alone, so
// every rank draws the same permutation without communicating.
#pragma once
#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::dist {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  /// Drop the tail so that every rank gets floor(n / ranks) samples; otherwise the permutation
  /// is padded with its own first indices to ceil(n / ranks) per rank (as PyTorch).
  bool drop_last = false;
  /// -1: world_size() and rank() of the process group.
  int num_replicas = -1;
  int rank = -1;
};

class DistributedSampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, SamplerOptions options = {});
  /// The epoch whose permutation indices() gives (call before each epoch, as PyTorch).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  /// This rank's sample indices for the current epoch: num_samples() of them.
  std::vector<int64_t> indices() const;
  /// The same as an int64 tensor, for index_select.
  Tensor indices_tensor() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * replicas_; }

 private:
  int64_t n_;
  SamplerOptions opt_;
  int replicas_, rank_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace kiln::dist
