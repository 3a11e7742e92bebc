// The fused inference convolution, conv2d_fused / conv2d_fused_add: what the conv_epilogue and
// block_layout passes (kiln/passes/conv_layout.cpp) make of a convolution and the bias,
// residual and activation that follow it, on oneDNN's primitive with post-ops, in NCHW or
// channel blocks; and the conversions to and from those blocks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/conv_common.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace conv_detail;
using op_util::one;
using op_util::pair2;
using Ints = std::vector<int64_t>;
using cpu::TapSpan;

// ---- conv2d_fused / conv2d_fused_add: an inference convolution with its epilogue ---------------
// What the conv_epilogue and block_layout passes make of conv2d -> add(bias) -> add(residual) ->
// relu chains whose intermediates nothing else reads: y = relu?(conv(x, w) + bias + residual) in
// one kernel (oneDNN's bias, sum and eltwise post-ops), optionally in channel-blocked layouts
// (kernels/cpu/conv_dnnl.h). Attributes: stride, padding, dilation, groups, bias, relu,
// in_block, out_block, w_blocked. conv2d_fused_add takes the residual first and writes over it
// (kAccumulates: the memory plan may give y the residual's buffer). Not differentiable: the
// passes run on programs whose gradients are already built, and they fuse only values no
// gradient reads.

// w_blocked (attribute 8): bit 0 the weight is blocked (else OIHW); bit 1 it is a constant of an
// inference program (block_layout marks it), which oneDNN lays out once and keeps.
// relu (attribute 5): the activation applied last, kConvAct* (0 and 1 as when it was a flag).
struct FusedP {
  ConvP c;
  bool bias;
  int64_t act;
  bool w_blocked;
  int64_t in_block, out_block;
  bool w_const;
};

FusedP fused_params(const char* op, const Attrs& a) {
  if (a.i(8) < 0 || a.i(8) > 3)
    fail(op, "w_blocked must be 0 (OIHW), 1 (blocked), 2 or 3 (the same, constant), got ", a.i(8));
  if (a.i(5) < cpu::kConvActNone || a.i(5) > cpu::kConvActHardswish)
    fail(op, "relu (the activation) must be 0 (none), 1 (relu), 2 (swish) or 3 (hardswish), got ",
         a.i(5));
  FusedP f{conv_params(op, a), a.i(4) != 0, a.i(5), (a.i(8) & 1) != 0, a.i(6), a.i(7),
           (a.i(8) & 2) != 0};
  for (int64_t b : {f.in_block, f.out_block})
    if (b != 0 && b != 8 && b != 16)
      fail(op, "channel blocks must be 0 (NCHW), 8 or 16, got in_block ", f.in_block,
           " and out_block ", f.out_block);
  if (f.w_blocked && f.in_block == 0)
    fail(op, "blocked weights need a blocked input (in_block 8 or 16), got in_block 0");
  // Grouped and depthwise convolutions take blocked activations (oneDNN's depthwise and grouped
  // jit kernels compute in them); their weights stay goihw.
  if (f.w_blocked && f.c.G != 1) fail(op, "blocked weights need groups = 1, got groups = ", f.c.G);
  return f;
}

// The NCHW shape of an activation stored with channel block b ([N, C/b, H, W, b]; 0: NCHW).
Shape logical_act(const char* op, const Shape& s, int64_t b, const char* what) {
  if (b == 0) {
    if (s.rank() != 4) fail(op, what, " must be 4-D [N, C, H, W], got shape ", s);
    return s;
  }
  if (s.rank() != 5 || s[4] != b)
    fail(op, what, " must be 5-D [N, C/", b, ", H, W, ", b, "] (channel blocks of ", b,
         "), got shape ", s);
  return Shape{s[0], s[1] < 0 ? -1 : s[1] * b, s[2], s[3]};
}

Shape blocked_shape(const Shape& s, int64_t b) {
  if (b == 0) return s;
  return Shape{s[0], s[1] < 0 ? -1 : s[1] / b, s[2], s[3], b};
}

Shape logical_weight(const char* op, const Shape& s, const FusedP& f) {
  if (!f.w_blocked) return s;
  const int64_t b = f.in_block;
  if (s.rank() != 6 || s[4] != b || s[5] != b)
    fail(op, "blocked weight must be 6-D [O/", b, ", C/", b, ", kH, kW, ", b, ", ", b,
         "], got shape ", s);
  return Shape{s[0] < 0 ? -1 : s[0] * b, s[1] < 0 ? -1 : s[1] * b, s[2], s[3]};
}

