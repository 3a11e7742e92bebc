// Pass "block_layout" (and the node builders it shares with "conv_epilogue", conv_epilogue.cpp):
// an inference CNN's convolutions computing in oneDNN's channel-blocked layout from one
// convolution to the next. ResNet-18 at batch 32 (W9) spent 70 ms of 880 on reorders between
// NCHW and nChw16c around every convolution: onnxruntime keeps NCHWc throughout, and this pass
// does the same.
#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/conv_taps.h"
#include "kiln/ops/handles.h"
#include "kiln/ops/ops.h"
#include "kiln/passes/conv_layout_gather.h"
#include "kiln/passes/passes.h"

namespace kiln::detail {

namespace conv_layout {

const TensorMeta& meta(ValueRef v) { return v.node->outputs[static_cast<size_t>(v.index)]; }

bool has_control_flow(const Program& p) {
  for (const auto& n : p.graph->nodes)
    if (n->kind == NodeKind::Op && n->op->has(kControlFlow)) return true;
  return false;
}

std::unique_ptr<Node> op_node(const OpDef& op, Attrs attrs, std::vector<ValueRef> inputs,
                              TensorMeta out) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::Op;
  n->op = &op;
  n->attrs = std::move(attrs);
  n->inputs = std::move(inputs);
  n->outputs.push_back(std::move(out));
  return n;
}

std::unique_ptr<Node> constant_node(const Tensor& v) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::Constant;
  n->value = v;
  n->outputs.push_back(TensorMeta{v.dtype(), v.shape()});
  return n;
}

Attrs fused_attrs(const Attrs& conv, bool bias, int64_t act, int64_t in_block, int64_t out_block,
                  bool w_blocked) {
  return Attrs{conv[0], conv[1],  conv[2],   conv[3],           int64_t{bias},
               act,     in_block, out_block, int64_t{w_blocked}};
}

}  // namespace conv_layout

