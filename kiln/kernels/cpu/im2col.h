// im2col / col2im for 2-D convolution as GEMM: plain loops over one sample's channels, no
// graph or tensor knowledge (the ops in kiln/ops/conv.cpp own shapes and threading).
#pragma once
#include <cstdint>

namespace kiln::cpu {

/// Geometry of one sample's (one group's) 2-D convolution. All sizes in elements.
struct Conv2dGeom {
  int64_t C, H, W;  ///< input channels (of this group), height, width
  int64_t kH, kW;   ///< kernel size
  int64_t pH, pW;   ///< zero padding
  int64_t sH, sW;   ///< stride
  int64_t dH, dW;   ///< dilation
  int64_t OH, OW;   ///< output size
  int64_t rows() const { return C * kH * kW; }
  int64_t cols() const { return OH * OW; }
};

/// Unfolds x [C, H, W] (contiguous) into cols [C*kH*kW, OH*OW] (row-major), zero where the
/// window reads padding.
template <typename T>
void im2col(const T* x, const Conv2dGeom& g, T* cols);

/// The adjoint of im2col: adds each column entry back into x [C, H, W] (x is accumulated into,
/// so the caller zeroes it first).
template <typename T>
void col2im(const T* cols, const Conv2dGeom& g, T* x);

}  // namespace kiln::cpu