// first: 1 when input 0 is the residual (conv2d_fused_add).
MetaList fused_infer(const char* op, std::span<const Tensor> in, const Attrs& a, size_t first) {
  FusedP f = fused_params(op, a);
  const size_t want = first + 2 + (f.bias ? 1 : 0);
  if (in.size() != want)
    fail(op, "expects ", want, " inputs (", first ? "residual, " : "", "x, w",
         f.bias ? ", bias" : "", "), got ", in.size());
  const Tensor &x = in[first], &w = in[first + 1];
  if (!is_floating(x.dtype()))
    fail(op, "expects floating operands, got input ", x.dtype(), " ", x.shape());
  for (const auto& t : in)
    if (t.dtype() != x.dtype())
      fail(op, "expects operands of one dtype, got input ", x.dtype(), " ", x.shape(),
           " and another operand ", t.dtype(), " ", t.shape());
  Shape xs = logical_act(op, x.shape(), f.in_block, "input");
  Shape ws = logical_weight(op, w.shape(), f);
  Shape ys = check_conv(op, xs, ws, f.c);
  if (f.out_block && (ys[1] < 0 || ys[1] % f.out_block != 0))
    fail(op, "out_block ", f.out_block,
         " needs a static number of output channels it divides, got ", ys[1], " (weight shape ",
         w.shape(), ")");
  if (f.bias) {
    const Tensor& b = in[first + 2];
    if (b.dim() != 1 || (b.size(0) >= 0 && ys[1] >= 0 && b.size(0) != ys[1]))
      fail(op, "bias must be 1-D [", ys[1], "], got shape ", b.shape());
  }
  Shape out = blocked_shape(ys, f.out_block);
  if (first) {
    const Shape& rs = in[0].shape();
    bool same = rs.rank() == out.rank();
    for (int64_t d = 0; same && d < rs.rank(); ++d)
      same = rs[d] < 0 || out[d] < 0 || rs[d] == out[d];
    if (!same)
      fail(op, "residual shape ", rs, " differs from the output shape ", out, " (input shape ",
           x.shape(), ", weight shape ", w.shape(), ")");
  }
  return one(x.dtype(), out);
}

// Blocked [N, C/b, H, W, b] -> NCHW (the fallback path's input).
template <typename T>
Tensor unblock_act(const Tensor& x, int64_t b) {
  const int64_t N = x.size(0), CB = x.size(1), HW = x.size(2) * x.size(3);
  Tensor y = empty(Shape{N, CB * b, x.size(2), x.size(3)}, x.dtype());
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t q = 0; q < HW; ++q)
          py[((n * CB + cb) * b + i) * HW + q] = px[((n * CB + cb) * HW + q) * b + i];
  return y;
}

// [O/b, C/b, kH, kW, b(i), b(o)] -> OIHW.
template <typename T>
Tensor unblock_weight(const Tensor& w, int64_t b) {
  const int64_t OB = w.size(0), CB = w.size(1), K = w.size(2) * w.size(3);
  Tensor y = empty(Shape{OB * b, CB * b, w.size(2), w.size(3)}, w.dtype());
  const T* pw = w.data_ptr<T>();
  T* py = y.data_ptr<T>();
  for (int64_t ob = 0; ob < OB; ++ob)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < b; ++i)
          for (int64_t o = 0; o < b; ++o)
            py[((ob * b + o) * CB * b + cb * b + i) * K + k] =
                pw[(((ob * CB + cb) * K + k) * b + i) * b + o];
  return y;
}

