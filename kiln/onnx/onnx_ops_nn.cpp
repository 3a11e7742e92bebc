// ONNX converters for the network layers: Conv, ConvTranspose, the pools, Gemm, the
// normalizations, LRN and Resize/Upsample. 1-D convolutions and pools run as 2-D ones over a
// height of 1; asymmetric and SAME padding become an explicit pad.
#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

using Ints = std::vector<int64_t>;

// Spatial geometry of a conv or pool over 2 dims (1-D lifted to H = 1).
struct Window {
  Ints kernel, stride, dilation, pad_begin, pad_end;
};

// x [N, C, L] -> [N, C, 1, L]; the attribute lists get a leading 1 (or 0 for pads).
bool lift_1d(const NodeIn& n, Tensor& x) {
  if (x.dim() == 3) {
    x = unsqueeze(x, 2);
    return true;
  }
  if (x.dim() != 4 && x.dim() != 5)
    n.fail("supports 1-D, 2-D and 3-D inputs ([N, C, L], [N, C, H, W] or [N, C, D, H, W]), got ",
           x.shape());
  return false;
}

// An attribute of `nd` spatial values (default `def`); a lifted 1-D op gets a leading one.
Ints attr_nd(const NodeIn& n, const char* name, bool lifted, int64_t def, size_t nd = 2) {
  Ints v = n.ints(name);
  if (v.empty()) return Ints(nd, def);
  if (lifted) v.insert(v.begin(), def);
  if (v.size() != nd) n.fail("attribute '", name, "' needs ", lifted ? 1 : nd, " values");
  return v;
}

// The geometry of a conv or pool over kernel.size() (2 or 3) spatial dims of x [N, C, ...].
Window window(const NodeIn& n, const Tensor& x, const Ints& kernel, bool lifted) {
  const size_t nd = kernel.size();
  Window w;
  w.kernel = kernel;
  w.stride = attr_nd(n, "strides", lifted, 1, nd);
  w.dilation = attr_nd(n, "dilations", lifted, 1, nd);
  for (size_t d = 0; d < nd; ++d) {
    if (w.kernel[d] <= 0 || w.stride[d] <= 0 || w.dilation[d] <= 0)
      n.fail("kernel, strides and dilations must be positive");
  }
  const std::string ap = n.s("auto_pad", "NOTSET");
  w.pad_begin.assign(nd, 0);
  w.pad_end.assign(nd, 0);
  if (ap == "NOTSET") {
    Ints p = n.ints("pads");
    if (!p.empty()) {
      if (lifted) p = {0, p.size() > 0 ? p[0] : 0, 0, p.size() > 1 ? p[1] : 0};
      if (p.size() != 2 * nd) n.fail("pads needs ", lifted ? 2 : 2 * nd, " values");
      w.pad_begin.assign(p.begin(), p.begin() + static_cast<int64_t>(nd));
      w.pad_end.assign(p.begin() + static_cast<int64_t>(nd), p.end());
    }
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    for (size_t d = 0; d < nd; ++d) {
      const int64_t in = x.size(static_cast<int64_t>(2 + d));
      if (in < 0) n.fail("auto_pad needs static spatial sizes");
      const int64_t out = (in + w.stride[d] - 1) / w.stride[d];
      const int64_t total = std::max<int64_t>(
          0, (out - 1) * w.stride[d] + (w.kernel[d] - 1) * w.dilation[d] + 1 - in);
      const int64_t small = total / 2;
      w.pad_begin[d] = ap == "SAME_UPPER" ? small : total - small;
      w.pad_end[d] = total - w.pad_begin[d];
    }
  } else if (ap != "VALID") {
    n.fail("unknown auto_pad '", ap, "'");
  }
  for (size_t d = 0; d < nd; ++d) {
    if (w.pad_begin[d] < 0 || w.pad_end[d] < 0) n.fail("negative pads");
    // A pad past the input plus the kernel's extent only adds windows that see nothing but
    // padding; refused, so that pads of 10^9 cannot make a run allocate gigabytes (fuzzing).
    const int64_t in = x.size(static_cast<int64_t>(2 + d));
    const int64_t limit = (in < 0 ? 0 : in) + (w.kernel[d] - 1) * w.dilation[d] + 1;
    if (w.pad_begin[d] > limit || w.pad_end[d] > limit)
      n.fail("pads ", w.pad_begin[d], "/", w.pad_end[d], " exceed the input plus the kernel (",
             limit, ")");
  }
  return w;
}

