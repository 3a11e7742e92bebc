// ONNX converters for recurrent layers and control flow: LSTM, GRU and RNN as one rnn_sequence
// op per direction where they are torch's cells, else unrolled over the (static) sequence
// length (clip, peepholes, other activations), If as Kiln's cond (Switch/Merge) or, with a
// condition known at import, the taken branch inline, and Loop unrolled when its trip count is
// known at import or as a while_loop otherwise; Scan unrolled over its static scan length.
#include <algorithm>
#include <cmath>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// Unrolling creates nodes per step and per iteration: bounded so that a small file cannot ask
// for millions of nodes.
constexpr int64_t kMaxUnroll = 4096;

// ---- recurrent layers ------------------------------------------------------------------------

struct Act {
  std::string name;
  double alpha = 0, beta = 0;
  Tensor operator()(const Tensor& x) const {
    if (name == "Sigmoid") return sigmoid(x);
    if (name == "Tanh") return tanh(x);
    if (name == "Relu") return relu(x);
    if (name == "LeakyRelu") return leaky_relu(x, alpha);
    if (name == "Elu") return elu(x, alpha);
    if (name == "Softsign") return div(x, add(abs(x), 1.0));
    if (name == "Softplus") return softplus(x);
    if (name == "Affine") return add(mul(x, alpha), beta);
    if (name == "ScaledTanh") return mul(tanh(mul(x, beta)), alpha);
    if (name == "HardSigmoid") return clamp(add(mul(x, alpha), beta), 0.0, 1.0);
    if (name == "ThresholdedRelu") return where(gt(x, alpha), x, zeros_like(x));
    fail(kOp, "unknown recurrent activation '", name, "'");
  }
};

std::vector<Act> activations(const NodeIn& n, std::vector<std::string> defaults, int dirs) {
  std::vector<Act> acts;
  const auto* a = n.attr("activations");
  std::vector<std::string> names;
  if (a) names.assign(a->strings().begin(), a->strings().end());
  const auto alphas = n.floats("activation_alpha"), betas = n.floats("activation_beta");
  const size_t per = defaults.size();
  for (int d = 0; d < dirs; ++d)
    for (size_t k = 0; k < per; ++k) {
      Act act;
      const size_t idx = d * per + k;
      act.name = idx < names.size() ? names[idx] : defaults[k];
      // Defaults per ONNX for the functions that take parameters.
      if (act.name == "LeakyRelu") act.alpha = 0.01;
      if (act.name == "HardSigmoid") act.alpha = 0.2, act.beta = 0.5;
      if (act.name == "Elu" || act.name == "ThresholdedRelu") act.alpha = 1.0;
      if (idx < alphas.size()) act.alpha = alphas[idx];
      if (idx < betas.size()) act.beta = betas[idx];
      acts.push_back(act);
    }
  return acts;
}

struct RnnSpec {
  int gates;  // 4 LSTM, 3 GRU, 1 RNN
  std::vector<std::string> acts;
};

// One LSTM/GRU/RNN node unrolled over its (static) sequence: the checks and attributes are read
// once, then each direction runs its steps on the weights sliced for it.
class Recurrent {
 public:
  Recurrent(NodeIn& n, const RnnSpec& spec) : n_(n), spec_(spec), G_(spec.gates) {}

  TL run() {
    read_node();
    std::vector<Tensor> ys(dirs_), hs(dirs_), cs(dirs_);
    for (int d = 0; d < dirs_; ++d) run_direction(d, ys[d], hs[d], cs[d]);
    // [T, D, B, H] and [D, B, H]; one direction's are views, not copies
    Tensor Y = dirs_ == 1 ? unsqueeze(ys[0], 1) : stack(ys, 1);
    Tensor Yh = dirs_ == 1 ? unsqueeze(hs[0], 0) : stack(hs, 0);
    Tensor Yc = dirs_ == 1 ? unsqueeze(cs[0], 0) : stack(cs, 0);
    if (batch_first_) {
      Y = permute(Y, {2, 0, 1, 3});  // [B, T, D, H]
      Yh = transpose(Yh, 0, 1);
      Yc = transpose(Yc, 0, 1);
    }
    return TL{Y, Yh, G_ == 4 ? Yc : Tensor()};
  }

