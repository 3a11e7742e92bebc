// ONNX converters for the vision ops: GridSample (Kiln's grid_sample), RoiAlign (Kiln's
// roi_align, torchvision's) and NonMaxSuppression (Kiln's batched_nms).
#include <algorithm>
#include <optional>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

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

// NonMaxSuppression: Kiln's batched_nms, whose row count a graph learns at run. The counts and
// thresholds are inputs: they must be known at import (constants, or bound).
KILN_ONNX_OP(NonMaxSuppression) {
  const Tensor &boxes = n.req(0), &scores = n.req(1);
  auto scalar = [&](size_t k, const char* what) -> std::optional<double> {
    if (!n.has_input(k)) return std::nullopt;
    const Tensor& t = n.in[k];
    if (!t.is_concrete())
      n.fail("input ", k, " (", what, ") must be known at import (a constant or bound)");
    if (t.numel() != 1) n.fail("input ", k, " (", what, ") must hold one value, got ", t.shape());
    return t.to_vector<double>()[0];
  };
  const std::optional<double> max_boxes = scalar(2, "max_output_boxes_per_class");
  const std::optional<double> iou = scalar(3, "iou_threshold");
  const std::optional<double> score = scalar(4, "score_threshold");
  const int64_t cpb = n.i("center_point_box", 0);
  if (cpb != 0 && cpb != 1) n.fail("center_point_box must be 0 or 1, got ", cpb);
  // ONNX: a max of 0 (the default) selects nothing; larger than the box count, all.
  const int64_t m = static_cast<int64_t>(std::clamp(max_boxes.value_or(0.0), 0.0, 9.0e18));
  return TL{batched_nms(boxes, scores, m, iou.value_or(0.0), score, cpb == 1)};
}

}  // namespace
}  // namespace kiln::onnx::detail
