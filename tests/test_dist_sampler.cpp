// DistributedSampler without a launcher (explicit num_replicas and rank): the shards of one epoch
// are disjoint and cover the data set (padded or cut as PyTorch), every rank draws the same
// permutation from (seed, epoch), and epochs differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiln/dist/sampler.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int replicas, dist::SamplerOptions o,
                                         int64_t epoch) {
  std::vector<std::vector<int64_t>> v;
  for (int r = 0; r < replicas; ++r) {
    o.num_replicas = replicas;
    o.rank = r;
    dist::DistributedSampler s(n, o);
    s.set_epoch(epoch);
    v.push_back(s.indices());
  }
  return v;
}

TEST(DistSampler, ShardsAreDisjointAndCoverTheData) {
  for (int64_t n : {10, 11, 3}) {
    for (int replicas : {1, 2, 3, 4}) {
      auto sh = shards(n, replicas, {.seed = 5}, 0);
      const int64_t per = (n + replicas - 1) / replicas;
      std::multiset<int64_t> all;
      for (const auto& s : sh) {
        EXPECT_EQ(static_cast<int64_t>(s.size()), per);
        all.insert(s.begin(), s.end());
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << n << " " << replicas;
      // Padding repeats only as many indices as the ranks need to come out even.
      EXPECT_EQ(static_cast<int64_t>(all.size()), per * replicas);
    }
  }
}

TEST(DistSampler, DropLastCutsTheTail) {
  auto sh = shards(11, 3, {.seed = 5, .drop_last = true}, 2);
  std::set<int64_t> all;
  for (const auto& s : sh) {
    EXPECT_EQ(s.size(), 3u);
    all.insert(s.begin(), s.end());
  }
  EXPECT_EQ(all.size(), 9u);  // disjoint: no index twice
}

TEST(DistSampler, EpochsReshuffleAndSeedsReproduce) {
  auto e0 = shards(100, 2, {.seed = 1}, 0);
  auto e0b = shards(100, 2, {.seed = 1}, 0);
  auto e1 = shards(100, 2, {.seed = 1}, 1);
  auto other = shards(100, 2, {.seed = 2}, 0);
  EXPECT_EQ(e0, e0b);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other);
  auto plain = shards(6, 2, {.shuffle = false}, 3);
  EXPECT_EQ(plain[0], (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(plain[1], (std::vector<int64_t>{1, 3, 5}));
  dist::DistributedSampler s(5, {.num_replicas = 2, .rank = 1});
  EXPECT_EQ(s.num_samples(), 3);
  EXPECT_EQ(s.total_size(), 6);
  EXPECT_EQ(s.indices_tensor().to_vector<int64_t>(), s.indices());
}

TEST(DistSampler, BadArgumentsRaise) {
  expect_error([] { dist::DistributedSampler s(-1); }, {"[DistributedSampler]", "dataset_size"});
  expect_error([] { dist::DistributedSampler s(4, {.num_replicas = 2, .rank = 2}); },
               {"[DistributedSampler]", "rank 2"});
  expect_error([] { dist::DistributedSampler s(4, {.num_replicas = 0}); },
               {"[DistributedSampler]", "num_replicas"});
  dist::DistributedSampler s(4);  // the process group: a world of one here
  EXPECT_EQ(s.indices().size(), 4u);
  expect_error([&] { s.set_epoch(-1); }, {"[DistributedSampler]", "epoch"});
}

}  // namespace
