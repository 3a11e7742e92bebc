// Small single-precision GEMM compiled ahead of time: for products too small to amortize
// oneDNN's run-time kernel generation (its first dnnl_sgemm call costs ~60 ms of JIT) or its
// per-call dispatch.
#pragma once
#include <cstdint>

namespace kiln {

/// Products of at most this many multiply-adds go to sgemm_small (see gemm.cpp for the
/// measurement behind it).
inline constexpr double kSmallGemmMacs = 32768;

/// C[m,n] = alpha * op(A) @ op(B) + beta * C, row-major with leading dims, on the calling thread.
/// Meant for m * n * k <= kSmallGemmMacs (any size is correct, large ones are slow).
void sgemm_small(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc);

}  // namespace kiln
