// Convolution family: conv2d with its two gradient ops (input and weight), each on oneDNN's
// primitives, Kiln's direct or lane kernels (kernels/cpu) or im2col + GEMM. Every gradient op's
// own rule is written with the family's ops, so gradients of gradients work. Also
// conv_transpose2d (conv2d's input gradient as an op). The fused inference convolution is in
// conv_fused.cpp, the convolutions built from these (conv1d, conv3d, the other transposed ones,
// unfold / fold) in conv_composite.cpp.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/dispatch/autocast.h"
#include "kiln/dispatch/grad_mode.h"
#include "kiln/kernels/cpu/conv_depthwise.h"
#include "kiln/kernels/cpu/conv_direct.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/conv_lanes.h"
#include "kiln/kernels/cpu/conv_tap_gemm.h"
#include "kiln/kernels/cpu/conv_taps.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/im2col.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/conv_common.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace conv_detail {

using op_util::one;
using op_util::out_size;
using op_util::pair2;
using Ints = std::vector<int64_t>;

// Gradient rules refer to ops defined further down (and to each other); these wrappers are
// defined after all the OpDefs.
Tensor conv2d_raw(const Tensor& x, const Tensor& w, const Attrs& conv_attrs);
Tensor conv2d_grad_input_fn(const Tensor& g, const Tensor& w, const Attrs& conv_attrs, int64_t H,
                            int64_t W);
Tensor conv2d_grad_weight_fn(const Tensor& x, const Tensor& g, const Attrs& conv_attrs, int64_t kH,
                             int64_t kW);

// ---- conv2d: attributes {stride, padding, dilation, groups} (+ input_size / kernel_size) ----

ConvP conv_params(const char* op, const Attrs& a) {
  const Ints &s = a.ints(0), &p = a.ints(1), &d = a.ints(2);
  if (s.size() != 2 || p.size() != 2 || d.size() != 2)
    fail(op, "stride, padding and dilation must have 2 values each, got ", Shape(s), ", ", Shape(p),
         ", ", Shape(d));
  if (s[0] <= 0 || s[1] <= 0) fail(op, "stride must be positive, got ", Shape(s));
  if (d[0] <= 0 || d[1] <= 0) fail(op, "dilation must be positive, got ", Shape(d));
  if (p[0] < 0 || p[1] < 0) fail(op, "padding must be non-negative, got ", Shape(p));
  if (a.i(3) <= 0) fail(op, "groups must be positive, got ", a.i(3));
  op_util::check_window_params(op, "stride", s);
  op_util::check_window_params(op, "padding", p);
  op_util::check_window_params(op, "dilation", d);
  op_util::check_window_params(op, "groups", {a.i(3)});
  return ConvP{s[0], s[1], p[0], p[1], d[0], d[1], a.i(3)};
}

void require_4d(const char* op, const Shape& s, const char* what, const char* layout,
                const Shape& other, const char* other_what) {
  if (s.rank() != 4)
    fail(op, what, " must be 4-D ", layout, ", got shape ", s, " (", other_what, " shape ", other,
         ")");
}

void require_float_pair(const char* op, const Tensor& a, const Tensor& b) {
  if (!is_floating(a.dtype()) || a.dtype() != b.dtype())
    fail(op, "expects two float32 or two float64 tensors, got ", a.dtype(), " ", a.shape(), " and ",
         b.dtype(), " ", b.shape());
}

// Checks the shapes x [N, C, H, W] and w [O, C/groups, kH, kW] (dynamic dims pass); returns
// the output shape. Shape-only, so the gradient ops reuse it on the shapes they imply.
Shape check_conv(const char* op, const Shape& xs, const Shape& ws, const ConvP& p) {
  require_4d(op, xs, "input", "[N, C, H, W]", ws, "weight");
  require_4d(op, ws, "weight", "[O, C/groups, kH, kW]", xs, "input");
  int64_t C = xs[1], O = ws[0];
  if ((C >= 0 && C % p.G != 0) || (O >= 0 && O % p.G != 0))
    fail(op, "groups = ", p.G, " must divide the input channels ", C, " and output channels ", O,
         " (input shape ", xs, ", weight shape ", ws, ")");
  if (C >= 0 && ws[1] >= 0 && ws[1] * p.G != C)
    fail(op, "weight shape ", ws, " with groups = ", p.G, " expects ", ws[1] * p.G,
         " input channels, but input shape ", xs, " has ", C);
  if (ws[2] == 0 || ws[3] == 0)
    fail(op, "kernel dims must be positive, got weight shape ", ws, " (input shape ", xs, ")");
  int64_t eH = p.dH * (ws[2] - 1) + 1, eW = p.dW * (ws[3] - 1) + 1;
  if ((xs[2] >= 0 && ws[2] >= 0 && xs[2] + 2 * p.pH < eH) ||
      (xs[3] >= 0 && ws[3] >= 0 && xs[3] + 2 * p.pW < eW))
    fail(op, "kernel ", ws[2], "x", ws[3], " (dilated to ", eH, "x", eW,
         ") is larger than the padded input ", xs[2] + 2 * p.pH, "x", xs[3] + 2 * p.pW,
         " (input shape ", xs, ", weight shape ", ws, ", padding [", p.pH, ", ", p.pW, "])");
  return Shape{xs[0], O, ws[2] < 0 ? -1 : out_size(xs[2], eH, p.pH, p.sH),
               ws[3] < 0 ? -1 : out_size(xs[3], eW, p.pW, p.sW)};
}