bool symmetric(const Window& w) { return w.pad_begin == w.pad_end; }

// kiln::pad's order: last dim first; b and e cover the trailing b.size() dims.
Tensor pad_hw(const Tensor& x, const Ints& b, const Ints& e, double value) {
  Ints p;
  for (size_t d = b.size(); d-- > 0;) p.push_back(b[d]), p.push_back(e[d]);
  return pad(x, p, value);
}

// The kernel sizes of a weight [O, I, k...] (its trailing dims).
Ints kernel_of(const Tensor& w) {
  Ints k;
  for (int64_t d = 2; d < w.dim(); ++d) k.push_back(w.size(d));
  return k;
}

Tensor unlift(const Tensor& y, bool lifted) { return lifted ? squeeze(y, 2) : y; }

KILN_ONNX_OP(Conv) {
  Tensor x = n.req(0), w = n.req(1);
  const bool lifted = lift_1d(n, x);
  if (lifted) {
    if (w.dim() != 3) n.fail("1-D conv needs a 3-D weight, got ", w.shape());
    w = unsqueeze(w, 2);
  }
  if (w.dim() != x.dim() || !w.shape().is_static())
    n.fail("weight must be static ", x.dim(), "-D for input ", x.shape(), ", got ", w.shape());
  Window win = window(n, x, kernel_of(w), lifted);
  const int64_t group = n.i("group", 1);
  Ints padding = win.pad_begin;
  if (!symmetric(win)) {
    x = pad_hw(x, win.pad_begin, win.pad_end, 0.0);
    padding.assign(padding.size(), 0);
  }
  if (x.dim() == 5) return TL{conv3d(x, w, n.input(2), win.stride, padding, win.dilation, group)};
  Tensor y = conv2d(x, w, n.input(2), win.stride, padding, win.dilation, group);
  return TL{unlift(y, lifted)};
}

KILN_ONNX_OP(ConvTranspose) {
  Tensor x = n.req(0), w = n.req(1);
  const bool lifted = lift_1d(n, x);
  if (lifted) w = unsqueeze(w, 2);
  if (w.dim() != x.dim() || !w.shape().is_static())
    n.fail("weight must be static ", x.dim(), "-D for input ", x.shape(), ", got ", w.shape());
  const size_t nd = static_cast<size_t>(x.dim() - 2);
  const int64_t group = n.i("group", 1);
  const Ints stride = attr_nd(n, "strides", lifted, 1, nd),
             dil = attr_nd(n, "dilations", lifted, 1, nd);
  Ints out_pad = attr_nd(n, "output_padding", lifted, 0, nd);
  Ints out_shape = n.ints("output_shape");
  if (lifted && !out_shape.empty()) out_shape.insert(out_shape.begin(), 1);
  const std::string ap = n.s("auto_pad", "NOTSET");
  Ints pb(nd, 0), pe(nd, 0);
  for (size_t d = 0; d < nd; ++d) {
    if (stride[d] <= 0 || dil[d] <= 0) n.fail("strides and dilations must be positive");
    const int64_t in = x.size(static_cast<int64_t>(2 + d));
    if (in < 0) n.fail("needs static spatial sizes");
    const int64_t full =
        (in - 1) * stride[d] + (w.size(static_cast<int64_t>(2 + d)) - 1) * dil[d] + 1;
    if (!out_shape.empty() || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      if (!out_shape.empty() && out_shape.size() != nd)
        n.fail("output_shape needs ", nd, " values");
      const int64_t target = out_shape.empty() ? in * stride[d] : out_shape[d];
      const int64_t total = full + out_pad[d] - target;
      // ONNX's formulas use Python's floor division: with an output_shape past the natural
      // size, total is negative and the negative pad extends the end with zeros.
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      if (ap == "SAME_UPPER") {
        pb[d] = half;
        pe[d] = total - half;
      } else {  // SAME_LOWER, and output_shape alone
        pb[d] = total - half;
        pe[d] = half;
      }
    } else {
      Ints p = n.ints("pads");
      if (!p.empty()) {
        if (lifted) p = {0, p[0], 0, p.size() > 1 ? p[1] : 0};
        if (p.size() != 2 * nd) n.fail("pads needs ", lifted ? 2 : 2 * nd, " values");
        pb.assign(p.begin(), p.begin() + static_cast<int64_t>(nd));
        pe.assign(p.begin() + static_cast<int64_t>(nd), p.end());
      }
    }
  }
  // The full transposed convolution, then the crop (pads) and the zero rows output_padding adds
  // at the end (no input reaches them), then the bias on every position.
  for (size_t d = 0; d < nd; ++d)
    if (std::abs(pb[d]) > (int64_t(1) << 16) || std::abs(pe[d]) > (int64_t(1) << 16) ||
        out_pad[d] < 0 || out_pad[d] > (int64_t(1) << 16))
      n.fail("pads or output_padding out of range");
  const Ints zero(nd, 0);
  Tensor y = nd == 3 ? conv_transpose3d(x, w, Tensor(), stride, zero, zero, dil, group)
                     : conv_transpose2d(x, w, Tensor(), stride, zero, zero, dil, group);
  check_result_size(n, y.shape());
  Ints crop_b(nd), crop_e(nd);
  for (size_t d = 0; d < nd; ++d) crop_b[d] = -pb[d], crop_e[d] = out_pad[d] - pe[d];
  y = pad_hw(y, crop_b, crop_e, 0.0);
  if (n.has_input(2)) {
    Shape bs(static_cast<size_t>(x.dim()), 1);
    bs[1] = -1;
    y = add(y, reshape(n.in[2], bs));
  }
  return TL{unlift(y, lifted)};
}

