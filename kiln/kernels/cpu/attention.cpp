// Fused scaled-dot-product attention, forward and backward, one (batch, head) per task.
//
// Per head the products are register-blocked loops (kMR rows x one or two 64-byte vectors of
// columns, the row operand broadcast from any strides, the column operand read along unit-stride
// rows). Causal heads skip the blocks above the diagonal: the score products stop at the block's
// last column, the products with the probabilities start or stop at the diagonal. Everything of
// a head (K^T, scores, probabilities, their gradient) stays in L1/L2 between the steps.
// Measured in L1 on one core here: a full 64 x 64 x 32 product 1.8 us (~145 GFLOP/s; oneDNN's
// sgemm takes 2.5 us per call for it), the causal parts 1.0-1.2 us; longer reductions do not
// run faster (8x2 to 14x2 register blocks all level off at ~150 GFLOP/s, oneDNN's 512^3 at
// ~130 on the same day).
#include "kiln/kernels/cpu/attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/static_count.h"
#include "kiln/kernels/cpu/transpose16.h"
#include "kiln/kernels/cpu/vec_math.h"

namespace kiln::cpu {
namespace {

template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
};

template <typename T>
constexpr int64_t kW = 64 / static_cast<int64_t>(sizeof(T));  // lanes of one vector
constexpr int64_t kMR = 8;                                    // rows per register block

// Which part of C = A B a causal head needs, for a block of rows [i0, i0 + mr):
enum class Tri {
  kFull,
  kColsToDiag,  // columns j < i0 + mr only (rounded up to whole vectors): scores, dP
  kKToDiag,     // reduction k < i0 + mr (A is zero past the diagonal): P V, dS K
  kKFromDiag,   // reduction k >= i0 (A^T is zero before the diagonal): P^T dO, dS^T Q
};

// Unaligned, aliasing-safe forms of the vector types for loads and stores (as immintrin's
// __m512_u).
template <typename T>
struct VecU;
template <>
struct VecU<float> {
  typedef float type __attribute__((vector_size(64), aligned(4), may_alias));
};
template <>
struct VecU<double> {
  typedef double type __attribute__((vector_size(64), aligned(8), may_alias));
};

// C[r][0, NV W) = sum_{k in [kb, ke)} A(r, k) B[k][0, NV W) for r < MR; A(r, k) = a[r ars + k acs]
// (broadcast, any strides), B rows unit-stride with leading dim ldb. Overwrites C. The unroll
// pragmas keep the accumulators in registers: without them GCC kept a zeroed copy of the array
// on the stack and stored the results through it (3-6% slower per product).
template <typename T, int64_t MR, int64_t NV>
[[gnu::always_inline]] inline void micro(int64_t kb, int64_t ke, const T* __restrict a, int64_t ars,
                                         int64_t acs, const T* __restrict b, int64_t ldb,
                                         T* __restrict c, int64_t ldc) {
  using V = typename VecOf<T>::type;
  using VU = typename VecU<T>::type;
  constexpr int64_t W = kW<T>;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int64_t v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int64_t k = kb; k < ke; ++k) {
    V bv[NV];
#pragma GCC unroll 2
    for (int64_t v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const VU*>(b + k * ldb + v * W);
    const T* ak = a + k * acs;
#pragma GCC unroll 8
    for (int64_t r = 0; r < MR; ++r) {
      const V av = ak[r * ars] - V{};  // a splat (V{} + x would add a real 0)
#pragma GCC unroll 2
      for (int64_t v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int64_t v = 0; v < NV; ++v) *reinterpret_cast<VU*>(c + r * ldc + v * W) = acc[r][v];
}

// Columns [j0, j1) that do not fill a vector.
template <typename T>
void tail_cols(int64_t mr, int64_t j0, int64_t j1, int64_t kb, int64_t ke, const T* a, int64_t ars,
               int64_t acs, const T* b, int64_t ldb, T* c, int64_t ldc) {
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      T s = 0;
      for (int64_t k = kb; k < ke; ++k) s += a[r * ars + k * acs] * b[k * ldb + j];
      c[r * ldc + j] = s;
    }
}

// C [M, N] (row stride ldc, unit column stride) = A [M, K] B [K, N], the parts `tri` names.
template <typename T>
void small_gemm(int64_t M, int64_t N, int64_t K, Tri tri, const T* a, int64_t ars, int64_t acs,
                const T* b, int64_t ldb, T* c, int64_t ldc) {
  constexpr int64_t W = kW<T>;
  for (int64_t i0 = 0; i0 < M; i0 += kMR) {
    const int64_t mr = std::min(kMR, M - i0);
    int64_t kb = 0, ke = K, ne = N;
    if (tri == Tri::kColsToDiag) ne = std::min(N, (i0 + mr + W - 1) / W * W);
    if (tri == Tri::kKToDiag) ke = std::min(K, i0 + mr);
    if (tri == Tri::kKFromDiag) kb = std::min(K, i0);
    const T* ai = a + i0 * ars;
    T* ci = c + i0 * ldc;
    with_count<kMR>(mr, [&](auto rows) {
      constexpr int64_t R = decltype(rows)::value;
      int64_t j = 0;
      for (; j + 2 * W <= ne; j += 2 * W)
        micro<T, R, 2>(kb, ke, ai, ars, acs, b + j, ldb, ci + j, ldc);
      if (j + W <= ne) {
        micro<T, R, 1>(kb, ke, ai, ars, acs, b + j, ldb, ci + j, ldc);
        j += W;
      }
      if (j < ne) tail_cols<T>(R, j, ne, kb, ke, ai, ars, acs, b, ldb, ci, ldc);
    });
  }
}

template <typename T>
using Vec = typename VecOf<T>::type;
template <typename T>
[[gnu::always_inline]] inline Vec<T> splat(T x) {
  return x - Vec<T>{};  // a broadcast (V{} + x would add a real 0: -0 + 0 = +0)
}
template <typename T>
[[gnu::always_inline]] inline Vec<T> loadv(const T* p) {
  return *reinterpret_cast<const typename VecU<T>::type*>(p);
}
template <typename T>
[[gnu::always_inline]] inline void storev(T* p, Vec<T> v) {
  *reinterpret_cast<typename VecU<T>::type*>(p) = v;
}
inline int64_t valid_cols(const AttnDims& s, int64_t i) {
  return s.causal ? std::min(i + 1, s.tk) : s.tk;
}

template <typename T>
Vec<T> lane_index() {
  Vec<T> v;
  for (int64_t u = 0; u < kW<T>; ++u) v[u] = static_cast<T>(u);
  return v;
}

typedef float VF __attribute__((vector_size(64)));
typedef double VD __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));

