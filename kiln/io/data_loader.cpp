// DataLoader: an epoch plan (a permutation drawn from seed and epoch) and batch assembly.
#include "kiln/io/data_loader.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/io/rng.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::io {

DataLoader::DataLoader(std::vector<Tensor> tensors, int64_t batch_size, bool shuffle,
                       bool drop_last, uint64_t seed)
    : tensors_(std::move(tensors)),
      batch_size_(batch_size),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  if (tensors_.empty()) fail("DataLoader", "needs at least one tensor");
  if (batch_size <= 0) fail("DataLoader", "batch_size must be positive, got ", batch_size);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (!t.defined() || !t.is_concrete())
      fail("DataLoader", "tensor ", i, " must be a concrete tensor");
    if (t.dim() < 1)
      fail("DataLoader", "tensor ", i, " must have at least one dim (samples along dim 0)");
    if (i > 0 && t.size(0) != n_)
      fail("DataLoader", "tensors disagree on dim 0: tensor 0 has shape ", tensors_[0].shape(),
           ", tensor ", i, " has shape ", t.shape());
    if (i == 0) n_ = t.size(0);
  }
  plan(0);
}

int64_t DataLoader::size() const {
  // Not (n + b - 1) / b: that overflows for batch sizes near 2^63.
  return n_ / batch_size_ + (!drop_last_ && n_ % batch_size_ != 0 ? 1 : 0);
}

void DataLoader::set_epoch(int64_t e) {
  // begin() counts the epoch as e + 1.
  if (e < 0 || e == std::numeric_limits<int64_t>::max())
    fail("DataLoader", "epoch must be in [0, 2^63 - 1), got ", e);
  next_epoch_ = e;
}

void DataLoader::plan(int64_t epoch) {
  order_.resize(static_cast<size_t>(n_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_) return;
  // Fisher-Yates with a generator seeded from (seed, epoch): each epoch's order depends on
  // nothing else, so set_epoch() reproduces it.
  SplitMix64 g(mix_seed(seed_, static_cast<uint64_t>(epoch)));
  for (int64_t i = n_ - 1; i > 0; --i)
    std::swap(order_[static_cast<size_t>(i)],
              order_[static_cast<size_t>(g.below(static_cast<uint64_t>(i) + 1))]);
  order_t_ = n_ > 0 ? tensor(order_) : empty({0}, Int64);
}

DataLoader::Iterator DataLoader::begin() {
  if (next_epoch_ == std::numeric_limits<int64_t>::max())
    fail("DataLoader", "epoch counter would overflow after ", epoch_, " epochs");
  plan(next_epoch_);
  epoch_ = next_epoch_ + 1;
  next_epoch_ = epoch_;
  return Iterator(this, 0);
}

std::vector<Tensor> DataLoader::batch(int64_t i) const {
  if (i < 0 || i >= size())
    fail("DataLoader", "batch index ", i, " is out of range [0, ", size(), ")");
  const int64_t start = i * batch_size_;
  const int64_t len = std::min(batch_size_, n_ - start);
  NoGradGuard ng;  // data batches are inputs, not part of any model's graph
  std::vector<Tensor> out;
  out.reserve(tensors_.size());
  for (const Tensor& t : tensors_) {
    if (shuffle_)
      out.push_back(index_select(t, 0, order_t_.narrow(0, start, len)));
    else
      out.push_back(t.narrow(0, start, len));
  }
  return out;
}

}  // namespace kiln::io
