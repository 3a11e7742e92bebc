// ONNX converters for constants, shapes and indexing: Constant, Shape, Reshape, Slice, Gather,
// Concat, Split, Expand, Tile, Range, Trilu, CumSum, TopK, OneHot, Einsum, ... Sizes and index
// lists these ops take as inputs must be known at import (constants or static shapes).
#include <algorithm>
#include <cmath>
#include <optional>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

using Ints_ = std::vector<int64_t>;

int64_t static_size(const NodeIn& n, const Tensor& x, int64_t d) {
  if (x.size(d) < 0) n.fail("needs the static size of dim ", d, " of ", x.shape());
  return x.size(d);
}

Tensor int64_vec(const std::vector<int64_t>& v) {
  Tensor t = empty(Shape{static_cast<int64_t>(v.size())}, Int64);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return t;
}

KILN_ONNX_OP(Constant) {
  if (Tensor t = n.t("value"); t.defined()) return TL{t};
  if (n.has("value_float")) return TL{scalar_tensor(n.f("value_float", 0), Float32)};
  if (n.has("value_int")) return TL{scalar_tensor(static_cast<double>(n.i("value_int", 0)), Int64)};
  if (n.has("value_floats")) {
    auto v = n.floats("value_floats");
    Tensor t = empty(Shape{static_cast<int64_t>(v.size())}, Float32);
    std::transform(v.begin(), v.end(), t.data_ptr<float>(), [](double x) { return float(x); });
    return TL{t};
  }
  if (n.has("value_ints")) return TL{int64_vec(n.ints("value_ints"))};
  n.fail("only value, value_float(s) and value_int(s) are supported");
}

KILN_ONNX_OP(Shape) {
  const Tensor& x = n.req(0);
  int64_t r = x.dim();
  int64_t start = n.i("start", 0), end = n.i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> v;
  for (int64_t d = start; d < end; ++d) v.push_back(static_size(n, x, d));
  return TL{int64_vec(v)};
}

KILN_ONNX_OP(Size) {
  const Tensor& x = n.req(0);
  if (!x.shape().is_static()) n.fail("needs a static shape, got ", x.shape());
  return TL{scalar_tensor(static_cast<double>(x.numel()), Int64)};
}

KILN_ONNX_OP(Reshape) {
  const Tensor& x = n.req(0);
  std::vector<int64_t> s = n.opset < 5 ? n.ints("shape") : const_ints(n, 1, "shape");
  const bool allowzero = n.i("allowzero", 0) != 0;
  int64_t infer = -1;
  for (size_t d = 0; d < s.size(); ++d) {
    if (s[d] == 0 && !allowzero) {
      if (static_cast<int64_t>(d) >= x.dim())
        n.fail("shape ", ints_str(s), " copies dim ", d, " of ", x.shape());
      s[d] = x.size(static_cast<int64_t>(d));
    }
    if (s[d] == -1) {
      if (infer >= 0) n.fail("shape ", ints_str(s), " has two -1");
      infer = static_cast<int64_t>(d);
    } else if (s[d] < -1) {
      n.fail("shape ", ints_str(s), " has a negative size");
    }
  }
  if (infer >= 0 && x.shape().is_static()) {
    int64_t known = 1;
    for (size_t d = 0; d < s.size(); ++d)
      if (static_cast<int64_t>(d) != infer) known *= s[d];
    if (known == 0 || x.numel() % known != 0)
      n.fail("cannot reshape ", x.shape(), " to ", ints_str(s));
    s[infer] = x.numel() / known;
  }
  if (x.is_concrete()) charge_fold(n, 0);
  return TL{reshape(x, Shape(s))};
}