cpu::Conv2dGeom conv_geom(const ConvP& p, int64_t Cg, int64_t H, int64_t W, int64_t kH, int64_t kW,
                          int64_t OH, int64_t OW) {
  return cpu::Conv2dGeom{Cg, H, W, kH, kW, p.pH, p.pW, p.sH, p.sW, p.dH, p.dW, OH, OW};
}

// A 1x1, stride-1, unpadded convolution reads its input as the column matrix itself.
bool is_pointwise(const cpu::Conv2dGeom& g) {
  return g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pH == 0 && g.pW == 0;
}

// The shape oneDNN's primitives take (float32 only: float64 references stay on im2col + GEMM).
cpu::ConvShape conv_shape(const ConvP& p, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                          int64_t kH, int64_t kW, int64_t OH, int64_t OW) {
  return cpu::ConvShape{N, C, H, W, O, kH, kW, p.G, OH, OW, p.sH, p.sW, p.pH, p.pW, p.dH, p.dW};
}

// How many chunks of samples to run side by side. Batch parallelism splits im2col and GEMM
// alike with no synchronization, so it wins whenever every thread gets whole samples; with a
// few large samples the GEMM's own threads split better (never both: no nesting). float64 goes
// to OpenBLAS, which is not called from several OpenMP threads at once; it serves references.
template <typename T>
int64_t batch_chunks(int64_t N, double macs_per_sample) {
  if (!std::is_same_v<T, float>) return 1;
  int64_t nt = omp_get_max_threads();
  if (nt <= 1 || N < 2 || omp_in_parallel()) return 1;
  bool even = N >= nt && (N % nt == 0 || N >= 4 * nt);
  if (even || macs_per_sample < double(1 << 22)) return std::min(nt, N);
  return 1;
}

// Runs f(n, chunk) for every sample, `chunks` contiguous ranges of samples side by side.
// Scratch buffers are indexed by chunk, not by thread id, so this stays right when
// parallel_for runs inline.
template <typename F>
void for_samples(int64_t N, int64_t chunks, F&& f) {
  int64_t per = (N + chunks - 1) / chunks;
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      for (int64_t n = t * per; n < std::min(N, (t + 1) * per); ++n) f(n, t);
  });
}

// Tiny reductions (C kH kW <= 32, stride 1, no dilation or groups: a first layer on image
// channels) run on kernels/cpu/conv_direct (oneDNN spends them in layout reorders).
bool small_direct(const ConvP& p, int64_t C, int64_t kH, int64_t kW, int64_t OW) {
  return p.G == 1 && p.sH == 1 && p.sW == 1 && p.dH == 1 && p.dW == 1 && C * kH * kW <= 32 &&
         OW >= 8;
}

bool runs_direct(const ConvP& p, int64_t C, int64_t kH, int64_t kW, int64_t OW) {
  const bool pointwise = kH == 1 && kW == 1 && p.sH == 1 && p.sW == 1 && p.pH == 0 && p.pW == 0;
  return !pointwise && small_direct(p, C, kH, kW, OW);
}

// Depthwise 3x3 on NCHW (MobileNet's, in a PyTorch program) runs on kernels/cpu/conv_depthwise
// straight from the planes: oneDNN's depthwise kernels reorder the whole map into and out of
// channel blocks around each call.
std::optional<cpu::DepthwiseConv> depthwise_conv(const ConvP& p, int64_t N, int64_t C, int64_t H,
                                                 int64_t W, int64_t O, int64_t Cg, int64_t kH,
                                                 int64_t kW, int64_t OH, int64_t OW) {
  if (p.G != C || O != C || Cg != 1) return std::nullopt;
  cpu::DepthwiseConv s{N, C, H, W, kH, kW, OH, OW, p.sH, p.sW, p.pH, p.pW, p.dH, p.dW};
  if (!cpu::conv_depthwise_suits(s)) return std::nullopt;
  return s;
}

// Few channels and a batch that fills the vector lanes (LeNet's 6 -> 16 layer) run on
// kernels/cpu/conv_lanes, samples in lanes (oneDNN's 16-channel blocks leave lanes empty).
std::optional<cpu::LaneConv> lanes_conv(const ConvP& p, int64_t N, int64_t C, int64_t H, int64_t W,
                                        int64_t O, int64_t kH, int64_t kW, int64_t OH, int64_t OW,
                                        bool weight_grad = false) {
  if (p.G != 1 || p.sH != 1 || p.sW != 1 || p.dH != 1 || p.dW != 1) return std::nullopt;
  cpu::LaneConv s{N, C, H, W, O, kH, kW, OH, OW, p.pH, p.pW};
  if (!cpu::conv_lanes_suits(s, weight_grad)) return std::nullopt;
  return s;
}

// ---- columns with a fixed set of taps ---------------------------------------------------------
// oneDNN's direct (jit) kernels take a left or right padding in width only up to their unroll
// over output columns (about 28); past it (ASPP's dilation 12 and 24 on a 33x33 map) it runs
// im2col + GEMM over the whole kernel, multiplying the padding too: 3.8x the useful work at
// dilation 24. One group: a GEMM per tap on the outputs it reaches (cpu::conv2d_tap_gemms).
// Groups: the output columns split into spans over which the width taps that meet the input
// are fixed, each a convolution without width padding on a window of the input's columns.
using cpu::TapSpan;

