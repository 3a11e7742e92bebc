// Helpers shared by the test files: checking that bad input raises kiln::Error with a message
// that names the op and what went wrong.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

// Not kiln::testing: with `using namespace kiln` that would make gtest's `testing::` ambiguous.
namespace kiln_test {

// Largest absolute elementwise difference; infinity when the shapes differ.
inline double max_diff(const kiln::Tensor& a, const kiln::Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  auto x = kiln::contiguous(a).to_vector<double>(), y = kiln::contiguous(b).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

// Runs f once and expects a kiln::Error whose message contains every part. Returns the message
// ("" when nothing was thrown) for checks beyond substrings. Runs f only once because graph and
// session callers may change state on the way to the error.
inline std::string expect_error(const std::function<void()>& f,
                                const std::vector<std::string>& parts = {}) {
  try {
    f();
  } catch (const kiln::Error& e) {
    std::string m = e.what();
    for (const auto& p : parts)
      EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    return m;
  } catch (...) {
    ADD_FAILURE() << "threw something other than kiln::Error; expected one naming "
                  << (parts.empty() ? "" : parts[0]);
    return "";
  }
  ADD_FAILURE() << "no kiln::Error; expected one naming " << (parts.empty() ? "" : parts[0]);
  return "";
}

// For one op's bad input: the message must start with "[op]" and contain every part. f runs
// twice so that a first failure which left bad state behind (a half-updated buffer, a leaked
// guard) shows up as a different second outcome; afterwards grad mode must be on and plain ops
// must still compute. Returns the message of the second run.
inline std::string expect_error(const std::function<void()>& f, const std::string& op,
                                const std::vector<std::string>& parts) {
  EXPECT_THROW(f(), kiln::Error) << "[" << op << "]";
  std::string m;
  try {
    f();
    ADD_FAILURE() << "no kiln::Error from [" << op << "] on the second run";
  } catch (const kiln::Error& e) {
    m = e.what();
    EXPECT_EQ(m.rfind("[" + op + "]", 0), 0u)
        << "message does not start with [" << op << "]: " << m;
    for (const auto& p : parts)
      EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  } catch (...) {
    ADD_FAILURE() << "[" << op << "] threw something other than kiln::Error";
  }
  EXPECT_TRUE(kiln::grad_mode_enabled()) << "grad mode left off by [" << op << "]";
  kiln::Tensor a = kiln::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  EXPECT_EQ((a + a.t()).sum().item<float>(), 20.f) << "plain ops broken after [" << op << "]";
  return m;
}

}  // namespace kiln_test
