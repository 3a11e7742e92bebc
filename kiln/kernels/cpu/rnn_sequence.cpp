// The recurrent time loop in one kernel. Forward: the hidden units are split across the threads
// in blocks of one vector (16 floats) for the whole sequence; at each step a thread computes, for
// its blocks, every gate's hidden product (register blocks of up to 6 batch rows x G vectors,
// the weight rows of its units streamed once per row block) and the cell update, and the team
// meets at one barrier before the next step reads the new h. A step of a 256-unit LSTM at batch
// 1 reads the 1 MiB weight for 0.26 M multiply-adds, so it is bound by the weight's read, which
// splits across the threads (each keeps its half in its own L2). Backward: one GEMM recomputes
// every step's hidden products (the h each step read is known from the forward's outputs),
// then the steps run back to front with a GEMM each for the gradient carried into h.
#include "kiln/kernels/cpu/rnn_sequence.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/vec_math.h"

namespace kiln::cpu {

int rnn_gates(RnnMode m) { return m == RnnMode::kLstm ? 4 : m == RnnMode::kGru ? 3 : 1; }

namespace {

template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(64)));
};
template <typename T>
constexpr int64_t kW = kRnnBlock<T>;  // lanes of a vector: the units of a block
constexpr int64_t kMaxRows = 6;       // batch rows per register block

template <typename T>
[[gnu::always_inline]] inline typename Vec<T>::type load(const T* p) {
  typename Vec<T>::type v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Hidden products of MR batch rows (hp, row stride H) for the W units of one block of each of
// the G gates, from the block's packed weight wb [H][G][W]: out[r][g][0, W). One row alone splits
// k into even and odd halves, so that 2G accumulators cover the FMA latency.
template <typename T, int MR, int G>
[[gnu::always_inline]] inline void block_dot(int64_t H, const T* __restrict hp,
                                             const T* __restrict wb, T* __restrict out) {
  using V = typename Vec<T>::type;
  constexpr int64_t W = kW<T>;
  V acc[MR][G], acc2[MR][G];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = acc2[r][g] = V{};
  int64_t k = 0;
  if constexpr (MR == 1) {
    for (; k + 1 < H; k += 2) {
      const T* w0 = wb + k * G * W;
      const V a0 = hp[k] - V{}, a1 = hp[k + 1] - V{};  // splats
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        acc[0][g] += a0 * load(w0 + g * W);
        acc2[0][g] += a1 * load(w0 + (G + g) * W);
      }
    }
  }
  for (; k < H; ++k) {
    V w[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) w[g] = load(wb + (k * G + g) * W);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const V a = hp[r * H + k] - V{};
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] += a * w[g];
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const V v = MR == 1 ? acc[r][g] + acc2[r][g] : acc[r][g];
      std::memcpy(out + (r * G + g) * W, &v, sizeof v);
    }
}

template <typename T, int G>
void rows_dot(int64_t mr, int64_t H, const T* hp, const T* wb, T* out) {
  switch (mr) {
    case 1:
      return block_dot<T, 1, G>(H, hp, wb, out);
    case 2:
      return block_dot<T, 2, G>(H, hp, wb, out);
    case 3:
      return block_dot<T, 3, G>(H, hp, wb, out);
    case 4:
      return block_dot<T, 4, G>(H, hp, wb, out);
    case 5:
      return block_dot<T, 5, G>(H, hp, wb, out);
    default:
      return block_dot<T, 6, G>(H, hp, wb, out);
  }
}

// One batch row's cell update for units [u0, u0 + w): pre [G][W] the hidden products, x the
// row's input projection [G H], hp/cp the previous state's row, h/c the new one. The sums keep
// torch's order: x + (h W^T + b).
template <typename T>
void cell_update(RnnMode mode, int64_t H, int64_t u0, int64_t w, const T* pre, const T* x,
                 const T* b, const T* hp, const T* cp, T* h, T* c) {
  using vec_math::sigmoid;
  using vec_math::tanh;
  constexpr int64_t W = kW<T>;
  x += u0, b += u0, hp += u0, h += u0;
  switch (mode) {
    case RnnMode::kLstm:
      cp += u0, c += u0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        const T i = sigmoid<T>(x[j] + (pre[j] + b[j]));
        const T f = sigmoid<T>(x[H + j] + (pre[W + j] + b[H + j]));
        const T g = tanh<T>(x[2 * H + j] + (pre[2 * W + j] + b[2 * H + j]));
        const T o = sigmoid<T>(x[3 * H + j] + (pre[3 * W + j] + b[3 * H + j]));
        const T cn = f * cp[j] + i * g;
        c[j] = cn;
        h[j] = o * tanh<T>(cn);
      }
      break;
    case RnnMode::kGru:
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        const T r = sigmoid<T>(x[j] + (pre[j] + b[j]));
        const T z = sigmoid<T>(x[H + j] + (pre[W + j] + b[H + j]));
        const T n = tanh<T>(x[2 * H + j] + r * (pre[2 * W + j] + b[2 * H + j]));
        h[j] = (hp[j] - n) * z + n;
      }
      break;
    case RnnMode::kRnnTanh:
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) h[j] = tanh<T>(x[j] + (pre[j] + b[j]));
      break;
    case RnnMode::kRnnRelu:
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) h[j] = std::max(x[j] + (pre[j] + b[j]), T(0));
      break;
  }
}

