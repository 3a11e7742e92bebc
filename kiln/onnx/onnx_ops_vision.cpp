// ONNX converters for the sampling ops of vision models: GridSample (Kiln's grid_sample) and
// RoiAlign (Kiln's roi_align, torchvision's).
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

// ONNX's RoiAlign is torchvision's roi_align with the batch index as its own input: half_pixel
// is aligned=True, output_half_pixel (opset 10's only behaviour) aligned=False.
KILN_ONNX_OP(RoiAlign) {
  const Tensor &x = n.req(0), &rois = n.req(1), &bi = n.req(2);
  const std::string mode = n.s("mode", "avg");
  if (mode != "avg")
    n.fail("mode '", mode, "' is not supported (Kiln's roi_align averages, as torchvision's)");
  const std::string ct = n.s("coordinate_transformation_mode", "half_pixel");
  if (ct != "half_pixel" && ct != "output_half_pixel")
    n.fail("coordinate_transformation_mode must be half_pixel or output_half_pixel, got '", ct,
           "'");
  const bool aligned = n.opset >= 16 && ct == "half_pixel";
  if (rois.dim() != 2 || rois.size(1) != 4)
    n.fail("rois must be [num_rois, 4], got ", rois.shape());
  if (bi.dim() != 1 || !is_integral(bi.dtype()))
    n.fail("batch_indices must be 1-D integers, got ", dtype_name(bi.dtype()), bi.shape());
  Tensor boxes = cat({cast(unsqueeze(bi, 1), rois.dtype()), rois}, 1);
  return TL{roi_align(x, boxes, {n.i("output_height", 1), n.i("output_width", 1)},
                      n.f("spatial_scale", 1.0), n.i("sampling_ratio", 0), aligned)};
}

}  // namespace
}  // namespace kiln::onnx::detail