namespace {

using namespace conv_layout;

using Ints = std::vector<int64_t>;

// Ops this pass rewrites besides those kiln/ops/handles.h names.
const OpHandle mean_op{"mean"}, mean_hw_blocked{"mean_hw_blocked"},
    scale_channels_blocked{"scale_channels_blocked"}, sigmoid_op{"sigmoid"},
    hardswish_op{"hardswish"}, max_pool2d_values{"max_pool2d_values"}, slice_op{"slice"},
    hardsigmoid_op{"hardsigmoid"}, clamp_op{"clamp"}, tanh_op{"tanh"},
    gather_op{"gather_channels_blocked"}, avg_pool2d_op{"avg_pool2d"},
    avg_pool2d_values{"avg_pool2d_values"};

// Elementwise ops that may run over channel-padded blocks (a block_layout value whose channel
// count is not a multiple of the block carries extra lanes up to the next one): each maps
// finite lanes to finite ones, so the padded lanes, which start at zero and meet only zero
// weight columns in the next convolution, never turn into a NaN that would reach real channels.
bool padding_safe(const Node* n) {
  return n->is(ops::add) || n->is(ops::sub) || n->is(ops::mul) || n->is(ops::neg) ||
         n->is(ops::relu) || n->is(hardswish_op) || n->is(hardsigmoid_op) || n->is(sigmoid_op) ||
         n->is(clamp_op) || n->is(tanh_op);
}

// a with attribute k replaced by v.
Attrs with_attr(const Attrs& a, size_t k, AttrValue v) {
  Attrs r;
  for (size_t i = 0; i < a.size(); ++i) r.push(i == k ? v : a[i]);
  return r;
}

// A float32 convolution (conv2d or an NCHW-weight conv2d_fused(_add)) of static shapes whose
// weight is a constant: the input index of that weight, else -1.
int const_weight_conv(const Node* n) {
  const bool plain = n->is(ops::conv2d);
  if (!plain && !n->is(ops::conv2d_fused) && !n->is(ops::conv2d_fused_add)) return -1;
  if (!plain && n->attrs.i(8) != 0) return -1;
  const size_t first = n->is(ops::conv2d_fused_add) ? 1 : 0;
  const TensorMeta& o = n->outputs[0];
  if (o.dtype != Float32 || !o.shape.is_static() || o.shape.rank() != 4) return -1;
  const Node* w = n->inputs[first + 1].node;
  if (w->kind != NodeKind::Constant || !w->value.is_concrete() || w->value.dim() != 4) return -1;
  return static_cast<int>(first + 1);
}

// Drops the weight taps that only ever meet padding (kernels/cpu/conv_taps.h) once, here, when
// the smaller convolution keeps symmetric padding (so the attributes can say it): ASPP's
// dilation-36 3x3 on a 33x33 map becomes a 1x1. Returns the new weight constant, or null.
std::unique_ptr<Node> crop_const_weight(Node* n, int wi) {
  const ValueRef& xr = n->inputs[static_cast<size_t>(wi - 1)];
  const Shape& xs = xr.node->outputs[static_cast<size_t>(xr.index)].shape;
  const Tensor& w = n->inputs[static_cast<size_t>(wi)].node->value;
  const Shape& ys = n->outputs[0].shape;
  if (!xs.is_static() || xs.rank() != 4) return nullptr;
  const Ints &s = n->attrs.ints(0), &pd = n->attrs.ints(1), &d = n->attrs.ints(2);
  Ints pad = pd;
  cpu::TapRange r[2];
  bool any = false;
  for (size_t k = 0; k < 2; ++k) {
    const int64_t kk = w.size(static_cast<int64_t>(2 + k));
    r[k] = cpu::kept_taps(xs[2 + k], kk, pd[k], s[k], d[k], ys[2 + k]);
    pad[k] = pd[k] - r[k].lo * d[k];
    const int64_t eff = d[k] * (r[k].n - 1) + 1;
    if (xs[2 + k] + 2 * pad[k] < eff || (xs[2 + k] + 2 * pad[k] - eff) / s[k] + 1 != ys[2 + k])
      return nullptr;
    any = any || r[k].n != kk;
  }
  if (!any) return nullptr;
  NoGradGuard ng;
  Tensor c = slice(slice(w, 2, r[0].lo, r[0].lo + r[0].n), 3, r[1].lo, r[1].lo + r[1].n);
  auto cn = constant_node(contiguous(c));
  n->inputs[static_cast<size_t>(wi)] = ValueRef{cn.get(), 0};
  n->attrs = with_attr(n->attrs, 1, pad);
  return cn;
}

// block_layout over one program: the nodes whose output 0 is blocked (with the NCHW shape each
// stands for), their NCHW copies, and the node list being rebuilt. Nodes are visited in order;
// each step either carries a node's values in blocks or leaves the node alone, and then its
// blocked inputs are read through NCHW copies made at that border.
class BlockLayout {
 public:
  BlockLayout(Program& p, int64_t b) : p_(p), b_(b) {
    for (const auto& n : p.graph->nodes)
      for (const auto& in : n->inputs) {
        if (in.index == 1) ++uses1_[in.node];
        readers_[in.node].push_back(n.get());
      }
    for (const auto& f : p.fetches) {
      if (f.index == 1) fetched1_.insert(f.node);
      fetched_.insert(f.node);
    }
  }

  // Rewrites the program; returns how many nodes it changed.
  int run() {
    for (auto& up : p_.graph->nodes) {
      Node* n = up.get();
      if (drop_.count(n)) continue;
      // blocked: a shuffle's gather, made when its first reshape was visited.
      const Step s = n->kind != NodeKind::Op || blocked_.count(n) ? kKeep : rewrite(n);
      if (s == kDrop) continue;
      if (s == kNotBlocked)
        for (auto& in : n->inputs)
          if (is_blocked(in)) in = ValueRef{to_nchw(in.node), 0};
      out_.push_back(std::move(up));
    }
    for (auto& f : p_.fetches)
      if (is_blocked(f)) f = ValueRef{to_nchw(f.node), 0};
    p_.graph->nodes = std::move(out_);
    dce(p_);
    return changed_;
  }

 private:
  // What a step did with node n: nothing (kNotBlocked: n stays NCHW, or the next step may
  // take it), n kept in the new list (kKeep), or n replaced (kDrop).
  enum Step { kNotBlocked, kKeep, kDrop };