 private:
  // One direction's weights and its running state.
  struct Dir {
    Tensor w, r, wb, rb;  // biases undefined when B is absent
    Tensor h, c, P;       // P: LSTM peepholes, undefined when absent
  };

  void read_node() {
    x_ = n_.req(0);
    const Tensor &W = n_.req(1), &R = n_.req(2);
    batch_first_ = n_.i("layout", 0) != 0;
    if (batch_first_) x_ = transpose(x_, 0, 1);
    if (x_.dim() != 3 || !x_.shape().is_static()) n_.fail("X must be static 3-D, got ", x_.shape());
    T_ = x_.size(0), B_ = x_.size(1);
    dir_ = n_.s("direction", "forward");
    dirs_ = dir_ == "bidirectional" ? 2 : 1;
    if (dir_ != "forward" && dir_ != "reverse" && dir_ != "bidirectional")
      n_.fail("direction ", dir_);
    H_ = n_.req_i("hidden_size");
    if (W.dim() != 3 || W.size(0) != dirs_ || W.size(1) != G_ * H_ || R.dim() != 3 ||
        R.size(1) != G_ * H_ || R.size(2) != H_)
      n_.fail("W ", W.shape(), " and R ", R.shape(), " do not match hidden_size ", H_);
    if (T_ > kMaxUnroll) n_.fail("sequence length ", T_, " is more than ", kMaxUnroll, " steps");
    // The unrolled graph grows with T: charged before it is built.
    charge_nodes(n_, T_ * 40 * dirs_);
    charge_fold(n_, 2 * static_numel(Shape{B_, H_}) * dirs_);
    if (n_.has_input(4)) {
      const Tensor& sl = n_.in[4];
      if (!sl.is_concrete()) n_.fail("sequence_lens must be known at import");
      for (int64_t v : sl.to_vector<int64_t>())
        if (v != T_) n_.fail("sequence_lens shorter than the sequence are not supported");
    }
    clip_ = n_.f("clip", 0.0);
    lbr_ = n_.i("linear_before_reset", 0) != 0;
    couple_ = n_.i("input_forget", 0) != 0;
    acts_ = activations(n_, spec_.acts, dirs_);
  }

  Tensor of_dir(const Tensor& t, int d) const { return squeeze(slice(t, 0, d, d + 1), 0); }

  Dir dir_inputs(int d) const {
    Dir s;
    s.w = of_dir(n_.in[1], d);
    s.r = of_dir(n_.in[2], d);
    if (n_.has_input(3)) {
      Tensor b = of_dir(n_.in[3], d);
      s.wb = slice(b, 0, 0, G_ * H_);
      s.rb = slice(b, 0, G_ * H_, 2 * G_ * H_);
    }
    s.h = n_.has_input(5) ? of_dir(n_.in[5], d) : zeros(Shape{B_, H_}, x_.dtype());
    s.c = n_.has_input(6) ? of_dir(n_.in[6], d) : zeros(Shape{B_, H_}, x_.dtype());
    if (G_ == 4 && n_.has_input(7)) s.P = of_dir(n_.in[7], d);
    return s;
  }

  void run_direction(int d, Tensor& y, Tensor& h, Tensor& c) {
    const bool rev = dir_ == "reverse" || d == 1;
    Dir s = dir_inputs(d);
    if (const char* mode = fused_mode(d)) return run_fused(s, mode, rev, y, h, c);
    // The input projection of every step in one GEMM.
    Tensor xw = matmul(x_, transpose(s.w, 0, 1));
    if (s.wb.defined()) xw = add(xw, s.wb);
    const Act* a = &acts_[d * spec_.acts.size()];
    const Tensor rt = transpose(s.r, 0, 1);
    std::vector<Tensor> steps(T_);
    for (int64_t k = 0; k < T_; ++k) {
      const int64_t t = rev ? T_ - 1 - k : k;
      const Tensor xt = squeeze(slice(xw, 0, t, t + 1), 0);
      if (G_ == 4)
        lstm_step(xt, rt, a, s);
      else if (G_ == 3)
        gru_step(xt, rt, a, s);
      else
        rnn_step(xt, rt, a, s);
      steps[t] = s.h;
    }
    y = stack(steps, 0);  // [T, B, H]
    h = s.h;
    c = s.c;
  }

