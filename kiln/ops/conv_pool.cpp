// Convolution and pooling family: conv2d as im2col + GEMM with its two gradient ops, max and
// average pooling with theirs. Every gradient op's own rule is written with the family's ops,
// so gradients of gradients work.
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/conv_direct.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/conv_lanes.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/im2col.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"

namespace kiln {
namespace {

using opu::one;
using Ints = std::vector<int64_t>;

// Gradient rules refer to ops defined further down (and to each other); these wrappers are
// defined after all the OpDefs.
Tensor conv2d_raw(const Tensor& x, const Tensor& w, const Attrs& conv_attrs);
Tensor conv2d_grad_input_fn(const Tensor& g, const Tensor& w, const Attrs& conv_attrs, int64_t H,
                            int64_t W);
Tensor conv2d_grad_weight_fn(const Tensor& x, const Tensor& g, const Attrs& conv_attrs, int64_t kH,
                             int64_t kW);
Tensor max_pool2d_grad_fn(const Tensor& g, const Tensor& idx, int64_t H, int64_t W);
Tensor max_pool2d_gather_fn(const Tensor& src, const Tensor& idx);
Tensor avg_pool2d_fn(const Tensor& x, const Attrs& pool_attrs);
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& pool_attrs, int64_t H, int64_t W);

// Output size of a window sweep; -1 when the input size is dynamic.
int64_t out_size(int64_t in, int64_t eff_kernel, int64_t pad, int64_t stride) {
  if (in < 0) return -1;
  return (in + 2 * pad - eff_kernel) / stride + 1;
}

// ---- conv2d: attributes {stride, padding, dilation, groups} (+ input_size / kernel_size) ----

struct ConvP {
  int64_t sH, sW, pH, pW, dH, dW, G;
};

ConvP conv_params(const char* op, const Attrs& a) {
  const Ints &s = a.ints(0), &p = a.ints(1), &d = a.ints(2);
  if (s.size() != 2 || p.size() != 2 || d.size() != 2)
    fail(op, "stride, padding and dilation must have 2 values each, got ", Shape(s), ", ", Shape(p),
         ", ", Shape(d));
  if (s[0] <= 0 || s[1] <= 0) fail(op, "stride must be positive, got ", Shape(s));
  if (d[0] <= 0 || d[1] <= 0) fail(op, "dilation must be positive, got ", Shape(d));
  if (p[0] < 0 || p[1] < 0) fail(op, "padding must be non-negative, got ", Shape(p));
  if (a.i(3) <= 0) fail(op, "groups must be positive, got ", a.i(3));
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

// Few channels and a batch that fills the vector lanes (LeNet's 6 -> 16 layer) run on
// kernels/cpu/conv_lanes, samples in lanes (oneDNN's 16-channel blocks leave lanes empty).
std::optional<cpu::LaneConv> lanes_conv(const ConvP& p, int64_t N, int64_t C, int64_t H, int64_t W,
                                        int64_t O, int64_t kH, int64_t kW, int64_t OH, int64_t OW) {
  if (p.G != 1 || p.sH != 1 || p.sW != 1 || p.dH != 1 || p.dW != 1) return std::nullopt;
  cpu::LaneConv s{N, C, H, W, O, kH, kW, OH, OW, p.pH, p.pW};
  if (!cpu::conv_lanes_suits(s)) return std::nullopt;
  return s;
}

template <typename T>
void conv2d_fwd(const Tensor& x, const Tensor& w, Tensor& y, const ConvP& p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  const int64_t OH = y.size(2), OW = y.size(3), Og = O / p.G;
  if (y.numel() == 0) return;
  const cpu::Conv2dGeom geo = conv_geom(p, Cg, H, W, kH, kW, OH, OW);
  const int64_t K = geo.rows(), P = geo.cols();
  const bool direct = is_pointwise(geo);
  if constexpr (std::is_same_v<T, float>)
    if (!direct && small_direct(p, C, kH, kW, OW)) {
      cpu::conv_direct_fwd(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), N, C, H,
                           W, O, kH, kW, OH, OW, p.pH, p.pW);
      return;
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
      if (auto s = lanes_conv(p, N, C, H, W, O, kH, kW, OH, OW)) {
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

Attrs conv_only(const Attrs& a) { return Attrs{a[0], a[1], a[2], a[3]}; }

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
           KILN_DISPATCH_FLOAT(in[0].dtype(), "conv2d",
                               [&] { conv2d_fwd<scalar_t>(in[0], in[1], out[0], p); });
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
     .doc = "2-D cross-correlation x [N, C, H, W] * w [O, C/groups, kH, kW] (im2col + GEMM)"});

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
           KILN_DISPATCH_FLOAT(in[0].dtype(), "conv2d_grad_input",
                               [&] { conv2d_bwd_input<scalar_t>(in[0], in[1], out[0], p); });
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
     .doc = "gradient of conv2d w.r.t. its input: col2im(w^T @ grad_output)"});

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
           KILN_DISPATCH_FLOAT(in[0].dtype(), "conv2d_grad_weight",
                               [&] { conv2d_bwd_weight<scalar_t>(in[0], in[1], out[0], p); });
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
     .doc = "gradient of conv2d w.r.t. its weight: sum_n grad_output[n] @ im2col(x[n])^T"});

