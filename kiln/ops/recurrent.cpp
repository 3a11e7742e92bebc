// Recurrent family: rnn_sequence, a recurrent layer's whole time loop (LSTM, GRU, Elman RNN) as
// one op after the input projection, with its gradient op. The ONNX importer maps LSTM, GRU and
// RNN nodes onto it; its kernel (kiln/kernels/cpu/rnn_sequence.cpp) splits each step's hidden
// product and gate arithmetic across the threads, where a loop of small ops ran a GEMV and a
// gate kernel per step, one thread each.
#include "kiln/kernels/cpu/rnn_sequence.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/sym_int.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using cpu::RnnMode;
constexpr const char* kOp = "rnn_sequence";
constexpr const char* kGradName = "rnn_sequence_grad";

RnnMode parse_mode(const char* op, const std::string& m) {
  if (m == "lstm") return RnnMode::kLstm;
  if (m == "gru") return RnnMode::kGru;
  if (m == "rnn_tanh") return RnnMode::kRnnTanh;
  if (m == "rnn_relu") return RnnMode::kRnnRelu;
  fail(op, "mode must be 'lstm', 'gru', 'rnn_tanh' or 'rnn_relu', got '", m, "'");
}

// Inputs of both ops: xw [T, B, G H], the packed recurrent weight wp [ceil(H / W), H, G, W]
// (kiln/kernels/cpu/rnn_sequence.h; W = 16, 8 for float64), b_hh [G H], h0 [B, H], then (LSTM)
// c0. `extra` more inputs follow (the gradient op's); their shapes are checked by the caller.
struct Dims {
  RnnMode mode;
  int64_t T, B, H;
  bool lstm;
};

// The kernel's unit block for a dtype: reduced dtypes run as float32.
int64_t block_of(DType dt) {
  return dt == Float64 ? cpu::kRnnBlock<double> : cpu::kRnnBlock<float>;
}

// wt [H, G H] (the recurrent weight transposed) -> [ceil(H / W), H, G, W], zero padded: Kiln
// ops, so it is folded when the weight is a constant and differentiable when it is not.
Tensor pack_transposed(const Tensor& wt, int64_t G) {
  const int64_t H = wt.size(0), W = block_of(wt.dtype()), blocks = (H + W - 1) / W;
  Tensor t = reshape(wt, Shape{H, G, H});
  if (blocks * W != H) t = pad(t, {0, blocks * W - H});
  return contiguous(permute(reshape(t, Shape{H, G, blocks, W}), {2, 0, 1, 3}));
}

Dims check_inputs(const char* op, std::span<const Tensor> in, const Attrs& a, size_t extra) {
  const RnnMode mode = parse_mode(op, a.s(0));
  (void)a.b(1), (void)a.b(2);
  const bool lstm = mode == RnnMode::kLstm;
  const size_t want = (lstm ? 5 : 4) + extra;
  if (in.size() != want) fail(op, "mode '", a.s(0), "' takes ", want, " inputs, got ", in.size());
  const Tensor &xw = in[0], &wp = in[1], &b = in[2], &h0 = in[3];
  for (size_t k = 0; k < in.size(); ++k) {
    op_util::require_float(op, in[k], "every input");
    op_util::require_same_dtype(op, xw, in[k]);
  }
  if (xw.dim() != 3 || wp.dim() != 4)
    fail(op, "xw must be 3-D [T, B, G H] and the packed weight 4-D [ceil(H / W), H, G, W], got ",
         xw.shape(), " and ", wp.shape());
  const int64_t G = cpu::rnn_gates(mode), T = xw.size(0), B = xw.size(1), H = wp.size(1);
  const int64_t W = block_of(xw.dtype());
  if (!wp.shape().is_static()) fail(op, "the packed weight needs static sizes, got ", wp.shape());
  const Shape state{B, H};
  if (wp.shape() != Shape{(H + W - 1) / W, H, G, W} ||
      !op_util::dims_agree(xw.shape(), Shape{T, B, G * H}) ||
      !op_util::dims_agree(b.shape(), Shape{G * H}) || !op_util::dims_agree(h0.shape(), state) ||
      (lstm && !op_util::dims_agree(in[4].shape(), state)))
    fail(op, "mode '", a.s(0), "' (", G, " gates) expects xw [T, B, ", G,
         " H], the packed weight [ceil(H / ", W, "), H, ", G, ", ", W, "], b_hh [", G,
         " H], h0 [B, H]", lstm ? ", c0 [B, H]" : "", "; got xw ", xw.shape(), ", weight ",
         wp.shape(), ", b_hh ", b.shape(), ", h0 ", h0.shape(), lstm ? ", c0 " : "",
         lstm ? in[4].shape() : Shape{});
  if (T == 0) fail(op, "xw has no time steps (shape ", xw.shape(), ")");
  return Dims{mode, T, B, H, lstm};
}