// Extra end padding so that ceil_mode's last partial window exists.
void ceil_extend(const NodeIn& n, const Tensor& x, Window& w) {
  if (n.i("ceil_mode", 0) == 0) return;
  for (size_t d = 0; d < w.kernel.size(); ++d) {
    const int64_t in = x.size(static_cast<int64_t>(2 + d)) + w.pad_begin[d] + w.pad_end[d];
    const int64_t ext = (w.kernel[d] - 1) * w.dilation[d] + 1;
    const int64_t out = (in - ext + w.stride[d] - 1) / w.stride[d] + 1;
    w.pad_end[d] += std::max<int64_t>(0, (out - 1) * w.stride[d] + ext - in);
  }
}

// The pool's kernel_shape, checked against the input's spatial rank (a 1-D pool lifted).
Ints pool_kernel(const NodeIn& n, const Tensor& x, bool lifted) {
  Ints k = n.ints("kernel_shape");
  if (lifted && k.size() == 1) k.insert(k.begin(), 1);
  if (static_cast<int64_t>(k.size()) != x.dim() - 2)
    n.fail("kernel_shape needs ", lifted ? 1 : x.dim() - 2, " values for input ", x.shape());
  return k;
}

// Kiln's pools take float32 and float64: integers and the 16-bit floats pool in a float type
// that holds their values exactly, and cast back.
DType pool_dtype(DType dt) {
  if (dt == Float32 || dt == Float64) return dt;
  return dt == Int32 || dt == Int64 ? Float64 : Float32;
}

Tensor max_pool_nd(const Tensor& x, const Window& w, const Ints& padding) {
  if (w.kernel.size() == 3) return max_pool3d(x, w.kernel, w.stride, padding, w.dilation);
  return max_pool2d(x, w.kernel, w.stride, padding, w.dilation);
}

// MaxPool's Indices output: Kiln's index within each input plane becomes ONNX's index into the
// whole tensor (row-major, or column-major over H and W with storage_order 1).
Tensor onnx_pool_indices(const NodeIn& n, const Tensor& x, const Tensor& idx) {
  int64_t plane = 1;
  for (int64_t d = 2; d < x.dim(); ++d) plane *= x.size(d);
  Tensor i = idx;
  if (n.i("storage_order", 0) != 0) {
    if (x.dim() != 4) n.fail("storage_order 1 needs a 2-D pool");
    const int64_t H = x.size(2), W = x.size(3);
    Tensor h = div(i, full(Shape{}, static_cast<double>(W), Int64), "floor");
    i = add(h, mul(sub(i, mul(h, W)), H));
  }
  Shape bs(static_cast<size_t>(idx.dim()), 1);
  bs[0] = x.size(0);
  bs[1] = x.size(1);
  Tensor base =
      reshape(mul(arange(0, static_cast<double>(x.size(0) * x.size(1)), 1, Int64), plane), bs);
  return add(i, base);
}