// vec_math::expf_fast on 16 lanes at once, same constants (an `omp simd` loop over expf_fast
// compiles to 8-lane vectors here, -mprefer-vector-width=256). Bit for bit the same where the
// vector a*b+c contracts to FMA as expf_fast's std::fma does (-march=native builds with FMA);
// without FMA hardware the last bits may differ.
[[gnu::always_inline]] inline VF vexp(VF x) {
  VF xc = x < -87.3f ? splat(-87.3f) : x;
  xc = xc > 88.3f ? splat(88.3f) : xc;
  const VF n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  VF r = n * -0.693359375f + xc;
  r = n * 2.12194440e-4f + r;
  VF p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  const VF scale = std::bit_cast<VF>((__builtin_convertvector(n, VI) + 127) << 23);
  VF res = p * scale;
  res = x < -87.3f ? VF{} : res;
  res = x > 88.72f ? splat(std::numeric_limits<float>::infinity()) : res;
  return x != x ? x : res;
}
inline VD vexp(VD x) {  // float64 (references, gradcheck): libm per lane
  for (int64_t u = 0; u < 8; ++u) x[u] = std::exp(x[u]);
  return x;
}

inline float hmax(VF a) {
  a = a > __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)
          ? a
          : __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  float m = a[0];
  for (int u = 1; u < 8; ++u) m = std::max(m, a[u]);
  return m;
}
inline double hmax(VD a) {
  double m = a[0];
  for (int u = 1; u < 8; ++u) m = std::max(m, a[u]);
  return m;
}
inline float hsum(VF a) {
  a += __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  a += __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
  a += __builtin_shufflevector(a, a, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1);
  return a[0] + a[1];
}
inline double hsum(VD a) {
  a += __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3);
  a += __builtin_shufflevector(a, a, 2, 3, 0, 1, 2, 3, 0, 1);
  return a[0] + a[1];
}

// row[from, len) <- 0 with whole vectors (std::fill compiled to a slower loop here).
template <typename T>
void zero_tail(T* row, int64_t from, int64_t len) {
  int64_t j = from;
  for (; j + kW<T> <= len; j += kW<T>) storev(row + j, Vec<T>{});
  for (; j < len; ++j) row[j] = T(0);
}