MetaList infer_rnn_sequence(std::span<const Tensor> in, const Attrs& a) {
  const Dims d = check_inputs(kOp, in, a, 0);
  MetaList m;
  for (int k = 0; k < (d.lstm ? 2 : 1); ++k)
    m.push_back(TensorMeta{in[0].dtype(), Shape{d.T, d.B, d.H}});
  if (a.b(2)) m.push_back(TensorMeta{in[0].dtype(), in[0].shape()});  // the hidden products
  return m;
}

template <typename T>
cpu::RnnSeq<T> seq_of(std::span<const Tensor> in, const Attrs& a) {
  cpu::RnnSeq<T> s;
  s.mode = parse_mode(kOp, a.s(0));
  s.reverse = a.b(1);
  s.steps = in[0].size(0), s.batch = in[0].size(1), s.hidden = in[1].size(1);
  s.xw = in[0].data_ptr<T>(), s.wp = in[1].data_ptr<T>(), s.bias = in[2].data_ptr<T>();
  s.h0 = in[3].data_ptr<T>();
  s.c0 = s.mode == RnnMode::kLstm ? in[4].data_ptr<T>() : nullptr;
  return s;
}

template <typename T>
void forward_typed(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const cpu::RnnSeq<T> s = seq_of<T>(in, a);
  const bool lstm = s.mode == RnnMode::kLstm;
  cpu::rnn_sequence_forward<T>(s, out[0].data_ptr<T>(), lstm ? out[1].data_ptr<T>() : nullptr,
                               a.b(2) ? out[lstm ? 2 : 1].data_ptr<T>() : nullptr);
}

void rnn_sequence_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == Float64)
    forward_typed<double>(in, out, a);
  else
    forward_typed<float>(in, out, a);
}

// The gradient op's inputs: the forward's (xw, wp, b_hh, h0[, c0]), then y and dy, then (LSTM)
// c and dc, then (save) the forward's hidden products [T, B, G H]. Outputs: dgx, dgh [T, B, G
// H], hprev [T, B, H], dh0 [B, H][, dc0].
MetaList infer_rnn_sequence_grad(std::span<const Tensor> in, const Attrs& a) {
  const bool lstm = parse_mode(kGradName, a.s(0)) == RnnMode::kLstm;
  const bool save = a.b(2);
  const Dims d = check_inputs(kGradName, in, a, (lstm ? 4 : 2) + (save ? 1 : 0));
  const Shape seq{d.T, d.B, d.H};
  const size_t first = lstm ? 5 : 4, last = in.size() - (save ? 1 : 0);
  for (size_t k = first; k < last; ++k)
    if (!op_util::dims_agree(in[k].shape(), seq))
      fail(kGradName, "y, dy (and c, dc) must be [T, B, H] = ", seq, ", got ", in[k].shape());
  if (save && !op_util::dims_agree(in[last].shape(), in[0].shape()))
    fail(kGradName, "the saved hidden products must be ", in[0].shape(), ", got ",
         in[last].shape());
  const DType dt = in[0].dtype();
  MetaList m;
  m.push_back(TensorMeta{dt, in[0].shape()});
  m.push_back(TensorMeta{dt, in[0].shape()});
  m.push_back(TensorMeta{dt, seq});
  for (int k = 0; k < (lstm ? 2 : 1); ++k) m.push_back(TensorMeta{dt, Shape{d.B, d.H}});
  return m;
}