KILN_ONNX_OP(Flatten) {
  const Tensor& x = n.req(0);
  const int64_t r = x.dim();
  int64_t axis = n.i("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) n.fail("axis ", n.i("axis", 1), " out of range for ", x.shape());
  if (x.shape().is_static()) {
    int64_t a = 1, b = 1;
    for (int64_t d = 0; d < r; ++d) (d < axis ? a : b) *= x.size(d);
    return TL{reshape(x, Shape{a, b})};
  }
  Tensor y = axis < r ? flatten(x, axis, -1) : unsqueeze(x, r);
  y = axis > 0 ? flatten(y, 0, axis - 1) : unsqueeze(y, 0);
  return TL{y};
}

KILN_ONNX_OP(Transpose) {
  const Tensor& x = n.req(0);
  std::vector<int64_t> perm = n.ints("perm");
  if (perm.empty())
    for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
  return TL{permute(x, perm)};
}

std::vector<int64_t> axes_arg(NodeIn& n, size_t input) {
  if (n.has("axes")) return n.ints("axes");
  if (n.has_input(input)) return const_ints(n, input, "axes");
  return {};
}

KILN_ONNX_OP(Squeeze) {
  Tensor x = n.req(0);
  std::vector<int64_t> axes = axes_arg(n, 1);
  if (axes.empty()) return TL{squeeze(x)};
  for (auto& a : axes) a = wrap_dim(a, x.dim(), kOp);
  std::sort(axes.rbegin(), axes.rend());
  for (int64_t a : axes) {
    if (x.size(a) != 1) n.fail("dim ", a, " of ", x.shape(), " is not 1");
    x = squeeze(x, a);
  }
  return TL{x};
}

KILN_ONNX_OP(Unsqueeze) {
  Tensor x = n.req(0);
  std::vector<int64_t> axes = axes_arg(n, 1);
  const int64_t out_rank = x.dim() + static_cast<int64_t>(axes.size());
  for (auto& a : axes) a = wrap_dim(a, out_rank, kOp);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) n.fail("repeated axes");
  for (int64_t a : axes) x = unsqueeze(x, a);
  return TL{x};
}

KILN_ONNX_OP(Concat) {
  std::vector<Tensor> xs;
  for (size_t k = 0; k < n.in.size(); ++k) xs.push_back(n.req(k));
  if (xs.empty()) n.fail("no inputs");
  const int64_t axis = wrap_dim(n.req_i("axis"), xs[0].dim(), kOp);
  return TL{cat(xs, axis)};
}

KILN_ONNX_OP(Split) {
  const Tensor& x = n.req(0);
  const int64_t axis = wrap_dim(n.i("axis", 0), x.dim(), kOp);
  std::vector<int64_t> sizes = n.has("split")   ? n.ints("split")
                               : n.has_input(1) ? const_ints(n, 1, "split")
                                                : std::vector<int64_t>{};
  const int64_t outs = n.proto.output_size();
  if (sizes.empty()) {
    const int64_t d = static_size(n, x, axis);
    if (outs <= 0) n.fail("no outputs");
    const int64_t piece = (d + outs - 1) / outs;  // the last piece may be smaller (opset 18)
    for (int64_t k = 0; k < outs; ++k)
      sizes.push_back(std::max<int64_t>(0, std::min(piece, d - k * piece)));
  }
  if (static_cast<int64_t>(sizes.size()) != outs)
    n.fail(sizes.size(), " split sizes for ", outs, " outputs");
  return split(x, sizes, axis);
}

// Slice with ONNX's clamping; a negative step walks a flipped view.
Tensor slice_axis(const NodeIn& n, const Tensor& x, int64_t axis, int64_t start, int64_t end,
                  int64_t step) {
  const int64_t d = static_size(n, x, axis);
  if (step == 0) n.fail("step 0");
  if (step > 0) {
    if (start < 0) start += d;
    if (end < 0) end += d;
    start = std::clamp<int64_t>(start, 0, d);
    end = std::clamp<int64_t>(end, 0, d);
    if (end < start) end = start;
    return slice(x, axis, start, end, step);
  }
  if (start < 0) start += d;
  if (end < 0 && end > std::numeric_limits<int64_t>::min() / 2) end += d;
  start = std::clamp<int64_t>(start, 0, d - 1);
  end = std::clamp<int64_t>(end, -1, d - 1);
  const int64_t count = start > end ? (start - end - step - 1) / -step : 0;
  Tensor f = flip(x, {axis});
  const int64_t s2 = d - 1 - start;
  return slice(f, axis, s2, count == 0 ? s2 : s2 + (count - 1) * -step + 1, -step);
}

