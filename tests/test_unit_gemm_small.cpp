// The ahead-of-time small GEMM (kernels/cpu/gemm_small) against a float64 loop: every layout of
// op(A) and op(B), leading dims wider than the matrix, alpha/beta, beta = 0 over NaN, sizes
// around the 16-float blocks and the 4-row blocks, and the dispatch through kiln::sgemm.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/gemm_small.h"

namespace {

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
};

// Fills op(A) [m,k] and op(B) [k,n] stored with 3 extra columns of padding per row.
void check(const Case& cs, void (*gemm)(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                        int64_t, const float*, int64_t, float, float*, int64_t)) {
  const auto [m, n, k, ta, tb, alpha, beta] = cs;
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  const int64_t lda = ac + 3, ldb = bc + 3, ldc = n + 3;
  std::vector<float> a(ar * lda), b(br * ldb), c(m * ldc);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * i + 0.1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.23 * i + 0.2);
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = beta == 0 ? std::numeric_limits<float>::quiet_NaN() : std::sin(0.11 * i);
  const std::vector<float> c0 = c;
  gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < k; ++p)
        ref += double(ta ? a[p * lda + i] : a[i * lda + p]) *
               double(tb ? b[j * ldb + p] : b[p * ldb + j]);
      ref = alpha * ref + (beta == 0 ? 0.0 : beta * double(c0[i * ldc + j]));
      ASSERT_NEAR(c[i * ldc + j], ref, 1e-5 * (1 + std::abs(ref)) * std::sqrt(double(k) + 1))
          << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb
          << " alpha=" << alpha << " beta=" << beta << " at (" << i << ", " << j << ")";
    }
  // The padding past each row of C is never written.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n; j < ldc; ++j) {
      const float x = c[i * ldc + j], y = c0[i * ldc + j];
      ASSERT_TRUE((std::isnan(x) && std::isnan(y)) || x == y) << "wrote past row " << i;
    }
}

}  // namespace

TEST(GemmSmall, MatchesFloat64OverLayoutsAndEdges) {
  int cases = 0;
  for (int64_t m : {1, 2, 3, 4, 5, 9})
    for (int64_t n : {1, 7, 16, 17, 33})
      for (int64_t k : {0, 1, 15, 16, 40})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            check({m, n, k, ta, tb, 1.f, 0.f}, kiln::sgemm_small);
            check({m, n, k, ta, tb, -0.5f, 2.f}, kiln::sgemm_small);
            cases += 2;
          }
  EXPECT_EQ(cases, 6 * 5 * 5 * 4 * 2);
}

TEST(GemmSmall, SgemmDispatchAgreesOnBothSidesOfTheThreshold) {
  // 32x32x32 = 32768 multiply-adds is the largest small product; 32x32x33 goes to the library.
  for (int64_t k : {32, 33})
    for (bool tb : {false, true}) {
      check({32, 32, k, false, tb, 1.f, 0.f}, kiln::sgemm);
      check({32, 32, k, true, tb, 0.5f, 1.f}, kiln::sgemm);
    }
  static_assert(32.0 * 32 * 32 <= kiln::kSmallGemmMacs && 32.0 * 32 * 33 > kiln::kSmallGemmMacs);
}