template <typename T>
void backward_typed(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const cpu::RnnSeq<T> s = seq_of<T>(in, a);
  const bool lstm = s.mode == RnnMode::kLstm;
  const size_t y = lstm ? 5 : 4;
  cpu::rnn_sequence_backward<T>(s, in[y].data_ptr<T>(), lstm ? in[7].data_ptr<T>() : nullptr,
                                a.b(2) ? in.back().data_ptr<T>() : nullptr, in[y + 1].data_ptr<T>(),
                                lstm ? in[8].data_ptr<T>() : nullptr, out[0].data_ptr<T>(),
                                out[1].data_ptr<T>(), out[2].data_ptr<T>(), out[3].data_ptr<T>(),
                                lstm ? out[4].data_ptr<T>() : nullptr);
}

void rnn_sequence_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == Float64)
    backward_typed<double>(in, out, a);
  else
    backward_typed<float>(in, out, a);
}

const OpDef& kRnnSequenceGrad =
    def_op({.name = kGradName,
            .num_inputs = -1,
            .num_outputs = -1,
            .attr_names = {"mode", "reverse", "save"},
            .infer = infer_rnn_sequence_grad,
            .kernel = rnn_sequence_grad_kernel,
            .contiguous_inputs = true,
            .doc = "gradients of rnn_sequence: of the gates' input and hidden parts [T, B, G H], "
                   "the h each step read [T, B, H], and of the initial state. Not differentiable "
                   "itself: a backward building a graph takes rnn_sequence's rule as ops"});

// ---- the gradient as ordinary ops, for a backward that builds a graph -------------------------
// rnn_sequence_grad has no rule of its own, so under create_graph (gradients of gradients) the
// rule walks the steps back to front with differentiable ops instead: each step's gates are
// recomputed from the states the forward kept (outputs of rnn_sequence, which the engine hands
// the rule as differentiable outputs there), torch's cell formulas.

// One step's gradients: dx into the gates' input part, dhp into their hidden part (h_prev's
// product with the weight, plus the bias), dh_direct into h_prev other than through dhp (GRU's
// z h_prev), dc into c_prev (LSTM).
struct StepGrad {
  Tensor dx, dhp, dh_direct, dc;
};

Tensor one_minus_sq(const Tensor& t) { return sub(1.0, mul(t, t)); }
Tensor sigmoid_slope(const Tensor& s) { return mul(s, sub(1.0, s)); }

StepGrad step_grad(RnnMode m, const Tensor& xt, const Tensor& hp, const Tensor& h_prev,
                   const Tensor& h_t, const Tensor& c_prev, const Tensor& c_t, const Tensor& dh,
                   const Tensor& dc_next) {
  if (m == RnnMode::kLstm) {
    auto a = chunk(add(xt, hp), 4, 1);
    Tensor i = sigmoid(a[0]), f = sigmoid(a[1]), g = tanh(a[2]), o = sigmoid(a[3]), tc = tanh(c_t);
    Tensor dc = add(dc_next, mul(mul(dh, o), one_minus_sq(tc)));
    Tensor da = cat({mul(mul(dc, g), sigmoid_slope(i)), mul(mul(dc, c_prev), sigmoid_slope(f)),
                     mul(mul(dc, i), one_minus_sq(g)), mul(mul(dh, tc), sigmoid_slope(o))},
                    1);
    return {da, da, Tensor(), mul(dc, f)};
  }
  if (m == RnnMode::kGru) {
    auto x = chunk(xt, 3, 1), h = chunk(hp, 3, 1);
    Tensor r = sigmoid(add(x[0], h[0])), z = sigmoid(add(x[1], h[1]));
    Tensor n = tanh(add(x[2], mul(r, h[2])));
    Tensor dan = mul(mul(dh, sub(1.0, z)), one_minus_sq(n));
    Tensor dar = mul(mul(dan, h[2]), sigmoid_slope(r));
    Tensor daz = mul(mul(dh, sub(h_prev, n)), sigmoid_slope(z));
    return {cat({dar, daz, dan}, 1), cat({dar, daz, mul(dan, r)}, 1), mul(dh, z), Tensor()};
  }
  // relu's slope: sign(h) is 1 where the step's output is positive, else 0.
  Tensor da = mul(dh, m == RnnMode::kRnnTanh ? one_minus_sq(h_t) : sign(h_t));
  return {da, da, Tensor(), Tensor()};
}