  // The steps, in order; the first that takes n decides.
  Step rewrite(Node* n) {
    const int wi = const_weight_conv(n);
    if (wi >= 0)
      if (auto cn = crop_const_weight(n, wi)) out_.push_back(std::move(cn));
    if (blockable_conv(n)) return block_conv(n, wi);
    // Other convolutions with a constant weight (grouped, depthwise, output channels not in
    // whole blocks) stay NCHW; their weight is laid out once as well.
    if (wi >= 0) {
      if (n->is(ops::conv2d)) {
        n->op = &*ops::conv2d_fused;
        n->attrs = fused_attrs(n->attrs, false, cpu::kConvActNone, 0, 0, false);
      }
      n->attrs = with_attr(n->attrs, 8, int64_t{2});
      ++changed_;
    }
    for (Step (BlockLayout::*step)(Node*) :
         {&BlockLayout::carry_max_pool, &BlockLayout::carry_cat, &BlockLayout::carry_slice,
          &BlockLayout::carry_shuffle, &BlockLayout::carry_avg_pool, &BlockLayout::carry_mean,
          &BlockLayout::carry_elementwise})
      if (const Step s = (this->*step)(n); s != kNotBlocked) return s;
    return kNotBlocked;
  }

  bool is_blocked(ValueRef v) const { return v.index == 0 && blocked_.count(v.node) > 0; }

  // Channel counts that the block does not divide are padded up to it (ONNX Runtime's NCHWc
  // does the same): mnasnet's 8, 24, 40 and 72 channels, efficientnet's 40 and 112. The padded
  // convolution has zero weight rows for the extra output channels and zero columns for the
  // extra input ones, so the real channels are the unpadded convolution's, term by term.
  int64_t padc(int64_t c) const { return (c + b_ - 1) / b_ * b_; }
  Shape bshape(const Shape& s) const { return Shape{s[0], padc(s[1]) / b_, s[2], s[3], b_}; }

  // n's output 0, of NCHW shape `logical`, is blocked from now on.
  void mark_blocked(Node* n, Shape logical) {
    blocked_[n] = logical;
    n->outputs[0].shape = bshape(logical);
    ++changed_;
  }

  // A blocked value's NCHW copy: [N, C/b, 1, 1, b] holds the bytes of [N, C, 1, 1] (a view);
  // the padded channels are sliced off.
  Node* to_nchw(Node* bn) {
    auto it = nchw_of_.find(bn);
    if (it != nchw_of_.end()) return it->second;
    const Shape s = blocked_.at(bn);
    const DType dt = bn->outputs[0].dtype;
    const Shape ps{s[0], padc(s[1]), s[2], s[3]};
    ValueRef src{bn, 0};
    if (s[2] * s[3] != 1) {
      auto perm = op_node(*ops::permute, Attrs{Ints{0, 1, 4, 2, 3}}, {src},
                          TensorMeta{dt, Shape{s[0], ps[1] / b_, b_, s[2], s[3]}});
      auto copy = op_node(*ops::clone, Attrs{}, {ValueRef{perm.get(), 0}}, perm->outputs[0]);
      src = ValueRef{copy.get(), 0};
      out_.push_back(std::move(perm));
      out_.push_back(std::move(copy));
    }
    auto back = op_node(*ops::reshape, Attrs{ps.vec()}, {src}, TensorMeta{dt, ps});
    Node* r = back.get();
    out_.push_back(std::move(back));
    if (ps[1] != s[1]) {
      auto cut = op_node(*slice_op, Attrs{int64_t{1}, int64_t{0}, s[1], int64_t{1}},
                         {ValueRef{r, 0}}, TensorMeta{dt, s});
      r = cut.get();
      out_.push_back(std::move(cut));
      if (s[0] != 1) {  // a strided view: its readers get it contiguous
        auto copy = op_node(*ops::clone, Attrs{}, {ValueRef{r, 0}}, TensorMeta{dt, s});
        r = copy.get();
        out_.push_back(std::move(copy));
      }
    }
    nchw_of_[bn] = r;
    return r;
  }

  // Whether an NCHW value can be brought into blocks: whole blocks of channels, or a constant
  // (padded once, here).
  bool blockable_value(ValueRef v) const {
    return is_blocked(v) || meta(v).shape[1] % b_ == 0 || const_value(v).defined();
  }

