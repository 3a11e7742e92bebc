// Sampling ops of vision models, composed from Kiln ops (gather, floor, where, ...) so that they
// run eagerly, in graphs and under jit, with gradients from autograd: grid_sample
// (torch.nn.functional.grid_sample on 4-D input) and roi_align (torchvision.ops.roi_align). And
// non-maximum suppression: the registry op nms_batched (greedy selection per batch and class,
// the selected rows compacted first and their count), whose public forms (batched_nms, nms)
// slice the rows to the count: a size a graph learns at run (SymInt from the count tensor).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"
#include "kiln/ops/sym_int.h"

using namespace kiln::detail;

namespace kiln {
namespace {

// ---- nms_batched -----------------------------------------------------------------------------

// boxes [B, N, 4], scores [B, C, N]; attrs max_per_class, iou_threshold, score_threshold (NaN:
// none), center_point_box. Outputs rows [B C K, 3] int64 (K = min(N, max_per_class)): the
// (batch, class, box) of every selected box, batch by batch, class by class, in selection order,
// then rows of -1; and their count (0-d int64).
MetaList infer_nms(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "nms_batched";
  const Tensor &boxes = in[0], &scores = in[1];
  if (boxes.dim() != 3 || boxes.size(2) != 4)
    fail(op, "boxes must be [batch, boxes, 4], got ", boxes.shape());
  if (scores.dim() != 3)
    fail(op, "scores must be [batch, classes, boxes], got ", scores.shape(), " (boxes ",
         boxes.shape(), ")");
  // The row count bound comes from the box count: a dynamic dim has none.
  if (!boxes.shape().is_static() || !scores.shape().is_static())
    fail(op, "needs a static size: got boxes ", boxes.shape(), " and scores ", scores.shape());
  if (scores.size(0) != boxes.size(0) || scores.size(2) != boxes.size(1))
    fail(op, "scores ", scores.shape(), " do not match boxes ", boxes.shape(), " (expected [",
         boxes.size(0), ", classes, ", boxes.size(1), "])");
  if (!is_floating(boxes.dtype()) || !is_floating(scores.dtype()))
    fail(op, "boxes and scores must be floating, got ", dtype_name(boxes.dtype()), " and ",
         dtype_name(scores.dtype()));
  if (a.i(0) < 0) fail(op, "max_output_boxes_per_class must be >= 0, got ", a.i(0));
  const int64_t K = std::min(boxes.size(1), a.i(0));
  MetaList m;
  m.push_back(TensorMeta{Int64, Shape{scores.size(0) * scores.size(1) * K, 3}});
  m.push_back(TensorMeta{Int64, Shape{}});
  return m;
}

void nms_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &boxes = in[0], &scores = in[1];
  const std::vector<double> box_v = boxes.to_vector<double>(), score_v = scores.to_vector<double>();
  const int64_t B = boxes.size(0), N = boxes.size(1), C = scores.size(1);
  const int64_t K = std::min(N, a.i(0));
  const double iou_max = a.f(1), score_min = a.f(2);
  const bool center = a.i(3) != 0;
  const double* bx = box_v.data();
  const double* sc = score_v.data();
  int64_t* rows = out[0].data_ptr<int64_t>();
  std::fill(rows, rows + out[0].numel(), int64_t{-1});
  int64_t count = 0;
  std::vector<std::array<double, 4>> corners(static_cast<size_t>(N));
  std::vector<int64_t> order, kept;
  for (int64_t b = 0; b < B; ++b) {
    // Corners as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2 (ONNX allows either diagonal).
    for (int64_t i = 0; i < N; ++i) {
      const double* p = bx + (b * N + i) * 4;
      std::array<double, 4> c;
      if (center)  // (x_center, y_center, width, height)
        c = {p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
      else
        c = {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]),
             std::max(p[1], p[3])};
      corners[static_cast<size_t>(i)] = c;
    }
    auto iou = [&](int64_t u, int64_t v) {
      const auto &p = corners[static_cast<size_t>(u)], &q = corners[static_cast<size_t>(v)];
      const double ih = std::max(0.0, std::min(p[2], q[2]) - std::max(p[0], q[0]));
      const double iw = std::max(0.0, std::min(p[3], q[3]) - std::max(p[1], q[1]));
      const double inter = ih * iw;
      const double uni = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter;
      return uni > 0 ? inter / uni : 0.0;
    };
    for (int64_t c = 0; c < C; ++c) {
      const double* s = sc + (b * C + c) * N;
      order.clear();
      for (int64_t i = 0; i < N; ++i)
        if (std::isnan(score_min) || s[i] > score_min) order.push_back(i);
      // Highest score first; ties by the lower index (a NaN score is never selected).
      order.erase(
          std::remove_if(order.begin(), order.end(), [&](int64_t i) { return std::isnan(s[i]); }),
          order.end());
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t u, int64_t v) { return s[u] > s[v]; });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= K) break;
        bool keep = true;
        for (int64_t j : kept)
          if (iou(i, j) > iou_max) {
            keep = false;
            break;
          }
        if (!keep) continue;
        kept.push_back(i);
        rows[count * 3] = b, rows[count * 3 + 1] = c, rows[count * 3 + 2] = i;
        ++count;
      }
    }
  }
  *out[1].data_ptr<int64_t>() = count;
}