// Whether to split: float32 NCHW on oneDNN, column spans (cpu::column_spans), and oneDNN would
// not run the whole convolution on a direct kernel.
bool split_columns(const ConvP& p, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                   int64_t kH, int64_t kW, int64_t OH, int64_t OW, std::vector<TapSpan>* sw) {
  if (cpu::dnnl_channel_block() == 0) return false;
  if (p.G == 1 && cpu::sparse_taps(H, W, kH, kW, p.pH, p.pW, p.sH, p.sW, p.dH, p.dW, OH, OW))
    return true;  // the per-tap GEMMs, even where oneDNN has a direct kernel
  *sw = cpu::column_spans(W, kW, p.pW, p.sW, p.dW, OW);
  return !sw->empty() &&
         !cpu::dnnl_conv2d_forward_direct(conv_shape(p, N, C, H, W, O, kH, kW, OH, OW));
}

// A constant weight's derived form (kind 0: its crop for the column spans; 1: its taps packed
// for the per-tap GEMMs), made once per weight, kind, crop and version (a thread's last 256; the
// weight's storage held weakly, so a freed one never matches), so that a Session's convolution
// finds its weights, and oneDNN their layouts, from the last run.
Tensor const_form(const Tensor& w, int kind, const TapCrop& c,
                  Tensor (*make)(const Tensor&, const TapCrop&)) {
  struct Kept {
    std::weak_ptr<const void> owner;
    const void* data;
    uint32_t version;
    int kind;
    TapCrop crop;
    Tensor form;
  };
  thread_local std::deque<Kept> kept;
  const std::shared_ptr<const void> owner = w.impl_ptr()->storage;
  const uint32_t version = w.impl_ptr()->version();
  auto same = [&](const Kept& k) {
    return k.data == w.raw_data() && k.kind == kind && k.crop.h.lo == c.h.lo &&
           k.crop.h.n == c.h.n && k.crop.w.lo == c.w.lo && k.crop.w.n == c.w.n &&
           !k.owner.owner_before(owner) && !owner.owner_before(k.owner);
  };
  for (Kept& k : kept)
    if (same(k)) {
      if (k.version != version) {  // a new tensor: oneDNN's cache keys on its storage
        k.form = make(w, c);
        k.version = version;
      }
      return k.form;
    }
  std::erase_if(kept, [](const Kept& k) { return k.owner.expired(); });
  if (kept.size() >= 256) kept.pop_front();
  kept.push_back({owner, w.raw_data(), version, kind, c, make(w, c)});
  return kept.back().form;
}

Tensor crop_w(const Tensor& w, const TapCrop& c) { return crop_weight(w, 2, c); }
Tensor const_crop(const Tensor& w, const TapCrop& c) { return const_form(w, 0, c, crop_w); }

// The float32 weight [O, C, kH, kW] as kH kW matrices [O, C] (cpu::conv2d_tap_gemms), packed once
// for a constant (its version checked, as const_crop), on every call otherwise.
Tensor pack_taps(const Tensor& w, const TapCrop&) {
  const int64_t O = w.size(0), C = w.size(1), taps = w.size(2) * w.size(3);
  Tensor wt = empty(Shape{taps, O, C}, Float32);
  cpu::pack_tap_weights(w.data_ptr<float>(), wt.data_ptr<float>(), O, C, taps);
  return wt;
}
Tensor tap_weights(const Tensor& w, bool w_const) {
  return w_const ? const_form(w, 1, TapCrop{}, pack_taps) : pack_taps(w, TapCrop{});
}

template <typename T>
void conv2d_columns(const Tensor& x, const Tensor& w, Tensor& y, const ConvP& p,
                    const std::vector<TapSpan>& sw, bool w_const) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0);
  const int64_t OH = y.size(2), OW = y.size(3);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  for (const TapSpan& b : sw) {
    const int64_t ow = b.o1 - b.o0;
    const int64_t iw0 = b.o0 * p.sW - p.pW + b.t0 * p.dW,
                  cols = (ow - 1) * p.sW + (b.n - 1) * p.dW + 1;
    Tensor xs = empty(Shape{N, C, H, cols}, x.dtype());
    T* pxs = xs.data_ptr<T>();
    for (int64_t r = 0; r < N * C * H; ++r)
      std::memcpy(pxs + r * cols, px + r * W + iw0, sizeof(T) * static_cast<size_t>(cols));
    Tensor ys = empty(Shape{N, O, OH, ow}, y.dtype());
    ConvP q = p;
    q.pW = 0;
    const TapCrop crop{{0, w.size(2)}, {b.t0, b.n}};
    bool done = false;
    if constexpr (std::is_same_v<T, float>)
      if (w_const) {  // the constant's crop, laid out by oneDNN once (conv2d_fused's cache)
        const Tensor wc = const_crop(w, crop);
        const cpu::ConvFused cf{conv_shape(q, N, C, H, cols, O, w.size(2), b.n, OH, ow),
                                0,
                                0,
                                false,
                                false,
                                false,
                                false,
                                true};
        done = cpu::dnnl_conv2d_fused(cf, pxs, wc.data_ptr<float>(), nullptr, ys.data_ptr<float>(),
                                      wc.impl_ptr()->storage, wc.impl_ptr()->version());
      }
    if (!done) conv2d_fwd<T>(xs, w_const ? const_crop(w, crop) : crop_weight(w, 2, crop), ys, q);
    const T* pys = ys.data_ptr<T>();
    for (int64_t r = 0; r < N * O * OH; ++r)
      std::memcpy(py + r * OW + b.o0, pys + r * ow, sizeof(T) * static_cast<size_t>(ow));
  }
}

