// The autograd engine's grad-ready hooks (kiln/autograd/grad_ready.h), which data-parallel
// training starts bucket all-reduces from: a leaf fires once, after its last contribution, with
// its final .grad(); grad() fires nothing; end() reports success or failure; removal works.
#include <gtest/gtest.h>

#include "kiln/autograd/grad_ready.h"
#include "test_util.h"

using namespace kiln;

namespace {

struct Log {
  std::vector<std::pair<TensorImpl*, double>> ready;  // leaf, its grad's first element then
  int begins = 0;
  std::vector<bool> ends;
};

int install(Log& log) {
  detail::GradReadyHooks h;
  h.begin = [&log] { ++log.begins; };
  h.leaf_ready = [&log](const std::shared_ptr<TensorImpl>& leaf) {
    Tensor g = Tensor(leaf).grad();
    log.ready.emplace_back(leaf.get(), g.to(Float64).to_vector<double>()[0]);
  };
  h.end = [&log](bool ok) { log.ends.push_back(ok); };
  return detail::add_grad_ready_hooks(std::move(h));
}

TEST(GradReady, LeafFiresOnceAfterEveryContribution) {
  Log log;
  int id = install(log);
  Tensor a = full({2}, 2.0, Float64).requires_grad_();
  Tensor b = full({2}, 3.0, Float64).requires_grad_();
  // a is used twice (a*b and a*a): it is ready only after both gradients arrived.
  Tensor y = add(mul(a, b), mul(a, a)).sum();
  y.backward();
  ASSERT_EQ(log.ready.size(), 2u);
  for (const auto& [leaf, g0] : log.ready) {
    EXPECT_TRUE(leaf == a.impl() || leaf == b.impl());
    EXPECT_DOUBLE_EQ(g0, leaf == a.impl() ? 3.0 + 4.0 : 2.0);  // a: b + 2a, both contributions
  }
  EXPECT_EQ(log.begins, 1);
  EXPECT_EQ(log.ends, std::vector<bool>{true});
  // Accumulation across backward passes: the hook sees the accumulated value.
  log.ready.clear();
  mul(b, 5.0).sum().backward();
  ASSERT_EQ(log.ready.size(), 1u);
  EXPECT_EQ(log.ready[0].first, b.impl());
  EXPECT_DOUBLE_EQ(log.ready[0].second, 7.0);
  detail::remove_grad_ready_hooks(id);
}

TEST(GradReady, GradDoesNotFireAndRemovalStopsHooks) {
  Log log;
  int id = install(log);
  Tensor a = full({3}, 1.5).requires_grad_();
  std::vector<Tensor> g = grad({mul(a, a).sum()}, {a});
  EXPECT_FLOAT_EQ(g[0].to_vector<float>()[0], 3.f);
  EXPECT_TRUE(log.ready.empty());
  EXPECT_EQ(log.begins, 0);
  detail::remove_grad_ready_hooks(id);
  mul(a, a).sum().backward();
  EXPECT_TRUE(log.ready.empty());
  EXPECT_TRUE(log.ends.empty());
}

TEST(GradReady, EndReportsAFailedBackward) {
  Log log;
  int id = install(log);
  Tensor a = full({2}, 1.0).requires_grad_();
  Tensor y = mul(a, a).sum();
  y.backward();
  EXPECT_THROW(y.backward(), Error);  // the graph was freed
  EXPECT_EQ(log.ends, (std::vector<bool>{true, false}));
  detail::remove_grad_ready_hooks(id);
}

}  // namespace
