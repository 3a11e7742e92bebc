// 2-D convolution through oneDNN's convolution primitives (forward, backward data, backward
// weights) for float32 NCHW tensors: the library PyTorch itself uses for these. On LeNet's
// second convolution (6 -> 16 channels, 10x10 outputs) it is 3.2x faster than Kiln's im2col +
// GEMM (forward 660 -> 204 us), where unfolding the input cost more than the arithmetic; on the
// first (1 channel in) the two are about even. Each cached primitive keeps its own buffers in
// the primitive's layout (as large as its operands), so the cache costs memory on large convs.
#pragma once
#include <cstdint>
#include <memory>

namespace kiln::cpu {

/// Geometry of a grouped, strided, padded, dilated 2-D convolution (dilation 1 = dense).
struct ConvShape {
  int64_t N, C, H, W;    ///< input
  int64_t O, kH, kW, G;  ///< output channels, kernel, groups
  int64_t OH, OW;        ///< output size
  int64_t sH, sW, pH, pW, dH, dW;
};

/// Each returns false when oneDNN is not the build's backend or cannot build a primitive for the
/// shape, or would only run it on its reference (ref:any) kernel, 100-1000x slower than its jit or
/// gemm ones (nothing is written then); the caller then runs im2col + GEMM. Primitives are built
/// once per shape and thread and cached (at most 64 per thread, the oldest dropped first).
bool dnnl_conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y);
bool dnnl_conv2d_backward_data(const ConvShape& s, const float* gy, const float* w, float* gx);
/// Whether oneDNN runs the float32 forward of the shape on a direct (jit) kernel, not its gemm
/// one (im2col over the whole kernel) nor none: it takes the gemm one where the left or right
/// padding in width exceeds its jit kernel's unroll (dilation 12 and 24 on a 33x33 map).
bool dnnl_conv2d_forward_direct(const ConvShape& s);
bool dnnl_conv2d_backward_weights(const ConvShape& s, const float* x, const float* gy, float* gw);
/// The same in bfloat16 (raw bits; every operand and result bfloat16, float32 accumulation):
/// the native kernels of the conv ops on bfloat16 tensors (autocast), AVX512-BF16 or AMX where
/// the CPU has them.
bool dnnl_conv2d_forward_bf16(const ConvShape& s, const uint16_t* x, const uint16_t* w,
                              uint16_t* y);
bool dnnl_conv2d_backward_data_bf16(const ConvShape& s, const uint16_t* gy, const uint16_t* w,
                                    uint16_t* gx);
bool dnnl_conv2d_backward_weights_bf16(const ConvShape& s, const uint16_t* x, const uint16_t* gy,
                                       uint16_t* gw);

/// The activation of a fused convolution (ConvFused::act, conv2d_fused's attribute 5).
enum ConvAct : int32_t {
  kConvActNone = 0,
  kConvActRelu = 1,
  kConvActSwish = 2,      ///< x sigmoid(x) (SiLU)
  kConvActHardswish = 3,  ///< x relu6(x + 3) / 6
};

/// An inference convolution with its epilogue, y = act(conv(x, w) + bias + y_in): the bias
/// added in the kernel, the residual accumulated into y where y holds it on entry (oneDNN's sum
/// post-op) and the activation (relu, swish, hardswish) applied before the result is stored, so
/// none of them is another pass over memory. Layouts: x and y NCHW (block 0) or channel-blocked [N,
/// C/b, H, W, b] (oneDNN's nChw{b}c, which its jit kernels compute in; keeping activations in it
/// between convolutions saves the reorders in and out); w OIHW or, when w_blocked, [O/b, C/b, kH,
/// kW, b, b] (OIhw{b}i{b}o, b = in_block). float32, groups = 1 when anything is blocked. w_const: w
/// is a constant of an inference program (the block_layout pass says so): the primitive's reorder
/// of it runs on the first call and is kept while the same storage (w_owner, held weakly) at the
/// same version comes back, so weights are laid out once, not per call.
struct ConvFused {
  ConvShape s;
  int64_t in_block = 0, out_block = 0;
  bool w_blocked = false, bias = false, residual = false;
  int32_t act = kConvActNone;  ///< a ConvAct, applied last
  bool w_const = false;
  bool operator==(const ConvFused& o) const;
};
bool dnnl_conv2d_fused(const ConvFused& f, const float* x, const float* w, const float* bias,
                       float* y, const std::shared_ptr<const void>& w_owner = nullptr,
                       uint32_t w_version = 0);
/// Winograd for inference convolutions (dnnl_conv2d_fused with a constant 3x3 weight at stride
/// 1): never (nor the training form on large maps), wherever oneDNN has a kernel, or the faster
/// of it and the direct form, timed on each shape's first call (the default).
/// KILN_CONV_WINOGRAD=0 / 1 / unset pick the same at start-up; set_winograd_mode overrides it.
enum WinogradMode { kWinogradOff = 0, kWinogradAlways = 1, kWinogradTimed = 2 };
void set_winograd_mode(int mode);
/// The channel block oneDNN's float32 jit convolutions use on this CPU (16 with AVX-512, 8 with
/// AVX2), 0 without oneDNN or without either.
int64_t dnnl_channel_block();

}  // namespace kiln::cpu