TensorList rule_as_ops(const GradCtx& c, RnnMode m, bool reverse) {
  const bool lstm = m == RnnMode::kLstm;
  const Tensor &xw = c.in(0), &wp = c.in(1);
  const int64_t T = xw.size(0), H = wp.size(1), G = cpu::rnn_gates(m);
  // The packed weight back to w_hh^T [H, G H] (the padded units dropped).
  Tensor wt = reshape(permute(wp, {1, 2, 0, 3}), Shape{H, G, wp.size(0) * wp.size(3)});
  wt = reshape(slice(wt, 2, 0, H), Shape{H, G * H});
  auto at = [](const Tensor& s, int64_t t) { return squeeze(slice(s, 0, t, t + 1), 0); };
  Tensor dh = zeros(c.in(3).shape(), xw.dtype()), dc = lstm ? zeros_like(dh) : Tensor();
  Tensor dw = zeros(wt.shape(), xw.dtype()), db = zeros(c.in(2).shape(), xw.dtype());
  std::vector<Tensor> dx(static_cast<size_t>(T));
  for (int64_t k = T - 1; k >= 0; --k) {  // k: the step's place in the forward's order
    const int64_t t = reverse ? T - 1 - k : k, tp = reverse ? t + 1 : t - 1;
    const Tensor h_prev = k == 0 ? c.in(3) : at(c.out(0), tp);
    const Tensor c_prev = !lstm ? Tensor() : k == 0 ? c.in(4) : at(c.out(1), tp);
    dh = add(dh, at(c.g(0), t));
    if (lstm) dc = add(dc, at(c.g(1), t));
    const StepGrad s =
        step_grad(m, at(xw, t), add(matmul(h_prev, wt), c.in(2)), h_prev, at(c.out(0), t), c_prev,
                  lstm ? at(c.out(1), t) : Tensor(), dh, dc);
    dx[static_cast<size_t>(t)] = s.dx;
    dw = add(dw, matmul(transpose(h_prev, 0, 1), s.dhp));
    db = add(db, sum(s.dhp, {0}));
    dh = matmul(s.dhp, transpose(wt, 0, 1));
    if (s.dh_direct.defined()) dh = add(dh, s.dh_direct);
    if (lstm) dc = s.dc;
  }
  TensorList g{c.need(0) ? stack(dx, 0) : Tensor(), c.need(1) ? pack_transposed(dw, G) : Tensor(),
               c.need(2) ? db : Tensor(), c.need(3) ? dh : Tensor()};
  if (lstm) g.push_back(c.need(4) ? dc : Tensor());
  return g;
}

