// Convolutions built from conv2d and its gradient ops (kiln/ops/conv.cpp): conv1d over a height
// of 1, conv3d with its depth taps stacked next to the channels, the transposed 1-D and 3-D
// convolutions, and unfold / fold (im2col and col2im as ops). Their gradients come through the
// ops they are made of.
#include <algorithm>
#include <vector>

#include "kiln/ops/conv_common.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {

// conv1d is conv2d over a height of 1: x [N, C, L] -> [N, C, 1, L], w [O, C/g, K] -> [O, C/g,
// 1, K]; the views cost nothing and the gradients come through conv2d's.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  if (!x.defined() || !w.defined()) fail("conv1d", "input and weight must be defined tensors");
  if (w.dim() != 3)
    fail("conv1d", "weight must be 3-D [out, in/groups, kernel], got shape ", w.shape(),
         " (input shape ", x.shape(), ")");
  if (x.dim() == 2)  // unbatched [C, L], as torch
    return squeeze(conv1d(unsqueeze(x, 0), w, b, stride, padding, dilation, groups), 0);
  if (x.dim() != 3)
    fail("conv1d", "input must be 3-D [N, C, L] (or 2-D [C, L]), got shape ", x.shape(),
         " (weight shape ", w.shape(), ")");
  return squeeze(
      conv2d(unsqueeze(x, 2), unsqueeze(w, 2), b, {1, stride}, {0, padding}, {1, dilation}, groups),
      2);
}

namespace {
using Ints = std::vector<int64_t>;

// n values from a 1- or n-value argument.
Ints expand3(const char* op, const char* what, const Ints& v) {
  if (v.size() == 1) return Ints(3, v[0]);
  if (v.size() != 3) fail(op, what, " must have 1 or 3 values, got ", Shape(v));
  return v;
}

void require_static(const char* op, const Tensor& t, const char* what) {
  for (int64_t d = 1; d < t.dim(); ++d)
    if (t.size(d) < 0)
      fail(op, what, " needs static sizes past the batch dim, got shape ", t.shape());
}
}  // namespace