// ---- pooling: attributes {kernel, stride, padding} (+ input_size for the gradients) ----------

struct PoolP {
  int64_t kH, kW, sH, sW, pH, pW;
};

PoolP pool_params(const char* op, const Attrs& a) {
  const Ints &k = a.ints(0), &s = a.ints(1), &p = a.ints(2);
  if (k.size() != 2 || s.size() != 2 || p.size() != 2)
    fail(op, "kernel, stride and padding must have 2 values each, got ", Shape(k), ", ", Shape(s),
         ", ", Shape(p));
  if (k[0] <= 0 || k[1] <= 0) fail(op, "kernel must be positive, got ", Shape(k));
  if (s[0] <= 0 || s[1] <= 0) fail(op, "stride must be positive, got ", Shape(s));
  // As PyTorch: a wider pad would give windows that see only padding.
  if (p[0] < 0 || p[1] < 0 || p[0] > k[0] / 2 || p[1] > k[1] / 2)
    fail(op, "padding ", Shape(p), " must be non-negative and at most half the kernel ", Shape(k));
  return PoolP{k[0], k[1], s[0], s[1], p[0], p[1]};
}

// Checks an input shape [N, C, H, W] (dynamic dims pass); returns the pooled shape.
Shape check_pool(const char* op, const Shape& s, const PoolP& p) {
  if (s.rank() != 4) fail(op, "input must be 4-D [N, C, H, W], got shape ", s);
  if ((s[2] >= 0 && s[2] + 2 * p.pH < p.kH) || (s[3] >= 0 && s[3] + 2 * p.pW < p.kW))
    fail(op, "kernel [", p.kH, ", ", p.kW, "] is larger than the padded input ", s[2] + 2 * p.pH,
         "x", s[3] + 2 * p.pW, " (input shape ", s, ", padding [", p.pH, ", ", p.pW, "])");
  return Shape{s[0], s[1], out_size(s[2], p.kH, p.pH, p.sH), out_size(s[3], p.kW, p.pW, p.sW)};
}

Attrs pool_only(const Attrs& a) { return Attrs{a[0], a[1], a[2]}; }

// Spatial input size for a pooling gradient: input_size attribute (4th), checked against g.
Shape pool_grad_shape(const char* op, const Tensor& g, const Attrs& a, const PoolP& p) {
  if (g.dim() != 4) fail(op, "grad_output must be 4-D [N, C, OH, OW], got shape ", g.shape());
  opu::require_float(op, g);
  const Ints& hw = a.ints(3);
  if (hw.size() != 2) fail(op, "input_size must have 2 values, got ", Shape(hw));
  Shape xs{g.size(0), g.size(1), hw[0], hw[1]};
  Shape ys = check_pool(op, xs, p);
  if ((ys[2] >= 0 && g.size(2) >= 0 && ys[2] != g.size(2)) ||
      (ys[3] >= 0 && g.size(3) >= 0 && ys[3] != g.size(3)))
    fail(op, "grad_output shape ", g.shape(), " does not match the pooled size ", ys, " of input ",
         xs);
  return xs;
}

