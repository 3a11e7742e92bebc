// Recurrent modules (torch.nn.RNN / LSTM / GRU): multi-layer, PyTorch gate order, weight names
// and initialization. Each layer projects the whole input sequence in one GEMM up front (as
// cuDNN and PyTorch do) and then loops over time steps with Kiln ops, so the same code runs
// eagerly, in a graph and under jit (where the loop unrolls into the trace).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct RNNOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  /// true: input and output are [batch, time, feature]; false: [time, batch, feature].
  bool batch_first = false;
  bool bias = true;
  /// Only for the plain RNN: "tanh" or "relu".
  std::string nonlinearity = "tanh";
};

/// Recurrent state: h is [num_layers, batch, hidden]; c (LSTM only) likewise.
struct RNNState {
  Tensor h;
  Tensor c;
};

/// The shared engine of RNN, LSTM and GRU.
class RNNBase : public Module {
 public:
  enum class Mode { RNN, LSTM, GRU };
  RNNBase(Mode mode, RNNOptions opts);

  /// x: [T, B, input] (or [B, T, input] with batch_first). `state` may be empty (zeros).
  /// Returns the last layer's outputs for every step ([T, B, H] or [B, T, H]) and the final
  /// state of every layer.
  std::pair<Tensor, RNNState> forward(const Tensor& x, const RNNState& state = {});
  std::pair<Tensor, RNNState> operator()(const Tensor& x, const RNNState& state = {}) {
    return forward(x, state);
  }
  const RNNOptions& options() const { return opts_; }
  std::string type_name() const override;

 private:
  Mode mode_;
  RNNOptions opts_;
  int64_t gates_;
  // Per layer: weight_ih [G*H, in], weight_hh [G*H, H], bias_ih [G*H], bias_hh [G*H].
  std::vector<Tensor> w_ih_, w_hh_, b_ih_, b_hh_;
};

/// Elman RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh).
class RNN : public RNNBase {
 public:
  explicit RNN(RNNOptions opts) : RNNBase(Mode::RNN, std::move(opts)) {}
};

/// LSTM with gates i, f, g, o (PyTorch order).
class LSTM : public RNNBase {
 public:
  explicit LSTM(RNNOptions opts) : RNNBase(Mode::LSTM, std::move(opts)) {}
};

/// GRU with gates r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn)) as in PyTorch.
class GRU : public RNNBase {
 public:
  explicit GRU(RNNOptions opts) : RNNBase(Mode::GRU, std::move(opts)) {}
};

}  // namespace kiln::nn