const OpDef& kNmsBatched =
    def_op({.name = "nms_batched",
            .num_inputs = 2,
            .num_outputs = 2,
            .attr_names = {"max_output_boxes_per_class", "iou_threshold", "score_threshold",
                           "center_point_box"},
            .traits = kStaticShapes,
            .infer = infer_nms,
            .kernel = nms_kernel,
            .doc = "greedy non-maximum suppression per batch and class: the selected (batch, "
                   "class, box) rows first, then -1 rows, and their count. Static shapes: the "
                   "rows are sized by the box count, which a dynamic dim does not give"});

enum class Pad { Zeros, Border, Reflection };

// torch's grid_sampler_unnormalize: [-1, 1] to pixel coordinates, the extremes at the corner
// pixels' centres (align_corners) or at their outer edges.
Tensor unnormalize(const Tensor& c, int64_t size, bool align_corners) {
  if (align_corners) return mul(add(c, 1.0), (static_cast<double>(size) - 1) / 2);
  return div(sub(mul(add(c, 1.0), static_cast<double>(size)), 1.0), 2.0);
}

// torch's reflect_coordinates: c reflected into [twice_low / 2, twice_high / 2].
Tensor reflect(const Tensor& c, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return zeros_like(c);
  const double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  Tensor in = abs(sub(c, lo));
  Tensor flips = floor(div(in, span));
  Tensor extra = sub(in, mul(flips, span));
  Tensor even = eq(sub(flips, mul(floor(div(flips, 2.0)), 2.0)), 0.0);
  return where(even, add(extra, lo), add(sub(span, extra), lo));
}

// torch's clip_coordinates into [0, size - 1], whose gradient passes strictly inside only (clamp's
// passes at the bounds too).
Tensor clip(const Tensor& c, int64_t size) {
  const double hi = static_cast<double>(size) - 1;
  return where(logical_or(le(c, 0.0), ge(c, hi)), detach(clamp(c, 0.0, hi)), c);
}

// torch's compute_coordinates: the padding mode applied to a coordinate.
Tensor pad_coordinates(const Tensor& c, int64_t size, Pad pad, bool align_corners) {
  if (pad == Pad::Border) return clip(c, size);
  if (pad == Pad::Reflection)
    return clip(align_corners ? reflect(c, 0, 2 * (size - 1)) : reflect(c, -1, 2 * size - 1), size);
  return c;
}

// Reads input [N, C, H*W] at integer-valued float pixel coordinates x, y ([N, P]) times weight w
// ([N, P]); taps outside the image read 0.
Tensor tap(const Tensor& flat, const Tensor& x, const Tensor& y, const Tensor& w, int64_t H,
           int64_t W) {
  const int64_t N = flat.size(0), C = flat.size(1), P = x.size(1);
  Tensor inside = logical_and(logical_and(ge(x, 0.0), le(x, static_cast<double>(W - 1))),
                              logical_and(ge(y, 0.0), le(y, static_cast<double>(H - 1))));
  // Outside taps (NaN coordinates too) read pixel 0, weighted 0.
  Tensor idx = cast(where(inside, add(mul(y, static_cast<double>(W)), x), zeros_like(x)), Int64);
  Tensor v = gather(flat, 2, expand(reshape(idx, Shape{N, 1, P}), Shape{N, C, P}));
  Tensor wm = where(inside, w, zeros_like(w));
  return mul(v, reshape(wm, Shape{N, 1, P}));
}