// Calls f(plane) for each of the N*C planes, in parallel when the work is large.
template <typename F>
void for_planes(int64_t planes, int64_t work_per_plane, F&& f) {
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work_per_plane, 1));
  parallel_for(planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) f(i);
  });
}

// One output row of max pooling over input rows [h0, h1), columns [ow0, ow1) whose windows lie
// inside the row (no column clipping). S is the column stride when it is a compile-time
// constant (1 or 2), else 0 (runtime); K, when not 0, is the window's height and width as a
// compile-time constant, so the window loops unroll. Branch-free selects with PyTorch's rule,
// take v when v > best or v is NaN: the first maximum wins ties, a NaN wins its window (the
// last NaN when there are several). The earlier form (first NaN wins: v != v && best == best)
// compiled to code 6-8x slower here (W5's [64, 6, 28, 28]: 760 -> ~150 us); the loop before
// that branched on each compare (1130 us).
template <typename T, int64_t S, int64_t K>
void max_pool_row(const T* xp, int64_t W, int64_t h0, int64_t h1_rt, int64_t kW_rt, int64_t sW_rt,
                  int64_t pW, int64_t ow0, int64_t ow1, T* yr, int64_t* ir) {
  const int64_t sW = S ? S : sW_rt;
  const int64_t h1 = K ? h0 + K : h1_rt, kW = K ? K : kW_rt;
#pragma omp simd
  for (int64_t ow = ow0; ow < ow1; ++ow) {
    const int64_t w0 = ow * sW - pW;
    T best = -std::numeric_limits<T>::infinity();
    int64_t bi = h0 * W + w0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t kw = 0; kw < kW; ++kw) {
        const T v = xp[ih * W + w0 + kw];
        const bool take = (v > best) | (v != v);
        best = take ? v : best;
        bi = take ? ih * W + w0 + kw : bi;
      }
    yr[ow] = best;
    ir[ow] = bi;
  }
}

#ifdef __AVX2__
// 2x2 / stride 2 windows over rows r0, r1, outputs [0, n) with n >= 8: eight windows per step,
// the even and odd columns split by shuffles, the last step overlapping the one before (GCC
// does not vectorize the generic row: 14-wide rows and 64-bit indices). Same rule as
// max_pool_row: take v when v > best or v is NaN, in the order (r0, c), (r0, c+1), (r1, c),
// (r1, c+1). W5's [64, 6, 28, 28]: ~200 -> ~60 us. `base` is r0's offset within the plane.
void max_pool_2x2_row_avx2(const float* r0, const float* r1, int64_t W, int64_t base, int64_t n,
                           float* yr, int64_t* ir) {
  auto split = [](const float* p, __m256& even, __m256& odd) {
    const __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
    const __m256 e = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
  };
  const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i one = _mm256_set1_epi32(1), wv = _mm256_set1_epi32(static_cast<int32_t>(W)),
                w1 = _mm256_set1_epi32(static_cast<int32_t>(W + 1));
  for (int64_t j0 = 0; j0 < n; j0 += 8) {
    const int64_t j = j0 + 8 <= n ? j0 : n - 8;
    __m256 a, b, c, d;
    split(r0 + 2 * j, a, b);
    split(r1 + 2 * j, c, d);
    __m256 best = a;
    __m256i bi = _mm256_setzero_si256();
    auto step = [&](__m256 v, __m256i at) {
      const __m256 tk =
          _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, tk);
      bi = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(at), tk));
    };
    step(b, one);
    step(c, wv);
    step(d, w1);
    _mm256_storeu_ps(yr + j, best);
    // index = base + 2 j' + offset, widened to int64 (the plane offsets fit in int32 here).
    const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(2 * j)), lane2);
    const __m256i rel = _mm256_add_epi32(col, bi);
    const __m256i b64 = _mm256_set1_epi64x(base);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ir + j),
                        _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(rel))));
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(ir + j + 4),
        _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(rel, 1))));
  }
}
#endif