template <typename T>
void conv2d_fwd(const Tensor& x, const Tensor& w, Tensor& y, const ConvP& p, bool w_const) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  const int64_t OH = y.size(2), OW = y.size(3), Og = O / p.G;
  if (y.numel() == 0) return;
  const cpu::Conv2dGeom geo = conv_geom(p, Cg, H, W, kH, kW, OH, OW);
  const int64_t K = geo.rows(), P = geo.cols();
  const bool direct = is_pointwise(geo);
  if constexpr (std::is_same_v<T, float>)
    if (auto s = depthwise_conv(p, N, C, H, W, O, Cg, kH, kW, OH, OW)) {
      cpu::conv_depthwise_fwd(*s, x.data_ptr<float>(), w.data_ptr<float>(), nullptr,
                              cpu::kConvActNone, false, y.data_ptr<float>());
      return;
    }
  if constexpr (std::is_same_v<T, float>)
    if (!direct && small_direct(p, C, kH, kW, OW)) {
      cpu::conv_direct_fwd(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), N, C, H,
                           W, O, kH, kW, OH, OW, p.pH, p.pW);
      return;
    }
  if constexpr (std::is_same_v<T, float>) {
    std::vector<TapSpan> sw;
    if (!direct && split_columns(p, N, C, H, W, O, kH, kW, OH, OW, &sw))
      return p.G == 1 ? cpu::conv2d_tap_gemms(x.data_ptr<float>(),
                                              tap_weights(w, w_const).data_ptr<float>(),
                                              y.data_ptr<float>(), N, O, geo)
                      : conv2d_columns<T>(x, w, y, p, sw, w_const);
  }
  if constexpr (std::is_same_v<T, float>)
    if (!direct &&
        cpu::dnnl_conv2d_forward(conv_shape(p, N, C, H, W, O, kH, kW, OH, OW), x.data_ptr<float>(),
                                 w.data_ptr<float>(), y.data_ptr<float>()))
      return;
  // After oneDNN: its forward matches the lane kernel on LeNet's 6 -> 16 layer (258 vs 278 us,
  // 1 thread); without oneDNN the lanes beat im2col's per-sample GEMMs.
  if constexpr (std::is_same_v<T, float>)
    if (!direct)
      if (auto s = lanes_conv(p, N, C, H, W, O, kH, kW, OH, OW)) {
        cpu::conv_lanes_fwd(*s, x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>());
        return;
      }
  const int64_t chunks = batch_chunks<T>(N, double(O) * double(K) * double(P));
  Tensor buf = direct ? Tensor() : empty(Shape{chunks * K * P}, x.dtype());
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  T* py = y.data_ptr<T>();
  T* cols0 = direct ? nullptr : buf.data_ptr<T>();
  for_samples(N, chunks, [&](int64_t n, int64_t t) {
    T* cols = direct ? nullptr : cols0 + t * K * P;
    for (int64_t g = 0; g < p.G; ++g) {
      const T* xg = px + (n * C + g * Cg) * H * W;
      if (!direct) cpu::im2col(xg, geo, cols);
      // y[n, g] [Og, P] = w_g [Og, K] @ cols [K, P]
      gemm<T>(false, false, Og, P, K, pw + g * Og * K, K, direct ? xg : cols, P, T(0),
              py + (n * O + g * Og) * P, P);
    }
  });
}

// dx = col2im(w^T @ g): the adjoint of conv2d in x.
template <typename T>
void conv2d_bwd_input(const Tensor& gy, const Tensor& w, Tensor& dx, const ConvP& p) {
  const int64_t N = dx.size(0), C = dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  const int64_t OH = gy.size(2), OW = gy.size(3), Og = O / p.G;
  if (dx.numel() == 0) return;
  const cpu::Conv2dGeom geo = conv_geom(p, Cg, H, W, kH, kW, OH, OW);
  const int64_t K = geo.rows(), P = geo.cols();
  const bool direct = is_pointwise(geo);
  if constexpr (std::is_same_v<T, float>)
    if (!direct)
      if (auto s = lanes_conv(p, N, C, H, W, O, kH, kW, OH, OW)) {
        cpu::conv_lanes_bwd_data(*s, gy.data_ptr<float>(), w.data_ptr<float>(),
                                 dx.data_ptr<float>());
        return;
      }
  if constexpr (std::is_same_v<T, float>)
    if (!direct && cpu::dnnl_conv2d_backward_data(conv_shape(p, N, C, H, W, O, kH, kW, OH, OW),
                                                  gy.data_ptr<float>(), w.data_ptr<float>(),
                                                  dx.data_ptr<float>()))
      return;
  const int64_t chunks = batch_chunks<T>(N, double(O) * double(K) * double(P));
  Tensor buf = direct ? Tensor() : empty(Shape{chunks * K * P}, dx.dtype());
  const T* pg = gy.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  T* pdx = dx.data_ptr<T>();
  T* cols0 = direct ? nullptr : buf.data_ptr<T>();
  for_samples(N, chunks, [&](int64_t n, int64_t t) {
    T* cols = direct ? nullptr : cols0 + t * K * P;
    for (int64_t g = 0; g < p.G; ++g) {
      T* dxg = pdx + (n * C + g * Cg) * H * W;
      // cols [K, P] = w_g^T [K, Og] @ g[n, g] [Og, P]
      gemm<T>(true, false, K, P, Og, pw + g * Og * K, K, pg + (n * O + g * Og) * P, P, T(0),
              direct ? dxg : cols, P);
      if (!direct) {
        std::fill(dxg, dxg + Cg * H * W, T(0));
        cpu::col2im(cols, geo, dxg);
      }
    }
  });
}