// Keys' cubic convolution with A = -0.75, as torch's upsample and grid_sample bicubic.
Tensor cubic1(const Tensor& t) {  // |t| <= 1
  constexpr double A = -0.75;
  return add(mul(mul(sub(mul(t, A + 2), A + 3), t), t), 1.0);
}
Tensor cubic2(const Tensor& t) {  // 1 < |t| < 2
  constexpr double A = -0.75;
  return sub(mul(add(mul(sub(mul(t, A), 5 * A), t), 8 * A), t), 4 * A);
}

// roi_align's sampling along one axis: for coordinates c ([K, S]) in an image of `size`, the
// low and high pixel, and their weights (0 for points past torchvision's bounds).
struct AxisTaps {
  Tensor low, high, wlow, whigh;
};
AxisTaps roi_axis(const Tensor& c, int64_t size) {
  const double last = static_cast<double>(size) - 1;
  Tensor valid = logical_and(ge(c, -1.0), le(c, static_cast<double>(size)));
  Tensor p = clamp_min(c, 0.0);
  Tensor low = floor(p);
  Tensor edge = ge(low, last);
  Tensor lastv = full_like(low, last);
  low = where(edge, lastv, low);
  Tensor high = where(edge, lastv, add(low, 1.0));
  p = where(edge, low, p);
  Tensor l = sub(p, low);
  Tensor zero = zeros_like(l);
  return {low, high, where(valid, sub(1.0, l), zero), where(valid, l, zero)};
}

// torchvision's roi_align for boxes [K, 5] with `gh` x `gw` samples per bin: [K, C, PH, PW].
Tensor roi_align_fixed(const Tensor& input, const Tensor& boxes, int64_t PH, int64_t PW,
                       double scale, int64_t gh, int64_t gw, bool aligned) {
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t K = boxes.size(0);
  const DType dt = input.dtype();
  const double off = aligned ? 0.5 : 0.0;
  auto col = [&](int64_t k) { return slice(boxes, 1, k, k + 1); };  // [K, 1]
  Tensor x0 = sub(mul(col(1), scale), off), y0 = sub(mul(col(2), scale), off);
  Tensor rw = sub(sub(mul(col(3), scale), off), x0), rh = sub(sub(mul(col(4), scale), off), y0);
  if (!aligned) rw = clamp_min(rw, 1.0), rh = clamp_min(rh, 1.0);  // malformed boxes as 1x1
  // Sample s of bin p sits at p + (s + 0.5) / g bins from the start.
  auto steps = [&](int64_t P, int64_t g) {
    std::vector<double> v;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t s = 0; s < g; ++s) v.push_back(p + (s + 0.5) / g);
    return cast(tensor(v, Shape{P * g}), dt);
  };
  Tensor ys = add(y0, mul(div(rh, static_cast<double>(PH)), reshape(steps(PH, gh), {1, PH * gh})));
  Tensor xs = add(x0, mul(div(rw, static_cast<double>(PW)), reshape(steps(PW, gw), {1, PW * gw})));
  const AxisTaps ty = roi_axis(ys, H), tx = roi_axis(xs, W);  // [K, S]
  const int64_t SY = PH * gh, SX = PW * gw, S = SY * SX;
  // Pixels of every image in one row per channel: [C, N H W].
  Tensor flat = reshape(permute(input, {1, 0, 2, 3}), Shape{C, N * H * W});
  Tensor base = mul(cast(col(0), Int64), H * W);  // [K, 1]
  auto read = [&](const Tensor& yi, const Tensor& xi, const Tensor& wy, const Tensor& wx) {
    Tensor idx = add(add(reshape(base, {K, 1, 1}), mul(reshape(cast(yi, Int64), {K, SY, 1}), W)),
                     reshape(cast(xi, Int64), {K, 1, SX}));
    Tensor v = gather(flat, 1, expand(reshape(idx, {1, K * S}), Shape{C, K * S}));
    Tensor w = mul(reshape(wy, {K, SY, 1}), reshape(wx, {K, 1, SX}));
    return mul(v, reshape(w, {1, K * S}));
  };
  Tensor sum = add(
      add(read(ty.low, tx.low, ty.wlow, tx.wlow), read(ty.low, tx.high, ty.wlow, tx.whigh)),
      add(read(ty.high, tx.low, ty.whigh, tx.wlow), read(ty.high, tx.high, ty.whigh, tx.whigh)));
  Tensor bins = reshape(sum, {C, K, PH, gh, PW, gw});
  Tensor avg = div(kiln::sum(bins, {3, 5}), static_cast<double>(std::max<int64_t>(gh * gw, 1)));
  return permute(avg, {1, 0, 2, 3});
}

}  // namespace