template <typename T>
void max_pool_fwd(const Tensor& x, Tensor& y, Tensor& idx, const PoolP& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  int64_t* pi = idx.data_ptr<int64_t>();
  // Output columns whose windows need no clipping at the left/right edge.
  int64_t ow_lo = std::min(OW, (p.pW + p.sW - 1) / p.sW);
  int64_t ow_hi = W + p.pW - p.kW >= 0 ? std::min(OW, (W + p.pW - p.kW) / p.sW + 1) : 0;
  ow_hi = std::max(ow_hi, ow_lo);
  for_planes(x.size(0) * x.size(1), OH * OW * p.kH * p.kW, [&](int64_t pl) {
    const T* xp = px + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = oh * p.sH - p.pH, h1 = std::min(h0 + p.kH, H);
      h0 = std::max<int64_t>(h0, 0);
      T* yr = py + (pl * OH + oh) * OW;
      int64_t* ir = pi + (pl * OH + oh) * OW;
      // Edge columns: clipped windows, one at a time.
      auto edge = [&](int64_t ow) {
        int64_t w0 = ow * p.sW - p.pW, w1 = std::min(w0 + p.kW, W);
        w0 = std::max<int64_t>(w0, 0);
        T best = -std::numeric_limits<T>::infinity();
        int64_t bi = h0 * W + w0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            const T v = xp[ih * W + iw];
            const bool take = (v > best) | (v != v);
            best = take ? v : best;
            bi = take ? ih * W + iw : bi;
          }
        yr[ow] = best;
        ir[ow] = bi;
      };
      for (int64_t ow = 0; ow < ow_lo; ++ow) edge(ow);
      const bool k2 = p.kW == 2 && h1 - h0 == 2, k3 = p.kW == 3 && h1 - h0 == 3;
#ifdef __AVX2__
      if constexpr (std::is_same_v<T, float>)
        if (p.sW == 2 && k2 && p.pW == 0 && ow_lo == 0 && ow_hi - ow_lo >= 8) {
          max_pool_2x2_row_avx2(xp + h0 * W, xp + (h0 + 1) * W, W, h0 * W, ow_hi, yr, ir);
          for (int64_t ow = ow_hi; ow < OW; ++ow) edge(ow);
          continue;
        }
#endif
      if (p.sW == 2 && k2)
        max_pool_row<T, 2, 2>(xp, W, h0, h1, p.kW, 2, p.pW, ow_lo, ow_hi, yr, ir);
      else if (p.sW == 2 && k3)
        max_pool_row<T, 2, 3>(xp, W, h0, h1, p.kW, 2, p.pW, ow_lo, ow_hi, yr, ir);
      else if (p.sW == 1 && k3)
        max_pool_row<T, 1, 3>(xp, W, h0, h1, p.kW, 1, p.pW, ow_lo, ow_hi, yr, ir);
      else
        max_pool_row<T, 0, 0>(xp, W, h0, h1, p.kW, p.sW, p.pW, ow_lo, ow_hi, yr, ir);
      for (int64_t ow = ow_hi; ow < OW; ++ow) edge(ow);
    }
  });
}

const OpDef& kMaxPool2d =
    def_op({.name = "max_pool2d",
            .num_inputs = 1,
            .num_outputs = 2,
            .attr_names = {"kernel", "stride", "padding"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  Shape ys = check_pool("max_pool2d", in[0].shape(), pool_params("max_pool2d", a));
                  opu::require_float("max_pool2d", in[0]);
                  MetaList m = one(in[0].dtype(), ys);
                  m.push_back(TensorMeta{Int64, ys});
                  return m;
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  PoolP p = pool_params("max_pool2d", a);
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d",
                                      [&] { max_pool_fwd<scalar_t>(in[0], out[0], out[1], p); });
                },
            // Output 1 holds each window's argmax (flat h * W + w within its plane): the gradient
            // is routed there, and only there (ties go to the first maximum, as the forward chose).
            .grad =
                [](const GradCtx& c) {
                  return TensorList{
                      max_pool2d_grad_fn(c.g(0), c.out(1), c.in(0).size(2), c.in(0).size(3))};
                },
            .contiguous_inputs = true,
            .doc = "2-D max pooling; outputs the maxima and their flat indices within each plane"});