// The row's whole vectors: up to n rounded up when that stays within len (the lanes past n are
// masked), else n rounded down (the rest is a scalar tail).
template <typename T>
int64_t vec_span(int64_t n, int64_t len) {
  constexpr int64_t L = kW<T>;
  const int64_t up = (n + L - 1) / L * L;
  return up <= len ? up : n / L * L;
}

[[gnu::always_inline]] inline VF vmax(VF a, VF b) { return a > b ? a : b; }
[[gnu::always_inline]] inline VD vmax(VD a, VD b) { return a > b ? a : b; }

// Rows r < R of p (leading dim ld): row[0, n[r]) scores -> softmax of scale * score
// (max-subtracted), row[n[r], len) exact zeros. Lanes past n[r] are masked (-inf before the
// max, 0 after the exp), so a causal row of any length runs whole vectors; whatever those lanes
// held is never used. R rows go together: one row is a ~150-cycle chain of dependent reductions
// and exps, and four interleaved chains took a causal 64 x 64 head from 2.2 to 1.9 us.
template <typename T, int R>
void softmax_rows(T* p, int64_t ld, const int64_t* n, int64_t len, T scale) {
  using V = Vec<T>;
  constexpr int64_t L = kW<T>;
  int64_t nv = 0;
  for (int r = 0; r < R; ++r) nv = std::max(nv, vec_span<T>(n[r], len));
  const V lanes = lane_index<T>();
  const V ninf = splat<T>(-std::numeric_limits<T>::infinity());
  V mv[R], sv[R];
  T m[R], inv[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) mv[r] = ninf, sv[r] = V{};
  for (int64_t j = 0; j < nv; j += L) {
    const V lj = lanes + static_cast<T>(j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const V x = loadv(p + r * ld + j) * scale;
      mv[r] = vmax(mv[r], lj < static_cast<T>(n[r]) ? x : ninf);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    m[r] = hmax(mv[r]);
    for (int64_t j = nv; j < n[r]; ++j) m[r] = std::max(m[r], p[r * ld + j] * scale);
  }
  for (int64_t j = 0; j < nv; j += L) {
    const V lj = lanes + static_cast<T>(j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      V e = vexp(loadv(p + r * ld + j) * scale - m[r]);
      e = lj < static_cast<T>(n[r]) ? e : V{};
      storev(p + r * ld + j, e);
      sv[r] += e;
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    T sum = hsum(sv[r]);
    for (int64_t j = nv; j < n[r]; ++j) {
      const T e = vec_math::exp<T>(p[r * ld + j] * scale - m[r]);
      p[r * ld + j] = e;
      sum += e;
    }
    inv[r] = T(1) / sum;
  }
  for (int64_t j = 0; j < nv; j += L) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) storev(p + r * ld + j, loadv(p + r * ld + j) * inv[r]);
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t j = nv; j < n[r]; ++j) p[r * ld + j] *= inv[r];
    zero_tail(p + r * ld, std::max(n[r], nv), len);
  }
}

// softmax_rows over all tq rows of a head, four at a time.
template <typename T>
void softmax_head(const AttnDims& s, T* p, T scale) {
  int64_t i = 0;
  for (; i + 4 <= s.tq; i += 4) {
    const int64_t n[4] = {valid_cols(s, i), valid_cols(s, i + 1), valid_cols(s, i + 2),
                          valid_cols(s, i + 3)};
    softmax_rows<T, 4>(p + i * s.tk, s.tk, n, s.tk, scale);
  }
  for (; i < s.tq; ++i) {
    const int64_t n = valid_cols(s, i);
    softmax_rows<T, 1>(p + i * s.tk, s.tk, &n, s.tk, scale);
  }
}

