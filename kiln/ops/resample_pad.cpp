// Resampling and padding: interpolate (nearest, nearest-exact, linear, bilinear, trilinear,
// bicubic, area; one [out, in] matrix per resized axis, so gradients are those of matmul), the
// padding modes (reflect, replicate, circular) and pixel_shuffle / pixel_unshuffle, all
// composites over matmul, views, index_select and cat.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;

enum class Resample { Nearest, NearestExact, Linear, Cubic, Area };

// torch's cubic convolution weights (A = -0.75).
double cubic1(double x) {
  const double A = -0.75;
  return ((A + 2) * x - (A + 3)) * x * x + 1;
}
double cubic2(double x) {
  const double A = -0.75;
  return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

// The [out, in] matrix of a 1-D resampling, as torch's kernels index: `scale` is 1/scale_factor
// when the caller gave one (and did not ask to recompute it), else 0 (in / out is used).
Tensor resample_matrix(int64_t out, int64_t in, Resample mode, bool align_corners, double scale,
                       DType dt) {
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  const double fin = static_cast<double>(in), fout = static_cast<double>(out);
  const double sc =
      align_corners ? (out > 1 ? (fin - 1) / (fout - 1) : 0.0) : (scale > 0 ? scale : fin / fout);
  for (int64_t i = 0; i < out; ++i) {
    double* row = m.data() + i * in;
    const double fi = static_cast<double>(i);
    switch (mode) {
      case Resample::Nearest:
      case Resample::NearestExact: {
        // torch computes these in float32
        const float f = mode == Resample::Nearest
                            ? static_cast<float>(fi) * static_cast<float>(sc)
                            : (static_cast<float>(fi) + 0.5f) * static_cast<float>(sc);
        // (torch's nearest special-cases equal and doubled sizes, whatever the scale)
        const int64_t src = mode == Resample::Nearest && out == in ? i
                            : mode == Resample::Nearest && out == 2 * in
                                ? i / 2
                                : std::min(in - 1, static_cast<int64_t>(std::floor(f)));
        row[src] = 1;
        break;
      }
      case Resample::Area: {
        const int64_t b = i * in / out, e = ((i + 1) * in + out - 1) / out;
        for (int64_t j = b; j < e; ++j) row[j] = 1.0 / static_cast<double>(e - b);
        break;
      }
      case Resample::Linear: {
        double src = align_corners ? sc * fi : std::max(0.0, sc * (fi + 0.5) - 0.5);
        const int64_t i0 = std::min(in - 1, static_cast<int64_t>(std::floor(src)));
        const int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
        const double w1 = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
        row[i0] += 1 - w1;
        row[i1] += w1;
        break;
      }
      case Resample::Cubic: {
        const double src = align_corners ? sc * fi : sc * (fi + 0.5) - 0.5;
        const double fl = std::floor(src);
        const int64_t i0 = static_cast<int64_t>(fl);
        const double t = src - fl;
        const double w[4] = {cubic2(t + 1), cubic1(t), cubic1(1 - t), cubic2(2 - t)};
        for (int64_t k = 0; k < 4; ++k) row[std::clamp<int64_t>(i0 - 1 + k, 0, in - 1)] += w[k];
        break;
      }
    }
  }
  return tensor(m, {out, in}).to(dt);
}

// The resampling of `mode` after torch's checks of the mode, align_corners and the input's rank
// and dtype.
Resample resample_mode(const Tensor& x, const std::string& mode, bool align_corners) {
  const char* op = "interpolate";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  Resample rm;
  int64_t need = 0;  // the input rank the mode requires (0: 3 to 5)
  if (mode == "nearest") {
    rm = Resample::Nearest;
  } else if (mode == "nearest-exact") {
    rm = Resample::NearestExact;
  } else if (mode == "area") {
    rm = Resample::Area;
  } else if (mode == "linear" || mode == "bilinear" || mode == "trilinear") {
    rm = Resample::Linear;
    need = mode == "linear" ? 3 : mode == "bilinear" ? 4 : 5;
  } else if (mode == "bicubic") {
    rm = Resample::Cubic;
    need = 4;
  } else {
    fail(op,
         "mode must be nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area, "
         "got \"",
         mode, "\"");
  }
  if (align_corners &&
      (rm == Resample::Nearest || rm == Resample::NearestExact || rm == Resample::Area))
    fail(op,
         "align_corners option can only be set with the interpolating modes: linear | "
         "bilinear | bicubic | trilinear (mode \"",
         mode, "\")");
  if (x.dim() < 3 || x.dim() > 5 || (need && x.dim() != need))
    fail(op, "mode \"", mode, "\" expects ", need ? std::to_string(need) : std::string("3-D to 5"),
         "-D input [N, C, spatial...], got shape ", x.shape());
  if (!is_floating(x.dtype())) fail(op, "input must be floating point, got ", x.dtype(), x.shape());
  return rm;
}

// The output's spatial sizes from `size` or `scale_factor` (one value, or one per spatial dim),
// and per dim the scale torch's kernels index with (1/scale_factor, or 0: in / out).
Ints output_sizes(const Tensor& x, const Ints& size, const std::vector<double>& scale_factor,
                  bool recompute_scale_factor, std::vector<double>& scales) {
  const char* op = "interpolate";
  const int64_t nd = x.dim() - 2;
  if (size.empty() == scale_factor.empty())
    fail(op, "exactly one of size and scale_factor must be given, got size ", Shape(size), " and ",
         scale_factor.size(), " scale factors");
  Ints o;
  scales.assign(static_cast<size_t>(nd), 0.0);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t in = x.size(d + 2);
    if (in <= 0) fail(op, "needs static, non-empty spatial dims, got shape ", x.shape());
    const size_t u = static_cast<size_t>(d);
    if (!size.empty()) {
      if (size.size() != 1 && size.size() != static_cast<size_t>(nd))
        fail(op, "size must have 1 or ", nd, " values for input ", x.shape(), ", got ",
             Shape(size));
      o.push_back(size.size() == 1 ? size[0] : size[u]);
    } else {
      if (scale_factor.size() != 1 && scale_factor.size() != static_cast<size_t>(nd))
        fail(op, "scale_factor must have 1 or ", nd, " values for input ", x.shape(), ", got ",
             scale_factor.size());
      const double f = scale_factor.size() == 1 ? scale_factor[0] : scale_factor[u];
      if (!(f > 0) || !std::isfinite(f)) fail(op, "scale_factor must be positive, got ", f);
      o.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in) * f)));
      if (!recompute_scale_factor) scales[u] = 1.0 / f;
    }
    if (o.back() <= 0 || o.back() > (int64_t(1) << 24))
      fail(op, "output size must be positive (and at most 2^24), got ", Shape(o), " for input ",
           x.shape());
    // The resampling matrices are [out, in] per axis.
    if (o.back() * in > (int64_t(1) << 28))
      fail(op, "resizing ", x.shape(), " to ", Shape(o),
           " needs resampling matrices over 2^28 elements");
  }
  return o;
}