KILN_ONNX_OP(MaxPool) {
  Tensor x = n.req(0);
  const bool want_idx = n.proto.output_size() > 1 && !n.proto.output(1).empty();
  const bool lifted = lift_1d(n, x);
  if (!x.shape().is_static()) n.fail("needs a static input shape, got ", x.shape());
  Window w = window(n, x, pool_kernel(n, x, lifted), lifted);
  const DType dt = x.dtype(), pdt = pool_dtype(dt);
  Tensor xf = cast(x, pdt);
  const size_t nd = w.kernel.size();
  // Symmetric pads of at most half the kernel (max_pool2d's limit, as torch's) leave every
  // window at least one input element, so the pool's own padding (ignored positions) equals
  // padding with -inf; a copy of the input into a padded buffer took as long as the pool
  // (ResNet's stem: 49 ms per batch of 32).
  bool own_pad = symmetric(w);
  for (size_t d = 0; d < nd; ++d) own_pad = own_pad && 2 * w.pad_begin[d] <= w.kernel[d];
  if (want_idx) {
    if (!own_pad || lifted)
      n.fail(
          "the Indices output needs symmetric pads of at most half the kernel and a 2-D or "
          "3-D pool");
    const bool ceil = n.i("ceil_mode", 0) != 0;
    auto [y, idx] =
        nd == 3 ? max_pool3d_with_indices(xf, w.kernel, w.stride, w.pad_begin, w.dilation, ceil)
                : max_pool2d_with_indices(xf, w.kernel, w.stride, w.pad_begin, w.dilation, ceil);
    return TL{cast(y, dt), onnx_pool_indices(n, x, idx)};
  }
  ceil_extend(n, x, w);
  own_pad = own_pad && symmetric(w);
  if (own_pad) return TL{cast(unlift(max_pool_nd(xf, w, w.pad_begin), lifted), dt)};
  // Asymmetric pads (ceil_mode's overhang) below the kernel: Kiln's values-only pool that
  // skips padded positions, no padded copy of the input (which block_layout keeps in blocks).
  bool below = nd == 2 && w.dilation == Ints(2, 1);
  for (size_t d = 0; d < nd; ++d)
    below = below && w.pad_begin[d] < w.kernel[d] && w.pad_end[d] < w.kernel[d];
  if (below) {
    static const auto& pool = kiln::detail::OpRegistry::get().at("max_pool2d_values");
    Tensor y = kiln::detail::call1(
        pool, {xf}, kiln::detail::Attrs{w.kernel, w.stride, w.pad_begin, w.pad_end, int64_t{0}});
    return TL{cast(unlift(y, lifted), dt)};
  }
  Tensor xp = pad_hw(xf, w.pad_begin, w.pad_end, -INFINITY);
  return TL{cast(unlift(max_pool_nd(xp, w, Ints(nd, 0)), lifted), dt)};
}

Tensor avg_pool_nd(const Tensor& x, const Window& w) {
  if (w.kernel.size() == 3) return avg_pool3d(x, w.kernel, w.stride, {0, 0, 0});
  return avg_pool2d(x, w.kernel, w.stride, {0, 0});
}

KILN_ONNX_OP(AveragePool) {
  Tensor x = n.req(0);
  const bool lifted = lift_1d(n, x);
  if (!x.shape().is_static()) n.fail("needs a static input shape, got ", x.shape());
  Window w = window(n, x, pool_kernel(n, x, lifted), lifted);
  const size_t nd = w.kernel.size();
  if (w.dilation != Ints(nd, 1)) n.fail("dilations are not supported");
  const Ints pb = w.pad_begin, pe = w.pad_end, zero(nd, 0);
  ceil_extend(n, x, w);
  Ints ext(nd);
  for (size_t d = 0; d < nd; ++d) ext[d] = w.pad_end[d] - pe[d];
  // The divisor counts the positions a window covers: inside the input, plus the explicit pads
  // when count_include_pad; never the ceil_mode overhang. Averages of x and of that mask, both
  // padded alike, divide to sum / count.
  const bool include = n.i("count_include_pad", 0) != 0;
  Tensor xp = pad_hw(pad_hw(x, pb, pe, 0.0), zero, ext, 0.0);
  Tensor y = avg_pool_nd(xp, w);
  if (!include || ext != zero) {
    if (!include && pb == zero && pe == zero && ext == zero) return TL{unlift(y, lifted)};
    Shape padded, plane{1, 1};
    for (size_t d = 0; d < nd; ++d) {
      const int64_t in = x.size(static_cast<int64_t>(2 + d));
      padded.push_back(in + pb[d] + pe[d] + ext[d]);
      plane.push_back(in);
    }
    charge_fold(n, 2 * static_numel(padded));
    Tensor ones_hw = ones(plane, x.dtype());
    Tensor m = pad_hw(pad_hw(ones_hw, pb, pe, include ? 1.0 : 0.0), zero, ext, 0.0);
    y = div(y, avg_pool_nd(m, w));
  }
  return TL{unlift(y, lifted)};
}

