// ONNX converters for recurrent layers and control flow: LSTM, GRU and RNN unrolled over the
// (static) sequence length, If as Kiln's cond (Switch/Merge) or, with a condition known at
// import, the taken branch inline, and Loop unrolled when its trip count is known at import or
// as a while_loop otherwise; Scan unrolled over its static scan length.
#include <algorithm>
#include <cmath>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

#define KILN_ONNX_OP(NAME)                                \
  std::vector<Tensor> conv_##NAME(NodeIn& n);             \
  const RegisterConverter reg_##NAME(#NAME, conv_##NAME); \
  std::vector<Tensor> conv_##NAME(NodeIn& n)

using TL = std::vector<Tensor>;

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

TL recurrent(NodeIn& n, const RnnSpec& spec) {
  Tensor x = n.req(0);
  const Tensor &W = n.req(1), &R = n.req(2);
  const bool batch_first = n.i("layout", 0) != 0;
  if (batch_first) x = transpose(x, 0, 1);
  if (x.dim() != 3 || !x.shape().is_static()) n.fail("X must be static 3-D, got ", x.shape());
  const int64_t T = x.size(0), B = x.size(1);
  const std::string dir = n.s("direction", "forward");
  const int dirs = dir == "bidirectional" ? 2 : 1;
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") n.fail("direction ", dir);
  const int64_t H = n.req_i("hidden_size");
  const int64_t G = spec.gates;
  if (W.dim() != 3 || W.size(0) != dirs || W.size(1) != G * H || R.dim() != 3 ||
      R.size(1) != G * H || R.size(2) != H)
    n.fail("W ", W.shape(), " and R ", R.shape(), " do not match hidden_size ", H);
  if (T > kMaxUnroll) n.fail("sequence length ", T, " is more than ", kMaxUnroll, " steps");
  charge_nodes(n, T * 40 * (dir == "bidirectional" ? 2 : 1));
  charge_fold(n, 2 * static_numel(Shape{B, H}) * (dir == "bidirectional" ? 2 : 1));
  if (n.has_input(4)) {
    const Tensor& sl = n.in[4];
    if (!sl.is_concrete()) n.fail("sequence_lens must be known at import");
    for (int64_t v : sl.to_vector<int64_t>())
      if (v != T) n.fail("sequence_lens shorter than the sequence are not supported");
  }
  const double clip = n.f("clip", 0.0);
  const bool lbr = n.i("linear_before_reset", 0) != 0;
  const bool couple = n.i("input_forget", 0) != 0;
  std::vector<Act> acts = activations(n, spec.acts, dirs);
  auto clipped = [&](const Tensor& t) { return clip > 0 ? clamp(t, -clip, clip) : t; };
  std::vector<Tensor> ys(dirs), hs(dirs), cs(dirs);
  for (int d = 0; d < dirs; ++d) {
    const bool rev = dir == "reverse" || d == 1;
    Tensor w = squeeze(slice(W, 0, d, d + 1), 0), r = squeeze(slice(R, 0, d, d + 1), 0);
    Tensor wb, rb;
    if (n.has_input(3)) {
      Tensor b = squeeze(slice(n.in[3], 0, d, d + 1), 0);
      wb = slice(b, 0, 0, G * H);
      rb = slice(b, 0, G * H, 2 * G * H);
    }
    Tensor h =
        n.has_input(5) ? squeeze(slice(n.in[5], 0, d, d + 1), 0) : zeros(Shape{B, H}, x.dtype());
    Tensor c =
        n.has_input(6) ? squeeze(slice(n.in[6], 0, d, d + 1), 0) : zeros(Shape{B, H}, x.dtype());
    Tensor P = G == 4 && n.has_input(7) ? squeeze(slice(n.in[7], 0, d, d + 1), 0) : Tensor();
    // The input projection of every step in one GEMM.
    Tensor xw = matmul(x, transpose(w, 0, 1));
    if (wb.defined()) xw = add(xw, wb);
    const Act* a = &acts[d * spec.acts.size()];
    Tensor rt = transpose(r, 0, 1);
    auto gate = [&](const Tensor& t, int64_t k) { return slice(t, -1, k * H, (k + 1) * H); };
    std::vector<Tensor> steps(T);
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = rev ? T - 1 - s : s;
      Tensor xt = squeeze(slice(xw, 0, t, t + 1), 0);
      if (G == 4) {
        Tensor g = add(xt, matmul(h, rt));
        if (rb.defined()) g = add(g, rb);
        Tensor gi = gate(g, 0), go = gate(g, 1), gf = gate(g, 2), gc = gate(g, 3);
        if (P.defined()) {
          gi = add(gi, mul(slice(P, 0, 0, H), c));
          gf = add(gf, mul(slice(P, 0, 2 * H, 3 * H), c));
        }
        Tensor i = a[0](clipped(gi));
        Tensor f = couple ? sub(1.0, i) : a[0](clipped(gf));
        Tensor cc = a[1](clipped(gc));
        c = add(mul(f, c), mul(i, cc));
        if (P.defined()) go = add(go, mul(slice(P, 0, H, 2 * H), c));
        Tensor o = a[0](clipped(go));
        h = mul(o, a[2](c));
      } else if (G == 3) {
        Tensor hr = matmul(h, rt);
        if (rb.defined()) hr = add(hr, rb);
        Tensor z = a[0](clipped(add(gate(xt, 0), gate(hr, 0))));
        Tensor rr = a[0](clipped(add(gate(xt, 1), gate(hr, 1))));
        Tensor hh;
        if (lbr) {
          hh = a[1](clipped(add(gate(xt, 2), mul(rr, gate(hr, 2)))));
        } else {
          Tensor rh = matmul(mul(rr, h), transpose(slice(r, 0, 2 * H, 3 * H), 0, 1));
          if (rb.defined()) rh = add(rh, slice(rb, 0, 2 * H, 3 * H));
          hh = a[1](clipped(add(gate(xt, 2), rh)));
        }
        h = add(mul(sub(1.0, z), hh), mul(z, h));
      } else {
        Tensor g = add(xt, matmul(h, rt));
        if (rb.defined()) g = add(g, rb);
        h = a[0](clipped(g));
      }
      steps[t] = h;
    }
    ys[d] = stack(steps, 0);  // [T, B, H]
    hs[d] = h;
    cs[d] = c;
  }
  Tensor Y = stack(ys, 1);  // [T, D, B, H]
  Tensor Yh = stack(hs, 0), Yc = stack(cs, 0);
  if (batch_first) {
    Y = permute(Y, {2, 0, 1, 3});  // [B, T, D, H]
    Yh = transpose(Yh, 0, 1);
    Yc = transpose(Yc, 0, 1);
  }
  return TL{Y, Yh, G == 4 ? Yc : Tensor()};
}

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
