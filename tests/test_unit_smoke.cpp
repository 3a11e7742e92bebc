// Smoke test of the core path: tensors, an op, autograd.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

TEST(Smoke, AddAndBackward) {
  Tensor a = tensor({1.f, 2.f, 3.f}).requires_grad_();
  Tensor b = tensor({4.f, 5.f, 6.f});
  Tensor c = (a * b + a).sum();
  EXPECT_FLOAT_EQ(c.item<float>(), 1 * 4 + 2 * 5 + 3 * 6 + 6);
  c.backward();
  auto g = a.grad().to_vector<float>();
  EXPECT_FLOAT_EQ(g[0], 5);
  EXPECT_FLOAT_EQ(g[2], 7);
}