// dw = sum_n g[n] @ im2col(x[n])^T: the adjoint of conv2d in w.
template <typename T>
void conv2d_bwd_weight(const Tensor& x, const Tensor& gy, Tensor& dw, const ConvP& p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = dw.size(0), Cg = dw.size(1), kH = dw.size(2), kW = dw.size(3);
  const int64_t OH = gy.size(2), OW = gy.size(3), Og = O / p.G;
  T* pdw = dw.data_ptr<T>();
  const cpu::Conv2dGeom geo = conv_geom(p, Cg, H, W, kH, kW, OH, OW);
  const int64_t K = geo.rows(), P = geo.cols();
  std::fill(pdw, pdw + O * K, T(0));
  if (dw.numel() == 0 || N == 0 || P == 0) return;
  const bool direct = is_pointwise(geo);
  if constexpr (std::is_same_v<T, float>)
    if (!direct && small_direct(p, C, kH, kW, OW)) {
      cpu::conv_direct_bwdw(x.data_ptr<float>(), gy.data_ptr<float>(), pdw, N, C, H, W, O, kH, kW,
                            OH, OW, p.pH, p.pW);
      return;
    }
  if constexpr (std::is_same_v<T, float>)
    if (!direct)
      if (auto s = lanes_conv(p, N, C, H, W, O, kH, kW, OH, OW, /*weight_grad=*/true)) {
        cpu::conv_lanes_bwd_weight(*s, x.data_ptr<float>(), gy.data_ptr<float>(), pdw);
        return;
      }
  if constexpr (std::is_same_v<T, float>)
    if (!direct &&
        cpu::dnnl_conv2d_backward_weights(conv_shape(p, N, C, H, W, O, kH, kW, OH, OW),
                                          x.data_ptr<float>(), gy.data_ptr<float>(), pdw))
      return;
  // The loop below accumulates into dw: start from zeros again in case a primitive that
  // failed half-way had written some of it.
  std::fill(pdw, pdw + O * K, T(0));
  const int64_t chunks = batch_chunks<T>(N, double(O) * double(K) * double(P));
  // Each chunk accumulates into its own dw (chunk 0 into the output), summed at the end.
  const int64_t scratch = (direct ? 0 : K * P) + O * K;
  Tensor buf = empty(Shape{chunks * scratch}, dw.dtype());
  const T* px = x.data_ptr<T>();
  const T* pg = gy.data_ptr<T>();
  T* b0 = buf.data_ptr<T>();
  for (int64_t t = 1; t < chunks; ++t) std::fill(b0 + t * scratch, b0 + t * scratch + O * K, T(0));
  for_samples(N, chunks, [&](int64_t n, int64_t t) {
    T* acc = t == 0 ? pdw : b0 + t * scratch;
    T* cols = b0 + t * scratch + O * K;
    for (int64_t g = 0; g < p.G; ++g) {
      const T* xg = px + (n * C + g * Cg) * H * W;
      if (!direct) cpu::im2col(xg, geo, cols);
      // dw_g [Og, K] += g[n, g] [Og, P] @ cols^T [P, K]
      gemm<T>(false, true, Og, K, P, pg + (n * O + g * Og) * P, P, direct ? xg : cols, P, T(1),
              acc + g * Og * K, K);
    }
  });
  for (int64_t t = 1; t < chunks; ++t) {
    const T* part = b0 + t * scratch;
    for (int64_t i = 0; i < O * K; ++i) pdw[i] += part[i];
  }
}

// ---- one direction of conv2d in any float dtype
// --------------------------------------------------

enum class ConvDir { kForward, kGradInput, kGradWeight };

const uint16_t* bf16_in(const Tensor& t) { return static_cast<const uint16_t*>(t.raw_data()); }

// Runs one direction, out = dir(a, b): forward y = conv(x, w), grad input dx = (gy, w), grad
// weight dw = (x, gy). bfloat16 runs natively on oneDNN's bfloat16 kernels (AVX512-BF16 or AMX,
// float32 accumulation) when it takes the shape; otherwise in float32 on widened copies, the
// result rounded once.
void conv_dir_kernel(ConvDir dir, const Tensor& a, const Tensor& b, Tensor& out, const ConvP& p) {
  LoadScope load;  // one thread while other processes starve this one (parallel.h)
  auto run = [&](auto tag, const Tensor& ta, const Tensor& tb, Tensor& to) {
    using T = decltype(tag);
    if (dir == ConvDir::kForward) return conv2d_fwd<T>(ta, tb, to, p);
    if (dir == ConvDir::kGradInput) return conv2d_bwd_input<T>(ta, tb, to, p);
    conv2d_bwd_weight<T>(ta, tb, to, p);
  };
  if (a.dtype() != BF16) {
    const char* name = dir == ConvDir::kForward     ? "conv2d"
                       : dir == ConvDir::kGradInput ? "conv2d_grad_input"
                                                    : "conv2d_grad_weight";
    KILN_DISPATCH_FLOAT(a.dtype(), name, [&] { run(scalar_t{}, a, b, out); });
    return;
  }
  // The input-, weight- and output-shaped operands of this direction.
  const Tensor& xs = dir == ConvDir::kGradInput ? out : a;
  const Tensor& ws = dir == ConvDir::kGradWeight ? out : b;
  const Tensor& ys = dir == ConvDir::kForward ? out : dir == ConvDir::kGradInput ? a : b;
  const cpu::ConvShape s = conv_shape(p, xs.size(0), xs.size(1), xs.size(2), xs.size(3), ws.size(0),
                                      ws.size(2), ws.size(3), ys.size(2), ys.size(3));
  if (a.numel() > 0 && b.numel() > 0 && out.numel() > 0) {
    const uint16_t *pa = bf16_in(a), *pb = bf16_in(b);
    auto* po = static_cast<uint16_t*>(out.raw_data());
    const bool done = dir == ConvDir::kForward ? cpu::dnnl_conv2d_forward_bf16(s, pa, pb, po)
                      : dir == ConvDir::kGradInput
                          ? cpu::dnnl_conv2d_backward_data_bf16(s, pa, pb, po)
                          : cpu::dnnl_conv2d_backward_weights_bf16(s, pa, pb, po);
    if (done) return;
  }
  auto widened = [](const Tensor& t) {
    Tensor w = empty(t.shape(), Float32);
    op_util::copy_cast_kernel(t, w);
    return w;
  };
  Tensor wa = widened(a), wb = widened(b), wo = empty(out.shape(), Float32);
  run(float{}, wa, wb, wo);
  op_util::copy_cast_kernel(wo, out);
}

