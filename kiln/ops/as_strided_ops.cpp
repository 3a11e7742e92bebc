// as_strided (a view at explicit sizes, strides and offset) and its inverse as_strided_scatter
// (src written into a copy of base at that region), which pad and several gradients (select,
// diagonal, unfold) use to place a result inside a larger tensor.
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

// ---- as_strided / as_strided_scatter ---------------------------------------------------------
// A geometry (sizes, element strides, offset) over the row-major elements of a contiguous base:
// the general form of every view, which in-place writes through views need (the node that gives
// a base its new history, and the view's identity after it). Positions must not overlap, so the
// gradient of a view is a scatter into zeros (torch's as_strided allows overlap and pays for it).

struct Geometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

Geometry geometry_of(const char* op, const Attrs& a) {
  Geometry g{a.ints(0), a.ints(1), a.i(2)};
  if (g.sizes.size() != g.strides.size())
    fail(op, "sizes ", ints_str(g.sizes), " and strides ", ints_str(g.strides),
         " must have one length");
  if (g.offset < 0) fail(op, "offset must be >= 0, got ", g.offset);
  for (size_t d = 0; d < g.sizes.size(); ++d)
    if (g.sizes[d] < 0 || g.strides[d] < 0)
      fail(op, "sizes and strides must be >= 0, got sizes ", ints_str(g.sizes), ", strides ",
           ints_str(g.strides));
  return g;
}

// Positions within a base of `numel` elements (-1: unknown), none reached twice.
void check_geometry(const char* op, const Geometry& g, const Shape& base) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims longer than 1
  bool empty = false;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    empty = empty || g.sizes[d] == 0;
    if (g.sizes[d] > 1) dims.emplace_back(g.strides[d], g.sizes[d]);
  }
  if (empty) return;
  std::sort(dims.begin(), dims.end());
  int64_t last = 0;  // largest position reached by the dims so far, relative to the offset
  for (const auto& [st, sz] : dims) {
    if (st <= last)
      fail(op, "sizes ", ints_str(g.sizes), " with strides ", ints_str(g.strides),
           " reach some position twice (views here must not overlap)");
    int64_t span = 0;
    if (__builtin_mul_overflow(sz - 1, st, &span) || __builtin_add_overflow(last, span, &last))
      fail(op, "sizes ", ints_str(g.sizes), " with strides ", ints_str(g.strides),
           " overflow int64");
  }
  const int64_t n = base.numel();
  int64_t end = 0;
  if (n >= 0 && (__builtin_add_overflow(g.offset, last, &end) || end >= n))
    fail(op, "sizes ", ints_str(g.sizes), ", strides ", ints_str(g.strides), " and offset ",
         g.offset, " reach past the base's ", n, " elements (shape ", base, ")");
}

// The region of a contiguous tensor a geometry names.
Tensor region(const Tensor& t, const Geometry& g) {
  return make_view(t, Shape(g.sizes), Strides(g.strides.begin(), g.strides.end()),
                   t.offset() + g.offset);
}

const OpDef& kAsStridedScatter = def_op(
    {.name = "as_strided_scatter",
     .num_inputs = 2,
     .attr_names = {"sizes", "strides", "offset"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "as_strided_scatter";
           const Geometry g = geometry_of(op, a);
           check_geometry(op, g, in[0].shape());
           if (in[1].dtype() != in[0].dtype())
             fail(op, "src dtype ", in[1].dtype(), " must be the base's ", in[0].dtype());
           const Shape want(g.sizes);
           bool fits = in[1].dim() == want.rank();
           for (int64_t d = 0; fits && d < want.rank(); ++d)
             fits = in[1].shape()[d] < 0 || in[1].shape()[d] == want[d];
           if (!fits) fail(op, "src shape ", in[1].shape(), " must be the sizes ", want);
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Geometry g = geometry_of("as_strided_scatter", a);
           op_util::copy_cast_kernel(in[0], out[0]);
           Tensor dst = region(out[0], g);
           op_util::copy_cast_kernel(in[1], dst);
         },
     // out = base outside the region, src inside: the base's gradient is g with the region
     // zeroed, src's is the region of g.
     .grad =
         [](const GradCtx& c) {
           const Attrs& a = c.attrs;
           Tensor gb, gs;
           if (c.need(0))
             gb = as_strided_scatter(c.g(), zeros_like(c.in(1)), a.ints(0), a.ints(1), a.i(2));
           if (c.need(1)) gs = as_strided(contiguous(c.g()), a.ints(0), a.ints(1), a.i(2));
           return TensorList{gb, gs};
         },
     .doc = "a copy of base with src written into the region as_strided(base, ...) names"});

const OpDef& kAsStrided = def_op(
    {.name = "as_strided",
     .attr_names = {"sizes", "strides", "offset"},
     .traits = kView,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const Geometry g = geometry_of("as_strided", a);
           check_geometry("as_strided", g, in[0].shape());
           return one(in[0].dtype(), Shape(g.sizes));
         },
     .view =
         [](std::span<const Tensor> in, const Attrs& a) {
           const Geometry g = geometry_of("as_strided", a);
           check_geometry("as_strided", g, in[0].shape());
           if (!in[0].is_contiguous())
             fail("as_strided", "the base must be contiguous, got shape ", in[0].shape(),
                  " with strides ",
                  ints_str(std::vector<int64_t>(in[0].strides().begin(), in[0].strides().end())));
           return TensorList{region(in[0], g)};
         },
     // The region's gradient scattered into zeros of the base's shape (positions never repeat).
     // Reads only the base's shape and dtype: in-place writes record it on an identity-only base.
     .grad =
         [](const GradCtx& c) {
           const Attrs& a = c.attrs;
           Tensor z = zeros_like(c.in(0));
           if (z.dtype() != c.g().dtype()) z = cast(z, c.g().dtype());
           return TensorList{as_strided_scatter(z, c.g(), a.ints(0), a.ints(1), a.i(2))};
         }});

}  // namespace

Tensor as_strided(const Tensor& a, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides, int64_t offset) {
  return call1(kAsStrided, {a}, {sizes, strides, offset});
}
Tensor detail::as_strided_scatter(const Tensor& base, const Tensor& src,
                                  const std::vector<int64_t>& sizes,
                                  const std::vector<int64_t>& strides, int64_t offset) {
  return call1(kAsStridedScatter, {base, src}, {sizes, strides, offset});
}

}  // namespace kiln
