// ONNX converters for the sampling ops of vision models: GridSample (Kiln's grid_sample) and
// RoiAlign (Kiln's roi_align).
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

#define KILN_ONNX_OP(NAME)                                \
  std::vector<Tensor> conv_##NAME(NodeIn& n);             \
  const RegisterConverter reg_##NAME(#NAME, conv_##NAME); \
  std::vector<Tensor> conv_##NAME(NodeIn& n)

using TL = std::vector<Tensor>;

// ONNX's GridSample (opset 16) is torch's grid_sample on 4-D input, with the same mode and
// padding names.
KILN_ONNX_OP(GridSample) {
  return TL{grid_sample(n.req(0), n.req(1), n.s("mode", "bilinear"), n.s("padding_mode", "zeros"),
                        n.i("align_corners", 0) != 0)};
}

}  // namespace
}  // namespace kiln::onnx::detail