// conv3d as one conv2d: the input's kD depth taps (strided, dilated slices along D) are stacked
// next to its channels, [N OD, C kD, H, W], and the weight [O, C/g, kD, kH, kW] read as
// [O, C/g kD, kH, kW] (its memory order already puts kd inside each channel, group by group).
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  const char* op = "conv3d";
  if (!x.defined() || !w.defined()) fail(op, "input and weight must be defined tensors");
  if (x.dim() == 4)  // unbatched [C, D, H, W], as torch
    return squeeze(conv3d(unsqueeze(x, 0), w, b, stride, padding, dilation, groups), 0);
  if (x.dim() != 5 || w.dim() != 5)
    fail(op,
         "input must be [N, C, D, H, W] (or [C, D, H, W]) and weight [O, C/groups, kD, kH, kW], "
         "got ",
         x.shape(), " and ", w.shape());
  const Ints s = expand3(op, "stride", stride), p = expand3(op, "padding", padding),
             d = expand3(op, "dilation", dilation);
  for (int k = 0; k < 3; ++k)
    if (s[k] <= 0 || d[k] <= 0 || p[k] < 0)
      fail(op, "stride and dilation must be positive and padding >= 0, got stride ", Shape(s),
           ", padding ", Shape(p), ", dilation ", Shape(d));
  op_util::check_window_params(op, "stride", s);
  op_util::check_window_params(op, "padding", p);
  op_util::check_window_params(op, "dilation", d);
  require_static(op, x, "input");
  require_static(op, w, "weight");
  if (groups <= 0) fail(op, "groups must be positive, got ", groups);
  const int64_t C = x.size(1), D = x.size(2), O = w.size(0), Cg = w.size(1), kD = w.size(2);
  if (C % groups != 0 || O % groups != 0 || Cg * groups != C)
    fail(op, "weight shape ", w.shape(), " with groups = ", groups, " does not fit input shape ",
         x.shape());
  if (b.defined() && (b.dim() != 1 || b.size(0) != O))
    fail(op, "bias must be 1-D [", O, "], got shape ", b.shape(), " (weight shape ", w.shape(),
         ")");
  if (kD <= 0) fail(op, "kernel dims must be positive, got weight shape ", w.shape());
  const int64_t Dp = D + 2 * p[0], eD = d[0] * (kD - 1) + 1;
  if (Dp < eD)
    fail(op, "kernel depth ", kD, " (dilated to ", eD, ") is larger than the padded input depth ",
         Dp, " (input shape ", x.shape(), ", weight shape ", w.shape(), ")");
  const int64_t OD = (Dp - eD) / s[0] + 1;
  const Tensor xp = p[0] > 0 ? pad(x, {0, 0, 0, 0, p[0], p[0]}) : x;
  std::vector<Tensor> taps;
  for (int64_t kd = 0; kd < kD; ++kd)
    taps.push_back(slice(xp, 2, kd * d[0], kd * d[0] + (OD - 1) * s[0] + 1, s[0]));
  // [N, C, kD, OD, H, W] -> [N, OD, C, kD, H, W] -> [N OD, C kD, H, W]
  const Tensor st = kD == 1 ? unsqueeze(taps[0], 2) : stack(taps, 2);
  const Tensor x2 =
      reshape(permute(st, {0, 3, 1, 2, 4, 5}), Shape{-1, C * kD, x.size(3), x.size(4)});
  const Tensor w2 = reshape(w, Shape{O, Cg * kD, w.size(3), w.size(4)});
  const Tensor y2 = conv2d(x2, w2, Tensor(), {s[1], s[2]}, {p[1], p[2]}, {d[1], d[2]}, groups);
  Tensor y = permute(reshape(y2, Shape{-1, OD, O, y2.size(2), y2.size(3)}), {0, 2, 1, 3, 4});
  if (b.defined()) y = add(y, reshape(b, Shape{1, O, 1, 1, 1}));
  return y;
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                        int64_t padding, int64_t output_padding, int64_t dilation, int64_t groups) {
  const char* op = "conv_transpose1d";
  if (!x.defined() || !w.defined()) fail(op, "input and weight must be defined tensors");
  if (w.dim() != 3)
    fail(op, "weight must be 3-D [C_in, C_out/groups, K], got shape ", w.shape(), " (input shape ",
         x.shape(), ")");
  if (x.dim() == 2)
    return squeeze(
        conv_transpose1d(unsqueeze(x, 0), w, b, stride, padding, output_padding, dilation, groups),
        0);
  if (x.dim() != 3)
    fail(op, "input must be 3-D [N, C_in, L] (or 2-D [C_in, L]), got shape ", x.shape(),
         " (weight shape ", w.shape(), ")");
  // (a height of 1: output_padding 0 and stride 1 there)
  return squeeze(conv_transpose2d(unsqueeze(x, 2), unsqueeze(w, 2), b, {1, stride}, {0, padding},
                                  {0, output_padding}, {1, dilation}, groups),
                 2);
}