  // rnn_sequence's mode for direction d when the node is one it computes (torch's cells: the
  // default activations, no clip, peepholes or coupled gates, GRU with linear_before_reset);
  // null for the step-by-step graph below.
  const char* fused_mode(int d) const {
    const Act* a = &acts_[d * spec_.acts.size()];
    if (clip_ > 0 || couple_ || (G_ == 4 && n_.has_input(7))) return nullptr;
    if (G_ == 4 && a[0].name == "Sigmoid" && a[1].name == "Tanh" && a[2].name == "Tanh")
      return "lstm";
    if (G_ == 3 && lbr_ && a[0].name == "Sigmoid" && a[1].name == "Tanh") return "gru";
    if (G_ == 1 && a[0].name == "Tanh") return "rnn_tanh";
    if (G_ == 1 && a[0].name == "Relu") return "rnn_relu";
    return nullptr;
  }

  // ONNX's gate blocks (LSTM i, o, f, c; GRU z, r, h) in torch's order (i, f, g, o; r, z, n),
  // along dim 0. Folded at import when the weights are initializers.
  Tensor torch_gate_order(const Tensor& t) const {
    static const std::vector<int64_t> lstm{0, 2, 3, 1}, gru{1, 0, 2}, one{0};
    std::vector<Tensor> parts;
    for (int64_t k : G_ == 4 ? lstm : G_ == 3 ? gru : one)
      parts.push_back(slice(t, 0, k * H_, (k + 1) * H_));
    return G_ == 1 ? t : cat(parts, 0);
  }

  // The whole direction as one rnn_sequence: the input projection of every step in one GEMM,
  // then the steps in one kernel (the recurrent weight packed for it at import).
  void run_fused(const Dir& s, const char* mode, bool rev, Tensor& y, Tensor& h, Tensor& c) const {
    const Tensor xw = linear(x_, torch_gate_order(s.w),  // the bias in the GEMM's epilogue
                             s.wb.defined() ? torch_gate_order(s.wb) : Tensor());
    const Tensor rb = s.rb.defined() ? torch_gate_order(s.rb) : Tensor();
    RnnSequenceOut out =
        rnn_sequence(xw, torch_gate_order(s.r), rb, s.h, G_ == 4 ? s.c : Tensor(), mode, rev);
    const int64_t last = rev ? 0 : T_ - 1;
    y = out.h;
    h = squeeze(slice(y, 0, last, last + 1), 0);
    c = G_ == 4 ? squeeze(slice(out.c, 0, last, last + 1), 0) : s.c;
  }

  Tensor clipped(const Tensor& t) const { return clip_ > 0 ? clamp(t, -clip_, clip_) : t; }
  Tensor gate(const Tensor& t, int64_t k) const { return slice(t, -1, k * H_, (k + 1) * H_); }

  // Gates i, o, f, c in ONNX's order; peepholes P are [i, o, f].
  void lstm_step(const Tensor& xt, const Tensor& rt, const Act* a, Dir& s) const {
    Tensor g = add(xt, matmul(s.h, rt));
    if (s.rb.defined()) g = add(g, s.rb);
    Tensor gi = gate(g, 0), go = gate(g, 1), gf = gate(g, 2), gc = gate(g, 3);
    if (s.P.defined()) {
      gi = add(gi, mul(slice(s.P, 0, 0, H_), s.c));
      gf = add(gf, mul(slice(s.P, 0, 2 * H_, 3 * H_), s.c));
    }
    Tensor i = a[0](clipped(gi));
    Tensor f = couple_ ? sub(1.0, i) : a[0](clipped(gf));
    Tensor cc = a[1](clipped(gc));
    s.c = add(mul(f, s.c), mul(i, cc));
    if (s.P.defined()) go = add(go, mul(slice(s.P, 0, H_, 2 * H_), s.c));
    Tensor o = a[0](clipped(go));
    s.h = mul(o, a[2](s.c));
  }