  ValueRef to_blocks(ValueRef v) {
    const Shape s = meta(v).shape;
    const DType dt = meta(v).dtype;
    if (s[1] % b_ != 0) {
      NoGradGuard ng;
      const Tensor c = const_value(v);
      auto cn = constant_node(to_channel_blocks(pad(c, {0, 0, 0, 0, 0, padc(s[1]) - s[1]}), b_));
      ValueRef r{cn.get(), 0};
      out_.push_back(std::move(cn));
      return r;
    }
    if (s[2] * s[3] == 1) {  // a per-channel vector: the same bytes either way
      auto r = op_node(*ops::reshape, Attrs{bshape(s).vec()}, {v}, TensorMeta{dt, bshape(s)});
      ValueRef rv{r.get(), 0};
      out_.push_back(std::move(r));
      return rv;
    }
    auto split = op_node(*ops::reshape, Attrs{Ints{s[0], s[1] / b_, b_, s[2], s[3]}}, {v},
                         TensorMeta{dt, Shape{s[0], s[1] / b_, b_, s[2], s[3]}});
    auto perm = op_node(*ops::permute, Attrs{Ints{0, 1, 3, 4, 2}}, {ValueRef{split.get(), 0}},
                        TensorMeta{dt, bshape(s)});
    auto copy = op_node(*ops::clone, Attrs{}, {ValueRef{perm.get(), 0}}, perm->outputs[0]);
    ValueRef r{copy.get(), 0};
    out_.push_back(std::move(split));
    out_.push_back(std::move(perm));
    out_.push_back(std::move(copy));
    return r;
  }

  // Convolutions oneDNN computes in blocks: float32, groups 1, static shapes, the output
  // channels in whole blocks (the input's too when it arrives blocked).
  bool blockable_conv(const Node* n) const {
    const bool plain = n->is(ops::conv2d);
    if (!plain && !n->is(ops::conv2d_fused) && !n->is(ops::conv2d_fused_add)) return false;
    const TensorMeta& o = n->outputs[0];
    if (o.dtype != Float32 || !o.shape.is_static() || o.shape.rank() != 4) return false;
    if (!plain && (n->attrs.i(6) != 0 || n->attrs.i(7) != 0 || n->attrs.i(8) != 0)) return false;
    const size_t first = n->is(ops::conv2d_fused_add) ? 1 : 0;
    const Shape& xs = meta(n->inputs[first]).shape;
    if (!xs.is_static()) return false;
    // Grouped: depthwise (oneDNN's dw kernels), or whole blocks of channels per group; on an
    // input that arrives blocked (the dw kernels want one layout in and out: an NCHW input
    // would be reordered inside the primitive on every call).
    const int64_t G = n->attrs.i(3), O = o.shape[1], b = b_;
    const bool in_blocked = is_blocked(n->inputs[first]);
    const int64_t C = in_blocked ? blocked_.at(n->inputs[first].node)[1] : xs[1];
    // Padded channels need the weight and bias as constants (padded with zeros here).
    const bool padded = O % b != 0 || (in_blocked && C % b != 0);
    if (padded && (!const_value(n->inputs[first + 1]).defined() ||
                   (!plain && n->attrs.i(4) && !const_value(n->inputs[first + 2]).defined()) ||
                   (first && !blockable_value(n->inputs[0]))))
      return false;
    if (G != 1 &&
        (!in_blocked || (!(C == G && O == G) && (padded || (C / G) % b != 0 || (O / G) % b != 0))))
      return false;
    // One that the conv op runs as column spans or per-tap GEMMs (kernels/cpu/conv_taps.h:
    // oneDNN would take its gemm kernel over the whole map, or most taps read padding) stays
    // NCHW, its weight OIHW.
    const Shape& ws = meta(n->inputs[first + 1]).shape;
    const Ints &st = n->attrs.ints(0), &pd = n->attrs.ints(1), &dl = n->attrs.ints(2);
    if (ws.rank() == 4 && ws.is_static() && G == 1 &&
        cpu::sparse_taps(xs[2], xs[3], ws[2], ws[3], pd[0], pd[1], st[0], st[1], dl[0], dl[1],
                         o.shape[2], o.shape[3]))
      return false;
    if (ws.rank() == 4 && ws.is_static() &&
        !cpu::column_spans(xs[3], ws[3], pd[1], st[1], dl[1], o.shape[3]).empty() &&
        !cpu::dnnl_conv2d_forward_direct(cpu::ConvShape{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2],
                                                        ws[3], 1, o.shape[2], o.shape[3], st[0],
                                                        st[1], pd[0], pd[1], dl[0], dl[1]}))
      return false;
    return true;
  }