// Rows r < R: dp[0, n[r]) <- scale p (dp - sum_j p dp), the gradient of the scores from that of
// the probabilities; dp[n[r], len) <- 0 (masked: p is 0 there, dp may hold anything). Rows go
// R at a time for the same reason as softmax_rows.
template <typename T, int R>
void dsoftmax_rows(const T* p, T* dp, int64_t ld, const int64_t* n, int64_t len, T scale) {
  using V = Vec<T>;
  constexpr int64_t L = kW<T>;
  int64_t nv = 0;
  for (int r = 0; r < R; ++r) nv = std::max(nv, vec_span<T>(n[r], len));
  const V lanes = lane_index<T>();
  V acc[R];
  T dsum[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = V{};
  for (int64_t j = 0; j < nv; j += L) {
    const V lj = lanes + static_cast<T>(j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const V x = loadv(p + r * ld + j) * loadv(dp + r * ld + j);
      acc[r] += lj < static_cast<T>(n[r]) ? x : V{};
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    dsum[r] = hsum(acc[r]);
    for (int64_t j = nv; j < n[r]; ++j) dsum[r] += p[r * ld + j] * dp[r * ld + j];
  }
  for (int64_t j = 0; j < nv; j += L) {
    const V lj = lanes + static_cast<T>(j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const V x = loadv(p + r * ld + j) * scale * (loadv(dp + r * ld + j) - dsum[r]);
      storev(dp + r * ld + j, lj < static_cast<T>(n[r]) ? x : V{});
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t j = nv; j < n[r]; ++j)
      dp[r * ld + j] = scale * p[r * ld + j] * (dp[r * ld + j] - dsum[r]);
    zero_tail(dp + r * ld, std::max(n[r], nv), len);
  }
}

template <typename T>
void dsoftmax_head(const AttnDims& s, const T* p, T* dp, T scale) {
  int64_t i = 0;
  for (; i + 4 <= s.tq; i += 4) {
    const int64_t n[4] = {valid_cols(s, i), valid_cols(s, i + 1), valid_cols(s, i + 2),
                          valid_cols(s, i + 3)};
    dsoftmax_rows<T, 4>(p + i * s.tk, dp + i * s.tk, s.tk, n, s.tk, scale);
  }
  for (; i < s.tq; ++i) {
    const int64_t n = valid_cols(s, i);
    dsoftmax_rows<T, 1>(p + i * s.tk, dp + i * s.tk, s.tk, &n, s.tk, scale);
  }
}

// dst [rows, cols] contiguous <- src (strides rs, cs).
template <typename T>
void pack(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, T* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[r * rs + c * cs];
}
// dst [cols, rows] contiguous <- src^T (16 x 16 register tiles for float rows of unit stride,
// kernels/cpu/transpose16.h: as scalar loops K^T and V^T per head took 6-8% of the op's time).
template <typename T>
void pack_t(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, T* dst) {
  int64_t r0 = 0, c0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (cs == 1) {
      r0 = rows / 16 * 16;
      c0 = cols / 16 * 16;
      for (int64_t r = 0; r < r0; r += 16)
        for (int64_t c = 0; c < c0; c += 16)
          transpose16(src + r * rs + c, rs, dst + c * rows + r, rows);
    }
  }
  // The rest: columns past c0 of every row, rows past r0 of the first c0 columns.
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = c < c0 ? r0 : 0; r < rows; ++r) dst[c * rows + r] = src[r * rs + c * cs];
}

// A unit-stride view of one head's matrix: the input itself, or a copy in `buf`.
template <typename T>
const T* unit_rows(const T* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, T* buf,
                   int64_t& ld) {
  if (cs == 1 || cols <= 1) {
    ld = rs;
    return src;
  }
  pack(src, rs, cs, rows, cols, buf);
  ld = cols;
  return buf;
}

// Work per head for the parallel grain: ~64k multiply-adds per task at least.
inline int64_t grain(const AttnDims& s) {
  const int64_t per = std::max<int64_t>(1, s.tq * s.tk * (s.d + s.dv));
  return std::max<int64_t>(1, 65536 / per);
}

}  // namespace

template <typename T>
void attention_forward(const AttnDims& s, AttnMat<const T> q, AttnMat<const T> k,
                       AttnMat<const T> v, AttnMat<T> o, T* p) {
  const T scale = static_cast<T>(s.scale);
  const Tri cols = s.causal ? Tri::kColsToDiag : Tri::kFull;
  const Tri kdiag = s.causal ? Tri::kKToDiag : Tri::kFull;
  parallel_for(s.bh, grain(s), [&](int64_t b, int64_t e) {
    std::vector<T> buf(static_cast<size_t>(s.d * s.tk + s.tk * s.dv));
    T* kt = buf.data();       // [d, tk]
    T* vb = kt + s.d * s.tk;  // [tk, dv] when v's columns are strided
    for (int64_t h = b; h < e; ++h) {
      const T* Q = q.data + q.off[h];
      const T* K = k.data + k.off[h];
      // Scores, then probabilities, in the output itself. (Computing them in a local buffer
      // and streaming them out made the backward 25% slower: it then reads them from memory
      // instead of L3.)
      T* P = p + h * s.tq * s.tk;
      pack_t(K, k.rs, k.cs, s.tk, s.d, kt);
      int64_t ldv = 0;
      const T* V = unit_rows(v.data + v.off[h], v.rs, v.cs, s.tk, s.dv, vb, ldv);
      small_gemm<T>(s.tq, s.tk, s.d, cols, Q, q.rs, q.cs, kt, s.tk, P, s.tk);
      softmax_head(s, P, scale);
      small_gemm<T>(s.tq, s.dv, s.tk, kdiag, P, s.tk, 1, V, ldv, o.data + o.off[h], o.rs);
    }
  });
}