// y with the resampling matrix A ([out, in]) applied along `dim`: the last dim multiplies from
// the right; another as [..., in, rest merged] from the left.
Tensor resample_axis(const Tensor& y, int64_t dim, const Tensor& A) {
  if (dim == y.dim() - 1) return matmul(y, transpose(A, 0, 1));
  const Shape ys = y.shape();
  Shape merged;
  for (int64_t k = 0; k <= dim; ++k) merged.push_back(ys[k]);
  merged.push_back(-1);
  Shape back = ys;
  back[dim] = A.size(0);
  return reshape(matmul(A, reshape(y, merged)), back);
}
}  // namespace

// Resizing is linear and separable: one [out, in] matrix per resized axis, applied as a GEMM
// over all the other dims (gradients are those of matmul).
Tensor interpolate(const Tensor& x, std::vector<int64_t> size, const std::string& mode,
                   bool align_corners, std::vector<double> scale_factor,
                   bool recompute_scale_factor) {
  const Resample rm = resample_mode(x, mode, align_corners);
  std::vector<double> scales;
  const Ints o = output_sizes(x, size, scale_factor, recompute_scale_factor, scales);
  Tensor y = x;
  for (int64_t d = 0; d < x.dim() - 2; ++d) {
    const int64_t in = x.size(d + 2), out = o[static_cast<size_t>(d)];
    if (out == in && (rm == Resample::Nearest || rm == Resample::Area)) continue;  // identity
    y = resample_axis(
        y, d + 2,
        resample_matrix(out, in, rm, align_corners, scales[static_cast<size_t>(d)], x.dtype()));
  }
  return y.is_same(x) ? clone(y) : y;
}

