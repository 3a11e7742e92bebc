// Smoke test of the core path: tensors, an op, autograd.
#include <gtest/gtest.h>

#include "kiln/dispatch/profile.h"
#include "kiln/kiln.h"
#include "kiln/registry/op_def.h"

using namespace kiln::detail;

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

// KILN_PROFILE's table: self time per op, largest first. The recording functions work whether or
// not the variable was set, so the table is checked directly.
TEST(Profile, ReportsCallsAndSelfTimePerOp) {
  profile_reset();
  const OpDef* add_op = OpRegistry::get().find("add");
  const OpDef* mm = OpRegistry::get().find("matmul");
  ASSERT_TRUE(add_op && mm);
  profile_record(*add_op, 0.001);
  profile_record(*add_op, 0.003);
  profile_record(*mm, 0.010);
  std::string r = profile_report();
  EXPECT_NE(r.find("matmul"), std::string::npos) << r;
  EXPECT_LT(r.find("matmul"), r.find("add")) << "largest first\n" << r;
  EXPECT_NE(r.find("2000.00"), std::string::npos) << "add: 2 calls, 2000 us each\n" << r;
  EXPECT_NE(r.find("14.000"), std::string::npos) << "total ms\n" << r;
  profile_reset();
  EXPECT_EQ(profile_report().find("matmul"), std::string::npos);
}