// With S = scale Q K^T, P = softmax(S) (masked entries 0), O = P V and G = dL/dO:
//   dV = P^T G;  dP = G V^T;  dS = P * (dP - rowsum(P * dP));  dQ = scale dS K;
//   dK = scale dS^T Q.
// (rowsum(P * dP) = rowsum(G * O); it is taken from dP here, which is in cache.) The scale is
// folded into dS.
template <typename T>
void attention_backward(const AttnDims& s, AttnMat<const T> g, AttnMat<const T> q,
                        AttnMat<const T> k, AttnMat<const T> v, const T* p, AttnMat<T> dq,
                        AttnMat<T> dk, AttnMat<T> dv) {
  const T scale = static_cast<T>(s.scale);
  const Tri cols = s.causal ? Tri::kColsToDiag : Tri::kFull;
  const Tri kto = s.causal ? Tri::kKToDiag : Tri::kFull;
  const Tri kfrom = s.causal ? Tri::kKFromDiag : Tri::kFull;
  parallel_for(s.bh, grain(s), [&](int64_t b, int64_t e) {
    std::vector<T> buf(
        static_cast<size_t>(s.dv * s.tk + s.tq * s.tk + s.tq * s.dv + s.tk * s.d + s.tq * s.d));
    T* vt = buf.data();        // [dv, tk]
    T* ds = vt + s.dv * s.tk;  // [tq, tk]: dP, then dS
    T* gb = ds + s.tq * s.tk;  // copies of strided-column operands
    T* kb = gb + s.tq * s.dv;
    T* qb = kb + s.tk * s.d;
    for (int64_t h = b; h < e; ++h) {
      const T* P = p + h * s.tq * s.tk;
      const T* G = g.data + g.off[h];
      pack_t(v.data + v.off[h], v.rs, v.cs, s.tk, s.dv, vt);
      int64_t ldg = 0, ldk = 0, ldq = 0;
      const T* Gu = unit_rows(G, g.rs, g.cs, s.tq, s.dv, gb, ldg);
      const T* Ku = unit_rows(k.data + k.off[h], k.rs, k.cs, s.tk, s.d, kb, ldk);
      const T* Qu = unit_rows(q.data + q.off[h], q.rs, q.cs, s.tq, s.d, qb, ldq);

      small_gemm<T>(s.tk, s.dv, s.tq, kfrom, P, 1, s.tk, Gu, ldg, dv.data + dv.off[h], dv.rs);
      small_gemm<T>(s.tq, s.tk, s.dv, cols, G, g.rs, g.cs, vt, s.tk, ds, s.tk);
      dsoftmax_head(s, P, ds, scale);
      small_gemm<T>(s.tq, s.d, s.tk, kto, ds, s.tk, 1, Ku, ldk, dq.data + dq.off[h], dq.rs);
      small_gemm<T>(s.tk, s.d, s.tq, kfrom, ds, 1, s.tk, Qu, ldq, dk.data + dk.off[h], dk.rs);
    }
  });
}

template void attention_forward<float>(const AttnDims&, AttnMat<const float>, AttnMat<const float>,
                                       AttnMat<const float>, AttnMat<float>, float*);
template void attention_forward<double>(const AttnDims&, AttnMat<const double>,
                                        AttnMat<const double>, AttnMat<const double>,
                                        AttnMat<double>, double*);
template void attention_backward<float>(const AttnDims&, AttnMat<const float>, AttnMat<const float>,
                                        AttnMat<const float>, AttnMat<const float>, const float*,
                                        AttnMat<float>, AttnMat<float>, AttnMat<float>);
template void attention_backward<double>(const AttnDims&, AttnMat<const double>,
                                         AttnMat<const double>, AttnMat<const double>,
                                         AttnMat<const double>, const double*, AttnMat<double>,
                                         AttnMat<double>, AttnMat<double>);

}  // namespace kiln::cpu