// One thread's part of one step: unit blocks [lo, hi) for every batch row.
template <typename T, int G>
void step_blocks(const RnnSeq<T>& s, int64_t t, const T* hp, const T* cp, T* h, T* c, int64_t lo,
                 int64_t hi) {
  constexpr int64_t W = kW<T>;
  const int64_t H = s.hidden, B = s.batch, GH = G * H;
  alignas(64) T pre[kMaxRows * G * W];
  for (int64_t blk = lo; blk < hi; ++blk) {
    const int64_t u0 = blk * W, w = std::min(W, H - u0);
    for (int64_t b0 = 0; b0 < B; b0 += kMaxRows) {
      const int64_t mr = std::min(kMaxRows, B - b0);
      rows_dot<T, G>(mr, H, hp + b0 * H, s.wp + blk * H * G * W, pre);  // zeros past H
      for (int64_t r = 0; r < mr; ++r) {
        const int64_t b = b0 + r;
        cell_update<T>(s.mode, H, u0, w, pre + r * G * W, s.xw + (t * B + b) * GH, s.bias,
                       hp + b * H, cp ? cp + b * H : nullptr, h + b * H, c ? c + b * H : nullptr);
      }
    }
  }
}

template <typename T, int G>
void forward_gates(const RnnSeq<T>& s, T* y, T* c) {
  constexpr int64_t W = kW<T>;
  const int64_t H = s.hidden, B = s.batch, S = s.steps;
  const int64_t blocks = (H + W - 1) / W;
  LoadScope load;  // one thread while other processes starve this one (parallel.h)
  // A barrier costs about a microsecond: steps smaller than ~64 K multiply-adds stay on one
  // thread, and no thread gets less than one block.
  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (B * H * G * H < (int64_t(1) << 16)) threads = 1;
  threads = static_cast<int>(std::min<int64_t>(threads, blocks));
  const bool lstm = s.mode == RnnMode::kLstm;
  parallel_team(threads, [&](int tid, int team, auto&& barrier) {
    const int64_t lo = blocks * tid / team, hi = blocks * (tid + 1) / team;
    for (int64_t k = 0; k < S; ++k) {
      const int64_t t = s.reverse ? S - 1 - k : k, tp = s.reverse ? t + 1 : t - 1;
      const T* hp = k ? y + tp * B * H : s.h0;
      const T* cp = lstm ? (k ? c + tp * B * H : s.c0) : nullptr;
      step_blocks<T, G>(s, t, hp, cp, y + t * B * H, lstm ? c + t * B * H : nullptr, lo, hi);
      barrier();
    }
  });
}

// Gate gradients of one step for batch row b and unit u (dh: the gradient reaching h_t). Writes
// dgx and dgh at [g H + u] of the step's row; returns what flows into c_{t-1} (LSTM) or
// directly into h_{t-1} (GRU's z h_{t-1} term); 0 otherwise.
template <typename T>
T unit_grad(RnnMode mode, int64_t H, int64_t u, T dh, T dc_in, const T* x, const T* hg, const T* b,
            T hp, T cp, T ct, T ht, T* dgx, T* dgh) {
  using vec_math::sigmoid;
  using vec_math::tanh;
  switch (mode) {
    case RnnMode::kLstm: {
      const T i = sigmoid<T>(x[u] + (hg[u] + b[u]));
      const T f = sigmoid<T>(x[H + u] + (hg[H + u] + b[H + u]));
      const T g = tanh<T>(x[2 * H + u] + (hg[2 * H + u] + b[2 * H + u]));
      const T o = sigmoid<T>(x[3 * H + u] + (hg[3 * H + u] + b[3 * H + u]));
      const T tc = tanh<T>(ct);
      const T dct = dc_in + dh * o * (T(1) - tc * tc);
      const T d[4] = {dct * g * i * (T(1) - i), dct * cp * f * (T(1) - f), dct * i * (T(1) - g * g),
                      dh * tc * o * (T(1) - o)};
      for (int k = 0; k < 4; ++k) dgx[k * H + u] = dgh[k * H + u] = d[k];
      return dct * f;
    }
    case RnnMode::kGru: {
      const T hr = hg[u] + b[u], hz = hg[H + u] + b[H + u], hn = hg[2 * H + u] + b[2 * H + u];
      const T r = sigmoid<T>(x[u] + hr), z = sigmoid<T>(x[H + u] + hz);
      const T n = tanh<T>(x[2 * H + u] + r * hn);
      const T dn = dh * (T(1) - z) * (T(1) - n * n);
      const T dz = dh * (hp - n) * z * (T(1) - z);
      const T dr = dn * hn * r * (T(1) - r);
      dgx[u] = dgh[u] = dr;
      dgx[H + u] = dgh[H + u] = dz;
      dgx[2 * H + u] = dn;
      dgh[2 * H + u] = dn * r;
      return dh * z;
    }
    case RnnMode::kRnnTanh:
      dgx[u] = dgh[u] = dh * (T(1) - ht * ht);
      return 0;
    case RnnMode::kRnnRelu:
      dgx[u] = dgh[u] = ht > 0 ? dh : T(0);
      return 0;
  }
  return 0;
}

}  // namespace