// ONNX's indices are into the whole output tensor; Kiln's unpool takes them per plane.
KILN_ONNX_OP(MaxUnpool) {
  const Tensor &x = n.req(0), &idx = n.req(1);
  if ((x.dim() != 4 && x.dim() != 5) || !x.shape().is_static())
    n.fail("needs a static 2-D or 3-D input [N, C, ...], got ", x.shape());
  const size_t nd = static_cast<size_t>(x.dim() - 2);
  const Ints k = pool_kernel(n, x, false);
  const Ints stride = attr_nd(n, "strides", false, 1, nd);
  Ints p = n.ints("pads");
  if (p.empty()) p.assign(2 * nd, 0);
  if (p.size() != 2 * nd) n.fail("pads needs ", 2 * nd, " values");
  // The indices address the default output (input - 1) stride + kernel - pads; a larger
  // output_shape adds zeros at the end of each dim.
  Ints out(nd), grow(nd, 0);
  for (size_t d = 0; d < nd; ++d)
    out[d] = (x.size(static_cast<int64_t>(2 + d)) - 1) * stride[d] + k[d] - p[d] - p[nd + d];
  if (n.has_input(2)) {
    const Ints full = const_ints(n, 2, "output_shape");
    if (full.size() != nd + 2) n.fail("output_shape needs ", nd + 2, " values");
    for (size_t d = 0; d < nd; ++d) {
      grow[d] = full[d + 2] - out[d];
      if (grow[d] < 0 || grow[d] > (int64_t(1) << 16))
        n.fail("output_shape ", full[d + 2], " against the default ", out[d]);
    }
  }
  int64_t plane = 1;
  Shape rs{x.size(0), x.size(1)};
  for (size_t d = 0; d < nd; ++d) {
    if (out[d] <= 0) n.fail("output size ", out[d]);
    plane *= out[d];
    rs.push_back(out[d] + grow[d]);
  }
  check_result_size(n, rs);
  Tensor i = cast(idx, Int64);
  i = sub(i, mul(div(i, full(Shape{}, static_cast<double>(plane), Int64), "floor"), plane));
  const Ints zero(nd, 0);
  Tensor y =
      nd == 3 ? max_unpool3d(x, i, k, stride, zero, out) : max_unpool2d(x, i, k, stride, zero, out);
  return TL{pad_hw(y, zero, grow, 0.0)};
}

Ints spatial_dims(const Tensor& x) {
  Ints d;
  for (int64_t k = 2; k < x.dim(); ++k) d.push_back(k);
  return d;
}
KILN_ONNX_OP(GlobalAveragePool) { return TL{mean(n.req(0), spatial_dims(n.req(0)), true)}; }
KILN_ONNX_OP(GlobalMaxPool) { return TL{max(n.req(0), spatial_dims(n.req(0)), true)}; }

KILN_ONNX_OP(Gemm) {
  Tensor a = n.req(0), b = n.req(1);
  if (a.dim() != 2 || b.dim() != 2)
    n.fail("A and B must be 2-D, got ", a.shape(), " and ", b.shape());
  if (n.i("transA", 0)) a = transpose(a, 0, 1);
  if (n.i("transB", 0)) b = transpose(b, 0, 1);
  const double alpha = n.f("alpha", 1.0), beta = n.f("beta", 1.0);
  if (n.has_input(2) && beta != 0) return TL{addmm(n.in[2], a, b, beta, alpha)};
  Tensor y = matmul(a, b);
  return TL{alpha == 1 ? y : mul(y, alpha)};
}

// [C] -> [1, C, 1, ...] to broadcast over x [N, C, ...].
Tensor per_channel(const Tensor& p, const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = -1;
  return reshape(p, s);
}

