// GEMM behind a small interface: oneDNN's dnnl_sgemm by default (KILN_GEMM=onednn), CBLAS
// (OpenBLAS) when built with KILN_GEMM=cblas. Row-major; transposed operands by flag, no copies.
#pragma once
#include <cstdint>

namespace kiln {

/// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, row-major with leading dims.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
           int64_t ldc);
/// C[m,n] = op(A) @ op(B) + bias (a row of n added to every row) through oneDNN's matmul
/// primitive, which adds the bias in its epilogue (no pre-filled C to read back). Returns false,
/// writing nothing, where that path is unavailable (CBLAS build, a shape oneDNN declines, a
/// shape's first call: see gemm.cpp) or switched off with KILN_GEMM_BIAS_PRIM=0.
bool sgemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                int64_t lda, const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc);
/// bfloat16 GEMM through oneDNN's matmul primitive, which picks AMX or AVX512-BF16 kernels at
/// run time where the CPU has them: C = alpha * op(A) @ op(B) (+ bias row) + beta * C over
/// `batch` matrices (A, B, C advancing by sa, sb, sc elements; sa or sb 0 for a shared operand).
/// A, B and bias hold bfloat16 bits; products accumulate in float32; C is bfloat16 (c_bf16) or
/// float32. bias: null or bfloat16 [n]. Returns false, writing nothing, where oneDNN is not the
/// backend or declines the shape: the caller then computes in float32.
bool gemm_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
               float alpha, const uint16_t* a, int64_t lda, int64_t sa, const uint16_t* b,
               int64_t ldb, int64_t sb, const uint16_t* bias, float beta, void* c, int64_t ldc,
               int64_t sc, bool c_bf16);
/// The instruction set oneDNN dispatches to on this CPU ("avx512_core_bf16", "avx512_core_amx",
/// ...), for reports.
const char* dnnl_isa();

/// Typed form for kernels templated on the element type: C = op(A) @ op(B) + beta * C.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (sizeof(T) == sizeof(float))
    sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
  else
    dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

/// Name of the backend compiled in ("onednn" or "cblas").
const char* gemm_backend();

}  // namespace kiln
