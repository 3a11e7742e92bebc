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
void step_blocks(const RnnSeq<T>& s, int64_t t, const T* hp, const T* cp, T* h, T* c, T* hg,
                 int64_t lo, int64_t hi) {
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
        if (hg)  // kept for the backward
          for (int64_t g = 0; g < G; ++g)
            std::memcpy(hg + (t * B + b) * GH + g * H + u0, pre + (r * G + g) * W, w * sizeof(T));
        cell_update<T>(s.mode, H, u0, w, pre + r * G * W, s.xw + (t * B + b) * GH, s.bias,
                       hp + b * H, cp ? cp + b * H : nullptr, h + b * H, c ? c + b * H : nullptr);
      }
    }
  }
}

template <typename T, int G>
void forward_gates(const RnnSeq<T>& s, T* y, T* c, T* hg) {
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
      step_blocks<T, G>(s, t, hp, cp, y + t * B * H, lstm ? c + t * B * H : nullptr, hg, lo, hi);
      barrier();
    }
  });
}

// One step's gate gradients for one batch row, n units (every pointer at the first; gates H
// apart): dy the gradient of the step's output
// h_t, carry what later steps sent into h_t (GRU: replaced by its direct term z dh for h_{t-1},
// which the GEMM then adds to), dcy and dcc the same for an LSTM's c_t (dcc replaced by the part
// for c_{t-1}); x, hg the gates' input parts and hidden products (bias not added), hp/cp the
// state the step read, ct/ht the one it wrote. Writes dgx and dgh [G H]. Gate values are
// recomputed with the forward's formulas, so they are the forward's to the bit.
template <typename T>
void row_grads(RnnMode mode, int64_t H, int64_t n, const T* dy, T* carry, const T* dcy, T* dcc,
               const T* x, const T* hg, const T* b, const T* hp, const T* cp, const T* ct,
               const T* ht, T* dgx, T* dgh) {
  using vec_math::sigmoid;
  using vec_math::tanh;
  switch (mode) {
    case RnnMode::kLstm:
#pragma omp simd
      for (int64_t u = 0; u < n; ++u) {
        const T i = sigmoid<T>(x[u] + (hg[u] + b[u]));
        const T f = sigmoid<T>(x[H + u] + (hg[H + u] + b[H + u]));
        const T g = tanh<T>(x[2 * H + u] + (hg[2 * H + u] + b[2 * H + u]));
        const T o = sigmoid<T>(x[3 * H + u] + (hg[3 * H + u] + b[3 * H + u]));
        const T dh = dy[u] + carry[u], tc = tanh<T>(ct[u]);
        const T dct = dcy[u] + dcc[u] + dh * o * (T(1) - tc * tc);
        dgx[u] = dgh[u] = dct * g * i * (T(1) - i);
        dgx[H + u] = dgh[H + u] = dct * cp[u] * f * (T(1) - f);
        dgx[2 * H + u] = dgh[2 * H + u] = dct * i * (T(1) - g * g);
        dgx[3 * H + u] = dgh[3 * H + u] = dh * tc * o * (T(1) - o);
        dcc[u] = dct * f;
      }
      break;
    case RnnMode::kGru:
#pragma omp simd
      for (int64_t u = 0; u < n; ++u) {
        const T hr = hg[u] + b[u], hz = hg[H + u] + b[H + u], hn = hg[2 * H + u] + b[2 * H + u];
        const T r = sigmoid<T>(x[u] + hr), z = sigmoid<T>(x[H + u] + hz);
        const T n = tanh<T>(x[2 * H + u] + r * hn);
        const T dh = dy[u] + carry[u];
        const T dn = dh * (T(1) - z) * (T(1) - n * n);
        dgx[u] = dgh[u] = dn * hn * r * (T(1) - r);
        dgx[H + u] = dgh[H + u] = dh * (hp[u] - n) * z * (T(1) - z);
        dgx[2 * H + u] = dn;
        dgh[2 * H + u] = dn * r;
        carry[u] = dh * z;
      }
      break;
    case RnnMode::kRnnTanh:
#pragma omp simd
      for (int64_t u = 0; u < n; ++u) dgx[u] = dgh[u] = (dy[u] + carry[u]) * (T(1) - ht[u] * ht[u]);
      break;
    case RnnMode::kRnnRelu:
#pragma omp simd
      for (int64_t u = 0; u < n; ++u) dgx[u] = dgh[u] = ht[u] > 0 ? dy[u] + carry[u] : T(0);
      break;
  }
}

}  // namespace

template <typename T>
void rnn_sequence_forward(const RnnSeq<T>& s, T* y, T* c, T* hg) {
  if (s.steps == 0 || s.batch == 0 || s.hidden == 0) return;
  switch (s.mode) {
    case RnnMode::kLstm:
      return forward_gates<T, 4>(s, y, c, hg);
    case RnnMode::kGru:
      return forward_gates<T, 3>(s, y, c, hg);
    default:
      return forward_gates<T, 1>(s, y, c, hg);
  }
}