KILN_ONNX_OP(BatchNormalization) {
  const Tensor& x = n.req(0);
  if (x.dim() < 2) n.fail("input must be [N, C, ...], got ", x.shape());
  if (n.i("training_mode", 0) != 0) {
    // The batch's statistics (biased variance) normalize; the running ones move toward them.
    const double eps = n.f("epsilon", 1e-5), mom = n.f("momentum", 0.9);
    Ints dims{0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    Tensor m = mean(x, dims, true);
    Tensor c = sub(x, m);
    Tensor v = mean(mul(c, c), dims, true);
    Tensor y = mul(div(c, sqrt(add(v, eps))), per_channel(n.req(1), x));
    y = add(y, per_channel(n.req(2), x));
    Tensor mc = reshape(m, Shape{-1}), vc = reshape(v, Shape{-1});
    return TL{y, add(mul(n.req(3), mom), mul(mc, 1 - mom)),
              add(mul(n.req(4), mom), mul(vc, 1 - mom))};
  }
  for (int k = 1; k < n.proto.output_size(); ++k)
    if (!n.proto.output(k).empty()) n.fail("the running-statistics outputs are not supported");
  const double eps = n.f("epsilon", 1e-5);
  if (x.dim() < 2) n.fail("input must be [N, C, ...], got ", x.shape());
  return TL{batch_norm(x, n.req(3), n.req(4), n.req(1), n.req(2), false, 0.1, eps)};
}

KILN_ONNX_OP(InstanceNormalization) {
  const Tensor& x = n.req(0);
  const double eps = n.f("epsilon", 1e-5);
  const Ints dims = spatial_dims(x);
  Tensor m = mean(x, dims, true);
  Tensor c = sub(x, m);
  Tensor v = mean(mul(c, c), dims, true);
  Tensor y = mul(c, rsqrt(add(v, eps)));
  return TL{add(mul(y, per_channel(n.req(1), x)), per_channel(n.req(2), x))};
}

KILN_ONNX_OP(LayerNormalization) {
  const Tensor& x = n.req(0);
  const int64_t axis = wrap_dim(n.i("axis", -1), x.dim(), kOp);
  const double eps = n.f("epsilon", 1e-5);
  const Tensor &scale = n.req(1), bias = n.input(2);
  Shape norm;
  Ints dims;
  for (int64_t d = axis; d < x.dim(); ++d) norm.push_back(x.size(d)), dims.push_back(d);
  const bool extra = (n.proto.output_size() > 1 && !n.proto.output(1).empty()) ||
                     (n.proto.output_size() > 2 && !n.proto.output(2).empty());
  if (!extra && norm.is_static() && scale.shape() == norm &&
      (!bias.defined() || bias.shape() == norm))
    return TL{layer_norm(x, norm, scale, bias, eps)};
  Tensor m = mean(x, dims, true);
  Tensor c = sub(x, m);
  Tensor inv = rsqrt(add(mean(mul(c, c), dims, true), eps));
  Tensor y = mul(mul(c, inv), scale);
  if (bias.defined()) y = add(y, bias);
  return TL{y, m, inv};
}

KILN_ONNX_OP(MeanVarianceNormalization) {
  const Tensor& x = n.req(0);
  const Ints axes = n.ints("axes", {0, 2, 3});
  Tensor m = mean(x, axes, true);
  Tensor c = sub(x, m);
  Tensor sd = sqrt(mean(mul(c, c), axes, true));
  return TL{div(c, add(sd, 1e-9))};
}

KILN_ONNX_OP(LRN) {
  const Tensor& x = n.req(0);
  const int64_t size = n.req_i("size");
  const double alpha = n.f("alpha", 1e-4), beta = n.f("beta", 0.75), bias = n.f("bias", 1.0);
  if (x.dim() < 3 || x.size(1) < 0) n.fail("needs [N, C, ...] with a static C, got ", x.shape());
  if (size <= 0 || size > 1024) n.fail("size ", size);
  const int64_t C = x.size(1), before = (size - 1) / 2, after = size - 1 - before;
  Tensor sq = mul(x, x);
  Ints p(2 * (x.dim() - 2), 0);  // no padding of the spatial dims, then channels
  p.push_back(before);
  p.push_back(after);
  Tensor sp = pad(sq, p, 0.0);
  Tensor acc = slice(sp, 1, 0, C);
  for (int64_t k = 1; k < size; ++k) acc = add(acc, slice(sp, 1, k, k + C));
  return TL{div(x, pow(add(mul(acc, alpha / static_cast<double>(size)), bias), beta))};
}

// ---- Resize / Upsample: per resized axis a host-computed [out, in] matrix ------------------

struct ResizeSpec {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false;
};

double cubic_w(double t, double a) {
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

// Rows of the map from `in` to `out` samples along one axis; `bias` gets the extrapolation value
// for rows that fall outside (tf_crop_and_resize).
std::vector<double> resize_matrix(const ResizeSpec& s, int64_t in, int64_t out, double scale,
                                  double roi_lo, double roi_hi, std::vector<double>& bias) {
  std::vector<double> m(static_cast<size_t>(in * out), 0.0);
  bias.assign(static_cast<size_t>(out), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    double x;
    const std::string& c = s.coord;
    if (c == "half_pixel")
      x = (i + 0.5) / scale - 0.5;
    else if (c == "pytorch_half_pixel")
      x = out > 1 ? (i + 0.5) / scale - 0.5 : 0;
    else if (c == "align_corners") {
      // ONNX divides by the unrounded resized length in * scale (2.4 for 4 * 0.6), not by the
      // integer output size.
      const double len = in * scale;
      x = len == 1 ? 0 : i * static_cast<double>(in - 1) / (len - 1);
    } else if (c == "asymmetric")
      x = i / scale;
    else if (c == "tf_half_pixel_for_nn")
      x = (i + 0.5) / scale;
    else if (c == "tf_crop_and_resize") {
      x = out > 1 ? roi_lo * (in - 1) + i * (roi_hi - roi_lo) * (in - 1) / (out - 1)
                  : 0.5 * (roi_lo + roi_hi) * (in - 1);
      if (x < 0 || x > in - 1) {
        bias[i] = s.extrapolation;
        continue;
      }
    } else {
      fail(kOp, "Resize: unknown coordinate_transformation_mode '", c, "'");
    }
    double* row = &m[static_cast<size_t>(i * in)];
    auto clampi = [&](int64_t k) { return std::clamp<int64_t>(k, 0, in - 1); };
    if (s.mode == "nearest") {
      int64_t k;
      const double fl = std::floor(x);
      if (s.nearest == "round_prefer_floor")
        k = static_cast<int64_t>(x == fl + 0.5 ? fl : std::round(x));
      else if (s.nearest == "round_prefer_ceil")
        k = static_cast<int64_t>(x == fl + 0.5 ? fl + 1 : std::round(x));
      else if (s.nearest == "floor")
        k = static_cast<int64_t>(fl);
      else if (s.nearest == "ceil")
        k = static_cast<int64_t>(std::ceil(x));
      else
        fail(kOp, "Resize: unknown nearest_mode '", s.nearest, "'");
      row[clampi(k)] = 1;
    } else if (s.mode == "linear") {
      const double fl = std::floor(x), r = x - fl;
      const auto k = static_cast<int64_t>(fl);
      row[clampi(k)] += 1 - r;
      row[clampi(k + 1)] += r;
    } else if (s.mode == "cubic") {
      const double fl = std::floor(x), r = x - fl;
      const auto k = static_cast<int64_t>(fl);
      double wsum = 0, w[4];
      for (int j = 0; j < 4; ++j) {
        w[j] = cubic_w(r - (j - 1), s.cubic_a);
        const int64_t idx = k - 1 + j;
        if (s.exclude_outside && (idx < 0 || idx >= in)) w[j] = 0;
        wsum += w[j];
      }
      for (int j = 0; j < 4; ++j) row[clampi(k - 1 + j)] += s.exclude_outside ? w[j] / wsum : w[j];
    } else {
      fail(kOp, "Resize: unknown mode '", s.mode, "'");
    }
  }
  return m;
}

Tensor resize_axes(NodeIn& n, const Tensor& x, const ResizeSpec& s, const Ints& out,
                   const std::vector<double>& scales, const std::vector<double>& roi) {
  Tensor y = x;
  const int64_t r = x.dim();
  for (int64_t d = 0; d < r; ++d) {
    const int64_t in = x.size(d);
    if (in < 0) n.fail("needs static sizes, got ", x.shape());
    if (out[d] < 0 || out[d] > (int64_t(1) << 24)) n.fail("output size ", out[d]);
    const double lo = roi.empty() ? 0 : roi[d], hi = roi.empty() ? 1 : roi[r + d];
    if (out[d] == in && scales[d] == 1.0 && s.coord != "tf_crop_and_resize") continue;
    charge_fold(n, in * out[d]);
    {
      Shape rs = y.shape();
      rs[d] = out[d];
      check_result_size(n, rs);
    }
    std::vector<double> bias;
    std::vector<double> m = resize_matrix(s, in, out[d], scales[d], lo, hi, bias);
    Tensor mt = empty(Shape{out[d], in}, Float64);
    std::copy(m.begin(), m.end(), mt.data_ptr<double>());
    Tensor yt = transpose(y, d, r - 1);
    Tensor z = matmul(yt, transpose(cast(mt, x.dtype()), 0, 1));
    bool any_bias = false;
    for (double b : bias) any_bias |= b != 0;
    if (any_bias) {
      Tensor bt = empty(Shape{out[d]}, Float64);
      std::copy(bias.begin(), bias.end(), bt.data_ptr<double>());
      z = add(z, cast(bt, x.dtype()));
    }
    y = contiguous(transpose(z, d, r - 1));
  }
  return y;
}

std::vector<double> const_doubles(const NodeIn& n, size_t i) {
  const Tensor& t = n.req(i);
  if (!t.is_concrete()) n.fail("input ", i, " must be known at import");
  return t.to_vector<double>();
}

KILN_ONNX_OP(Resize) {
  const Tensor& x = n.req(0);
  ResizeSpec s;
  s.mode = n.s("mode", "nearest");
  std::vector<double> scales, roi;
  Ints sizes;
  if (n.opset < 11) {
    s.coord = "asymmetric";
    s.nearest = "floor";
    scales = const_doubles(n, 1);
  } else {
    s.coord = n.s("coordinate_transformation_mode", "half_pixel");
    s.nearest = n.s("nearest_mode", "round_prefer_floor");
    s.cubic_a = n.f("cubic_coeff_a", -0.75);
    s.exclude_outside = n.i("exclude_outside", 0) != 0;
    s.extrapolation = n.f("extrapolation_value", 0.0);
    if (n.has_input(1) && n.in[1].numel() > 0) roi = const_doubles(n, 1);
    if (n.has_input(2) && n.in[2].numel() > 0) scales = const_doubles(n, 2);
    if (n.has_input(3) && n.in[3].numel() > 0) sizes = const_ints(n, 3, "sizes");
  }
  const auto r = static_cast<size_t>(x.dim());
  if (!roi.empty() && roi.size() != 2 * r) n.fail("roi needs ", 2 * r, " values");
  Ints out(r);
  if (!sizes.empty()) {
    if (sizes.size() != r) n.fail("sizes needs ", r, " values");
    scales.resize(r);
    for (size_t d = 0; d < r; ++d) {
      out[d] = sizes[d];
      scales[d] =
          static_cast<double>(sizes[d]) / static_cast<double>(x.size(static_cast<int64_t>(d)));
    }
  } else {
    if (scales.size() != r) n.fail("scales needs ", r, " values");
    for (size_t d = 0; d < r; ++d) {
      if (!(scales[d] > 0 && scales[d] < 1e6)) n.fail("scale ", scales[d]);
      out[d] = static_cast<int64_t>(std::floor(x.size(static_cast<int64_t>(d)) * scales[d]));
    }
  }
  return TL{resize_axes(n, x, s, out, scales, roi)};
}

KILN_ONNX_OP(Upsample) {
  const Tensor& x = n.req(0);
  ResizeSpec s;
  s.mode = n.s("mode", "nearest");
  s.coord = "asymmetric";
  s.nearest = "floor";
  std::vector<double> scales = n.opset < 9 ? n.floats("scales") : const_doubles(n, 1);
  const auto r = static_cast<size_t>(x.dim());
  if (scales.size() != r) n.fail("scales needs ", r, " values");
  Ints out(r);
  for (size_t d = 0; d < r; ++d) {
    if (!(scales[d] > 0 && scales[d] < 1e6)) n.fail("scale ", scales[d]);
    out[d] = static_cast<int64_t>(std::floor(x.size(static_cast<int64_t>(d)) * scales[d]));
  }
  return TL{resize_axes(n, x, s, out, scales, {})};
}

}  // namespace
}  // namespace kiln::onnx::detail
