// RNN / LSTM / GRU: one input GEMM per layer for all time steps, then the steps in one
// rnn_sequence op (a while_loop of small ops when the length is dynamic).
#include "kiln/nn/rnn.h"

#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::nn {

namespace {
// PyTorch's RNN init: every weight and bias ~ U(-1/sqrt(hidden), 1/sqrt(hidden)).
Tensor uniform_init(const Shape& s, double bound) {
  NoGradGuard ng;
  return sub(mul(rand(s), 2.0 * bound), bound);
}
}  // namespace

RNNBase::RNNBase(Mode mode, RNNOptions opts) : mode_(mode), opts_(std::move(opts)) {
  const char* who = mode == Mode::RNN ? "RNN" : mode == Mode::LSTM ? "LSTM" : "GRU";
  if (opts_.input_size <= 0 || opts_.hidden_size <= 0 || opts_.num_layers <= 0)
    fail(who, "input_size, hidden_size and num_layers must be positive, got ", opts_.input_size,
         ", ", opts_.hidden_size, ", ", opts_.num_layers);
  // gates * hidden rows per weight must be countable.
  constexpr int64_t kLimit = int64_t(1) << 40;
  if (opts_.input_size > kLimit || opts_.hidden_size > kLimit || opts_.num_layers > kLimit)
    fail(who, "input_size, hidden_size and num_layers must each be at most 2^40, got ",
         opts_.input_size, ", ", opts_.hidden_size, ", ", opts_.num_layers);
  if (mode == Mode::RNN && opts_.nonlinearity != "tanh" && opts_.nonlinearity != "relu")
    fail(who, "nonlinearity must be 'tanh' or 'relu', got '", opts_.nonlinearity, "'");
  gates_ = mode == Mode::LSTM ? 4 : mode == Mode::GRU ? 3 : 1;
  const int64_t H = opts_.hidden_size, L = opts_.num_layers;
  const double bound = 1.0 / std::sqrt(static_cast<double>(H));
  // Reserve first: registration keeps pointers into these vectors.
  w_ih_.reserve(L), w_hh_.reserve(L), b_ih_.reserve(L), b_hh_.reserve(L);
  for (int64_t l = 0; l < L; ++l) {
    int64_t in = l == 0 ? opts_.input_size : H;
    w_ih_.push_back(uniform_init({gates_ * H, in}, bound));
    w_hh_.push_back(uniform_init({gates_ * H, H}, bound));
    if (opts_.bias) {
      b_ih_.push_back(uniform_init({gates_ * H}, bound));
      b_hh_.push_back(uniform_init({gates_ * H}, bound));
    }
  }
  for (int64_t l = 0; l < L; ++l) {
    std::string s = "_l" + std::to_string(l);
    register_parameter("weight_ih" + s, &w_ih_[l]);
    register_parameter("weight_hh" + s, &w_hh_[l]);
    if (opts_.bias) {
      register_parameter("bias_ih" + s, &b_ih_[l]);
      register_parameter("bias_hh" + s, &b_hh_[l]);
    }
  }
}

std::string RNNBase::type_name() const {
  return mode_ == Mode::RNN ? "RNN" : mode_ == Mode::LSTM ? "LSTM" : "GRU";
}

