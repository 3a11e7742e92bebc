// A 2-D convolution as one GEMM per kernel tap over the output rectangle where that tap meets
// the input: for dilated kernels whose padding oneDNN's direct kernels cannot take (ASPP's
// dilation 12 and 24 on a 33x33 map), every multiply-add lands on the input and runs at GEMM
// speed. Plain loops over raw NCHW buffers; the op (kiln/ops/conv.cpp) owns shapes.
#pragma once
#include <cstdint>

#include "kiln/kernels/cpu/im2col.h"

namespace kiln::cpu {

/// y [N, O, OH, OW] = the convolution of x [N, C, H, W] with w [O, C, kH, kW] (one group, no
/// bias), all contiguous. Each tap (ky, kx) adds W[:, :, ky, kx] times the input it reads onto
/// the rectangle of outputs where it meets the input: a tap covering the whole output reads x in
/// place when it is unshifted, the others read a packed copy of their window.
template <typename T>
void conv2d_tap_gemms(const T* x, const T* w, T* y, int64_t N, int64_t O, const Conv2dGeom& g);

}  // namespace kiln::cpu