  // A blockable convolution (wi: its constant weight's input, or -1) as conv2d_fused computing
  // in blocks: its channels padded to whole blocks, its weight laid out once, its residual
  // brought into blocks.
  Step block_conv(Node* n, int wi) {
    if (n->is(ops::conv2d)) {
      n->op = &*ops::conv2d_fused;
      n->attrs = fused_attrs(n->attrs, false, cpu::kConvActNone, 0, 0, false);
    }
    const size_t first = n->is(ops::conv2d_fused_add) ? 1 : 0;
    const int64_t in_block = is_blocked(n->inputs[first]) ? b_ : 0;
    const int64_t O = n->outputs[0].shape[1];
    const int64_t C = in_block ? blocked_.at(n->inputs[first].node)[1] : -1;
    if (O % b_ != 0 || (in_block && C % b_ != 0)) pad_conv(n, first, in_block != 0, C, O);
    const bool w_blocked = in_block && block_const_weight(n, first);
    if (first && !is_blocked(n->inputs[0])) n->inputs[0] = to_blocks(n->inputs[0]);
    Attrs a = n->attrs;
    // A constant weight, blocked here or left OIHW (the first convolution: its input is not
    // blocked), is laid out by oneDNN once, on the first run (w_blocked bit 1), not reordered
    // on every one: oneDNN may want another layout than the blocks (its gemm kernel).
    const int64_t w_mode = (w_blocked ? 1 : 0) | (wi >= 0 ? 2 : 0);
    n->attrs = Attrs{a[0], a[1], a[2], a[3], a[4], a[5], in_block, b_, w_mode};
    mark_blocked(n, n->outputs[0].shape);
    return kKeep;
  }

  // Zero rows for the padded output channels (and bias entries), zero columns for the padded
  // input ones (C of them are real); a depthwise convolution gets one group per padded channel.
  void pad_conv(Node* n, size_t first, bool in_block, int64_t C, int64_t O) {
    NoGradGuard ng;
    const bool dw = n->attrs.i(3) != 1;
    const int64_t dc = dw || !in_block ? 0 : padc(C) - C;
    auto wn = constant_node(
        contiguous(pad(const_value(n->inputs[first + 1]), {0, 0, 0, 0, 0, dc, 0, padc(O) - O})));
    n->inputs[first + 1] = ValueRef{wn.get(), 0};
    out_.push_back(std::move(wn));
    if (dw) n->attrs = with_attr(n->attrs, 3, padc(O));
    if (n->attrs.i(4)) {
      auto bn = constant_node(contiguous(pad(const_value(n->inputs[first + 2]), {0, padc(O) - O})));
      n->inputs[first + 2] = ValueRef{bn.get(), 0};
      out_.push_back(std::move(bn));
    }
  }

  // Constant weights of ungrouped convolutions on blocked inputs are laid out in blocks once
  // here, not reordered on every run. Returns whether n's weight was.
  bool block_const_weight(Node* n, size_t first) {
    Node* w = n->inputs[first + 1].node;
    const Shape& ws = meta(n->inputs[first + 1]).shape;
    if (n->attrs.i(3) != 1 || w->kind != NodeKind::Constant || !w->value.is_concrete() ||
        ws.rank() != 4 || !ws.is_static() || ws[0] % b_ != 0 || ws[1] % b_ != 0)
      return false;
    NoGradGuard ng;
    auto c = constant_node(conv_weight_to_blocks(w->value, b_));
    n->inputs[first + 1] = ValueRef{c.get(), 0};
    out_.push_back(std::move(c));
    return true;
  }