Tensor batched_nms(const Tensor& boxes, const Tensor& scores, int64_t max_output_boxes_per_class,
                   double iou_threshold, std::optional<double> score_threshold,
                   bool center_point_box) {
  if (!boxes.defined() || !scores.defined()) fail("nms_batched", "undefined input");
  const double none = std::numeric_limits<double>::quiet_NaN();
  TensorList r = call(kNmsBatched, {boxes, scores},
                      {max_output_boxes_per_class, iou_threshold, score_threshold.value_or(none),
                       static_cast<int64_t>(center_point_box)});
  // The count is known after the kernel: eagerly a number, in a graph a size read at run.
  const SymInt n =
      r[1].is_concrete() ? SymInt(r[1].to_vector<int64_t>()[0]) : SymInt(r[1], SymInt::kNoHint);
  return slice(r[0], 0, 0, n);
}

Tensor nms(const Tensor& boxes, const Tensor& scores, double iou_threshold) {
  const char* op = "nms";
  if (!boxes.defined() || !scores.defined()) fail(op, "undefined input");
  if (boxes.dim() != 2 || boxes.size(1) != 4)
    fail(op, "boxes must be [N, 4] (x1, y1, x2, y2), got ", boxes.shape());
  if (scores.dim() != 1 || scores.size(0) != boxes.size(0))
    fail(op, "scores must be [N] for boxes ", boxes.shape(), ", got ", scores.shape());
  // torchvision's corners are (x1, y1, x2, y2); the IoU does not care which axis is first.
  Tensor rows = batched_nms(unsqueeze(boxes, 0), reshape(scores, Shape{1, 1, scores.size(0)}),
                            boxes.size(0), iou_threshold, std::nullopt, false);
  return squeeze(slice(rows, 1, 2, 3), 1);
}

Tensor roi_align(const Tensor& input, const Tensor& boxes, std::vector<int64_t> output_size,
                 double spatial_scale, int64_t sampling_ratio, bool aligned) {
  const char* op = "roi_align";
  if (!input.defined() || !boxes.defined()) fail(op, "undefined input");
  if (input.dim() != 4) fail(op, "input must be 4-D [N, C, H, W], got ", input.shape());
  if (boxes.dim() != 2 || boxes.size(1) != 5)
    fail(op, "boxes must be [K, 5] (batch index, x1, y1, x2, y2), got ", boxes.shape());
  if (!input.shape().is_static() || !boxes.shape().is_static())
    fail(op, "needs static shapes, got input ", input.shape(), " and boxes ", boxes.shape());
  if (!is_floating(input.dtype()) || boxes.dtype() != input.dtype())
    fail(op, "input and boxes must be of one floating dtype, got ", dtype_name(input.dtype()),
         " and ", dtype_name(boxes.dtype()));
  if (output_size.size() == 1) output_size.push_back(output_size[0]);
  if (output_size.size() != 2 || output_size[0] <= 0 || output_size[1] <= 0)
    fail(op, "output_size must be one or two positive ints, got ", output_size.size(), " values");
  const int64_t PH = output_size[0], PW = output_size[1];
  // As torchvision: no gradient reaches the boxes.
  const Tensor b = detach(boxes);
  if (sampling_ratio > 0)
    return roi_align_fixed(input, b, PH, PW, spatial_scale, sampling_ratio, sampling_ratio,
                           aligned);
  // Adaptive: ceil(roi size / bins) samples per bin, per box; the count depends on the values.
  if (!b.is_concrete())
    fail(op, "sampling_ratio ", sampling_ratio,
         " (adaptive) takes its sample counts from the boxes' values, which a static graph does "
         "not know: give sampling_ratio > 0");
  const int64_t K = b.size(0);
  if (K == 0) return roi_align_fixed(input, b, PH, PW, spatial_scale, 1, 1, aligned);
  const std::vector<double> v = contiguous(b).to_vector<double>();
  const double off = aligned ? 0.5 : 0.0;
  std::vector<Tensor> rows;
  for (int64_t k = 0; k < K; ++k) {
    const double* r = &v[static_cast<size_t>(k) * 5];
    double rw = (r[3] * spatial_scale - off) - (r[1] * spatial_scale - off);
    double rh = (r[4] * spatial_scale - off) - (r[2] * spatial_scale - off);
    if (!aligned) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const auto g = [](double extent, int64_t bins) {
      return static_cast<int64_t>(std::ceil(extent / static_cast<double>(bins)));
    };
    const int64_t gh = g(rh, PH), gw = g(rw, PW);
    rows.push_back(gh > 0 && gw > 0 ? roi_align_fixed(input, slice(b, 0, k, k + 1), PH, PW,
                                                      spatial_scale, gh, gw, aligned)
                                    : zeros(Shape{1, input.size(1), PH, PW}, input.dtype()));
  }
  return cat(rows, 0);
}