// Shared check of (values [N, C, OH, OW], indices of the same shape).
void check_idx(const char* op, const Tensor& v, const Tensor& idx) {
  if (idx.dtype() != Int64)
    fail(op, "indices must be int64, got ", idx.dtype(), " (shape ", idx.shape(), ")");
  if (v.dim() != 4 || v.shape() != idx.shape())
    fail(op, "expects 4-D values and indices of one shape, got ", v.shape(), " and ", idx.shape());
  opu::require_float(op, v);
}

// Checked serially before the parallel loops: an exception must not leave an OpenMP region.
// The range is found with a min/max reduction first (vectorized; a compare-and-branch per
// index cost ~40 us on W5's 75K indices), and the offending index only when it fails.
void check_indices(const char* op, const Tensor& idx, int64_t H, int64_t W) {
  const int64_t* pi = idx.data_ptr<int64_t>();
  const int64_t n = idx.numel();
  int64_t lo = 0, hi = 0;
  if (n > 0) lo = hi = pi[0];
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (int64_t q = 0; q < n; ++q) {
    lo = std::min(lo, pi[q]);
    hi = std::max(hi, pi[q]);
  }
  if (lo >= 0 && hi < H * W) return;
  for (int64_t q = 0; q < n; ++q)
    if (pi[q] < 0 || pi[q] >= H * W)
      fail(op, "index ", pi[q], " is outside the ", H, "x", W, " plane (indices shape ",
           idx.shape(), ")");
}

// dx[plane] = 0, then dx[plane][idx[q]] += g[q], over the planes [lo, hi): each thread zeroes
// and fills its own planes. Indices are range-checked in the same pass: a bad one is clamped
// (writing only into this fresh output, which the caller then discards with the error) and
// counted. Outside any lambda so that the stores are known not to alias the inputs. A separate
// serial check and fill took as long as the scatter and did not scale with threads.
template <typename T>
int64_t pool_scatter(const T* __restrict g, const int64_t* __restrict idx, T* __restrict dx,
                     int64_t lo, int64_t hi, int64_t Q, int64_t HW) {
  int64_t bad = 0;
  for (int64_t pl = lo; pl < hi; ++pl) {
    T* d = dx + pl * HW;
    std::fill(d, d + HW, T(0));
    const int64_t* ip = idx + pl * Q;
    const T* gp = g + pl * Q;
    for (int64_t q = 0; q < Q; ++q) {
      const int64_t i = ip[q];
      const bool ok = i >= 0 && i < HW;
      bad += !ok;
      d[ok ? i : 0] += gp[q];
    }
  }
  return bad;
}

const OpDef& kMaxPool2dGrad = def_op(
    {.name = "max_pool2d_grad",
     .num_inputs = 2,
     .attr_names = {"input_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           check_idx("max_pool2d_grad", in[0], in[1]);
           const Ints& hw = a.ints(0);
           if (hw.size() != 2)
             fail("max_pool2d_grad", "input_size must have 2 values, got ", Shape(hw));
           return one(in[0].dtype(), Shape{in[0].size(0), in[0].size(1), hw[0], hw[1]});
         },
     // dx = zeros, then dx[plane][idx] += g (a scatter-add: overlapping windows can share one).
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const int64_t H = out[0].size(2), W = out[0].size(3), Q = in[0].size(2) * in[0].size(3);
           const int64_t* pi = in[1].data_ptr<int64_t>();
           std::atomic<int64_t> bad{0};
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d_grad", [&] {
             const scalar_t* pg = in[0].data_ptr<scalar_t>();
             scalar_t* pd = out[0].data_ptr<scalar_t>();
             const int64_t planes = in[0].size(0) * in[0].size(1);
             parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(Q, 1)),
                          [&](int64_t lo, int64_t hi) {
                            bad += pool_scatter<scalar_t>(pg, pi, pd, lo, hi, Q, H * W);
                          });
           });
           // Outside the parallel region (an exception must not leave it): name the index.
           if (bad.load() > 0) check_indices("max_pool2d_grad", in[1], H, W);
         },
     // Linear in g: dx = S g (scatter). Its adjoint gathers: d<gg, S g>/dg = S^T gg.
     .grad =
         [](const GradCtx& c) {
           return TensorList{c.need(0) ? max_pool2d_gather_fn(c.g(), c.in(1)) : Tensor(), Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "gradient of max_pool2d: scatters grad_output to the saved argmax positions"});