  // Gates z, r, h; linear_before_reset applies r after the hidden GEMM instead of before.
  void gru_step(const Tensor& xt, const Tensor& rt, const Act* a, Dir& s) const {
    Tensor hr = matmul(s.h, rt);
    if (s.rb.defined()) hr = add(hr, s.rb);
    Tensor z = a[0](clipped(add(gate(xt, 0), gate(hr, 0))));
    Tensor rr = a[0](clipped(add(gate(xt, 1), gate(hr, 1))));
    Tensor hh;
    if (lbr_) {
      hh = a[1](clipped(add(gate(xt, 2), mul(rr, gate(hr, 2)))));
    } else {
      Tensor rh = matmul(mul(rr, s.h), transpose(slice(s.r, 0, 2 * H_, 3 * H_), 0, 1));
      if (s.rb.defined()) rh = add(rh, slice(s.rb, 0, 2 * H_, 3 * H_));
      hh = a[1](clipped(add(gate(xt, 2), rh)));
    }
    s.h = add(mul(sub(1.0, z), hh), mul(z, s.h));
  }

  void rnn_step(const Tensor& xt, const Tensor& rt, const Act* a, Dir& s) const {
    Tensor g = add(xt, matmul(s.h, rt));
    if (s.rb.defined()) g = add(g, s.rb);
    s.h = a[0](clipped(g));
  }

  NodeIn& n_;
  const RnnSpec& spec_;
  const int64_t G_;
  Tensor x_;
  bool batch_first_ = false;
  int64_t T_ = 0, B_ = 0, H_ = 0;
  std::string dir_;
  int dirs_ = 1;
  double clip_ = 0.0;
  bool lbr_ = false, couple_ = false;
  std::vector<Act> acts_;
};

TL recurrent(NodeIn& n, const RnnSpec& spec) { return Recurrent(n, spec).run(); }

KILN_ONNX_OP(LSTM) { return recurrent(n, {4, {"Sigmoid", "Tanh", "Tanh"}}); }
KILN_ONNX_OP(GRU) { return recurrent(n, {3, {"Sigmoid", "Tanh"}}); }
KILN_ONNX_OP(RNN) { return recurrent(n, {1, {"Tanh"}}); }

// ---- control flow ----------------------------------------------------------------------------

const ::onnx::GraphProto& graph_attr(const NodeIn& n, const char* name) {
  const auto* a = n.attr(name);
  if (!a || a->type() != ::onnx::AttributeProto::GRAPH)
    n.fail("attribute '", name, "' must be a graph");
  return a->g();
}

bool known_bool(const Tensor& t, bool* v) {
  if (!t.is_concrete() || t.numel() != 1) return false;
  *v = t.to_vector<int64_t>()[0] != 0;
  return true;
}

KILN_ONNX_OP(If) {
  const Tensor& c = n.req(0);
  const auto& then_g = graph_attr(n, "then_branch");
  const auto& else_g = graph_attr(n, "else_branch");
  bool v;
  if (known_bool(c, &v)) return import_subgraph(n.ctx, v ? then_g : else_g, {}, "If branch");
  if (c.numel() != 1) n.fail("the condition must hold one element, got ", c.shape());
  Tensor pred = reshape(cast(c, Bool), Shape{});
  return cond(
      pred, [&] { return import_subgraph(n.ctx, then_g, {}, "If then_branch"); },
      [&] { return import_subgraph(n.ctx, else_g, {}, "If else_branch"); });
}

