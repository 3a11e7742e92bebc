// Average-pooling family: avg_pool2d (the full-window fast path) with its gradient, the N-D
// avg_pool_nd (1/2/3-D, ceil_mode, count_include_pad, divisor_override, adaptive bins) with its
// gradient, and the composites adaptive_avg_pool (one avg_pool2d when the bins are equal) and
// lp_pool. Each gradient op's own rule is the forward op, so gradients of gradients work.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/pool_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace pool_util;
using op_util::one;
using op_util::pair2;

// avg_pool2d and its gradient op call each other in their rules: wrappers defined below them.
Tensor avg_pool2d_fn(const Tensor& x, const Attrs& pool_attrs);
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& pool_attrs, int64_t H, int64_t W);

Attrs pool_only(const Attrs& a) { return Attrs{a[0], a[1], a[2]}; }

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
           op_util::require_float("avg_pool2d", in[0]);
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

Tensor avg_pool2d_fn(const Tensor& x, const Attrs& a) {
  return call1(kAvgPool2d, {x}, pool_only(a));
}
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& a, int64_t H, int64_t W) {
  return call1(kAvgPool2dGrad, {g}, {a[0], a[1], a[2], Ints{H, W}});
}

// forward = true: y = A x (average over each window); false: dx = A^T g.
template <typename T>
void nd_avg(const Tensor& src, Tensor& dst, const NdP& q, bool forward) {
  const Tensor& xin = forward ? src : dst;  // the input-shaped tensor
  const Tensor& yout = forward ? dst : src;
  const auto L = sp3(xin, q.nd), O = sp3(yout, q.nd);
  const auto w = nd_windows(q, L.data() + 3 - q.nd, O.data() + 3 - q.nd);
  const int64_t P = L[0] * L[1] * L[2], Q = O[0] * O[1] * O[2];
  const T* ps = src.data_ptr<T>();
  T* pd = dst.data_ptr<T>();
  for_planes(planes_of(xin), Q * 8, [&](int64_t pl) {
    const T* sp = ps + pl * (forward ? P : Q);
    T* dp = pd + pl * (forward ? Q : P);
    if (!forward) std::fill(dp, dp + P, T(0));
    int64_t q_ = 0;
    for (int64_t a = 0; a < O[0]; ++a)
      for (int64_t b = 0; b < O[1]; ++b)
        for (int64_t c = 0; c < O[2]; ++c, ++q_) {
          const size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b),
                       uc = static_cast<size_t>(c);
          const int64_t div =
              q.divisor > 0 ? q.divisor : w[0].factor[ua] * w[1].factor[ub] * w[2].factor[uc];
          const T inv = div > 0 ? T(1) / static_cast<T>(div) : T(0);
          T acc = 0;
          const T gv = forward ? T(0) : sp[q_] * inv;
          for (int64_t i0 = 0; i0 < w[0].count[ua]; ++i0) {
            const int64_t z = w[0].start[ua] + i0 * w[0].step;
            for (int64_t i1 = 0; i1 < w[1].count[ub]; ++i1) {
              const int64_t r = (z * L[1] + w[1].start[ub] + i1 * w[1].step) * L[2];
              for (int64_t i2 = 0; i2 < w[2].count[uc]; ++i2) {
                const int64_t at = r + w[2].start[uc] + i2 * w[2].step;
                if (forward)
                  acc += sp[at];
                else
                  dp[at] += gv;
              }
            }
          }
          if (forward) dp[q_] = acc * inv;
        }
  });
}

Tensor nd_avg_fn(const Tensor& x, const Attrs& a);
Tensor nd_avg_grad_fn(const Tensor& g, const Attrs& a, const Tensor& x);