namespace {

using Mode = RNNBase::Mode;

// One layer's weights and what its steps need.
struct RnnLayer {
  Mode mode;
  const RNNOptions& opts;
  const Tensor &w_ih, &w_hh;
  Tensor b_ih, b_hh;  // undefined without bias
  int64_t gates;
};

// forward's argument checks: x_in against the options and weights, the initial state against x.
void check_forward(const char* who, const RnnLayer& ly, const Tensor& x_in, const RNNState& state) {
  const RNNOptions& opts = ly.opts;
  if (!x_in.defined() || x_in.dim() != 3)
    fail(who, "input must be 3-D ", opts.batch_first ? "[B, T, input]" : "[T, B, input]",
         ", got shape ", x_in.defined() ? x_in.shape() : Shape{});
  if (!is_floating(x_in.dtype())) fail(who, "input must be floating point, got ", x_in.dtype());
  if (x_in.size(2) != opts.input_size)
    fail(who, "input feature size ", x_in.size(2), " (shape ", x_in.shape(),
         ") does not match input_size ", opts.input_size);
  if (x_in.dtype() != ly.w_ih.dtype())
    fail(who, "input must be ", ly.w_ih.dtype(), " (the dtype of its weights), got ", x_in.dtype(),
         x_in.shape());
  const int64_t T = x_in.size(opts.batch_first ? 1 : 0), B = x_in.size(opts.batch_first ? 0 : 1);
  const Shape state_shape{opts.num_layers, B, opts.hidden_size};
  auto check_state = [&](const Tensor& s, const char* name) {
    if (s.defined() && (s.shape() != state_shape || s.dtype() != x_in.dtype()))
      fail(who, "initial ", name, " must be ", x_in.dtype(), state_shape, " (input ", x_in.dtype(),
           x_in.shape(), "), got ", s.dtype(), s.shape());
  };
  check_state(state.h, "h");
  check_state(state.c, "c");
  if (state.c.defined() && ly.mode != Mode::LSTM) fail(who, "only an LSTM takes a cell state c");
  if (T == 0) fail(who, "input has no time steps (shape ", x_in.shape(), ")");
}

// One step: xt [B, G*H] (the input projection), h and c [B, H].
void cell(const RnnLayer& ly, const Tensor& xt, Tensor& h, Tensor& c) {
  Tensor hp = linear(h, ly.w_hh, ly.b_hh);
  if (ly.mode == Mode::RNN) {
    Tensor pre = add(xt, hp);
    h = ly.opts.nonlinearity == "relu" ? relu(pre) : tanh(pre);
  } else if (ly.mode == Mode::LSTM) {
    auto g = chunk(add(xt, hp), 4, 1);
    Tensor i = sigmoid(g[0]), f = sigmoid(g[1]), gg = tanh(g[2]), o = sigmoid(g[3]);
    c = add(mul(f, c), mul(i, gg));
    h = mul(o, tanh(c));
  } else {
    auto xg = chunk(xt, 3, 1);
    auto hg = chunk(hp, 3, 1);
    Tensor r = sigmoid(add(xg[0], hg[0]));
    Tensor z = sigmoid(add(xg[1], hg[1]));
    Tensor n = tanh(add(xg[2], mul(r, hg[2])));
    // h' = (1 - z) * n + z * h  ==  n + z * (h - n)
    h = add(n, mul(z, sub(h, n)));
  }
}

// A layer whose number of steps is known when building (the batch may be dynamic): all time
// steps' input projections in one GEMM, then the steps in one rnn_sequence op, from layer l's
// slice of `state` (zeros where it is empty). Returns the outputs [T, B, H]; h and c get the
// last state.
Tensor layer_steps(const RnnLayer& ly, const Tensor& layer_in, const RNNState& state, int64_t l,
                   Tensor& h, Tensor& c) {
  const int64_t T = layer_in.size(0), B = layer_in.size(1), H = ly.opts.hidden_size;
  // [T*B, in] -> [T, B, G*H] (a dynamic batch is the reshapes' -1).
  Tensor xp = linear(reshape(layer_in, {B < 0 ? -1 : T * B, layer_in.size(2)}), ly.w_ih, ly.b_ih);
  xp = reshape(xp, {T, B < 0 ? -1 : B, ly.gates * H});
  const bool lstm = ly.mode == Mode::LSTM;
  const char* mode = lstm                             ? "lstm"
                     : ly.mode == Mode::GRU           ? "gru"
                     : ly.opts.nonlinearity == "relu" ? "rnn_relu"
                                                      : "rnn_tanh";
  RnnSequenceOut r =
      rnn_sequence(xp, ly.w_hh, ly.b_hh, state.h.defined() ? state.h.select(0, l) : Tensor(),
                   lstm && state.c.defined() ? state.c.select(0, l) : Tensor(), mode);
  h = squeeze(slice(r.h, 0, T - 1, T), 0);
  c = lstm ? squeeze(slice(r.c, 0, T - 1, T), 0) : Tensor();
  return r.h;
}

// A layer whose length is known only at run time (a graph or a jit trace with a dynamic time
// dim): the steps become one while_loop (TensorFlow's dynamic_rnn). The outputs go into a
// [T, B, H] buffer, row t written by index_add (the rows start as zeros). Arguments and result
// as layer_steps'.
Tensor layer_loop(const RnnLayer& ly, const Tensor& layer_in, const RNNState& state, int64_t l,
                  Tensor& h, Tensor& c) {
  const int64_t H = ly.opts.hidden_size;
  Tensor xp = linear(layer_in, ly.w_ih, ly.b_ih);  // [T, B, G*H]
  auto x_at = [&](const Tensor& t) { return squeeze(index_select(xp, 0, reshape(t, {1})), 0); };
  Tensor first = x_at(scalar_tensor(0, Int64));  // [B, G*H]
  Tensor zero_bh = add(zeros_like(slice(first, 1, 0, 1)), zeros({H}, layer_in.dtype()));  // [B, H]
  Tensor h0 = state.h.defined() ? state.h.select(0, l) : zero_bh;
  Tensor c0 = ly.mode == Mode::LSTM && state.c.defined() ? state.c.select(0, l) : zero_bh;
  Tensor buf = zeros_like(slice(xp, 2, 0, H));  // [T, B, H]
  Tensor len = cast(sum(ones_like(slice(slice(xp, 1, 0, 1), 2, 0, 1))), Int64);
  auto fin =
      while_loop([&](const std::vector<Tensor>& v) { return lt(v[0], len); },
                 [&](const std::vector<Tensor>& v) {
                   Tensor hv = v[1], cv = v[2];
                   cell(ly, x_at(v[0]), hv, cv);
                   Tensor out = index_add(v[3], 0, reshape(v[0], {1}), unsqueeze(hv, 0));
                   return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), hv, cv, out};
                 },
                 {scalar_tensor(0, Int64), h0, c0, buf});
  h = fin[1];
  c = fin[2];
  return fin[3];
}

}  // namespace