// carry[b][c0, c0 + n) (+)= dg[b] @ w[:, c0, c0 + n) for every row b, w = the recurrent weight
// [G H, H] held as one panel of 4 W units: panel[k][4 W] (zeros past H); `add` keeps what carry
// holds (GRU's direct term).
template <typename T>
void carry_product(int64_t B, int64_t GH, int64_t H, const T* dg, const T* panel, int64_t c0,
                   int64_t n, bool add, T* carry) {
  constexpr int64_t PW = 4 * kW<T>;
  alignas(64) T out[kMaxRows * PW];
  for (int64_t b0 = 0; b0 < B; b0 += kMaxRows) {
    const int64_t mr = std::min(kMaxRows, B - b0);
    rows_dot<T, 4>(mr, GH, dg + b0 * GH, panel, out);
    for (int64_t r = 0; r < mr; ++r) {
      T* dst = carry + (b0 + r) * H + c0;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dst[j] = (add ? dst[j] : T(0)) + out[r * PW + j];
    }
  }
}

template <typename T>
void rnn_sequence_backward(const RnnSeq<T>& s, const T* y, const T* c, const T* hg_saved,
                           const T* dy, const T* dc, T* dgx, T* dgh, T* hprev, T* dh0, T* dc0) {
  constexpr int64_t W = kW<T>, PW = 4 * W;
  const int G = rnn_gates(s.mode);
  const int64_t H = s.hidden, B = s.batch, S = s.steps, GH = G * H, BH = B * H;
  const bool lstm = s.mode == RnnMode::kLstm, gru = s.mode == RnnMode::kGru;
  if (S * BH == 0) return;  // nothing to differentiate (the op refuses zero steps)
  auto step_at = [&](int64_t k) { return s.reverse ? S - 1 - k : k; };
  for (int64_t k = 0; k < S; ++k)
    std::memcpy(hprev + step_at(k) * BH, k ? y + step_at(k - 1) * BH : s.h0, BH * sizeof(T));
  // The weight unpacked twice: wt [H, G H] for the GEMM that recomputes every step's hidden
  // products at once when the forward did not keep them (the bias is added per element, as
  // forward), and panels of 4 W units of w [G H, H] for each step's product into h_{t-1}.
  const int64_t panels = (H + PW - 1) / PW;
  std::vector<T> wt(hg_saved ? 0 : static_cast<size_t>(H * GH));
  std::vector<T> wq(static_cast<size_t>(panels * GH * PW), T(0));
  for (int64_t k = 0; k < H; ++k)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t u = 0; u < H; ++u) {
        const T v = s.wp[((u / W * H + k) * G + g) * W + u % W];
        if (!hg_saved) wt[static_cast<size_t>(k * GH + g * H + u)] = v;
        wq[static_cast<size_t>((k / PW * GH + g * H + u) * PW + k % PW)] = v;
      }
  std::vector<T> hg_own(hg_saved ? 0 : static_cast<size_t>(S * B * GH));
  if (!hg_saved)
    gemm<T>(false, false, S * B, GH, H, hprev, H, wt.data(), GH, T(0), hg_own.data(), GH);
  const T* hg = hg_saved ? hg_saved : hg_own.data();
  // carry: the gradient reaching h_t from later steps (GRU: then its direct term z dh); dcc the
  // same for an LSTM's c_t. Each thread owns whole panels of units for every step, as forward.
  std::vector<T> carry(static_cast<size_t>(BH), T(0)), dcc(static_cast<size_t>(BH), T(0));
  LoadScope load;  // before the thread count: it may lower it (parallel.h)
  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (B * H * GH < (int64_t(1) << 16)) threads = 1;
  threads = static_cast<int>(std::min<int64_t>(threads, panels));
  parallel_team(threads, [&](int tid, int team, auto&& barrier) {
    const int64_t p0 = panels * tid / team, p1 = panels * (tid + 1) / team;
    const int64_t u0 = p0 * PW, n = std::min(H, p1 * PW) - u0;
    auto into_h = [&](int64_t t_next, T* dst) {  // dgh of step t_next into the h it read
      for (int64_t p = p0; p < p1; ++p)
        carry_product<T>(B, GH, H, dgh + t_next * B * GH, wq.data() + p * GH * PW, p * PW,
                         std::min(PW, H - p * PW), gru, dst);
    };
    for (int64_t k = S - 1; k >= 0; --k) {
      const int64_t t = step_at(k);
      if (k < S - 1) into_h(step_at(k + 1), carry.data());
      const T* cp = lstm ? (k ? c + step_at(k - 1) * BH : s.c0) : nullptr;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t row = t * B + b, e = b * H + u0;
        row_grads<T>(s.mode, H, n, dy + row * H + u0, carry.data() + e,
                     lstm ? dc + row * H + u0 : nullptr, lstm ? dcc.data() + e : nullptr,
                     s.xw + row * GH + u0, hg + row * GH + u0, s.bias + u0, hprev + row * H + u0,
                     lstm ? cp + e : nullptr, lstm ? c + row * H + u0 : nullptr, y + row * H + u0,
                     dgx + row * GH + u0, dgh + row * GH + u0);
      }
      barrier();  // the next step's product reads every unit's dgh
    }
    into_h(step_at(0), carry.data());
  });
  std::memcpy(dh0, carry.data(), BH * sizeof(T));
  if (dc0) std::memcpy(dc0, dcc.data(), BH * sizeof(T));
}

template void rnn_sequence_forward<float>(const RnnSeq<float>&, float*, float*, float*);
template void rnn_sequence_forward<double>(const RnnSeq<double>&, double*, double*, double*);
template void rnn_sequence_backward<float>(const RnnSeq<float>&, const float*, const float*,
                                           const float*, const float*, const float*, float*, float*,
                                           float*, float*, float*);
template void rnn_sequence_backward<double>(const RnnSeq<double>&, const double*, const double*,
                                            const double*, const double*, const double*, double*,
                                            double*, double*, double*, double*);

}  // namespace kiln::cpu