KILN_ONNX_OP(Loop) {
  const auto& body = graph_attr(n, "body");
  // M and cond may be empty names, but their slots are there (a file may leave them out).
  if (n.in.size() < 2)
    n.fail("takes the trip count, the condition and the loop values: ", n.in.size(),
           " inputs given, expected at least 2");
  const Tensor M = n.input(0), c0 = n.input(1);
  const size_t nv = n.in.size() - 2;
  const int64_t n_scan = body.output_size() - 1 - static_cast<int64_t>(nv);
  if (n_scan < 0) n.fail("the body has ", body.output_size(), " outputs for ", nv, " loop values");
  std::vector<Tensor> vars(n.in.begin() + 2, n.in.end());
  for (size_t k = 0; k < nv; ++k)
    if (!vars[k].defined()) n.fail("loop value ", k, " is missing");
  int64_t trips = -1;
  if (M.defined()) {
    if (!M.is_concrete() || M.numel() != 1) {
      trips = -2;  // symbolic: while_loop
    } else {
      trips = M.to_vector<int64_t>()[0];
    }
  }
  bool go = true;
  const bool cond_known = !c0.defined() || known_bool(c0, &go);
  // Unrolled while the trip count and the condition are known at import.
  if (trips >= -1 && cond_known) {
    std::vector<std::vector<Tensor>> scans(n_scan);
    int64_t it = 0;
    for (; go && (trips < 0 || it < trips); ++it) {
      if (it >= kMaxUnroll) n.fail("more than ", kMaxUnroll, " iterations to unroll");
      charge_nodes(n, body.node_size() + 1);
      std::vector<Tensor> in{scalar_tensor(static_cast<double>(it), Int64),
                             scalar_tensor(1.0, Bool)};
      in.insert(in.end(), vars.begin(), vars.end());
      std::vector<Tensor> out = import_subgraph(n.ctx, body, in, "Loop body");
      for (size_t k = 0; k < nv; ++k) vars[k] = out[1 + k];
      for (int64_t k = 0; k < n_scan; ++k) scans[k].push_back(out[1 + nv + k]);
      if (!known_bool(out[0], &go)) {
        if (trips < 0 || n_scan > 0)
          n.fail("the body's condition must be known at import to unroll");
        go = true;  // a symbolic condition under a known trip count: not supported either
        n.fail("a condition computed at run time is not supported with a trip count");
      }
    }
    TL res = vars;
    for (int64_t k = 0; k < n_scan; ++k) {
      if (scans[k].empty()) n.fail("scan output ", k, " of a loop that ran no iteration");
      res.push_back(stack(scans[k], 0));
    }
    return res;
  }
  if (n_scan > 0) n.fail("scan outputs need a trip count known at import");
  // A while_loop: vars = {iteration, condition, values...}.
  std::vector<Tensor> lv{scalar_tensor(0.0, Int64), c0.defined() ? reshape(cast(c0, Bool), Shape{})
                                                                 : scalar_tensor(1.0, Bool)};
  lv.insert(lv.end(), vars.begin(), vars.end());
  Tensor limit = M.defined() ? reshape(cast(M, Int64), Shape{}) : Tensor();
  auto cond_fn = [&](const std::vector<Tensor>& v) {
    return limit.defined() ? logical_and(v[1], lt(v[0], limit)) : v[1];
  };
  auto body_fn = [&](const std::vector<Tensor>& v) {
    std::vector<Tensor> out = import_subgraph(n.ctx, body, v, "Loop body");
    std::vector<Tensor> next{add(v[0], 1), reshape(cast(out[0], Bool), Shape{})};
    next.insert(next.end(), out.begin() + 1, out.end());
    return next;
  };
  std::vector<Tensor> fin = while_loop(cond_fn, body_fn, lv);
  return TL(fin.begin() + 2, fin.end());
}

// Scan: the body run over slices of the scan inputs, unrolled as Loop is when its trip count is
// known (the scan length comes from the inputs' static shapes). Opset 8's leading batch axis
// (and sequence_lens, which must then be the full length) is unrolled too.
TL scan_unrolled(NodeIn& n, const ::onnx::GraphProto& body, std::vector<Tensor> states,
                 const std::vector<Tensor>& xs, const std::vector<int64_t>& in_axes,
                 const std::vector<int64_t>& in_dirs, const std::vector<int64_t>& out_axes,
                 const std::vector<int64_t>& out_dirs) {
  const size_t N = states.size();
  const int64_t K = body.output_size() - static_cast<int64_t>(N);
  int64_t L = -1;
  for (size_t j = 0; j < xs.size(); ++j) {
    const int64_t len = xs[j].size(in_axes[j]);
    if (len < 0) n.fail("scan input ", j, " ", xs[j].shape(), ": its scan axis must be static");
    if (L >= 0 && len != L)
      n.fail("scan input ", j, " has length ", len, " on its scan axis, input 0 has ", L);
    L = len;
  }
  if (L > kMaxUnroll) n.fail("scan length ", L, " is more than ", kMaxUnroll, " to unroll");
  charge_nodes(n, L * (body.node_size() + 1));
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(K));
  for (int64_t t = 0; t < L; ++t) {
    std::vector<Tensor> in = states;
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t at = in_dirs[j] ? L - 1 - t : t;
      in.push_back(squeeze(slice(xs[j], in_axes[j], at, at + 1), in_axes[j]));
    }
    std::vector<Tensor> out = import_subgraph(n.ctx, body, in, "Scan body");
    for (size_t k = 0; k < N; ++k) states[k] = out[k];
    for (int64_t k = 0; k < K; ++k) outs[k].push_back(out[N + k]);
  }
  TL res = states;
  for (int64_t k = 0; k < K; ++k) {
    if (outs[k].empty()) n.fail("scan output ", k, " of a scan of length 0");
    if (out_dirs[k]) std::reverse(outs[k].begin(), outs[k].end());
    const int64_t r = outs[k][0].dim() + 1;
    const int64_t axis = out_axes[k] < 0 ? out_axes[k] + r : out_axes[k];
    if (axis < 0 || axis >= r) n.fail("scan_output_axes[", k, "] = ", out_axes[k], " for rank ", r);
    res.push_back(stack(outs[k], axis));
  }
  return res;
}