const OpDef& kAvgPoolNd = def_op(
    {.name = "avg_pool_nd",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "avg_pool_nd";
           Shape ys = nd_check(op, in[0].shape(), nd_params(op, a));
           op_util::require_float(op, in[0]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           NdP q = nd_params("avg_pool_nd", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool_nd",
                               [&] { nd_avg<scalar_t>(in[0], out[0], q, true); });
         },
     // y = A x: dx = A^T g (avg_pool_nd_grad).
     .grad = [](const GradCtx& c) { return TensorList{nd_avg_grad_fn(c.g(), c.attrs, c.in(0))}; },
     .contiguous_inputs = true,
     .doc = "1/2/3-D average pooling (ceil_mode, count_include_pad, divisor_override, adaptive "
            "bins). Any dim may be dynamic (a dynamic spatial dim pools to a dynamic size)"});

const OpDef& kAvgPoolNdGrad = def_op(
    {.name = "avg_pool_nd_grad",
     .num_inputs = -1,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size", "input_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "avg_pool_nd_grad";
           NdP q = nd_params(op, a);
           const Tensor& g = in[0];
           op_util::require_float(op, g, "grad_output");
           // An optional input 1 (the pooled input, its values unread) gives the input
           // size where input_size has dynamic dims: it cannot be read back from g
           // (strided windows round).
           if (in.size() != 1 && in.size() != 2)
             fail(op, "takes grad_output and an optional input, got ", in.size(), " inputs");
           const Ints& sz = a.ints(8);
           if (g.dim() != static_cast<int64_t>(q.nd) + 2 || sz.size() != q.nd ||
               (in.size() == 2 && in[1].dim() != g.dim()))
             fail(op, "grad_output ", g.shape(), " and input_size ", Shape(sz), " must have ",
                  q.nd + 2, " and ", q.nd, " dims");
           Shape xs{g.size(0), g.size(1)};
           for (size_t i = 0; i < q.nd; ++i) {
             const int64_t v = in.size() == 2 ? in[1].size(static_cast<int64_t>(i) + 2) : sz[i];
             if (v < 0 && in.size() == 1)
               fail(op, "needs a static size: input_size ", Shape(sz),
                    " has a dynamic dim and no input gives it (grad_output ", g.shape(), ")");
             xs.push_back(v);
           }
           Shape ys = nd_check(op, xs, q);
           for (int64_t d = 2; d < g.dim(); ++d)
             if (g.size(d) >= 0 && ys[d] != g.size(d))
               fail(op, "grad_output shape ", g.shape(), " does not match the pooled size ", ys,
                    " of input ", xs);
           return one(g.dtype(), xs);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           NdP q = nd_params("avg_pool_nd_grad", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool_nd_grad",
                               [&] { nd_avg<scalar_t>(in[0], out[0], q, false); });
         },
     // dx = A^T g is linear in g; its adjoint is A.
     .grad =
         [](const GradCtx& c) {
           TensorList r{nd_avg_fn(c.g(), Attrs{c.attrs[0], c.attrs[1], c.attrs[2], c.attrs[3],
                                               c.attrs[4], c.attrs[5], c.attrs[6], c.attrs[7]})};
           if (c.inputs.size() == 2) r.push_back(Tensor());
           return r;
         },
     .contiguous_inputs = true,
     .doc = "gradient of avg_pool_nd: spreads grad_output / divisor over each window"});

Tensor nd_avg_fn(const Tensor& x, const Attrs& a) { return call1(kAvgPoolNd, {x}, a); }
Tensor nd_avg_grad_fn(const Tensor& g, const Attrs& a, const Tensor& x) {
  const Ints all = x.shape().vec();
  Ints sz(all.begin() + 2, all.end());
  const Attrs ga{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], sz};
  // A dynamic spatial size: x itself gives it when the graph runs (its values are not read).
  if (std::any_of(sz.begin(), sz.end(), [](int64_t v) { return v < 0; }))
    return call1(kAvgPoolNdGrad, {g, x}, ga);
  return call1(kAvgPoolNdGrad, {g}, ga);
}

Tensor adaptive_avg_nd(const char* op, size_t nd, const Tensor& x, const Ints& output_size) {
  Attrs a{Ints{}, Ints{}, Ints{},     Ints{},
          false,  true,   int64_t(0), expand_n(op, "output_size", output_size, nd)};
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));
    Tensor y = call1(kAvgPoolNd, {xb}, a);
    return unb ? squeeze(y, 0) : y;
  });
}