// whole_map: false where split_columns holds: the NCHW convolution then runs the spans.
template <typename T>
void conv2d_fused_kernel(std::span<const Tensor> in, Tensor& y, const FusedP& f, size_t first,
                         const Tensor& w, bool whole_map) {
  const Tensor& x = in[first];
  const Tensor* bias = f.bias ? &in[first + 2] : nullptr;
  if (first && in[0].raw_data() != y.raw_data() && y.numel() > 0)
    std::memcpy(y.raw_data(), in[0].raw_data(), static_cast<size_t>(y.numel()) * sizeof(T));
  const int64_t N = x.size(0), C = f.in_block ? x.size(1) * f.in_block : x.size(1);
  const int64_t H = x.size(2), W = x.size(3);
  const int64_t O = f.out_block ? y.size(1) * f.out_block : y.size(1);
  const int64_t kH = w.size(2), kW = w.size(3), OH = y.size(2), OW = y.size(3);
  if (y.numel() == 0) return;
  if constexpr (std::is_same_v<T, float>)
    if (!f.in_block && !f.out_block && !f.w_blocked)
      if (auto s = depthwise_conv(f.c, N, C, H, W, O, w.size(1), kH, kW, OH, OW)) {
        cpu::conv_depthwise_fwd(*s, x.data_ptr<float>(), w.data_ptr<float>(),
                                bias ? bias->data_ptr<float>() : nullptr, static_cast<int>(f.act),
                                first == 1, y.data_ptr<float>());
        return;
      }
  if constexpr (std::is_same_v<T, float>) {
    cpu::ConvFused cf{conv_shape(f.c, N, C, H, W, O, kH, kW, OH, OW),
                      f.in_block,
                      f.out_block,
                      f.w_blocked,
                      f.bias,
                      first == 1,
                      static_cast<int32_t>(f.act),
                      f.w_const};
    // An NCHW first layer on a few image channels: the direct kernel (conv2d_fwd) and the
    // epilogue pass beat oneDNN's primitive, which reorders around it (1 -> 6 channels, 5x5,
    // batch 64: 125 against 265 us).
    const bool direct_nchw =
        !f.in_block && !f.out_block && !f.w_blocked && runs_direct(f.c, C, kH, kW, OW);
    if (whole_map && !direct_nchw && x.numel() > 0 && w.numel() > 0 &&
        cpu::dnnl_conv2d_fused(cf, x.data_ptr<float>(), w.data_ptr<float>(),
                               bias ? bias->data_ptr<float>() : nullptr, y.data_ptr<float>(),
                               w.impl_ptr()->storage, w.impl_ptr()->version()))
      return;
  }
  // float64, a build without oneDNN or a shape it refuses: the NCHW convolution, then the
  // epilogue in one pass that reads the residual from (and writes the result to) y's layout.
  Tensor xl = f.in_block ? unblock_act<T>(x, f.in_block) : x;
  Tensor wl = f.w_blocked ? unblock_weight<T>(w, f.in_block) : w;
  Tensor yl = empty(Shape{N, O, OH, OW}, y.dtype());
  conv2d_fwd<T>(xl, wl, yl, f.c, f.w_const && !f.w_blocked);
  const T* pc = yl.data_ptr<T>();
  const T* pb = bias ? bias->data_ptr<T>() : nullptr;
  T* py = y.data_ptr<T>();
  const int64_t P = OH * OW, ob = f.out_block;
  const int act = static_cast<int>(f.act);
  // One output plane at a time, its bias and the layout's offsets hoisted (the per-element
  // form took as long as the per-tap GEMMs on ASPP's 33x33 maps).
  parallel_for(N * O, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, P)),
               [&](int64_t b0, int64_t e0) {
                 for (int64_t no = b0; no < e0; ++no) {
                   const int64_t n = no / O, o = no % O;
                   const T* src = pc + no * P;
                   const T bo = pb ? pb[o] : T(0);
                   T* dst = ob ? py + (n * (O / ob) + o / ob) * P * ob + o % ob : py + no * P;
                   const int64_t step = ob ? ob : 1;
                   for (int64_t q = 0; q < P; ++q) {
                     T v = src[q] + bo;
                     if (first) v += dst[q * step];
                     if (act == cpu::kConvActRelu) v = v > T(0) || v != v ? v : T(0);
                     if (act == cpu::kConvActSwish) v = v / (T(1) + std::exp(-v));
                     if (act == cpu::kConvActHardswish)
                       v = v * std::min(std::max(v + T(3), T(0)), T(6)) / T(6);
                     dst[q * step] = v;
                   }
                 }
               });
}

// Crops taps that only meet padding (see find_crop) before the kernel; the block_layout pass
// crops constant weights once, so this copies only non-constant or asymmetric ones.
void fused_op_kernel(const char* op, std::span<const Tensor> in, Tensor& y, const Attrs& a,
                     size_t first) {
  LoadScope load;  // one thread while other processes starve this one (parallel.h)
  FusedP f = fused_params(op, a);
  const Tensor &x = in[first], &w = in[first + 1];
  Tensor wc = w;
  if (auto c = find_crop(f.c, x.size(2), x.size(3), w.size(2), w.size(3), y.size(2), y.size(3))) {
    wc = crop_weight(w, 2, *c);
    f.c = cropped_params(f.c, *c);
    f.w_const = false;
  }
  bool whole_map = true;
  if (x.dtype() == Float32 && !f.w_blocked) {  // (blocked weights: taken as they are)
    std::vector<TapSpan> sw;
    const int64_t C = f.in_block ? x.size(1) * f.in_block : x.size(1);
    const int64_t O = f.out_block ? y.size(1) * f.out_block : y.size(1);
    whole_map = !split_columns(f.c, x.size(0), C, x.size(2), x.size(3), O, wc.size(2), wc.size(3),
                               y.size(2), y.size(3), &sw);
  }
  KILN_DISPATCH_FLOAT(x.dtype(), op,
                      [&] { conv2d_fused_kernel<scalar_t>(in, y, f, first, wc, whole_map); });
}