template <typename T>
void rnn_sequence_forward(const RnnSeq<T>& s, T* y, T* c) {
  if (s.steps == 0 || s.batch == 0 || s.hidden == 0) return;
  switch (s.mode) {
    case RnnMode::kLstm:
      return forward_gates<T, 4>(s, y, c);
    case RnnMode::kGru:
      return forward_gates<T, 3>(s, y, c);
    default:
      return forward_gates<T, 1>(s, y, c);
  }
}

template <typename T>
void rnn_sequence_backward(const RnnSeq<T>& s, const T* y, const T* c, const T* dy, const T* dc,
                           T* dgx, T* dgh, T* hprev, T* dh0, T* dc0) {
  const int G = rnn_gates(s.mode);
  const int64_t H = s.hidden, B = s.batch, S = s.steps, GH = G * H, BH = B * H;
  const bool lstm = s.mode == RnnMode::kLstm, gru = s.mode == RnnMode::kGru;
  if (S * BH == 0) return;  // nothing to differentiate (the op refuses zero steps)
  auto step_at = [&](int64_t k) { return s.reverse ? S - 1 - k : k; };
  for (int64_t k = 0; k < S; ++k)
    std::memcpy(hprev + step_at(k) * BH, k ? y + step_at(k - 1) * BH : s.h0, BH * sizeof(T));
  // The weight as [H, G H] for the GEMMs (a copy against the steps' T GEMMs).
  constexpr int64_t W = kW<T>;
  std::vector<T> wt(static_cast<size_t>(H * GH));
  for (int64_t k = 0; k < H; ++k)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t u = 0; u < H; ++u)
        wt[static_cast<size_t>(k * GH + g * H + u)] = s.wp[((u / W * H + k) * G + g) * W + u % W];
  // Every step's hidden products at once (the bias is added per element below, as forward).
  std::vector<T> hg(static_cast<size_t>(S * B * GH));
  gemm<T>(false, false, S * B, GH, H, hprev, H, wt.data(), GH, T(0), hg.data(), GH);
  std::vector<T> carry(static_cast<size_t>(BH), T(0)), dcc(static_cast<size_t>(BH), T(0));
  for (int64_t k = S - 1; k >= 0; --k) {
    const int64_t t = step_at(k);
    const T* cp = lstm ? (k ? c + step_at(k - 1) * BH : s.c0) : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = t * B + b;
      for (int64_t u = 0; u < H; ++u) {
        const int64_t e = b * H + u;
        const T dh = (dy ? dy[row * H + u] : T(0)) + carry[static_cast<size_t>(e)];
        const T dc_in = lstm ? (dc ? dc[row * H + u] : T(0)) + dcc[static_cast<size_t>(e)] : T(0);
        const T back =
            unit_grad<T>(s.mode, H, u, dh, dc_in, s.xw + row * GH, hg.data() + row * GH, s.bias,
                         hprev[row * H + u], lstm ? cp[e] : T(0), lstm ? c[row * H + u] : T(0),
                         y[row * H + u], dgx + row * GH, dgh + row * GH);
        if (lstm) dcc[static_cast<size_t>(e)] = back;
        if (gru) carry[static_cast<size_t>(e)] = back;  // h_t's direct term; the GEMM adds on
      }
    }
    // The gradient into h_{t-1} through the hidden products: dgh_t @ wt^T.
    gemm<T>(false, true, B, H, GH, dgh + t * B * GH, GH, wt.data(), GH, gru ? T(1) : T(0),
            carry.data(), H);
  }
  std::memcpy(dh0, carry.data(), BH * sizeof(T));
  if (dc0) std::memcpy(dc0, dcc.data(), BH * sizeof(T));
}

template void rnn_sequence_forward<float>(const RnnSeq<float>&, float*, float*);
template void rnn_sequence_forward<double>(const RnnSeq<double>&, double*, double*);
template void rnn_sequence_backward<float>(const RnnSeq<float>&, const float*, const float*,
                                           const float*, const float*, float*, float*, float*,
                                           float*, float*);
template void rnn_sequence_backward<double>(const RnnSeq<double>&, const double*, const double*,
                                            const double*, const double*, double*, double*, double*,
                                            double*, double*);

}  // namespace kiln::cpu