// conv_transpose3d: one conv_transpose2d gives every depth tap's plane (the weight [C_in,
// C_out/g, kD, kH, kW] read as [C_in, C_out/g kD, kH, kW]); tap kd of input depth i lands at
// output depth i sD + kd dD - pD, placed by zero-interleaving and shifting with pad.
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& b,
                        std::vector<int64_t> stride, std::vector<int64_t> padding,
                        std::vector<int64_t> output_padding, std::vector<int64_t> dilation,
                        int64_t groups) {
  const char* op = "conv_transpose3d";
  if (!x.defined() || !w.defined()) fail(op, "input and weight must be defined tensors");
  if (x.dim() == 4)
    return squeeze(
        conv_transpose3d(unsqueeze(x, 0), w, b, stride, padding, output_padding, dilation, groups),
        0);
  if (x.dim() != 5 || w.dim() != 5)
    fail(op, "input must be [N, C_in, D, H, W] and weight [C_in, C_out/groups, kD, kH, kW], got ",
         x.shape(), " and ", w.shape());
  const Ints s = expand3(op, "stride", stride), p = expand3(op, "padding", padding),
             o = expand3(op, "output_padding", output_padding),
             d = expand3(op, "dilation", dilation);
  conv_detail::check_transposed_params(op, s, p, o, d);
  for (const Ints* v : {&s, &p, &o, &d}) op_util::check_window_params(op, "window", *v);
  require_static(op, x, "input");
  require_static(op, w, "weight");
  if (groups <= 0) fail(op, "groups must be positive, got ", groups);
  const int64_t Cin = x.size(1), D = x.size(2), Cog = w.size(1), kD = w.size(2);
  if (w.size(0) != Cin || Cin % groups != 0)
    fail(op, "input has ", Cin, " channels, the weight expects ", w.size(0),
         " with groups = ", groups, " (input ", x.shape(), ", weight ", w.shape(), ")");
  const int64_t Cout = Cog * groups;
  if (b.defined() && (b.dim() != 1 || b.size(0) != Cout))
    fail(op, "bias must be 1-D [", Cout, "], got shape ", b.shape(), " (weight shape ", w.shape(),
         ")");
  const int64_t OD = (D - 1) * s[0] - 2 * p[0] + d[0] * (kD - 1) + o[0] + 1;
  if (OD <= 0)
    fail(op, "output depth ", OD, " is not positive (input ", x.shape(), ", weight ", w.shape(),
         ")");
  // [N D, C_in, H, W] -> [N D, C_out kD, H', W'] (channels ordered g, c, kd)
  const Tensor x2 = reshape(permute(x, {0, 2, 1, 3, 4}), Shape{-1, Cin, x.size(3), x.size(4)});
  const Tensor w2 = reshape(w, Shape{Cin, Cog * kD, w.size(3), w.size(4)});
  const Tensor z2 = conv_transpose2d(x2, w2, Tensor(), {s[1], s[2]}, {p[1], p[2]}, {o[1], o[2]},
                                     {d[1], d[2]}, groups);
  const int64_t H2 = z2.size(2), W2 = z2.size(3);
  // [N, D, C_out, kD, H', W'] -> [N, C_out, kD, D, H', W']
  const Tensor z = permute(reshape(z2, Shape{-1, D, Cout, kD, H2, W2}), {0, 2, 3, 1, 4, 5});
  Tensor y;
  for (int64_t kd = 0; kd < kD; ++kd) {
    Tensor t = squeeze(slice(z, 2, kd, kd + 1), 2);  // [N, C_out, D, H', W']
    if (s[0] > 1) {                                  // depth i -> i sD: zeros between
      t = pad(unsqueeze(t, 3), {0, 0, 0, 0, 0, s[0] - 1});
      t = reshape(t, Shape{-1, Cout, D * s[0], H2, W2});
    }
    const int64_t before = kd * d[0] - p[0];
    const int64_t after = OD - before - t.size(2);
    t = pad(t, {0, 0, 0, 0, before, after});
    y = y.defined() ? add(y, t) : t;
  }
  if (b.defined()) y = add(y, reshape(b, Shape{1, Cout, 1, 1, 1}));
  return y;
}

// unfold / fold as grouped convolutions with a 0/1 kernel: output channel c K + k of unfold
// copies input channel c at kernel offset k (torch's (C, kH, kW) order); fold is its adjoint,
// the transposed convolution with the same kernel.
namespace {
Tensor block_kernel(int64_t C, int64_t kH, int64_t kW, DType dt) {
  const int64_t K = kH * kW;
  return reshape(
      contiguous(expand(reshape(eye(K, K, dt), Shape{1, K, 1, kH, kW}), Shape{C, K, 1, kH, kW})),
      Shape{C * K, 1, kH, kW});
}
Ints two(const char* op, const char* what, const Ints& v) { return op_util::pair2(op, what, v); }
}  // namespace