Attrs conv_only(const Attrs& a) { return Attrs{a[0], a[1], a[2], a[3]}; }

void conv2d_kernel(const Tensor& x, const Tensor& w, Tensor& y, const ConvP& p) {
  conv_dir_kernel(ConvDir::kForward, x, w, y, p);
}
void conv2d_grad_input_kernel(const Tensor& gy, const Tensor& w, Tensor& dx, const ConvP& p) {
  conv_dir_kernel(ConvDir::kGradInput, gy, w, dx, p);
}
void conv2d_grad_weight_kernel(const Tensor& x, const Tensor& gy, Tensor& dw, const ConvP& p) {
  conv_dir_kernel(ConvDir::kGradWeight, x, gy, dw, p);
}

const OpDef& kConv2d = def_op(
    {.name = "conv2d",
     .num_inputs = 2,
     .attr_names = {"stride", "padding", "dilation", "groups"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           ConvP p = conv_params("conv2d", a);
           Shape ys = check_conv("conv2d", in[0].shape(), in[1].shape(), p);
           require_float_pair("conv2d", in[0], in[1]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           ConvP p = conv_params("conv2d", a);
           const Tensor &x = in[0], &w = in[1];
           if (auto c = find_crop(p, x.size(2), x.size(3), w.size(2), w.size(3), out[0].size(2),
                                  out[0].size(3)))
             return conv2d_kernel(x, crop_weight(w, 2, *c), out[0], cropped_params(p, *c));
           conv2d_kernel(x, w, out[0], p);
         },
     // y = conv(x, w) is bilinear: dx = conv^T_w(g) (conv2d_grad_input), dw = the correlation of
     // x with g (conv2d_grad_weight).
     .grad =
         [](const GradCtx& c) {
           const Tensor &x = c.in(0), &w = c.in(1);
           return TensorList{
               c.need(0) ? conv2d_grad_input_fn(c.g(), w, c.attrs, x.size(2), x.size(3)) : Tensor(),
               c.need(1) ? conv2d_grad_weight_fn(x, c.g(), c.attrs, w.size(2), w.size(3))
                         : Tensor()};
         },
     .contiguous_inputs = true,
     .autocast = AutocastPolicy::kLower,
     .doc = "2-D cross-correlation x [N, C, H, W] * w [O, C/groups, kH, kW] (oneDNN, direct or "
            "lane kernels; im2col + GEMM otherwise)",
     .native_dtypes = dtype_bit(BF16)});

// Input size of conv2d_grad_input: the attribute, or (dynamic graphs) the smallest input that
// gives the gradient's spatial size.
int64_t grad_input_size(int64_t attr, int64_t out, int64_t eff, int64_t pad, int64_t stride) {
  if (attr >= 0) return attr;
  if (out < 0) return -1;
  return (out - 1) * stride - 2 * pad + eff;
}

const OpDef& kConv2dGradInput = def_op(
    {.name = "conv2d_grad_input",
     .num_inputs = 2,
     .attr_names = {"stride", "padding", "dilation", "groups", "input_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "conv2d_grad_input";
           ConvP p = conv_params(op, a);
           const Tensor &g = in[0], &w = in[1];
           require_4d(op, g.shape(), "grad_output", "[N, O, OH, OW]", w.shape(), "weight");
           require_4d(op, w.shape(), "weight", "[O, C/groups, kH, kW]", g.shape(), "grad_output");
           require_float_pair(op, g, w);
           const Ints& hw = a.ints(4);
           if (hw.size() != 2) fail(op, "input_size must have 2 values, got ", Shape(hw));
           int64_t eH = p.dH * (w.size(2) - 1) + 1, eW = p.dW * (w.size(3) - 1) + 1;
           int64_t H = grad_input_size(hw[0], g.size(2), eH, p.pH, p.sH);
           int64_t W = grad_input_size(hw[1], g.size(3), eW, p.pW, p.sW);
           Shape xs{g.size(0), w.size(1) < 0 ? -1 : w.size(1) * p.G, H, W};
           Shape ys = check_conv(op, xs, w.shape(), p);
           if ((g.size(1) >= 0 && ys[1] >= 0 && g.size(1) != ys[1]) ||
               (g.size(2) >= 0 && ys[2] >= 0 && g.size(2) != ys[2]) ||
               (g.size(3) >= 0 && ys[3] >= 0 && g.size(3) != ys[3]))
             fail(op, "grad_output shape ", g.shape(), " does not match the conv2d output ", ys,
                  " of input ", xs, " and weight ", w.shape());
           return one(g.dtype(), xs);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           ConvP p = conv_params("conv2d_grad_input", a);
           const Tensor &gy = in[0], &w = in[1];
           Tensor& dx = out[0];
           // Dropped taps only ever met padding: they add nothing to dx.
           if (auto c = find_crop(p, dx.size(2), dx.size(3), w.size(2), w.size(3), gy.size(2),
                                  gy.size(3)))
             return conv2d_grad_input_kernel(gy, crop_weight(w, 2, *c), dx, cropped_params(p, *c));
           conv2d_grad_input_kernel(gy, w, dx, p);
         },
     // dx = A_w^T g, linear in g and in w. With gg the gradient of dx:
     //   d<gg, A_w^T g>/dg = A_w gg = conv2d(gg, w);
     //   <gg, A_w^T g> = <conv2d(gg, w), g>, so the w-gradient is conv2d_grad_weight(gg, g).
     .grad =
         [](const GradCtx& c) {
           const Tensor &g = c.in(0), &w = c.in(1);
           return TensorList{c.need(0) ? conv2d_raw(c.g(), w, conv_only(c.attrs)) : Tensor(),
                             c.need(1)
                                 ? conv2d_grad_weight_fn(c.g(), g, c.attrs, w.size(2), w.size(3))
                                 : Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "gradient of conv2d w.r.t. its input: col2im(w^T @ grad_output)",
     .native_dtypes = dtype_bit(BF16)});

const OpDef& kConv2dGradWeight = def_op(
    {.name = "conv2d_grad_weight",
     .num_inputs = 2,
     .attr_names = {"stride", "padding", "dilation", "groups", "kernel_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "conv2d_grad_weight";
           ConvP p = conv_params(op, a);
           const Tensor &x = in[0], &g = in[1];
           require_4d(op, x.shape(), "input", "[N, C, H, W]", g.shape(), "grad_output");
           require_4d(op, g.shape(), "grad_output", "[N, O, OH, OW]", x.shape(), "input");
           require_float_pair(op, x, g);
           const Ints& k = a.ints(4);
           if (k.size() != 2 || k[0] <= 0 || k[1] <= 0)
             fail(op, "kernel_size must be 2 positive values, got ", Shape(k));
           if (x.size(1) >= 0 && x.size(1) % p.G != 0)
             fail(op, "groups = ", p.G, " must divide the input channels of shape ", x.shape());
           Shape ws{g.size(1), x.size(1) < 0 ? -1 : x.size(1) / p.G, k[0], k[1]};
           Shape ys = check_conv(op, x.shape(), ws, p);
           for (int64_t d = 0; d < 4; ++d)
             if (g.size(d) >= 0 && ys[d] >= 0 && g.size(d) != ys[d])
               fail(op, "grad_output shape ", g.shape(), " does not match the conv2d output ", ys,
                    " of input ", x.shape(), " and weight ", ws);
           return one(x.dtype(), ws);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           ConvP p = conv_params("conv2d_grad_weight", a);
           const Tensor &x = in[0], &gy = in[1];
           Tensor& dw = out[0];
           // The gradient of a tap that only ever met padding is 0: the kept taps' gradient,
           // placed into zeros.
           if (auto c = find_crop(p, x.size(2), x.size(3), dw.size(2), dw.size(3), gy.size(2),
                                  gy.size(3))) {
             Tensor part = empty(cropped_shape(dw.shape(), 2, *c), dw.dtype());
             conv2d_grad_weight_kernel(x, gy, part, cropped_params(p, *c));
             return copy_taps(part, dw, 2, *c, true);
           }
           conv2d_grad_weight_kernel(x, gy, dw, p);
         },
     // dw = B(x, g) with <w', B(x, g)> = <conv2d(x, w'), g> for every w'. With gg the gradient
     // of dw: <gg, B(x, g)> = <conv2d(x, gg), g>, so
     //   the x-gradient is A_gg^T g = conv2d_grad_input(g, gg), and the g-gradient conv2d(x, gg).
     .grad =
         [](const GradCtx& c) {
           const Tensor &x = c.in(0), &g = c.in(1);
           return TensorList{
               c.need(0) ? conv2d_grad_input_fn(g, c.g(), c.attrs, x.size(2), x.size(3)) : Tensor(),
               c.need(1) ? conv2d_raw(x, c.g(), conv_only(c.attrs)) : Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "gradient of conv2d w.r.t. its weight: sum_n grad_output[n] @ im2col(x[n])^T",
     .native_dtypes = dtype_bit(BF16)});

// ---- the forward-declared helpers ------------------------------------------------------------

Tensor conv2d_raw(const Tensor& x, const Tensor& w, const Attrs& conv_attrs) {
  return call1(kConv2d, {x, w}, conv_attrs);
}
Tensor conv2d_grad_input_fn(const Tensor& g, const Tensor& w, const Attrs& a, int64_t H,
                            int64_t W) {
  return call1(kConv2dGradInput, {g, w}, {a[0], a[1], a[2], a[3], Ints{H, W}});
}
Tensor conv2d_grad_weight_fn(const Tensor& x, const Tensor& g, const Attrs& a, int64_t kH,
                             int64_t kW) {
  return call1(kConv2dGradWeight, {x, g}, {a[0], a[1], a[2], a[3], Ints{kH, kW}});
}

// conv_fused.cpp runs the fused inference convolution's fallback on these.
template void conv2d_fwd<float>(const Tensor&, const Tensor&, Tensor&, const ConvP&, bool);
template void conv2d_fwd<double>(const Tensor&, const Tensor&, Tensor&, const ConvP&, bool);

}  // namespace conv_detail

using namespace conv_detail;

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  if (!x.defined() || !w.defined()) fail("conv2d", "input and weight must be defined tensors");
  // The bias is checked before the conv is built, so that a bad one leaves no node behind in a
  // graph.
  if (b.defined() && w.dim() >= 1 &&
      (b.dim() != 1 || (b.size(0) >= 0 && w.size(0) >= 0 && b.size(0) != w.size(0))))
    fail("conv2d", "bias must be 1-D [", w.size(0), "], got shape ", b.shape(), " (weight shape ",
         w.shape(), ")");
  const Attrs a{pair2("conv2d", "stride", stride), pair2("conv2d", "padding", padding),
                pair2("conv2d", "dilation", dilation), groups};
  // Eager inference (no trace, nothing to differentiate, float32, autocast off): the bias in
  // the convolution's epilogue (conv2d_fused, what a Session's passes make of conv + add), not
  // a second pass over the output; torch adds its bias inside the convolution too. The values
  // agree within float rounding (oneDNN adds the bias where it chooses in its sums).
  if (b.defined() && !capturing() && !x.is_symbolic() && !w.is_symbolic() && !b.is_symbolic() &&
      x.dtype() == Float32 && w.dtype() == Float32 && b.dtype() == Float32 && !autocast_enabled() &&
      !(grad_mode_enabled() && (x.requires_grad() || w.requires_grad() || b.requires_grad()))) {
    check_conv("conv2d", x.shape(), w.shape(), conv_params("conv2d", a));
    return conv2d_fused(x, w, b, Tensor(), stride, padding, dilation, groups);
  }
  Tensor y = call1(kConv2d, {x, w}, a);
  if (!b.defined()) return y;
  // Bias as a broadcast add: its gradient is the engine's sum_to over N, H, W. Under autocast
  // it is cast as conv2d's own inputs were (torch casts the bias with them).
  return add(y, reshape(autocast_arg(AutocastPolicy::kLower, b), Shape{1, b.size(0), 1, 1}));
}

// The transposed convolution is conv2d's input gradient: x plays the gradient of a conv2d whose
// input has the output size below, w [C_in, C_out / groups, kH, kW] its weight. Its own
// gradients are that op's (conv2d for x, conv2d_grad_weight for w).
namespace conv_detail {

void check_transposed_params(const char* op, const std::vector<int64_t>& s,
                             const std::vector<int64_t>& p, const std::vector<int64_t>& o,
                             const std::vector<int64_t>& d) {
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] <= 0 || d[k] <= 0 || p[k] < 0 || o[k] < 0)
      fail(op, "stride and dilation must be positive, padding and output_padding >= 0, got ",
           "stride ", Shape(s), ", padding ", Shape(p), ", output_padding ", Shape(o),
           ", dilation ", Shape(d));
    // (torch's rule: a larger output_padding would not be reached by any input position)
    if (o[k] >= s[k] && o[k] >= d[k])
      fail(op, "output_padding ", Shape(o), " must be smaller than the stride ", Shape(s),
           " or the dilation ", Shape(d));
  }
}

}  // namespace conv_detail

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b,
                        std::vector<int64_t> stride, std::vector<int64_t> padding,
                        std::vector<int64_t> output_padding, std::vector<int64_t> dilation,
                        int64_t groups) {
  const char* op = "conv_transpose2d";
  if (!x.defined() || !w.defined()) fail(op, "input and weight must be defined tensors");
  if (x.dim() == 3)  // unbatched [C, H, W]
    return squeeze(
        conv_transpose2d(unsqueeze(x, 0), w, b, stride, padding, output_padding, dilation, groups),
        0);
  if (x.dim() != 4 || w.dim() != 4)
    fail(op, "input must be [N, C_in, H, W] and weight [C_in, C_out/groups, kH, kW], got ",
         x.shape(), " and ", w.shape());
  const Ints s = pair2(op, "stride", stride), p = pair2(op, "padding", padding),
             o = pair2(op, "output_padding", output_padding), d = pair2(op, "dilation", dilation);
  if (groups <= 0) fail(op, "groups must be positive, got ", groups);
  for (const Ints* v : {&s, &p, &o, &d})
    for (int64_t e : *v)
      if (e > op_util::kMaxWindowParam)
        fail(op, "stride, padding, output_padding and dilation must each be at most 2^30, got ",
             "stride ", Shape(s), ", padding ", Shape(p), ", output_padding ", Shape(o),
             ", dilation ", Shape(d));
  conv_detail::check_transposed_params(op, s, p, o, d);
  if (x.size(1) >= 0 && w.size(0) >= 0 && x.size(1) != w.size(0))
    fail(op, "input has ", x.size(1), " channels, the weight expects ", w.size(0), " (input ",
         x.shape(), ", weight ", w.shape(), ")");
  Ints hw(2, -1);
  for (int k = 0; k < 2; ++k) {
    const int64_t in = x.size(2 + k), ks = w.size(2 + k);
    if (in >= 0 && ks >= 0) {
      hw[static_cast<size_t>(k)] = (in - 1) * s[k] - 2 * p[k] + d[k] * (ks - 1) + o[k] + 1;
      if (hw[static_cast<size_t>(k)] <= 0)
        fail(op, "output size ", hw[static_cast<size_t>(k)], " in dim ", 2 + k,
             " is not positive (input ", x.shape(), ", weight ", w.shape(), ")");
    }
  }
  if (b.defined() &&
      (b.dim() != 1 || (b.size(0) >= 0 && w.size(1) >= 0 && b.size(0) != w.size(1) * groups)))
    fail(op, "bias must be 1-D [", w.size(1) * groups, "], got shape ", b.shape(),
         " (weight shape ", w.shape(), ")");
  const Tensor y = call1(kConv2dGradInput, {x, w}, {s, p, d, groups, hw});
  if (!b.defined()) return y;
  return add(y, reshape(b, Shape{1, b.size(0), 1, 1}));
}

}  // namespace kiln