// ---- padding modes, pixel shuffle ------------------------------------------------------------

// One dynamic padded dim (a graph or a jit trace): the borders are slices counted from either
// end of the dim, reordered by a static index_select, and cat'ed around y; eager's size checks
// run when the graph runs (check_numel).
static Tensor pad_mode_dynamic(const Tensor& y, int64_t dim, int64_t lo, int64_t hi,
                               const std::string& mode) {
  const char* op = "pad";
  const bool reflect = mode == "reflect", circular = mode == "circular";
  const int64_t need = reflect ? std::max(lo, hi) + 1 : circular ? std::max(lo, hi) : 1;
  const Tensor x = op_util::check_numel(
      y, {dim}, need, op,
      reflect    ? str_cat("padding (", lo, ", ", hi, ") at dimension ", dim,
                           " should be less than the corresponding input dimension: shape ")
      : circular ? str_cat("padding (", lo, ", ", hi, ") at dimension ", dim,
                           " wraps around more than once: shape ")
                 : str_cat("mode \"", mode, "\" cannot pad an empty dim: shape "));
  auto index = [](int64_t n, bool reversed, bool zero) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = zero ? 0 : reversed ? n - 1 - i : i;
    return tensor(v, Shape{n});
  };
  // Each border: the source rows (a slice of n rows, or of the one edge row for replicate)
  // and the order to take them in.
  auto border = [&](bool left, int64_t n) {
    if (mode == "replicate")
      return index_select(left ? slice(x, dim, 0, 1) : slice(x, dim, -1, INT64_MAX), dim,
                          index(n, false, true));
    if (reflect)
      return index_select(left ? slice(x, dim, 1, n + 1) : slice(x, dim, -n - 1, -1), dim,
                          index(n, true, false));
    return index_select(left ? slice(x, dim, -n, INT64_MAX) : slice(x, dim, 0, n), dim,
                        index(n, false, false));
  };
  std::vector<Tensor> parts;
  if (lo > 0) parts.push_back(border(true, lo));
  parts.push_back(x);
  if (hi > 0) parts.push_back(border(false, hi));
  return cat(parts, dim);
}