const std::vector<std::string> kFusedAttrs = {"stride", "padding",  "dilation",  "groups",   "bias",
                                              "relu",   "in_block", "out_block", "w_blocked"};

const OpDef& kConv2dFused = def_op(
    {.name = "conv2d_fused",
     .num_inputs = -1,
     .attr_names = kFusedAttrs,
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return fused_infer("conv2d_fused", in, a, 0); },
     .kernel = [](std::span<const Tensor> in, std::span<Tensor> out,
                  const Attrs& a) { fused_op_kernel("conv2d_fused", in, out[0], a, 0); },
     .contiguous_inputs = true,
     .doc = "inference conv2d with its epilogue: act(conv(x, w) + bias), act by attribute relu "
            "(0 none, 1 relu, 2 swish, 3 hardswish), NCHW or channel-blocked [N, C/b, H, W, b] "
            "(what the conv_epilogue and block_layout passes make)"});

const OpDef& kConv2dFusedAdd = def_op(
    {.name = "conv2d_fused_add",
     .num_inputs = -1,
     .attr_names = kFusedAttrs,
     .traits = kAccumulates,
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return fused_infer("conv2d_fused_add", in, a, 1); },
     .kernel = [](std::span<const Tensor> in, std::span<Tensor> out,
                  const Attrs& a) { fused_op_kernel("conv2d_fused_add", in, out[0], a, 1); },
     .contiguous_inputs = true,
     .doc = "conv2d_fused that adds a residual (input 0, same layout as the output) before the "
            "activation: act(conv(x, w) + bias + residual), accumulated onto the residual"});

}  // namespace

Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                    std::vector<int64_t> stride, std::vector<int64_t> padding,
                    std::vector<int64_t> dilation, int64_t groups, bool relu, int64_t in_block,
                    int64_t out_block, bool w_blocked) {
  const char* op = residual.defined() ? "conv2d_fused_add" : "conv2d_fused";
  if (!x.defined() || !w.defined()) fail(op, "input and weight must be defined tensors");
  Attrs a{pair2(op, "stride", stride),
          pair2(op, "padding", padding),
          pair2(op, "dilation", dilation),
          groups,
          int64_t{bias.defined()},
          int64_t{relu},
          in_block,
          out_block,
          int64_t{w_blocked}};
  std::vector<Tensor> in;
  if (residual.defined()) in.push_back(residual);
  in.push_back(x);
  in.push_back(w);
  if (bias.defined()) in.push_back(bias);
  return call1(residual.defined() ? kConv2dFusedAdd : kConv2dFused, in, a);
}

Tensor to_channel_blocks(const Tensor& x, int64_t b) {
  if (!x.defined() || x.dim() != 4 || b <= 0 || x.size(1) < 0 || x.size(1) % b != 0)
    fail("to_channel_blocks", "expects a 4-D [N, C, H, W] input with a static C that the block ", b,
         " divides, got shape ", x.defined() ? x.shape() : Shape{});
  const Shape& s = x.shape();
  return contiguous(permute(reshape(x, Shape{s[0], s[1] / b, b, s[2], s[3]}), {0, 1, 3, 4, 2}));
}

Tensor from_channel_blocks(const Tensor& x) {
  if (!x.defined() || x.dim() != 5 || x.size(1) < 0 || x.size(4) <= 0)
    fail("from_channel_blocks", "expects a 5-D [N, C/b, H, W, b] input with static C/b and b, got ",
         "shape ", x.defined() ? x.shape() : Shape{});
  const Shape& s = x.shape();
  return reshape(contiguous(permute(x, {0, 1, 4, 2, 3})), Shape{s[0], s[1] * s[4], s[2], s[3]});
}

Tensor conv_weight_to_blocks(const Tensor& w, int64_t b) {
  if (!w.defined() || w.dim() != 4 || !w.shape().is_static() || b <= 0 || w.size(0) % b != 0 ||
      w.size(1) % b != 0)
    fail("conv_weight_to_blocks", "expects a static 4-D [O, C, kH, kW] weight with O and C ",
         "divisible by the block ", b, ", got shape ", w.defined() ? w.shape() : Shape{});
  const Shape& s = w.shape();
  return contiguous(
      permute(reshape(w, Shape{s[0] / b, b, s[1] / b, b, s[2], s[3]}), {0, 2, 4, 5, 3, 1}));
}

}  // namespace kiln