const OpDef& kMaxPool2dGather = def_op(
    {.name = "max_pool2d_gather",
     .num_inputs = 2,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           const Tensor &src = in[0], &idx = in[1];
           if (src.dim() != 4 || idx.dim() != 4 || src.size(0) != idx.size(0) ||
               src.size(1) != idx.size(1))
             fail("max_pool2d_gather", "expects src [N, C, H, W] and indices [N, C, OH, OW], got ",
                  src.shape(), " and ", idx.shape());
           if (idx.dtype() != Int64)
             fail("max_pool2d_gather", "indices must be int64, got ", idx.dtype(), " (shape ",
                  idx.shape(), ")");
           opu::require_float("max_pool2d_gather", src);
           return one(src.dtype(), idx.shape());
         },
     // out[plane][q] = src[plane][idx[plane][q]]
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const int64_t H = in[0].size(2), W = in[0].size(3), Q = in[1].size(2) * in[1].size(3);
           check_indices("max_pool2d_gather", in[1], H, W);
           const int64_t* pi = in[1].data_ptr<int64_t>();
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d_gather", [&] {
             const scalar_t* ps = in[0].data_ptr<scalar_t>();
             scalar_t* po = out[0].data_ptr<scalar_t>();
             for_planes(in[1].size(0) * in[1].size(1), Q, [&](int64_t pl) {
               const scalar_t* s = ps + pl * H * W;
               for (int64_t q = pl * Q; q < (pl + 1) * Q; ++q) po[q] = s[pi[q]];
             });
           });
         },
     // Linear in src: out = S^T src, so the src-gradient scatters back: S gg (max_pool2d_grad).
     .grad =
         [](const GradCtx& c) {
           return TensorList{
               c.need(0) ? max_pool2d_grad_fn(c.g(), c.in(1), c.in(0).size(2), c.in(0).size(3))
                         : Tensor(),
               Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "picks src at max_pool2d's argmax indices (the adjoint of max_pool2d_grad)"});

// Average pooling divides by the full window (count_include_pad = true, PyTorch's default);
// without ceil_mode no window reaches past the padding, so the divisor is always kH * kW.
template <typename T>
void avg_pool_fwd(const Tensor& x, Tensor& y, const PoolP& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const T inv = T(1) / static_cast<T>(p.kH * p.kW);
  for_planes(x.size(0) * x.size(1), OH * OW * p.kH * p.kW, [&](int64_t pl) {
    const T* xp = px + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = std::max<int64_t>(oh * p.sH - p.pH, 0),
              h1 = std::min(oh * p.sH - p.pH + p.kH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = std::max<int64_t>(ow * p.sW - p.pW, 0);
        int64_t w1 = std::min(ow * p.sW - p.pW + p.kW, W);
        T s = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) s += xp[ih * W + iw];
        py[(pl * OH + oh) * OW + ow] = s * inv;
      }
    }
  });
}

template <typename T>
void avg_pool_bwd(const Tensor& g, Tensor& dx, const PoolP& p) {
  const int64_t H = dx.size(2), W = dx.size(3), OH = g.size(2), OW = g.size(3);
  const T* pg = g.data_ptr<T>();
  T* pd = dx.data_ptr<T>();
  const T inv = T(1) / static_cast<T>(p.kH * p.kW);
  std::fill(pd, pd + dx.numel(), T(0));
  for_planes(g.size(0) * g.size(1), OH * OW * p.kH * p.kW, [&](int64_t pl) {
    T* dp = pd + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = std::max<int64_t>(oh * p.sH - p.pH, 0),
              h1 = std::min(oh * p.sH - p.pH + p.kH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = std::max<int64_t>(ow * p.sW - p.pW, 0);
        int64_t w1 = std::min(ow * p.sW - p.pW + p.kW, W);
        T v = pg[(pl * OH + oh) * OW + ow] * inv;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) dp[ih * W + iw] += v;
      }
    }
  });
}

