// Samples for the recurrent family (kiln/ops/recurrent.cpp): rnn_sequence in its four modes,
// forward and reversed, with and without an initial state, at sizes that reach the kernel's
// partial unit blocks (H not a multiple of the vector) and its batch row blocks (6 rows and a
// remainder); its gradient op through gradcheck. The reference runs torch's cell formulas in
// float64 loops.
#include <cmath>
#include <string>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

size_t z(int64_t i) { return static_cast<size_t>(i); }
double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

int64_t gates_of(const std::string& mode) { return mode == "lstm" ? 4 : mode == "gru" ? 3 : 1; }

// in: xw [T, B, G H], w_hh [G H, H], b_hh [G H], h0 [B, H] (, c0). Returns every step's h,
// then (LSTM) every step's c, flattened.
Tensor ref_rnn(const In& in, const std::string& mode, bool reverse) {
  const int64_t T = in[0].size(0), B = in[0].size(1), H = in[1].size(1), G = gates_of(mode);
  const auto xw = vals(in[0]), w = vals(in[1]), bias = vals(in[2]);
  std::vector<double> h = vals(in[3]), c = mode == "lstm" ? vals(in[4]) : std::vector<double>();
  std::vector<double> ys(z(T * B * H)), cs(z(T * B * H));
  for (int64_t k = 0; k < T; ++k) {
    const int64_t t = reverse ? T - 1 - k : k;
    std::vector<double> hn(z(B * H)), cn(c.size());
    for (int64_t b = 0; b < B; ++b) {
      auto x = [&](int64_t g, int64_t u) { return xw[z((t * B + b) * G * H + g * H + u)]; };
      auto hg = [&](int64_t g, int64_t u) {  // (h W^T + b_hh) of gate g, unit u
        double s = bias[z(g * H + u)];
        for (int64_t j = 0; j < H; ++j) s += h[z(b * H + j)] * w[z((g * H + u) * H + j)];
        return s;
      };
      for (int64_t u = 0; u < H; ++u) {
        const size_t e = z(b * H + u);
        if (mode == "lstm") {
          const double i = sig(x(0, u) + hg(0, u)), f = sig(x(1, u) + hg(1, u));
          const double g = std::tanh(x(2, u) + hg(2, u)), o = sig(x(3, u) + hg(3, u));
          cn[e] = f * c[e] + i * g;
          hn[e] = o * std::tanh(cn[e]);
        } else if (mode == "gru") {
          const double r = sig(x(0, u) + hg(0, u)), zz = sig(x(1, u) + hg(1, u));
          const double n = std::tanh(x(2, u) + r * hg(2, u));
          hn[e] = (1 - zz) * n + zz * h[e];
        } else {
          const double a = x(0, u) + hg(0, u);
          hn[e] = mode == "rnn_tanh" ? std::tanh(a) : std::max(a, 0.0);
        }
      }
    }
    h = hn, c = cn;
    for (int64_t e = 0; e < B * H; ++e) {
      ys[z(t * B * H + e)] = h[z(e)];
      if (mode == "lstm") cs[z(t * B * H + e)] = c[z(e)];
    }
  }
  if (mode == "lstm") ys.insert(ys.end(), cs.begin(), cs.end());
  return from_vals(ys, Shape{static_cast<int64_t>(ys.size())});
}

OpSample sample(const std::string& mode, bool reverse, bool state, int64_t T, int64_t B, int64_t H,
                uint64_t seed) {
  OpSample o;
  o.ops = {"rnn_sequence", "rnn_sequence_grad"};
  o.name = mode + (reverse ? "_reverse" : "") + (state ? "_state" : "") + "_h" + std::to_string(H) +
           "_b" + std::to_string(B);
  const int64_t G = gates_of(mode);
  o.inputs = [=] {
    In in{rnd({T, B, G * H}, seed, 0.8), rnd({G * H, H}, seed + 1, 0.5),
          rnd({G * H}, seed + 2, 0.3), state ? rnd({B, H}, seed + 3, 0.5) : zeros({B, H}, Float64)};
    if (mode == "lstm") in.push_back(state ? rnd({B, H}, seed + 4, 0.5) : zeros({B, H}, Float64));
    return in;
  };
  o.run = [=](const In& in) {
    RnnSequenceOut r =
        rnn_sequence(in[0], in[1], in[2], in[3], mode == "lstm" ? in[4] : Tensor(), mode, reverse);
    return mode == "lstm" ? cat({flatten(r.h), flatten(r.c)}, 0) : flatten(r.h);
  };
  o.reference = [=](const In& in) { return ref_rnn(in, mode, reverse); };
  if (B == 1) o.noncontig_inputs = {1};  // a one-row state is contiguous whatever its strides
  return o;
}

const SampleRegistrar reg([] {
  std::vector<OpSample> v;
  uint64_t seed = 2300;
  for (const char* mode : {"lstm", "gru", "rnn_tanh", "rnn_relu"}) {
    v.push_back(sample(mode, false, true, 3, 7, 9, seed += 10));  // partial block, 6 + 1 rows
    v.push_back(sample(mode, true, false, 4, 1, 5, seed += 10));  // one row, reversed
  }
  // A float32 block and a remainder (20 = 16 + 4; float64: 2 x 8 + 4).
  v.push_back(sample("lstm", true, true, 2, 3, 20, seed += 10));
  // Enough work per step (16 x 32 x 128 multiply-adds) for the threads to split the units.
  v.push_back(sample("lstm", false, true, 2, 16, 32, seed += 10));
  return v;
}());

}  // namespace
}  // namespace kiln::testing