  // A max pool whose indices nothing reads: values only, on blocks (max_pool2d_values, whose
  // padding per side is max_pool2d's on both); and the padded max pool (ONNX's ceil_mode and
  // asymmetric pools) on blocks.
  Step carry_max_pool(Node* n) {
    if (n->is(ops::max_pool2d) && is_blocked(n->inputs[0]) && !uses1_.count(n) &&
        !fetched1_.count(n) && n->outputs[0].shape.is_static()) {
      const Ints &k = n->attrs.ints(0), &pd = n->attrs.ints(2);
      n->op = &*max_pool2d_values;
      n->attrs = Attrs{k, n->attrs.ints(1), pd, pd, b_};
      blocked_[n] = n->outputs[0].shape;
      n->outputs = {TensorMeta{n->outputs[0].dtype, bshape(n->outputs[0].shape)}};
      ++changed_;
      return kKeep;
    }
    if (n->is(max_pool2d_values) && n->attrs.i(4) == 0 && is_blocked(n->inputs[0]) &&
        n->outputs[0].shape.is_static()) {
      n->attrs = with_attr(n->attrs, 4, b_);
      mark_blocked(n, n->outputs[0].shape);
      return kKeep;
    }
    return kNotBlocked;
  }

  // A blocked value's channels as a gather: a gather that only the node at hand reads is taken
  // apart (composed into that node's gather), so a chain of channel moves is one copy.
  Gather gather_of(ValueRef v) const {
    const Node* g = v.node;
    auto it = readers_.find(g);
    if (g->is(gather_op) && !fetched_.count(g) && it != readers_.end() && it->second.size() == 1)
      return Gather{g->inputs, g->attrs.ints(0), g->attrs.ints(1)};
    const int64_t C = blocked_.at(g)[1];
    Gather r{{v}, {C}, Ints(static_cast<size_t>(C))};
    for (int64_t c = 0; c < C; ++c) r.idx[static_cast<size_t>(c)] = c;
    return r;
  }

  Step make_gather(Node* n, const Gather& g, const Shape& logical) {
    n->op = &*gather_op;
    n->attrs = Attrs{g.ch, g.idx};
    n->inputs = g.in;
    blocked_[n] = logical;
    n->outputs = {TensorMeta{n->outputs[0].dtype, bshape(logical)}};
    ++changed_;
    return kKeep;
  }

  // A concatenation of blocked values along whole channel blocks is one along C/b: the
  // branches of an inception module or a fire module stay blocked. Inputs with padded
  // channels are gathered (shufflenet's units).
  Step carry_cat(Node* n) {
    if (!n->is(ops::cat) || !n->outputs[0].shape.is_static() || n->outputs[0].shape.rank() != 4 ||
        (n->attrs.i(0) != 1 && n->attrs.i(0) != -3) || n->inputs.empty())
      return kNotBlocked;
    bool all = true, whole = true;
    for (const auto& in : n->inputs) {
      all = all && is_blocked(in);
      whole = whole && all && blocked_.at(in.node)[1] % b_ == 0;
    }
    if (!all) return kNotBlocked;
    if (!whole) {
      Gather g;
      for (const auto& in : n->inputs) append(g, gather_of(in));
      return make_gather(n, g, n->outputs[0].shape);
    }
    n->attrs = Attrs{int64_t{1}};
    mark_blocked(n, n->outputs[0].shape);
    return kKeep;
  }