Tensor avg_pool_nd(const char* op, size_t nd, const Tensor& x, const Ints& kernel,
                   const Ints& stride, const Ints& padding, bool ceil, bool include_pad,
                   int64_t divisor) {
  Attrs a = nd_attrs(op, nd, kernel, stride, padding, Ints{1}, ceil, include_pad, divisor);
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));
    Tensor y = call1(kAvgPoolNd, {xb}, a);
    return unb ? squeeze(y, 0) : y;
  });
}

// torch's lp_pool: (sign(s) relu(|s|) * kernel_numel)^(1/p) with s = avg_pool(x^p).
Tensor lp_pool_nd(const char* op, size_t nd, const Tensor& x, double norm_type, const Ints& kernel,
                  const Ints& stride, bool ceil) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  const Ints k = expand_n(op, "kernel_size", kernel, nd);
  int64_t numel = 1;
  for (int64_t v : k) numel *= v;
  Tensor s = avg_pool_nd(op, nd, pow(x, norm_type), k, stride, Ints{0}, ceil, true, 0);
  return pow(mul(mul(sign(s), relu(abs(s))), static_cast<double>(numel)), 1.0 / norm_type);
}

}  // namespace

Tensor avg_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad) {
  return avg_pool_nd("avg_pool1d", 1, x, kernel, stride, padding, ceil_mode, count_include_pad, 0);
}
Tensor avg_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  return avg_pool_nd("avg_pool3d", 3, x, kernel, stride, padding, ceil_mode, count_include_pad,
                     divisor_override);
}
Tensor lp_pool1d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, bool ceil_mode) {
  return lp_pool_nd("lp_pool1d", 1, x, norm_type, kernel, stride, ceil_mode);
}
Tensor lp_pool2d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, bool ceil_mode) {
  return lp_pool_nd("lp_pool2d", 2, x, norm_type, kernel, stride, ceil_mode);
}
Tensor adaptive_avg_pool1d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_avg_nd("adaptive_avg_pool1d", 1, x, output_size);
}
Tensor adaptive_avg_pool3d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_avg_nd("adaptive_avg_pool3d", 3, x, output_size);
}

// torch's bins: output i of n over a length L averages [floor(i L / n), ceil((i + 1) L / n)).
// The bins of a rectangle are products of row and column ranges, so averaging over rows, then
// columns, is the rectangle's mean. Equal bins (L divisible by n) are one avg_pool2d.
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  const char* op = "adaptive_avg_pool2d";
  Ints o = pair2(op, "output_size", output_size);
  if (o[0] <= 0 || o[1] <= 0) fail(op, "output_size must be positive, got ", Shape(o));
  // (uneven bins cost one op per output row and column)
  if (o[0] > 65536 || o[1] > 65536)
    fail(op, "output_size must be at most 65536 per dim, got ", Shape(o));
  return pool_call(op, x, [&](const Tensor& x4) {
    if (!is_floating(x4.dtype()))
      fail(op, "input must be floating point, got ", x4.dtype(), x4.shape());
    const int64_t H = x4.size(2), W = x4.size(3);
    if (H < 0 || W < 0) fail(op, "needs static H and W, got shape ", x4.shape());
    if (H == 0 || W == 0) fail(op, "input has an empty spatial dim: shape ", x4.shape());
    if (H % o[0] == 0 && W % o[1] == 0) return avg_pool2d(x4, {H / o[0], W / o[1]});
    // Uneven bins: the N-D op's adaptive windows.
    return adaptive_avg_nd(op, 2, x4, o);
  });
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  // The fast op divides by the full window and never sees a window past the padding.
  if (ceil_mode || !count_include_pad || divisor_override != 0)
    return avg_pool_nd("avg_pool2d", 2, x, kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override);
  Ints k = pair2("avg_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("avg_pool2d", "stride", stride);
  Ints p = pair2("avg_pool2d", "padding", padding);
  return pool_call("avg_pool2d", x, [&](const Tensor& x4) {
    return call1(kAvgPool2d, {x4}, {k, s, p});
  });
}

}  // namespace kiln