const OpDef& kAvgPool2d = def_op(
    {.name = "avg_pool2d",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           Shape ys = check_pool("avg_pool2d", in[0].shape(), pool_params("avg_pool2d", a));
           opu::require_float("avg_pool2d", in[0]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           PoolP p = pool_params("avg_pool2d", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool2d",
                               [&] { avg_pool_fwd<scalar_t>(in[0], out[0], p); });
         },
     // y = A x with A[o, i] = 1/(kH kW) for i in window o: dx = A^T g (avg_pool2d_grad).
     .grad =
         [](const GradCtx& c) {
           return TensorList{avg_pool2d_grad_fn(c.g(), c.attrs, c.in(0).size(2), c.in(0).size(3))};
         },
     .contiguous_inputs = true,
     .doc = "2-D average pooling, count_include_pad = true"});

const OpDef& kAvgPool2dGrad =
    def_op({.name = "avg_pool2d_grad",
            .num_inputs = 1,
            .attr_names = {"kernel", "stride", "padding", "input_size"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  PoolP p = pool_params("avg_pool2d_grad", a);
                  return one(in[0].dtype(), pool_grad_shape("avg_pool2d_grad", in[0], a, p));
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  PoolP p = pool_params("avg_pool2d_grad", a);
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool2d_grad",
                                      [&] { avg_pool_bwd<scalar_t>(in[0], out[0], p); });
                },
            // dx = A^T g is linear in g; its adjoint is A: the g-gradient is avg_pool2d(gg).
            .grad = [](const GradCtx& c) { return TensorList{avg_pool2d_fn(c.g(), c.attrs)}; },
            .contiguous_inputs = true,
            .doc = "gradient of avg_pool2d: spreads grad_output / (kH kW) over each window"});

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
Tensor max_pool2d_grad_fn(const Tensor& g, const Tensor& idx, int64_t H, int64_t W) {
  return call1(kMaxPool2dGrad, {g, idx}, {Ints{H, W}});
}
Tensor max_pool2d_gather_fn(const Tensor& src, const Tensor& idx) {
  return call1(kMaxPool2dGather, {src, idx});
}
Tensor avg_pool2d_fn(const Tensor& x, const Attrs& a) {
  return call1(kAvgPool2d, {x}, pool_only(a));
}
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& a, int64_t H, int64_t W) {
  return call1(kAvgPool2dGrad, {g}, {a[0], a[1], a[2], Ints{H, W}});
}

// Expands a 1- or 2-value size argument to 2 values.
Ints pair(const char* op, const char* what, const Ints& v) {
  if (v.size() == 1) return Ints{v[0], v[0]};
  if (v.size() != 2) fail(op, what, " must have 1 or 2 values, got ", Shape(v));
  return v;
}

// Pooling accepts [C, H, W] too (as PyTorch): a batch dim is added and removed around the op.
template <typename F>
Tensor pool_call(const char* op, const Tensor& x, F&& f) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() == 3) return squeeze(f(unsqueeze(x, 0)), 0);
  if (x.dim() != 4)
    fail(op, "input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape ", x.shape());
  return f(x);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  if (!x.defined() || !w.defined()) fail("conv2d", "input and weight must be defined tensors");
  Tensor y = call1(kConv2d, {x, w},
                   {pair("conv2d", "stride", stride), pair("conv2d", "padding", padding),
                    pair("conv2d", "dilation", dilation), groups});
  if (!b.defined()) return y;
  if (b.dim() != 1 || (b.size(0) >= 0 && w.size(0) >= 0 && b.size(0) != w.size(0)))
    fail("conv2d", "bias must be 1-D [", w.size(0), "], got shape ", b.shape(), " (weight shape ",
         w.shape(), ")");
  // Bias as a broadcast add: its gradient is the engine's sum_to over N, H, W.
  return add(y, reshape(b, Shape{1, b.size(0), 1, 1}));
}

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  Ints k = pair("max_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair("max_pool2d", "stride", stride);
  Ints p = pair("max_pool2d", "padding", padding);
  return pool_call("max_pool2d", x, [&](const Tensor& x4) {
    return call(kMaxPool2d, {x4}, {k, s, p})[0];
  });
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  Ints k = pair("avg_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair("avg_pool2d", "stride", stride);
  Ints p = pair("avg_pool2d", "padding", padding);
  return pool_call("avg_pool2d", x, [&](const Tensor& x4) {
    return call1(kAvgPool2d, {x4}, {k, s, p});
  });
}

}  // namespace kiln