  // A slice of a blocked value's channels: a gather.
  Step carry_slice(Node* n) {
    if (!n->is(slice_op) || !is_blocked(n->inputs[0]) ||
        (n->attrs.i(0) != 1 && n->attrs.i(0) != -3) || n->attrs.i(3) != 1 ||
        !n->outputs[0].shape.is_static())
      return kNotBlocked;
    const Shape& xs = blocked_.at(n->inputs[0].node);
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + xs[1] : v, 0, xs[1]); };
    const int64_t lo = clampi(n->attrs.i(1)), hi = std::max(lo, clampi(n->attrs.i(2)));
    Ints sel;
    for (int64_t c = lo; c < hi; ++c) sel.push_back(c);
    const Shape ys = n->outputs[0].shape;
    if (ys != Shape{xs[0], hi - lo, xs[2], xs[3]}) return kNotBlocked;
    return make_gather(n, select(gather_of(n->inputs[0]), sel), ys);
  }

  // A channel shuffle of a blocked value: its last reshape becomes a gather (made here; run()
  // passes it on when it gets there) and the reshape and transpose before it go.
  Step carry_shuffle(Node* n) {
    if (!n->is(ops::reshape) || !is_blocked(n->inputs[0])) return kNotBlocked;
    const Shape xs = blocked_.at(n->inputs[0].node);
    auto [r2, groups] = channel_shuffle_at(n, xs, readers_, fetched_);
    if (!r2) return kNotBlocked;
    const int64_t C = xs[1], per = C / groups;
    Ints sel;
    for (int64_t c = 0; c < C; ++c) sel.push_back((c % groups) * per + c / groups);
    drop_.insert(r2->inputs[0].node);  // the transpose
    make_gather(r2, select(gather_of(n->inputs[0]), sel), xs);
    return kDrop;
  }

  // An average pool of a blocked value, or of its zero padding (ONNX's Pad before an
  // AveragePool, inception's branch pools), on blocks: the padding is the pool's, counted in
  // the divisor as avg_pool2d does (count_include_pad).
  Step carry_avg_pool(Node* n) {
    Node* pool = n;
    // The padded value is the scatter's input 1.
    ValueRef src = n->is(ops::as_strided_scatter) && n->inputs.size() == 2 ? n->inputs[1]
                   : n->inputs.empty()                                     ? ValueRef{}
                                                                           : n->inputs[0];
    Ints pb{0, 0}, pe{0, 0};
    if (!n->is(avg_pool2d_op) && is_blocked(src)) {
      auto it = readers_.find(n);
      pool = it != readers_.end() && it->second.size() == 1 && !fetched_.count(n) ? it->second[0]
                                                                                  : nullptr;
      auto pads = zero_padding(n, blocked_.at(src.node));
      if (!pads || !pool || !pool->is(avg_pool2d_op)) pool = nullptr;
      if (pool) pb = pads->first, pe = pads->second;
    }
    if (!pool || !pool->is(avg_pool2d_op) || !is_blocked(src) ||
        !pool->outputs[0].shape.is_static())
      return kNotBlocked;
    const Ints &k = pool->attrs.ints(0), &pp = pool->attrs.ints(2);
    for (size_t d = 0; d < 2; ++d) pb[d] += pp[d], pe[d] += pp[d];
    if (pb[0] >= k[0] || pb[1] >= k[1] || pe[0] >= k[0] || pe[1] >= k[1]) return kNotBlocked;
    pool->op = &*avg_pool2d_values;
    pool->attrs = Attrs{k, pool->attrs.ints(1), pb, pe, b_};
    pool->inputs = {src};
    mark_blocked(pool, pool->outputs[0].shape);
    // The pad goes; the pool is passed on where it stands.
    return pool == n ? kKeep : kDrop;
  }

  // A global average pool of a blocked value (mean over H and W): over the blocked value's
  // dims 2 and 3 it gives [N, C/b, 1, 1, b], the bytes of [N, C, 1, 1] (the squeeze of a
  // squeeze-excite block, the classifier's pool), without a copy back to NCHW first. Without
  // keepdim (mnasnet's x.mean([2, 3])) the node becomes a reshape of that pool.
  Step carry_mean(Node* n) {
    const bool keep = n->is(mean_op) && n->attrs.b(1);
    if (!n->is(mean_op) || n->inputs.size() != 1 || !is_blocked(n->inputs[0]) ||
        !n->outputs[0].shape.is_static() || n->outputs[0].shape.rank() != (keep ? 4 : 2))
      return kNotBlocked;
    Ints dims = n->attrs.ints(0);
    for (auto& d : dims) d = d < 0 ? d + 4 : d;
    std::sort(dims.begin(), dims.end());
    if (dims != Ints{2, 3}) return kNotBlocked;
    if (keep) {
      n->op = &*mean_hw_blocked;
      n->attrs = Attrs{};
      mark_blocked(n, n->outputs[0].shape);
      return kKeep;
    }
    const Shape ys = n->outputs[0].shape, ks{ys[0], ys[1], 1, 1};
    auto pool = op_node(*mean_hw_blocked, Attrs{}, {n->inputs[0]},
                        TensorMeta{n->outputs[0].dtype, bshape(ks)});
    blocked_[pool.get()] = ks;
    Node* pn = pool.get();
    out_.push_back(std::move(pool));
    n->op = &*ops::reshape;
    n->attrs = Attrs{ys.vec()};
    n->inputs = {ValueRef{to_nchw(pn), 0}};
    ++changed_;
    return kKeep;
  }

  // Elementwise ops over blocked values stay blocked: operands of the output's shape, or
  // broadcast over H and W (a squeeze-excite scale [N, C, 1, 1], blocked or not: a
  // per-channel vector is blocked by a view), and scalars.
  Step carry_elementwise(Node* n) {
    if (!n->op->has(kElementwise) || n->op->has(kRandom) || n->outputs.size() != 1 ||
        !n->outputs[0].shape.is_static() || n->outputs[0].shape.rank() != 4 ||
        (n->outputs[0].shape[1] % b_ != 0 && !padding_safe(n)))
      return kNotBlocked;
    const Shape o = n->outputs[0].shape;
    auto fits = [&](const Shape& s) {  // [N or 1, C, H or 1, W or 1]
      return s.rank() == 4 && s.is_static() && s[1] == o[1] && (s[0] == o[0] || s[0] == 1) &&
             (s[2] == o[2] || s[2] == 1) && (s[3] == o[3] || s[3] == 1);
    };
    bool ok = true, any = false;
    std::vector<size_t> per_channel;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      const ValueRef& in = n->inputs[k];
      const Shape& ms = meta(in).shape;
      if (is_blocked(in)) {
        ok = ok && fits(blocked_.at(in.node));
        any = true;
      } else if (ms.is_static() && ms.numel() == 1 && ms.rank() <= 4) {
      } else if (fits(ms) && ms[2] * ms[3] == 1 && blockable_value(in)) {
        per_channel.push_back(k);
      } else {
        ok = false;
      }
    }
    if (!any || !ok) return kNotBlocked;
    for (size_t k : per_channel) n->inputs[k] = to_blocks(n->inputs[k]);
    if (n->is(ops::mul) && n->inputs.size() == 2 && o[2] * o[3] > 1) scale_channels(n, o);
    mark_blocked(n, o);
    return kKeep;
  }

  // A squeeze-excite scale, x * s with s per channel (o: the NCHW shape of x and the product):
  // its own kernel (the broadcast mul reads s with a strided inner loop).
  void scale_channels(Node* n, const Shape& o) const {
    for (size_t k = 0; k < 2; ++k) {
      const Shape& xs = meta(n->inputs[k]).shape;
      const Shape& ss = meta(n->inputs[1 - k]).shape;
      if (xs == bshape(o) && ss.rank() == 5 && ss[2] * ss[3] == 1) {
        n->op = &*scale_channels_blocked;
        n->inputs = {n->inputs[k], n->inputs[1 - k]};
        return;
      }
    }
  }

  Program& p_;
  const int64_t b_;                             // the channel block
  std::unordered_map<const Node*, int> uses1_;  // reads of output 1 (max_pool2d's indices)
  std::set<const Node*> fetched1_, fetched_;
  std::unordered_map<const Node*, std::vector<Node*>> readers_;
  std::set<const Node*> drop_;  // nodes a channel shuffle's rewrite replaced
  // Nodes whose output 0 is now blocked, with the NCHW shape it stands for.
  std::unordered_map<const Node*, Shape> blocked_;
  std::unordered_map<const Node*, Node*> nchw_of_;  // a blocked value's NCHW copy, made once
  std::vector<std::unique_ptr<Node>> out_;          // the new node list
  int changed_ = 0;
};

// Where a convolution's gradient is computed, its gradient ops read the forward values in
// NCHW, so blocking them would add a copy back for each.
bool has_conv_gradients(const Program& p) {
  for (const auto& n : p.graph->nodes)
    if (n->is(ops::conv2d_grad_input) || n->is(ops::conv2d_grad_weight)) return true;
  return false;
}

}  // namespace

// Inference programs only (see has_conv_gradients).
int block_layout(Program& p) {
  const int64_t b = cpu::dnnl_channel_block();
  if (b == 0 || has_control_flow(p) || has_conv_gradients(p)) return 0;
  return BlockLayout(p, b).run();
}

}  // namespace kiln::detail
