// Samples for nms_batched (kiln/ops/vision_ops.cpp, behind batched_nms and nms): greedy
// non-maximum suppression per batch and class, checked against a plain reference that keeps the
// selected rows. grid_sample and roi_align are compositions of other ops, compared with torch and
// torchvision in python/tests/test_ops_conv_pool.py.
#include <algorithm>
#include <cmath>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

// The rows (batch, class, box) as ONNX's NonMaxSuppression selects them, by plain loops.
Tensor ref_nms(const Tensor& boxes, const Tensor& scores, int64_t max_per_class, double iou_max,
               double score_min, bool center) {
  const auto bv = vals(boxes), sv = vals(scores);
  const int64_t B = boxes.size(0), N = boxes.size(1), C = scores.size(1);
  auto corner = [&](int64_t b, int64_t i, int k) {  // y1, x1, y2, x2 of box i
    const double* p = &bv[static_cast<size_t>((b * N + i) * 4)];
    if (center) {
      const double half[4] = {-p[3] / 2, -p[2] / 2, p[3] / 2, p[2] / 2};
      return (k % 2 == 0 ? p[1] : p[0]) + half[k];
    }
    return k < 2 ? std::min(p[k], p[k + 2]) : std::max(p[k - 2], p[k]);
  };
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      std::vector<bool> used(static_cast<size_t>(N), false);
      std::vector<int64_t> taken;
      while (static_cast<int64_t>(taken.size()) < max_per_class) {
        int64_t best = -1;  // the highest remaining score above the threshold, lowest index
        for (int64_t i = 0; i < N; ++i) {
          const double s = sv[static_cast<size_t>((b * C + c) * N + i)];
          if (used[static_cast<size_t>(i)] || !(s > score_min)) continue;
          if (best < 0 || s > sv[static_cast<size_t>((b * C + c) * N + best)]) best = i;
        }
        if (best < 0) break;
        used[static_cast<size_t>(best)] = true;
        bool suppressed = false;
        for (int64_t j : taken) {
          const double ih = std::max(0.0, std::min(corner(b, best, 2), corner(b, j, 2)) -
                                              std::max(corner(b, best, 0), corner(b, j, 0)));
          const double iw = std::max(0.0, std::min(corner(b, best, 3), corner(b, j, 3)) -
                                              std::max(corner(b, best, 1), corner(b, j, 1)));
          const double area_a =
              (corner(b, best, 2) - corner(b, best, 0)) * (corner(b, best, 3) - corner(b, best, 1));
          const double area_b =
              (corner(b, j, 2) - corner(b, j, 0)) * (corner(b, j, 3) - corner(b, j, 1));
          const double uni = area_a + area_b - ih * iw;
          if ((uni > 0 ? ih * iw / uni : 0.0) > iou_max) suppressed = true;
        }
        if (suppressed) continue;
        taken.push_back(best);
        out.insert(out.end(),
                   {static_cast<double>(b), static_cast<double>(c), static_cast<double>(best)});
      }
    }
  return from_vals(out, Shape{static_cast<int64_t>(out.size() / 3), 3});
}

const SampleRegistrar reg([] {
  std::vector<OpSample> v;
  for (bool center : {false, true}) {
    OpSample o;
    o.ops = {"nms_batched"};
    o.name = center ? "nms_center_boxes" : "nms_corner_boxes";
    // Boxes of corners in [0, 4) (either diagonal) or centres with sizes in [0.5, 3): enough
    // overlap for suppression at IoU 0.2.
    o.inputs = [center] {
      Tensor b = center ? cat({uni({2, 7, 2}, 1710, 0.0, 4.0), uni({2, 7, 2}, 1711, 0.5, 3.0)}, 2)
                        : uni({2, 7, 4}, 1712, 0.0, 4.0);
      return In{b, rnd({2, 3, 7}, 1713)};
    };
    o.run = [center](const In& in) { return batched_nms(in[0], in[1], 4, 0.2, -0.8, center); };
    o.reference = [center](const In& in) { return ref_nms(in[0], in[1], 4, 0.2, -0.8, center); };
    o.differentiable = false;
    v.push_back(std::move(o));
  }
  return v;
}());

}  // namespace
}  // namespace kiln::testing
