// Small single-precision GEMM: a 4x16 register block per step, compiled ahead of time, so a
// small model's first matmul needs no run-time code generation (kiln-run's first result).
#include "kiln/kernels/cpu/gemm_small.h"

#include <algorithm>
#include <vector>

namespace kiln {
namespace {

// 16 floats: one zmm on AVX-512, two ymm on AVX2; GCC's vector extension keeps the
// accumulators in registers whatever the target.
typedef float V16 __attribute__((vector_size(64)));
constexpr int64_t kW = 16;

inline V16 load(const float* p) {
  V16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store_c(float* c, float v, float alpha, float beta) {
  // BLAS semantics: beta == 0 never reads C (it may hold NaN from an uninitialized buffer).
  *c = beta == 0.f ? alpha * v : alpha * v + beta * *c;
}

// C = A @ B for row-major A (lda) and B whose rows (ldb) hold whole 16-float blocks: an MR x 16
// block of C per step, each B row loaded once for MR rows of A.
template <int MR>
void nn_rows(int64_t i0, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += kW) {
    V16 acc[MR] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      const V16 bv = load(b + kk * ldb + j0);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r] += a[(i0 + r) * lda + kk] * bv;
    }
    const int64_t nr = std::min(kW, n - j0);
    for (int r = 0; r < MR; ++r)
      for (int64_t j = 0; j < nr; ++j) store_c(c + (i0 + r) * ldc + j0 + j, acc[r][j], alpha, beta);
  }
}

// C = A @ B^T for few rows of A (a matrix-vector product, e.g. a Linear layer at batch 1):
// dot products of one row of A with 4 rows of B, 16 lanes of k at a time, so B is read once in
// place (copying B^T would cost as much as the product).
void nt_row(int64_t i, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const float* ar = a + i * lda;
  const int64_t kv = k / kW * kW;
  for (int64_t j0 = 0; j0 < n; j0 += 4) {
    const int nq = static_cast<int>(std::min<int64_t>(4, n - j0));
    V16 acc[4] = {};
    for (int64_t kk = 0; kk < kv; kk += kW) {
      const V16 av = load(ar + kk);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
        if (q < nq) acc[q] += av * load(b + (j0 + q) * ldb + kk);
    }
    for (int q = 0; q < nq; ++q) {
      float sum = 0.f;
      for (int j = 0; j < kW; ++j) sum += acc[q][j];
      for (int64_t kk = kv; kk < k; ++kk) sum += ar[kk] * b[(j0 + q) * ldb + kk];
      store_c(c + i * ldc + j0 + q, sum, alpha, beta);
    }
  }
}

}  // namespace

void sgemm_small(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  // Operands in a layout the kernel does not read are copied once (small: k*n or m*k floats
  // against m*n*k multiply-adds): a transposed A to m rows of k; a transposed B, or one whose
  // rows do not come in whole 16-float blocks, to k rows of n rounded up to 16, zero padded.
  // (A dot-product kernel for B^T measured 3-10x slower than this copy: a horizontal sum per
  // element of C.)
  thread_local std::vector<float> pa, pb;
  if (ta) {
    pa.resize(static_cast<size_t>(m * k));
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t i = 0; i < m; ++i) pa[i * k + kk] = a[kk * lda + i];
    a = pa.data();
    lda = k;
  }
  if (tb && m < 4) {
    for (int64_t i = 0; i < m; ++i) nt_row(i, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t np = (n + kW - 1) / kW * kW;
  if (tb || np != n) {
    pb.assign(static_cast<size_t>(k * np), 0.f);
    if (tb) {
      // In 16x16 tiles: row by row, B's rows 4 KiB apart alias in L1 and the copy crawls.
      for (int64_t j0 = 0; j0 < n; j0 += kW)
        for (int64_t k0 = 0; k0 < k; k0 += kW) {
          const int64_t je = std::min(n, j0 + kW), ke = std::min(k, k0 + kW);
          for (int64_t kk = k0; kk < ke; ++kk)
            for (int64_t j = j0; j < je; ++j) pb[kk * np + j] = b[j * ldb + kk];
        }
    } else {
      for (int64_t kk = 0; kk < k; ++kk) std::copy(b + kk * ldb, b + kk * ldb + n, &pb[kk * np]);
    }
    b = pb.data();
    ldb = np;
  }
  int64_t i0 = 0;
  for (; i0 + 4 <= m; i0 += 4) nn_rows<4>(i0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  switch (m - i0) {
    case 3:
      nn_rows<3>(i0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      break;
    case 2:
      nn_rows<2>(i0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      break;
    case 1:
      nn_rows<1>(i0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      break;
    default:
      break;
  }
}

}  // namespace kiln
