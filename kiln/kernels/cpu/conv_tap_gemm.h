// A 2-D convolution as one GEMM per kernel tap over the output rectangle where that tap meets
// the input: for dilated kernels whose padding oneDNN's direct kernels cannot take (ASPP's
// dilation 12 and 24 on a 33x33 map), every multiply-add lands on the input and runs at GEMM
// speed. Plain loops over raw NCHW buffers; the op (kiln/ops/conv.cpp) owns shapes.
#pragma once
#include <cstdint>

#include "kiln/kernels/cpu/im2col.h"

namespace kiln::cpu {

/// The weight w [O, C, kH, kW] as kH kW matrices [O, C], one per tap, into wt (a GEMM operand
/// needs one unit stride): what conv2d_tap_gemms takes.
void pack_tap_weights(const float* w, float* wt, int64_t O, int64_t C, int64_t taps);

/// y [N, O, OH, OW] = the convolution of x [N, C, H, W] with the packed weight wt (one group, no
/// bias), all contiguous float32. Each tap (ky, kx) adds its [O, C] matrix times the input it
/// reads onto the rectangle of outputs where it meets the input: a tap covering the whole output
/// reads x in place when it is unshifted, the others read a packed copy of their window.
void conv2d_tap_gemms(const float* x, const float* wt, float* y, int64_t N, int64_t O,
                      const Conv2dGeom& g);

}  // namespace kiln::cpu