Tensor grid_sample(const Tensor& input, const Tensor& grid, const std::string& mode,
                   const std::string& padding_mode, bool align_corners) {
  const char* op = "grid_sample";
  if (!input.defined() || !grid.defined()) fail(op, "undefined input");
  if (input.dim() != 4)
    fail(op, "input must be 4-D [N, C, H, W], got ", input.shape(),
         " (5-D volumetric sampling is not supported)");
  if (grid.dim() != 4 || grid.size(3) != 2)
    fail(op, "grid must be [N, H_out, W_out, 2] for input ", input.shape(), ", got ", grid.shape());
  if (!input.shape().is_static() || !grid.shape().is_static())
    fail(op, "needs static shapes, got input ", input.shape(), " and grid ", grid.shape());
  if (grid.size(0) != input.size(0))
    fail(op, "grid ", grid.shape(), " and input ", input.shape(), " differ in batch size");
  if (!is_floating(input.dtype()) || input.dtype() != grid.dtype())
    fail(op, "input and grid must be of one floating dtype, got ", dtype_name(input.dtype()),
         " and ", dtype_name(grid.dtype()));
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    fail(op, "mode must be 'bilinear', 'nearest' or 'bicubic', got '", mode, "'");
  Pad pad;
  if (padding_mode == "zeros")
    pad = Pad::Zeros;
  else if (padding_mode == "border")
    pad = Pad::Border;
  else if (padding_mode == "reflection")
    pad = Pad::Reflection;
  else
    fail(op, "padding_mode must be 'zeros', 'border' or 'reflection', got '", padding_mode, "'");
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t Ho = grid.size(1), Wo = grid.size(2), P = Ho * Wo;
  Tensor flat = reshape(input, Shape{N, C, H * W});
  Tensor g = reshape(grid, Shape{N, P, 2});
  Tensor gx = squeeze(slice(g, 2, 0, 1), 2), gy = squeeze(slice(g, 2, 1, 2), 2);  // [N, P]
  Tensor ix = unnormalize(gx, W, align_corners), iy = unnormalize(gy, H, align_corners);
  Tensor out;
  if (mode == "bicubic") {
    // The padding applies to each of the 4x4 taps, not to the sampling point (as torch).
    Tensor x0 = floor(ix), y0 = floor(iy);
    Tensor tx = sub(ix, x0), ty = sub(iy, y0);
    const Tensor wx[4] = {cubic2(add(tx, 1.0)), cubic1(tx), cubic1(sub(1.0, tx)),
                          cubic2(sub(2.0, tx))};
    const Tensor wy[4] = {cubic2(add(ty, 1.0)), cubic1(ty), cubic1(sub(1.0, ty)),
                          cubic2(sub(2.0, ty))};
    for (int j = 0; j < 4; ++j) {
      Tensor y = pad_coordinates(add(y0, j - 1.0), H, pad, align_corners);
      for (int i = 0; i < 4; ++i) {
        Tensor x = pad_coordinates(add(x0, i - 1.0), W, pad, align_corners);
        Tensor t = tap(flat, x, y, mul(wx[i], wy[j]), H, W);
        out = out.defined() ? add(out, t) : t;
      }
    }
  } else {
    ix = pad_coordinates(ix, W, pad, align_corners);
    iy = pad_coordinates(iy, H, pad, align_corners);
    if (mode == "nearest") {
      // nearbyint: halves to even, as torch.
      out = tap(flat, round(ix), round(iy), ones_like(ix), H, W);
    } else {
      Tensor x0 = floor(ix), y0 = floor(iy);
      Tensor x1 = add(x0, 1.0), y1 = add(y0, 1.0);
      Tensor wx1 = sub(ix, x0), wx0 = sub(x1, ix), wy1 = sub(iy, y0), wy0 = sub(y1, iy);
      out =
          add(add(tap(flat, x0, y0, mul(wx0, wy0), H, W), tap(flat, x1, y0, mul(wx1, wy0), H, W)),
              add(tap(flat, x0, y1, mul(wx0, wy1), H, W), tap(flat, x1, y1, mul(wx1, wy1), H, W)));
    }
  }
  return reshape(out, Shape{N, C, Ho, Wo});
}

}  // namespace kiln
