// DataLoader over in-memory tensors (torch.utils.data.DataLoader over a TensorDataset): batches
// along dim 0, optionally reshuffled each epoch from a seed, for range-for training loops.
#pragma once
#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// Iterates over mini-batches of several tensors that share dim 0 (e.g. images and labels):
///
///   DataLoader dl({images, labels}, 128, /*shuffle=*/true, /*drop_last=*/false, /*seed=*/1);
///   for (int e = 0; e < epochs; ++e)
///     for (const std::vector<Tensor>& b : dl) step(b[0], b[1]);
///
/// Each begin() starts a new epoch (epoch() counts them). With shuffle, epoch e visits the
/// samples in a permutation drawn from (seed, e) alone, so runs are reproducible and every epoch
/// has a different order; batches are index_select copies. Without shuffle, batches are views
/// (contiguous slices along dim 0) in order. The last batch is smaller unless drop_last.
/// Nested or concurrent iteration of one loader is not supported: a new begin() re-plans.
class DataLoader {
 public:
  /// `tensors`: concrete tensors with at least one dim and equal size(0). batch_size > 0.
  DataLoader(std::vector<Tensor> tensors, int64_t batch_size, bool shuffle = false,
             bool drop_last = false, uint64_t seed = 0);

  /// Number of batches per epoch.
  int64_t size() const;
  /// Number of samples (size(0) of every tensor).
  int64_t num_samples() const { return n_; }
  int64_t batch_size() const { return batch_size_; }
  /// Epochs started so far (0 before the first begin()).
  int64_t epoch() const { return epoch_; }
  /// Makes the next begin() start epoch `e` (as DistributedSampler.set_epoch), e >= 0.
  void set_epoch(int64_t e);
  /// Batch i (0 <= i < size()) of the current epoch (of epoch 0's order before any begin()).
  std::vector<Tensor> batch(int64_t i) const;
  /// The sample order of the current epoch (identity when not shuffling).
  const std::vector<int64_t>& order() const { return order_; }

  class Iterator {
   public:
    std::vector<Tensor> operator*() const { return dl_->batch(i_); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* dl, int64_t i) : dl_(dl), i_(i) {}
    const DataLoader* dl_;
    int64_t i_;
  };
  /// Starts the next epoch (reshuffling when enabled) and returns its first batch.
  Iterator begin();
  Iterator end() const { return Iterator(this, size()); }

 private:
  void plan(int64_t epoch);
  std::vector<Tensor> tensors_;
  int64_t n_ = 0;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t epoch_ = 0;       // epochs started
  int64_t next_epoch_ = 0;  // the epoch the next begin() plans
  std::vector<int64_t> order_;
  Tensor order_t_;  // order_ as an int64 tensor for index_select
};

}  // namespace kiln::io