KILN_ONNX_OP(Slice) {
  const Tensor& x = n.req(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset < 10) {
    starts = n.ints("starts");
    ends = n.ints("ends");
    axes = n.ints("axes");
  } else {
    starts = const_ints(n, 1, "starts");
    ends = const_ints(n, 2, "ends");
    if (n.has_input(3)) axes = const_ints(n, 3, "axes");
    if (n.has_input(4)) steps = const_ints(n, 4, "steps");
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    n.fail("starts, ends, axes and steps differ in length");
  Tensor y = x;
  for (size_t k = 0; k < starts.size(); ++k)
    y = slice_axis(n, y, wrap_dim(axes[k], x.dim(), kOp), starts[k], ends[k], steps[k]);
  return TL{y};
}

// Negative indices count from the end of `dim` (Gather, GatherElements, ScatterElements).
Tensor wrap_index(const NodeIn& n, const Tensor& idx, const Tensor& x, int64_t dim) {
  Tensor i = cast(idx, Int64);
  const int64_t d = static_size(n, x, dim);
  return where(lt(i, 0), add(i, d), i);
}

KILN_ONNX_OP(Gather) {
  const Tensor &x = n.req(0), &idx = n.req(1);
  const int64_t axis = wrap_dim(n.i("axis", 0), x.dim(), kOp);
  Tensor i = wrap_index(n, idx, x, axis);
  Tensor flat = index_select(x, axis, reshape(i, Shape{-1}));
  Shape out;
  for (int64_t d = 0; d < axis; ++d) out.push_back(x.size(d));
  for (int64_t d = 0; d < idx.dim(); ++d) out.push_back(idx.size(d));
  for (int64_t d = axis + 1; d < x.dim(); ++d) out.push_back(x.size(d));
  return TL{reshape(flat, out)};
}

KILN_ONNX_OP(GatherElements) {
  const Tensor &x = n.req(0), &idx = n.req(1);
  const int64_t axis = wrap_dim(n.i("axis", 0), x.dim(), kOp);
  return TL{gather(x, axis, wrap_index(n, idx, x, axis))};
}

KILN_ONNX_OP(Expand) {
  const Tensor& x = n.req(0);
  std::vector<int64_t> s = const_ints(n, 1, "shape");
  Shape out = broadcast_shapes(x.shape(), Shape(s), kOp);
  check_result_size(n, out);
  if (x.is_concrete()) charge_fold(n, out.numel());
  return TL{contiguous(expand(x, out))};
}

KILN_ONNX_OP(Tile) {
  const Tensor& x = n.req(0);
  std::vector<int64_t> reps = const_ints(n, 1, "repeats");
  if (static_cast<int64_t>(reps.size()) != x.dim())
    n.fail("repeats ", ints_str(reps), " for ", x.shape());
  for (int64_t r : reps)
    if (r < 0) n.fail("negative repeat ", r);
  {
    Shape grown = x.shape();
    for (size_t d = 0; d < reps.size(); ++d)
      if (grown[d] >= 0) {
        if (grown[d] != 0 && reps[d] > (int64_t(1) << 40) / grown[d]) n.fail("repeats too large");
        grown[d] *= reps[d];
      }
    check_result_size(n, grown);
  }
  if (x.is_concrete()) {
    int64_t total = x.numel();
    for (int64_t r : reps) total = r == 0 ? 0 : (total > (int64_t(1) << 40) / r ? -1 : total * r);
    charge_fold(n, total);
  }
  return TL{repeat(x, reps)};
}

KILN_ONNX_OP(ConstantOfShape) {
  std::vector<int64_t> s = const_ints(n, 0, "shape");
  Tensor v = n.t("value");
  DType dt = Float32;
  double val = 0;
  if (v.defined()) {
    if (v.numel() != 1) n.fail("value must hold one element, got ", v.shape());
    dt = v.dtype();
    val = v.to_vector<double>()[0];
  }
  int64_t total = 1;
  for (int64_t d : s) {
    if (d < 0) n.fail("negative size in ", ints_str(s));
    total = d == 0 ? 0 : (total > (int64_t(1) << 40) / d ? -1 : total * d);
  }
  charge_fold(n, total);
  return TL{full(Shape(s), val, dt)};
}

KILN_ONNX_OP(Range) {
  for (size_t k = 0; k < 3; ++k)
    if (!n.req(k).is_concrete() || n.in[k].numel() != 1)
      n.fail("start, limit and delta must be scalars known at import");
  const DType dt = n.in[0].dtype();
  const double start = n.in[0].to_vector<double>()[0], limit = n.in[1].to_vector<double>()[0],
               delta = n.in[2].to_vector<double>()[0];
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    n.fail("start ", start, ", limit ", limit, ", delta ", delta);
  const double cnt = std::max(0.0, std::ceil((limit - start) / delta));
  if (cnt > 1e15) n.fail(cnt, " elements");
  charge_fold(n, static_cast<int64_t>(cnt));
  Tensor t = empty(Shape{static_cast<int64_t>(cnt)}, dt);
  KILN_DISPATCH_ALL(dt, kOp, [&] {
    auto* p = t.data_ptr<scalar_t>();
    if constexpr (std::is_integral_v<scalar_t> && !std::is_same_v<scalar_t, bool>) {
      const auto s = static_cast<scalar_t>(start), dl = static_cast<scalar_t>(delta);
      for (int64_t k = 0; k < static_cast<int64_t>(cnt); ++k)
        p[k] = static_cast<scalar_t>(s + k * dl);
    } else {
      // Accumulated in the type, as the reference does, so float results match it.
      scalar_t v = static_cast<scalar_t>(start);
      for (int64_t k = 0; k < static_cast<int64_t>(cnt);
           ++k, v = static_cast<scalar_t>(v + static_cast<scalar_t>(delta)))
        p[k] = v;
    }
  });
  return TL{t};
}

KILN_ONNX_OP(Trilu) {
  const Tensor& x = n.req(0);
  int64_t k = 0;
  if (n.has_input(1)) {
    auto v = const_ints(n, 1, "k");
    if (v.size() != 1) n.fail("k must hold one value");
    k = v[0];
  }
  if (x.dim() < 2) n.fail("needs rank >= 2, got ", x.shape());
  // Kiln's tril/triu take int offsets; clamp far-out diagonals so nothing overflows.
  k = std::clamp<int64_t>(k, -(int64_t(1) << 40), int64_t(1) << 40);
  return TL{n.i("upper", 1) != 0 ? triu(x, k) : tril(x, k)};
}

KILN_ONNX_OP(CumSum) {
  const Tensor& x = n.req(0);
  auto ax = const_ints(n, 1, "axis");
  if (ax.size() != 1) n.fail("axis must hold one value");
  const int64_t axis = wrap_dim(ax[0], x.dim(), kOp);
  const bool rev = n.i("reverse", 0) != 0;
  Tensor c = cast(cumsum(x, axis, rev), x.dtype());
  if (n.i("exclusive", 0) != 0) {
    // Shifted by one along the axis (exact, unlike c - x in floating point).
    const int64_t d = static_size(n, x, axis);
    Shape zs = x.shape();
    zs[axis] = 1;
    charge_fold(n, static_numel(zs));
    Tensor z = zeros(zs, x.dtype());
    c = rev ? cat({slice(c, axis, 1, d), z}, axis) : cat({z, slice(c, axis, 0, d - 1)}, axis);
  }
  return TL{c};
}

KILN_ONNX_OP(TopK) {
  const Tensor& x = n.req(0);
  int64_t k;
  if (n.opset < 10) {
    k = n.req_i("k");
  } else {
    auto v = const_ints(n, 1, "K");
    if (v.size() != 1) n.fail("K must hold one value");
    k = v[0];
  }
  const int64_t axis = wrap_dim(n.i("axis", -1), x.dim(), kOp);
  auto [vals, idx] = topk(x, k, axis, n.i("largest", 1) != 0);
  return TL{vals, idx};
}

KILN_ONNX_OP(OneHot) {
  const Tensor &ind = n.req(0), &vals = n.req(2);
  auto dv = n.req(1);
  if (!dv.is_concrete() || dv.numel() != 1) n.fail("depth must be a scalar known at import");
  const double depth_d = dv.to_vector<double>()[0];
  if (!(depth_d >= 1 && depth_d < 1e9)) n.fail("depth ", depth_d);
  const auto depth = static_cast<int64_t>(depth_d);
  charge_fold(n, depth);
  const int64_t axis = wrap_dim(n.i("axis", -1), ind.dim() + 1, kOp);
  Tensor i = cast(ind, Int64);
  i = where(lt(i, 0), add(i, depth), i);
  Shape rs(ind.dim() + 1, 1);
  rs[axis] = depth;
  Tensor r = reshape(arange(0, static_cast<double>(depth)), rs);
  Tensor mask = eq(unsqueeze(i, axis), r);
  if (vals.numel() != 2) n.fail("values must hold [off, on]");
  return TL{
      where(mask, slice(vals, 0, 1, 2).reshape(Shape{}), slice(vals, 0, 0, 1).reshape(Shape{}))};
}

KILN_ONNX_OP(EyeLike) {
  const Tensor& x = n.req(0);
  if (x.dim() != 2 || !x.shape().is_static()) n.fail("needs a static 2-D input, got ", x.shape());
  const DType dt = n.has("dtype")
                       ? dtype_from_onnx(static_cast<int32_t>(n.i("dtype", 1)), "EyeLike dtype")
                       : x.dtype();
  const int64_t k = n.i("k", 0), r = x.size(0), c = x.size(1);
  charge_fold(n, r * c);
  Tensor t = zeros(Shape{r, c}, Float64);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < r; ++i)
    if (i + k >= 0 && i + k < c) p[i * c + i + k] = 1;
  return TL{cast(t, dt)};
}

