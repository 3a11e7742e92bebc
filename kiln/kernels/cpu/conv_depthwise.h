// Depthwise float32 convolution straight from NCHW planes (groups = in = out channels) with its
// epilogue: the layout PyTorch programs hand over. oneDNN's depthwise kernels compute in
// 16-channel blocks only, so an NCHW call reorders the whole input into blocks and the output
// back (a 56x56x256 map at stride 2, bias and relu: 63 + 16 us of the Session's 118, the
// convolution itself 40). Here each output row's vectors take their taps from the input rows
// with unaligned (stride 1) or split even/odd (stride 2) loads, masked at the edges.
#pragma once
#include <cstdint>

namespace kiln::cpu {

/// Geometry of one depthwise convolution: x [N, C, H, W], w [C, 1, kH, kW], y [N, C, OH, OW].
struct DepthwiseConv {
  int64_t N, C, H, W, kH, kW, OH, OW, sH, sW, pH, pW, dH, dW;
};

/// Whether conv_depthwise_fwd runs it: an AVX-512 build, a 3x3 kernel with the same stride and
/// dilation in both dims: stride 1 at dilation 1 or 2 (DeepLab's MobileNet backbone), stride 2
/// undilated with a width padding of at most 2 (MobileNet's and ShuffleNet's downsampling: 1);
/// others stay on oneDNN.
bool conv_depthwise_suits(const DepthwiseConv& s);

/// y = act(conv(x, w) + bias + (accumulate ? y : 0)), all contiguous; bias may be null; act a
/// kConvAct* (conv_dnnl.h). y is read before it is written only when accumulate is set.
void conv_depthwise_fwd(const DepthwiseConv& s, const float* x, const float* w, const float* bias,
                        int act, bool accumulate, float* y);

}  // namespace kiln::cpu
