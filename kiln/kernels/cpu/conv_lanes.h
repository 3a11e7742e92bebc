// Float32 convolution with the batch in the vector lanes, for layers with few channels (LeNet's
// 6 -> 16 conv), where oneDNN's 16-channel blocked layouts leave most lanes empty. Stride 1, no
// dilation, no groups; any zero padding.
#pragma once
#include <cstdint>

namespace kiln::cpu {

/// Geometry of one stride-1 convolution: x [N, C, H, W], w [O, C, kH, kW], y [N, O, OH, OW].
struct LaneConv {
  int64_t N, C, H, W, O, kH, kW, OH, OW, pH, pW;
};

/// Whether the lane kernels should run this convolution (float32, stride 1, no dilation or
/// groups assumed by the caller): enough samples to fill the lanes, few channels; for the
/// weight gradient also planes of at most 256 pixels (measured faster on those; see the .cpp).
bool conv_lanes_suits(const LaneConv& s, bool weight_grad = false);

/// y = conv(x, w) (forward), all contiguous NCHW; y overwritten.
void conv_lanes_fwd(const LaneConv& s, const float* x, const float* w, float* y);
/// dx = the input gradient for g [N, O, OH, OW]; dx overwritten.
void conv_lanes_bwd_data(const LaneConv& s, const float* g, const float* w, float* dx);
/// dw = the weight gradient for g; dw overwritten, not accumulated.
void conv_lanes_bwd_weight(const LaneConv& s, const float* x, const float* g, float* dw);

}  // namespace kiln::cpu