// reflect / replicate / circular: each padded dim is one index_select with the source position
// of every output position (the gradient is index_select's: contributions summed back).
Tensor pad(const Tensor& a, const std::vector<int64_t>& pads, const std::string& mode,
           double value) {
  const char* op = "pad";
  if (mode == "constant") return pad(a, pads, value);
  if (mode != "reflect" && mode != "replicate" && mode != "circular")
    fail(op, "mode must be constant, reflect, replicate or circular, got \"", mode, "\"");
  if (!a.defined()) fail(op, "input is an undefined tensor");
  if (value != 0.0)
    fail(op, "padding mode \"", mode, "\" doesn't take in value argument (got ", value, ")");
  const int64_t np = static_cast<int64_t>(pads.size()) / 2;
  if (pads.size() % 2 != 0 || np < 1 || np > 3)
    fail(op, "mode \"", mode, "\" pads 1 to 3 trailing dims: pad must have 2, 4 or 6 values, got ",
         Shape(pads));
  // As torch: the padded dims plus a channel dim, and an optional batch dim.
  if (a.dim() != np + 1 && a.dim() != np + 2)
    fail(op, "mode \"", mode, "\" with ", pads.size(), " pad values expects a ", np + 1, "-D or ",
         np + 2, "-D input, got shape ", a.shape());
  Tensor y = a;
  for (int64_t j = 0; j < np; ++j) {
    const int64_t dim = a.dim() - 1 - j;
    const int64_t L = a.size(dim), lo = pads[static_cast<size_t>(2 * j)],
                  hi = pads[static_cast<size_t>(2 * j + 1)];
    if (lo < 0 || hi < 0)
      fail(op, "mode \"", mode, "\" needs non-negative padding, got ", Shape(pads));
    if (L < 0) {
      if (lo > 0 || hi > 0) y = pad_mode_dynamic(y, dim, lo, hi, mode);
      continue;
    }
    if (mode == "reflect" && (lo >= L || hi >= L))
      fail(op, "padding size should be less than the corresponding input dimension, but got: ",
           "padding (", lo, ", ", hi, ") at dimension ", dim, " of input ", a.shape());
    if (mode == "circular" && (lo > L || hi > L))
      fail(op, "padding value causes wrapping around more than once: padding (", lo, ", ", hi,
           ") at dimension ", dim, " of input ", a.shape());
    if (L == 0) fail(op, "mode \"", mode, "\" cannot pad an empty dim, input shape ", a.shape());
    if (lo == 0 && hi == 0) continue;
    std::vector<int64_t> idx;
    for (int64_t q = -lo; q < L + hi; ++q) {
      int64_t src = q;
      if (mode == "reflect")
        src = q < 0 ? -q : q >= L ? 2 * (L - 1) - q : q;
      else if (mode == "replicate")
        src = std::clamp<int64_t>(q, 0, L - 1);
      else
        src = ((q % L) + L) % L;
      idx.push_back(src);
    }
    y = index_select(y, dim, tensor(idx, Shape{static_cast<int64_t>(idx.size())}));
  }
  return y.is_same(a) ? clone(y) : y;
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_shuffle";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() < 3)
    fail(op, "input must have at least 3 dims [*, C r^2, H, W], got shape ", x.shape());
  if (r <= 0) fail(op, "upscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), C = x.size(n - 3), H = x.size(n - 2), W = x.size(n - 1);
  if (C < 0 || H < 0 || W < 0) fail(op, "needs static C, H and W, got shape ", x.shape());
  if (C % (r * r) != 0)
    fail(op, "input's channel dim ", C, " must be divisible by the square of upscale_factor ", r,
         " (input shape ", x.shape(), ")");
  const Ints dims = x.shape().vec();
  Shape lead(dims.begin(), dims.end() - 3);
  Shape s6 = lead;
  for (int64_t v : {C / (r * r), r, r, H, W}) s6.push_back(v);
  std::vector<int64_t> perm;
  const int64_t b = static_cast<int64_t>(lead.rank());
  for (int64_t i = 0; i < b; ++i) perm.push_back(i);
  for (int64_t v : {0, 3, 1, 4, 2}) perm.push_back(b + v);
  Shape out = lead;
  for (int64_t v : {C / (r * r), H * r, W * r}) out.push_back(v);
  return reshape(permute(reshape(x, s6), perm), out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_unshuffle";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() < 3)
    fail(op, "input must have at least 3 dims [*, C, H r, W r], got shape ", x.shape());
  if (r <= 0) fail(op, "downscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), C = x.size(n - 3), H = x.size(n - 2), W = x.size(n - 1);
  if (C < 0 || H < 0 || W < 0) fail(op, "needs static C, H and W, got shape ", x.shape());
  if (H % r != 0 || W % r != 0)
    fail(op, "input's height and width (", H, ", ", W, ") must be divisible by downscale_factor ",
         r, " (input shape ", x.shape(), ")");
  const Ints dims = x.shape().vec();
  Shape lead(dims.begin(), dims.end() - 3);
  Shape s6 = lead;
  for (int64_t v : {C, H / r, r, W / r, r}) s6.push_back(v);
  std::vector<int64_t> perm;
  const int64_t b = static_cast<int64_t>(lead.rank());
  for (int64_t i = 0; i < b; ++i) perm.push_back(i);
  for (int64_t v : {0, 2, 4, 1, 3}) perm.push_back(b + v);
  Shape out = lead;
  for (int64_t v : {C * r * r, H / r, W / r}) out.push_back(v);
  return reshape(permute(reshape(x, s6), perm), out);
}

}  // namespace kiln
