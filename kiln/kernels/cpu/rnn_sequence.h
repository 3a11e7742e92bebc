// A whole recurrent layer's time loop in one kernel (LSTM, GRU, Elman RNN): each step's hidden
// product and its gate arithmetic run together, the hidden units split across the threads for
// the whole sequence (one barrier per step), instead of a GEMV and a gate kernel per step. The
// input projection of every step is the caller's (one GEMM before the loop). No graph knowledge.
#pragma once
#include <cstdint>

namespace kiln::cpu {

/// torch's gate orders: LSTM i, f, g, o; GRU r, z, n (n = tanh(x_n + r (W_hn h + b_hn)));
/// RNN one gate.
enum class RnnMode { kLstm, kGru, kRnnTanh, kRnnRelu };

/// Gates per hidden unit: 4, 3, 1.
int rnn_gates(RnnMode m);

/// Hidden units per block of the packed weight: one 64-byte vector of T (16 floats, 8 doubles).
template <typename T>
constexpr int64_t kRnnBlock = 64 / static_cast<int64_t>(sizeof(T));

/// One direction of a layer: steps t = 0..T-1 (reverse: T-1..0) of
///   gates = xw[t] + h_prev @ wt + bias        (xw: the input projection with its bias)
/// and the cell update of `mode`, wt [hidden, G hidden] the recurrent weight transposed, held
/// packed: wp[blk][k][g][j] = wt[k][g hidden + blk W + j] for blocks of W = kRnnBlock<T> units
/// (zeros past hidden), so that a thread's units stream from memory in order. Contiguous
/// row-major buffers.
template <typename T>
struct RnnSeq {
  RnnMode mode = RnnMode::kLstm;
  bool reverse = false;
  int64_t steps = 0, batch = 0, hidden = 0;
  const T* xw = nullptr;    ///< [steps, batch, G hidden]
  const T* wp = nullptr;    ///< [ceil(hidden / W), hidden, G, W]: the packed weight
  const T* bias = nullptr;  ///< [G hidden]
  const T* h0 = nullptr;    ///< [batch, hidden]
  const T* c0 = nullptr;    ///< [batch, hidden], LSTM only
};

/// y [steps, batch, hidden] gets every step's h; c (LSTM only) every step's cell state; hg
/// (null: not kept) every step's hidden products h_prev @ wt [steps, batch, G hidden], which
/// spares the backward their recomputation.
template <typename T>
void rnn_sequence_forward(const RnnSeq<T>& s, T* y, T* c, T* hg = nullptr);

/// Gradients from dy (and dc, LSTM) [steps, batch, hidden] at every step, given the
/// forward's y, c and hg (null: recomputed, one GEMM): dgx [steps, batch, G hidden] of the gates'
/// input parts (= of xw), dgh of their hidden parts (= of h_prev @ wt + bias; differs from dgx for
/// GRU's n gate only), hprev [steps, batch, hidden] the h each step read, dh0 and dc0 (LSTM) of the
/// initial state.
template <typename T>
void rnn_sequence_backward(const RnnSeq<T>& s, const T* y, const T* c, const T* hg, const T* dy,
                           const T* dc, T* dgx, T* dgh, T* hprev, T* dh0, T* dc0);

extern template void rnn_sequence_forward<float>(const RnnSeq<float>&, float*, float*, float*);
extern template void rnn_sequence_forward<double>(const RnnSeq<double>&, double*, double*, double*);
extern template void rnn_sequence_backward<float>(const RnnSeq<float>&, const float*, const float*,
                                                  const float*, const float*, const float*, float*,
                                                  float*, float*, float*, float*);
extern template void rnn_sequence_backward<double>(const RnnSeq<double>&, const double*,
                                                   const double*, const double*, const double*,
                                                   const double*, double*, double*, double*,
                                                   double*, double*);

}  // namespace kiln::cpu
