// Direct float32 convolution for tiny reductions (C kH kW <= 32: a first layer on one or three
// image channels), stride 1, no dilation, no groups. oneDNN's primitives spend most of their
// time there in layout reorders, and im2col's column matrix is kH kW times the input.
#pragma once
#include <cstdint>

namespace kiln::cpu {

/// y [N, O, OH, OW] = conv(x [N, C, H, W], w [O, C, kH, kW]) with zero padding pH, pW; all
/// contiguous; OW >= 8.
void conv_direct_fwd(const float* x, const float* w, float* y, int64_t N, int64_t C, int64_t H,
                     int64_t W, int64_t O, int64_t kH, int64_t kW, int64_t OH, int64_t OW,
                     int64_t pH, int64_t pW);
/// dw [O, C, kH, kW] = the weight gradient for g [N, O, OH, OW] (overwritten, not accumulated).
void conv_direct_bwdw(const float* x, const float* g, float* dw, int64_t N, int64_t C, int64_t H,
                      int64_t W, int64_t O, int64_t kH, int64_t kW, int64_t OH, int64_t OW,
                      int64_t pH, int64_t pW);

}  // namespace kiln::cpu
