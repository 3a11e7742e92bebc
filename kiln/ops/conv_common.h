// Helpers of the convolution ops that conv.cpp (conv2d and its gradient ops), conv_fused.cpp
// (the fused inference convolution) and conv_composite.cpp (transposed and 3-D) share: parameters
// and shape checks, oneDNN's shape, the crop of taps that only meet padding, the column split and
// the forward convolution itself.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/kernels/cpu/conv_depthwise.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/conv_taps.h"
#include "kiln/ops/op_util.h"

namespace kiln::conv_detail {

/// conv2d's attributes {stride, padding, dilation, groups}, checked.
struct ConvP {
  int64_t sH, sW, pH, pW, dH, dW, G;
};
ConvP conv_params(const char* op, const detail::Attrs& a);

/// A transposed convolution's stride, padding, output_padding and dilation (one entry per
/// spatial dim): positive stride and dilation, non-negative paddings, and output_padding below
/// the stride or the dilation (torch's rule); kiln::Error naming `op` and all four otherwise.
void check_transposed_params(const char* op, const std::vector<int64_t>& s,
                             const std::vector<int64_t>& p, const std::vector<int64_t>& o,
                             const std::vector<int64_t>& d);

/// Checks x [N, C, H, W] and w [O, C/groups, kH, kW] (dynamic dims pass); the output shape.
Shape check_conv(const char* op, const Shape& xs, const Shape& ws, const ConvP& p);

/// The shape oneDNN's primitives take.
cpu::ConvShape conv_shape(const ConvP& p, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                          int64_t kH, int64_t kW, int64_t OH, int64_t OW);

/// The taps kept in height and width when some only ever read padding (kernels/cpu/conv_taps.h).
struct TapCrop {
  cpu::TapRange h, w;
};
/// The crop of a convolution's kernel, or none when every tap meets the input.
std::optional<TapCrop> find_crop(const ConvP& p, int64_t H, int64_t W, int64_t kH, int64_t kW,
                                 int64_t OH, int64_t OW);
/// The parameters of the cropped convolution (the padding less the dropped taps' span).
ConvP cropped_params(ConvP p, const TapCrop& c);
/// w with only the kept taps of its spatial dims (which start at dim kdim).
Tensor crop_weight(const Tensor& w, int64_t kdim, const TapCrop& c);
/// A weight shape with its spatial dims (from kdim) cropped.
Shape cropped_shape(const Shape& s, int64_t kdim, const TapCrop& c);
/// The kept taps of `from` into `to` (crop_weight's copy); back: a cropped `from` into the
/// full-size `to`, zeroed first (a weight gradient: the dropped taps get 0).
void copy_taps(const Tensor& from, Tensor& to, int64_t kdim, const TapCrop& c, bool back);

/// Whether conv2d_fwd runs this NCHW float32 convolution on the direct kernel for tiny
/// reductions (C kH kW <= 32 at stride 1: a first layer on image channels), ahead of oneDNN.
bool runs_direct(const ConvP& p, int64_t C, int64_t kH, int64_t kW, int64_t OW);

/// The depthwise kernel's geometry (kernels/cpu/conv_depthwise.h) when it should run this
/// NCHW convolution: groups = in = out channels, a geometry it takes.
std::optional<cpu::DepthwiseConv> depthwise_conv(const ConvP& p, int64_t N, int64_t C, int64_t H,
                                                 int64_t W, int64_t O, int64_t Cg, int64_t kH,
                                                 int64_t kW, int64_t OH, int64_t OW);

/// Whether a padded map runs as column spans or, for one group, per-tap GEMMs (oneDNN would take
/// its gemm kernel on the whole map, or most taps read padding: cpu::sparse_taps); the spans in
/// *sw (empty where only the taps' sparsity decided).
bool split_columns(const ConvP& p, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                   int64_t kH, int64_t kW, int64_t OH, int64_t OW, std::vector<cpu::TapSpan>* sw);

/// y = conv2d(x, w) (NCHW, OIHW) on the best path for the shape; w_const: w is a constant of
/// an inference program (conv2d_fused's w_blocked bit 1). float and double.
template <typename T>
void conv2d_fwd(const Tensor& x, const Tensor& w, Tensor& y, const ConvP& p, bool w_const = false);

}  // namespace kiln::conv_detail
