// The 200 random fused graphs through generated code (each a cold compile, about 0.5 s: slow).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kiln/codegen/codegen.h"
#include "random_graphs.h"

using namespace kiln::detail;

namespace {
using namespace kiln;

TEST(CodegenSlow, TwoHundredRandomGraphsEagerInterpreterAndGeneratedCodeAgree) {
  std::string dir = std::filesystem::temp_directory_path().string() + "/kiln_cg_slow_" +
                    std::to_string(::getpid());
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  if (!codegen::enabled()) GTEST_SKIP() << "no compiler: " << codegen::stats().last_error;
  codegen::set_async(false);  // every graph checks its generated code, from the first call
  kiln::testing::run_random_graphs(200, true);
  EXPECT_GE(codegen::stats().compiles, 150);
  std::filesystem::remove_all(dir);
}

}  // namespace
