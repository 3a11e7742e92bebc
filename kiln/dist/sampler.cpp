// DistributedSampler: a Fisher-Yates permutation from io's SplitMix64 seeded by (seed, epoch),
// padded or cut to a multiple of the ranks, then every replicas-th index from this rank's.
#include "kiln/dist/sampler.h"

#include <numeric>

#include "kiln/core/error.h"
#include "kiln/dist/dist.h"
#include "kiln/io/rng.h"

namespace kiln::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : n_(dataset_size), opt_(options) {
  replicas_ = opt_.num_replicas < 0 ? world_size() : opt_.num_replicas;
  rank_ = opt_.rank < 0 ? rank() : opt_.rank;
  if (n_ < 0) fail("DistributedSampler", "dataset_size must be >= 0, got ", n_);
  if (replicas_ < 1) fail("DistributedSampler", "num_replicas must be >= 1, got ", replicas_);
  if (rank_ >= replicas_)
    fail("DistributedSampler", "rank ", rank_, " is not below num_replicas ", replicas_);
  num_samples_ = opt_.drop_last ? n_ / replicas_ : (n_ + replicas_ - 1) / replicas_;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  if (epoch < 0) fail("DistributedSampler", "epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> perm(static_cast<size_t>(n_));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  if (opt_.shuffle) {
    io::SplitMix64 g(io::mix_seed(opt_.seed, static_cast<uint64_t>(epoch_)));
    for (int64_t i = n_ - 1; i > 0; --i)
      std::swap(perm[static_cast<size_t>(i)],
                perm[static_cast<size_t>(g.below(static_cast<uint64_t>(i + 1)))]);
  }
  const int64_t total = total_size();
  // Padding repeats the permutation from its start (more than once for tiny data sets).
  for (int64_t i = n_; i < total && n_ > 0; ++i) perm.push_back(perm[static_cast<size_t>(i - n_)]);
  perm.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(perm[static_cast<size_t>(i)]);
  return mine;
}

Tensor DistributedSampler::indices_tensor() const {
  std::vector<int64_t> v = indices();
  if (v.empty()) return zeros({0}, Int64);
  return tensor(v);
}

}  // namespace kiln::dist