Tensor unfold(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> dilation,
              std::vector<int64_t> padding, std::vector<int64_t> stride) {
  const char* op = "unfold";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() == 3) return squeeze(unfold(unsqueeze(x, 0), kernel, dilation, padding, stride), 0);
  if (x.dim() != 4)
    fail(op, "input must be 4-D [N, C, H, W] (or 3-D [C, H, W]), got shape ", x.shape());
  const Ints k = two(op, "kernel_size", kernel), d = two(op, "dilation", dilation),
             p = two(op, "padding", padding), s = two(op, "stride", stride);
  if (k[0] <= 0 || k[1] <= 0) fail(op, "kernel_size must be positive, got ", Shape(k));
  require_static(op, x, "input");
  if (!is_floating(x.dtype()))
    fail(op, "input must be float32 or float64, got ", x.dtype(), " ", x.shape());
  const int64_t C = x.size(1);
  const Tensor y = conv2d(x, block_kernel(C, k[0], k[1], x.dtype()), Tensor(), s, p, d, C);
  return reshape(y, Shape{-1, C * k[0] * k[1], y.size(2) * y.size(3)});
}

Tensor fold(const Tensor& x, std::vector<int64_t> output_size, std::vector<int64_t> kernel,
            std::vector<int64_t> dilation, std::vector<int64_t> padding,
            std::vector<int64_t> stride) {
  const char* op = "fold";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() == 2)
    return squeeze(fold(unsqueeze(x, 0), output_size, kernel, dilation, padding, stride), 0);
  if (x.dim() != 3)
    fail(op, "input must be 3-D [N, C kH kW, L] (or 2-D [C kH kW, L]), got shape ", x.shape());
  const Ints os = two(op, "output_size", output_size), k = two(op, "kernel_size", kernel),
             d = two(op, "dilation", dilation), p = two(op, "padding", padding),
             s = two(op, "stride", stride);
  require_static(op, x, "input");
  if (!is_floating(x.dtype()))
    fail(op, "input must be float32 or float64, got ", x.dtype(), " ", x.shape());
  for (int i = 0; i < 2; ++i)
    if (k[i] <= 0 || d[i] <= 0 || s[i] <= 0 || p[i] < 0 || os[i] <= 0)
      fail(op, "kernel_size, dilation, stride and output_size must be positive and padding >= 0, ",
           "got kernel_size ", Shape(k), ", dilation ", Shape(d), ", padding ", Shape(p),
           ", stride ", Shape(s), ", output_size ", Shape(os));
  const int64_t K = k[0] * k[1];
  if (x.size(1) % K != 0)
    fail(op, "expected size of input's dimension 1 (", x.size(1),
         ") to be divisible by the product of kernel_size (", K, "), input shape ", x.shape());
  Ints blocks(2);
  for (int i = 0; i < 2; ++i) {
    blocks[i] = (os[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
    if (os[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1 < 0 || blocks[i] <= 0)
      fail(op, "output_size ", Shape(os), " with kernel_size ", Shape(k), ", dilation ", Shape(d),
           ", padding ", Shape(p), " gives no sliding block");
  }
  if (x.size(2) != blocks[0] * blocks[1])
    fail(op, "expected input's dimension 2 to match the calculated number of sliding blocks ",
         blocks[0], " * ", blocks[1], " = ", blocks[0] * blocks[1], ", but got input shape ",
         x.shape());
  const int64_t C = x.size(1) / K;
  Ints op_(2);
  for (int i = 0; i < 2; ++i)
    op_[i] = os[i] - ((blocks[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + 1);
  const Tensor x4 = reshape(x, Shape{-1, x.size(1), blocks[0], blocks[1]});
  return conv_transpose2d(x4, block_kernel(C, k[0], k[1], x.dtype()), Tensor(), s, p, op_, d, C);
}

}  // namespace kiln