KILN_ONNX_OP(Einsum) {
  std::string eq = n.s("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  std::vector<Tensor> xs;
  for (size_t k = 0; k < n.in.size(); ++k) xs.push_back(n.req(k));
  return TL{einsum(eq, xs)};
}

KILN_ONNX_OP(DepthToSpace) {
  const Tensor& x = n.req(0);
  if (x.dim() != 4 || !x.shape().is_static()) n.fail("needs a static 4-D input, got ", x.shape());
  const int64_t b = n.req_i("blocksize"), N = x.size(0), C = x.size(1), H = x.size(2),
                W = x.size(3);
  if (b <= 0 || C % (b * b) != 0) n.fail("blocksize ", b, " for ", x.shape());
  const int64_t c = C / (b * b);
  Tensor y;
  if (n.s("mode", "DCR") == "DCR")
    y = permute(reshape(x, Shape{N, b, b, c, H, W}), {0, 3, 4, 1, 5, 2});
  else
    y = permute(reshape(x, Shape{N, c, b, b, H, W}), {0, 1, 4, 2, 5, 3});
  return TL{reshape(contiguous(y), Shape{N, c, H * b, W * b})};
}

KILN_ONNX_OP(SpaceToDepth) {
  const Tensor& x = n.req(0);
  if (x.dim() != 4 || !x.shape().is_static()) n.fail("needs a static 4-D input, got ", x.shape());
  const int64_t b = n.req_i("blocksize"), N = x.size(0), C = x.size(1), H = x.size(2),
                W = x.size(3);
  if (b <= 0 || H % b != 0 || W % b != 0) n.fail("blocksize ", b, " for ", x.shape());
  Tensor y = permute(reshape(x, Shape{N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
  return TL{reshape(contiguous(y), Shape{N, C * b * b, H / b, W / b})};
}

KILN_ONNX_OP(Compress) {
  const Tensor &x = n.req(0), &c = n.req(1);
  if (!c.is_concrete()) n.fail("condition must be known at import (the output size depends on it)");
  auto keep = c.to_vector<int64_t>();
  std::vector<int64_t> idx;
  for (size_t k = 0; k < keep.size(); ++k)
    if (keep[k]) idx.push_back(static_cast<int64_t>(k));
  if (!n.has("axis")) return TL{index_select(reshape(x, Shape{-1}), 0, int64_vec(idx))};
  return TL{index_select(x, wrap_dim(n.i("axis", 0), x.dim(), kOp), int64_vec(idx))};
}

KILN_ONNX_OP(NonZero) {
  const Tensor& x = n.req(0);
  if (!x.is_concrete()) n.fail("input must be known at import (the output size depends on it)");
  return TL{transpose(nonzero(x), 0, 1)};
}

// Unique: Kiln's unique_rows, whose distinct count a graph reads at run.
KILN_ONNX_OP(Unique) {
  const Tensor& x = n.req(0);
  std::optional<int64_t> axis;
  if (n.has("axis")) {
    const int64_t a = n.i("axis", 0);
    if (a < -x.dim() || a >= x.dim()) n.fail("axis ", a, " for X ", x.shape());
    axis = a < 0 ? a + x.dim() : a;
  }
  UniqueRows u = unique_rows(x, axis, n.i("sorted", 1) != 0);
  return TL{u.values, u.indices, u.inverse, u.counts};
}

}  // namespace
}  // namespace kiln::onnx::detail

namespace kiln::onnx::detail {
namespace {

KILN_ONNX_OP(Pad) {
  Tensor x = n.req(0);
  const std::string mode = n.s("mode", "constant");
  Ints_ p;
  double value = 0;
  if (n.opset < 11) {
    p = n.ints("pads");
    value = n.f("value", 0.0);
  } else {
    p = const_ints(n, 1, "pads");
    if (n.has_input(2)) {
      const Tensor& v = n.in[2];
      if (!v.is_concrete() || v.numel() != 1)
        n.fail("constant_value must be a scalar known at import");
      value = v.to_vector<double>()[0];
    }
  }
  const int64_t r = x.dim();
  if (static_cast<int64_t>(p.size()) != 2 * r)
    n.fail("pads needs ", 2 * r, " values, got ", p.size());
  {
    Shape grown = x.shape();
    for (int64_t d = 0; d < r; ++d)
      if (grown[d] >= 0) grown[d] = std::max<int64_t>(0, grown[d] + p[d] + p[r + d]);
    check_result_size(n, grown);
  }
  if (mode == "constant") {
    Ints_ tp;
    for (int64_t d = r - 1; d >= 0; --d) tp.push_back(p[d]), tp.push_back(p[r + d]);
    if (x.is_concrete()) {
      int64_t total = 1;
      for (int64_t d = 0; d < r; ++d) total *= std::max<int64_t>(0, x.size(d) + p[d] + p[r + d]);
      charge_fold(n, total);
    }
    return TL{pad(x, tp, value)};
  }
  if (mode != "reflect" && mode != "edge") n.fail("unknown mode '", mode, "'");
  for (int64_t d = 0; d < r; ++d) {
    int64_t b = p[d], e = p[r + d];
    int64_t size = static_size(n, x, d);
    if (b < 0) x = slice(x, d, -b, size), size += b, b = 0;
    if (e < 0) x = slice(x, d, 0, size + e), size += e, e = 0;
    if (b == 0 && e == 0) continue;
    if (size <= 0) n.fail("cannot ", mode, "-pad an empty dim");
    if (mode == "reflect" && (b >= size || e >= size))
      n.fail("reflect pads must be smaller than the dim");
    if (b > (int64_t(1) << 20) || e > (int64_t(1) << 20)) n.fail("pads too large");
    std::vector<Tensor> parts;
    auto edge = [&](int64_t at, int64_t count) {
      Shape s = x.shape();
      s[d] = count;
      return contiguous(expand(slice(x, d, at, at + 1), s));
    };
    if (b > 0) parts.push_back(mode == "edge" ? edge(0, b) : flip(slice(x, d, 1, b + 1), {d}));
    parts.push_back(x);
    if (e > 0)
      parts.push_back(mode == "edge" ? edge(size - 1, e)
                                     : flip(slice(x, d, size - 1 - e, size - 1), {d}));
    if (x.is_concrete()) {
      Shape grown = x.shape();
      grown[d] += b + e;
      charge_fold(n, static_numel(grown));
    }
    x = cat(parts, d);
  }
  return TL{x};
}

KILN_ONNX_OP(GatherND) {
  const Tensor &x = n.req(0), &idx = n.req(1);
  const int64_t bd = n.i("batch_dims", 0);
  if (!idx.shape().is_static() || !x.shape().is_static()) n.fail("needs static shapes");
  const int64_t q = idx.dim(), k = idx.size(q - 1);
  if (q < 1 || bd < 0 || bd >= q || k < 1 || bd + k > x.dim())
    n.fail("bad shapes ", x.shape(), " ", idx.shape());
  // Flattened positions: batch index times the batch stride plus the indexed offset.
  Ints_ strides(x.dim(), 1);
  for (int64_t d = x.dim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * x.size(d + 1);
  int64_t batch = 1;
  for (int64_t d = 0; d < bd; ++d) batch *= x.size(d);
  int64_t inner = 1;
  for (int64_t d = bd + k; d < x.dim(); ++d) inner *= x.size(d);
  charge_fold(n, batch);
  Tensor i = cast(idx, Int64);
  Tensor off = zeros(Shape{}, Int64);
  for (int64_t j = 0; j < k; ++j) {
    Tensor ij = squeeze(slice(i, q - 1, j, j + 1), q - 1);
    ij = where(lt(ij, 0), add(ij, x.size(bd + j)), ij);
    off = add(off, mul(ij, strides[bd + j] / inner));
  }
  // off: [b..., rest...] in units of `inner`; add the batch offsets.
  Shape bs;
  for (int64_t d = 0; d < bd; ++d) bs.push_back(idx.size(d));
  for (int64_t d = bd; d < q - 1; ++d) bs.push_back(1);
  if (bd > 0) {
    Tensor b = reshape(mul(arange(0, static_cast<double>(batch)), strides[bd - 1] / inner), bs);
    off = add(off, b);
  }
  Tensor rows = reshape(x, Shape{-1, inner});
  Tensor g = index_select(rows, 0, reshape(off, Shape{-1}));
  Shape out;
  for (int64_t d = 0; d < q - 1; ++d) out.push_back(idx.size(d));
  for (int64_t d = bd + k; d < x.dim(); ++d) out.push_back(x.size(d));
  return TL{reshape(g, out)};
}

KILN_ONNX_OP(ReverseSequence) {
  const Tensor &x = n.req(0), &lens = n.req(1);
  const int64_t ba = n.i("batch_axis", 1), ta = n.i("time_axis", 0);
  if (!lens.is_concrete()) n.fail("sequence_lens must be known at import");
  if (x.dim() < 2 || (ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta) n.fail("bad axes");
  auto l = lens.to_vector<int64_t>();
  const int64_t B = static_size(n, x, ba), T = static_size(n, x, ta);
  if (static_cast<int64_t>(l.size()) != B) n.fail("sequence_lens needs ", B, " values");
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = std::clamp<int64_t>(l[b], 0, T);
    Tensor r = slice(x, ba, b, b + 1);
    std::vector<Tensor> parts;
    if (len > 0) parts.push_back(flip(slice(r, ta, 0, len), {ta}));
    if (len < T) parts.push_back(slice(r, ta, len, T));
    rows.push_back(parts.size() == 1 ? parts[0] : cat(parts, ta));
  }
  return TL{cat(rows, ba)};
}

// The window functions (opset 17): periodic by default; a size known at import folds.
TL window_fn(NodeIn& n, double a0, double a1, double a2) {
  auto sz = const_ints(n, 0, "size");
  if (sz.size() != 1 || sz[0] < 0) n.fail("size must be one non-negative value");
  charge_fold(n, sz[0]);
  const int64_t N = sz[0];
  const double denom = n.i("periodic", 1) ? static_cast<double>(N) : static_cast<double>(N - 1);
  Tensor t = empty(Shape{N}, Float64);
  double* p = t.data_ptr<double>();
  for (int64_t k = 0; k < N; ++k)
    p[k] = a0 - a1 * std::cos(2 * M_PI * k / denom) + a2 * std::cos(4 * M_PI * k / denom);
  const DType dt =
      dtype_from_onnx(static_cast<int32_t>(n.i("output_datatype", 1)), "output_datatype");
  return TL{cast(t, dt)};
}
KILN_ONNX_OP(HannWindow) { return window_fn(n, 0.5, 0.5, 0); }
KILN_ONNX_OP(HammingWindow) { return window_fn(n, 25.0 / 46, 21.0 / 46, 0); }
KILN_ONNX_OP(BlackmanWindow) { return window_fn(n, 0.42, 0.5, 0.08); }

}  // namespace
}  // namespace kiln::onnx::detail