// xw's gradient is the gates' input part; the weight's and bias's sum the hidden part over the
// steps against the h each step read; the initial state's come from the kernel. An eager
// backward building a graph (create_graph: grad mode on in the rule) takes the ops above; a
// graph's or a trace's gradient nodes (symbolic inputs, the length possibly dynamic) keep the
// fused op.
TensorList rnn_sequence_rule(const GradCtx& c) {
  if (grad_mode_enabled() && c.in(0).is_concrete())
    return rule_as_ops(c, parse_mode(kOp, c.attrs.s(0)), c.attrs.b(1));
  const bool lstm = parse_mode(kOp, c.attrs.s(0)) == RnnMode::kLstm;
  std::vector<Tensor> ins{c.in(0), c.in(1), c.in(2), c.in(3)};
  if (lstm) ins.push_back(c.in(4));
  ins.push_back(c.out(0));
  ins.push_back(c.g(0));
  if (lstm) {
    ins.push_back(c.out(1));
    ins.push_back(c.g(1));
  }
  if (c.attrs.b(2)) ins.push_back(c.out(lstm ? 2 : 1));
  TensorList r = call(kRnnSequenceGrad, ins, c.attrs);
  TensorList g{c.need(0) ? r[0] : Tensor(), Tensor(), Tensor(), c.need(3) ? r[3] : Tensor()};
  if (c.need(1))
    g[1] = pack_transposed(matmul(transpose(flatten(r[2], 0, 1), 0, 1), flatten(r[1], 0, 1)),
                           cpu::rnn_gates(parse_mode(kOp, c.attrs.s(0))));
  if (c.need(2)) g[2] = sum(r[1], {0, 1});
  if (lstm) g.push_back(c.need(4) ? r[4] : Tensor());
  return g;
}

const OpDef& kRnnSequence =
    def_op({.name = kOp,
            .num_inputs = -1,
            .num_outputs = -1,
            .attr_names = {"mode", "reverse", "save"},
            .infer = infer_rnn_sequence,
            .kernel = rnn_sequence_kernel,
            .grad = rnn_sequence_rule,
            .contiguous_inputs = true,
            .doc = "a recurrent layer's time loop after its input projection: every step's h "
                   "[T, B, H] (and an LSTM's cell state) from xw [T, B, G H], w_hh_t [H, G H], "
                   "b_hh [G H], h0 (and c0) [B, H]; torch's gate orders"});

}  // namespace

RnnSequenceOut rnn_sequence(const Tensor& xw, const Tensor& w_hh, const Tensor& b_hh,
                            const Tensor& h0, const Tensor& c0, const std::string& mode,
                            bool reverse) {
  const RnnMode m = parse_mode(kOp, mode);
  const bool lstm = m == RnnMode::kLstm;
  const int64_t G = cpu::rnn_gates(m);
  if (!xw.defined() || !w_hh.defined())
    fail(kOp, "xw and w_hh must be defined (the bias and the initial state may be omitted)");
  if (c0.defined() && !lstm) fail(kOp, "only an LSTM takes a cell state c0 (mode '", mode, "')");
  // (H must be static: it sizes the packed weight; a graph checks a dynamic G H when it runs)
  if (xw.dim() != 3 || w_hh.dim() != 2 || w_hh.size(1) < 0 ||
      (w_hh.size(0) >= 0 && w_hh.size(0) != G * w_hh.size(1)) ||
      (xw.size(2) >= 0 && xw.size(2) != G * w_hh.size(1)))
    fail(kOp, "mode '", mode, "' expects xw [T, B, ", G, " H] and w_hh [", G,
         " H, H] with a static H, got ", xw.shape(), " and ", w_hh.shape());
  op_util::require_float(kOp, w_hh, "w_hh");
  const int64_t H = w_hh.size(1);
  // Omitted parts are zeros; the batch may be dynamic (a graph's placeholder).
  auto zero_state = [&] { return full_symint({sym_size(xw, 1), H}, 0.0, xw.dtype()); };
  std::vector<Tensor> ins{xw, pack_transposed(transpose(w_hh, 0, 1), G),
                          b_hh.defined() ? b_hh : zeros(Shape{G * H}, xw.dtype()),
                          h0.defined() ? h0 : zero_state()};
  if (lstm) ins.push_back(c0.defined() ? c0 : zero_state());
  // The hidden products are kept when a gradient may follow (eager or traced code under grad
  // mode with an input needing one): the backward then skips recomputing them (one GEMM).
  bool save = false;
  if (grad_mode_enabled())
    for (const Tensor& t : ins) save = save || t.requires_grad();
  TensorList r = call(kRnnSequence, ins, {mode, reverse, save});
  return RnnSequenceOut{r[0], lstm ? r[1] : Tensor()};
}

}  // namespace kiln