KILN_ONNX_OP(Scan) {
  const auto& body = graph_attr(n, "body");
  const int64_t M = n.req_i("num_scan_inputs");
  const bool v8 = n.opset < 9;  // opset 8: sequence_lens first, and a batch axis
  const int64_t first = v8 ? 1 : 0;
  const int64_t N = static_cast<int64_t>(n.in.size()) - first - M;
  if (M < 1 || N < 0)
    n.fail(n.in.size(), " inputs for num_scan_inputs ", M, ": expected at least ", M + first);
  const int64_t K = body.output_size() - N;
  if (K < 0) n.fail("the body has ", body.output_size(), " outputs for ", N, " state values");
  std::vector<Tensor> states, xs;
  for (int64_t k = 0; k < N + M; ++k) {
    const Tensor& t = n.req(static_cast<size_t>(first + k));
    (k < N ? states : xs).push_back(t);
  }
  auto per = [&](const char* name, int64_t count, int64_t def) {
    std::vector<int64_t> v = n.ints(name, std::vector<int64_t>(count, def));
    if (static_cast<int64_t>(v.size()) != count)
      n.fail("attribute '", name, "' has ", v.size(), " values, expected ", count);
    return v;
  };
  if (!v8) {
    std::vector<int64_t> in_axes = per("scan_input_axes", M, 0);
    for (int64_t j = 0; j < M; ++j) {
      const int64_t r = xs[j].dim();
      if (in_axes[j] < -r || in_axes[j] >= r)
        n.fail("scan_input_axes[", j, "] = ", in_axes[j], " for scan input ", xs[j].shape());
      if (in_axes[j] < 0) in_axes[j] += r;
    }
    return scan_unrolled(n, body, states, xs, in_axes, per("scan_input_directions", M, 0),
                         per("scan_output_axes", K, 0), per("scan_output_directions", K, 0));
  }
  // Opset 8: axis 0 is the batch, axis 1 the sequence, for every input and output.
  const std::vector<int64_t> dirs = per("directions", M, 0);
  for (const Tensor& t : states)
    if (t.dim() < 1 || t.size(0) < 0) n.fail("state ", t.shape(), " must have a static batch axis");
  for (const Tensor& t : xs)
    if (t.dim() < 2) n.fail("scan input ", t.shape(), " must be [batch, sequence, ...]");
  const int64_t B = xs[0].size(0);
  if (B <= 0) n.fail("scan input ", xs[0].shape(), " must have a static, nonzero batch axis");
  if (n.has_input(0)) {
    const Tensor& sl = n.in[0];
    if (!sl.is_concrete()) n.fail("sequence_lens must be known at import");
    for (int64_t v : sl.to_vector<int64_t>())
      if (v != xs[0].size(1)) n.fail("sequence_lens shorter than the sequence are not supported");
  }
  std::vector<std::vector<Tensor>> per_batch(static_cast<size_t>(N + K));
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Tensor> st, x;
    for (const Tensor& t : states) st.push_back(squeeze(slice(t, 0, b, b + 1), 0));
    for (const Tensor& t : xs) x.push_back(squeeze(slice(t, 0, b, b + 1), 0));
    TL r = scan_unrolled(n, body, st, x, std::vector<int64_t>(M, 0), dirs,
                         std::vector<int64_t>(K, 0), std::vector<int64_t>(K, 0));
    for (int64_t k = 0; k < N + K; ++k) per_batch[k].push_back(r[k]);
  }
  TL res;
  for (auto& v : per_batch) res.push_back(stack(v, 0));
  return res;
}

}  // namespace
}  // namespace kiln::onnx::detail