std::pair<Tensor, RNNState> RNNBase::forward(const Tensor& x_in, const RNNState& state) {
  const std::string who = type_name();
  auto layer = [&](int64_t l) {
    return RnnLayer{mode_,
                    opts_,
                    w_ih_[l],
                    w_hh_[l],
                    opts_.bias ? b_ih_[l] : Tensor(),
                    opts_.bias ? b_hh_[l] : Tensor(),
                    gates_};
  };
  check_forward(who.c_str(), layer(0), x_in, state);
  Tensor layer_in = opts_.batch_first ? transpose(x_in, 0, 1) : x_in;  // [T, B, in]
  const bool dynamic_length = layer_in.size(0) < 0;
  std::vector<Tensor> h_final, c_final;
  for (int64_t l = 0; l < opts_.num_layers; ++l) {
    Tensor h, c;
    layer_in = dynamic_length ? layer_loop(layer(l), layer_in, state, l, h, c)
                              : layer_steps(layer(l), layer_in, state, l, h, c);
    h_final.push_back(h);
    if (mode_ == Mode::LSTM) c_final.push_back(c);
  }
  RNNState out_state;
  out_state.h = stack(h_final, 0);
  if (mode_ == Mode::LSTM) out_state.c = stack(c_final, 0);
  Tensor y = opts_.batch_first ? transpose(layer_in, 0, 1) : layer_in;
  return {y, out_state};
}

}  // namespace kiln::nn
