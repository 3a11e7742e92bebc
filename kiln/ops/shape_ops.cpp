// Shape family: views (reshape, transpose, permute, slice, expand, squeeze, unsqueeze,
// as_strided) that alias their input, and copies (contiguous, clone, cast, slice_grad,
// as_strided_scatter), with their wrappers and Tensor's shape methods. Composite shape functions
// (pad, flip, roll, repeat, movedim, tile, ...) are in shape_compose.cpp, symbolic sizes in
// sym_ops.cpp, joining and splitting in join_ops.cpp, in-place writes in inplace_ops.cpp.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "kiln/kernels/cpu/cast.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

// Target sizes with -1s. One -1 is inferred from the element count (torch). Several can only
// come from a graph or a trace, where code wrote dynamic sizes (-1) into the target, as
// attention's reshape(t, {B, T, heads, dh}) does with B and T dynamic, or flatten of [?, 2, ?, 2]
// from dim 2 ([-1, 2, -1]): then the leading run of -1s keeps the input's sizes at those
// positions and at most one later -1 is inferred; the element counts must agree (at run time
// when a size is dynamic). Eagerly the wrapper refuses several -1s, as torch does.
Shape resolve_shape(const Shape& in, const std::vector<int64_t>& want, const char* op) {
  Shape out;
  int64_t known = 1, infer_at = -1;
  const int64_t anys = std::count(want.begin(), want.end(), int64_t(-1));
  int64_t lead = 0;  // with several -1s: how many lead the target (all of them)
  if (anys > 1) {
    while (lead < static_cast<int64_t>(want.size()) && want[static_cast<size_t>(lead)] == -1)
      ++lead;
    bool ok = anys - lead <= 1 && lead <= in.rank();
    // Building a graph (the input has dynamic dims) the run must stand over dynamic dims, and
    // without an inferred -1 the rest must match statically: otherwise a -1 meant "infer" could
    // be taken for "keep" and give another shape.
    if (ok && !in.is_static()) {
      for (int64_t i = 0; i < lead; ++i) ok = ok && in[i] < 0;
      if (ok && anys == lead) {
        int64_t rest_in = 1, rest_want = 1;
        for (int64_t i = lead; i < in.rank(); ++i)
          ok = ok && in[i] >= 0, rest_in *= std::max<int64_t>(in[i], 0);
        for (size_t i = static_cast<size_t>(lead); i < want.size(); ++i) rest_want *= want[i];
        ok = ok && rest_in == rest_want;
      }
    }
    if (!ok)
      fail(op, "only one dim can be -1 in target shape ", ints_str(want), " for input ", in,
           " (in a graph, a leading run of -1s keeps the input's dynamic sizes, and one more "
           "is inferred)");
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (static_cast<int64_t>(i) < lead) {
      const int64_t z = in[static_cast<int64_t>(i)];
      out.push_back(z);
      if (z < 0)
        known = -1;
      else if (known >= 0 && __builtin_mul_overflow(known, z, &known))
        fail(op, "target shape ", ints_str(want), " has more than 2^63 elements (input ", in, ")");
    } else if (want[i] == -1) {
      infer_at = static_cast<int64_t>(i);
      out.push_back(1);
    } else if (want[i] < 0) {
      fail(op, "invalid size ", want[i], " in target shape ", ints_str(want), " for input ", in);
    } else {
      // Checked: a count that wraps could match the input's ([2^62 + 16, 4] is 64 mod 2^64).
      if (known >= 0 && __builtin_mul_overflow(known, want[i], &known))
        fail(op, "target shape ", ints_str(want), " has more than 2^63 elements (input ", in, ")");
      out.push_back(want[i]);
    }
  }
  int64_t n = in.numel();
  if (n < 0 || known < 0) {  // dynamic input: keep -1 where inferred
    if (infer_at >= 0) out[infer_at] = -1;
    return out;
  }
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0)
      fail(op, "cannot reshape tensor of shape ", in, " (", n, " elements) into ", ints_str(want));
    out[infer_at] = n / known;
  } else if (known != n) {
    fail(op, "cannot reshape tensor of shape ", in, " (", n, " elements) into ", out, " (", known,
         " elements)");
  }
  return out;
}

// Strides for viewing t as `shape` without a copy; false if impossible (PyTorch's computeStride).
bool view_strides(const Tensor& t, const Shape& shape, Strides* out) {
  if (t.is_contiguous() || t.numel() == 0) {
    *out = contiguous_strides(shape);
    return true;
  }
  const Shape& os = t.shape();
  const Strides& ost = t.strides();
  Strides ns(shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base = ost[os.size() - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = os.rank() - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = ns;
  return true;
}

MetaList infer_reshape(std::span<const Tensor> in, const Attrs& a) {
  return one(in[0].dtype(), resolve_shape(in[0].shape(), a.ints(0), "reshape"));
}

TensorList view_reshape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape s = resolve_shape(x.shape(), a.ints(0), "reshape");
  Strides st;
  if (view_strides(x, s, &st)) return TensorList{make_view(x, s, st, x.offset())};
  Tensor c = raw_contiguous_copy(x);
  return TensorList{make_view(c, s, contiguous_strides(s), 0)};
}

std::vector<int64_t> perm_of(const Attrs& a, const Shape& shape, const char* op) {
  std::vector<int64_t> p = a.ints(0);
  int64_t rank = shape.rank();
  if (static_cast<int64_t>(p.size()) != rank)
    fail(op, "permutation ", ints_str(p), " has ", p.size(), " dims but the tensor has shape ",
         shape, " (rank ", rank, ")");
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (auto& d : p) {
    d = wrap_dim(d, shape, op);
    if (seen[d])
      fail(op, "dim ", d, " appears twice in the permutation ", ints_str(a.ints(0)), " for shape ",
           shape);
    seen[d] = true;
  }
  return p;
}

struct SliceArgs {
  int64_t dim, start, end, step, len;
};
SliceArgs slice_args(const Shape& s, const Attrs& a, const char* op = "slice") {
  if (s.rank() == 0) fail(op, "cannot slice a 0-d tensor");
  SliceArgs r;
  r.dim = wrap_dim(a.i(0), s, op);
  r.step = a.i(3);
  if (r.step <= 0) fail(op, "step must be positive, got ", r.step, " (shape ", s, ")");
  int64_t n = s[r.dim];
  auto clampi = [&](int64_t v) {
    if (v < 0) v += n;
    return std::min(std::max<int64_t>(v, 0), n);
  };
  r.start = clampi(a.i(1));
  r.end = clampi(a.i(2));
  r.len = r.end > r.start ? (r.end - r.start + r.step - 1) / r.step : 0;
  return r;
}

Shape squeezed(const Shape& s, const Attrs& a) {
  Shape out;
  // Whether a dynamic dim is 1 is known only at run time, and the result's rank depends on it.
  if (a.size() == 0 || a.i(0) == INT64_MIN) {
    for (auto d : s) {
      if (d < 0)
        fail("squeeze", "needs a static size: shape ", s,
             " has a dynamic dim, and whether it is 1 decides the result's rank (name the dims "
             "to squeeze; under jit the call is compiled for the concrete shape)");
      if (d != 1) out.push_back(d);
    }
    return out;
  }
  int64_t dim = wrap_dim(a.i(0), s, "squeeze");
  if (s[dim] < 0)
    fail("squeeze", "needs a static size: dim ", dim, " of shape ", s,
         " is dynamic, and whether it is 1 decides the result's rank (under jit the call is "
         "compiled for the concrete shape)");
  for (int64_t d = 0; d < s.rank(); ++d)
    if (d != dim || s[d] != 1) out.push_back(s[d]);
  return out;
}

const OpDef& kReshape =
    def_op({.name = "reshape",
            .attr_names = {"shape"},
            .traits = kView,
            .infer = infer_reshape,
            .view = view_reshape,
            // With dynamic dims the input's sizes are symbols (sym_size), not -1s.
            .grad = [](const GradCtx& c) {
              const Tensor& x = c.in(0);
              return TensorList{x.shape().is_static() ? reshape(c.g(), x.shape())
                                                      : reshape_symint(c.g(), sym_sizes(x))};
            }});

const OpDef& kTranspose =
    def_op({.name = "transpose",
            .attr_names = {"dim0", "dim1"},
            .traits = kView,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  Shape s = in[0].shape();
                  int64_t r = s.rank();
                  if (r == 0) return one(in[0].dtype(), s);
                  int64_t d0 = wrap_dim(a.i(0), in[0].shape(), "transpose");
                  int64_t d1 = wrap_dim(a.i(1), in[0].shape(), "transpose");
                  std::swap(s[d0], s[d1]);
                  return one(in[0].dtype(), s);
                },
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  const Tensor& x = in[0];
                  Shape s = x.shape();
                  Strides st = x.strides();
                  if (s.rank() > 0) {
                    int64_t d0 = wrap_dim(a.i(0), x.shape(), "transpose"),
                            d1 = wrap_dim(a.i(1), x.shape(), "transpose");
                    std::swap(s[d0], s[d1]);
                    std::swap(st[d0], st[d1]);
                  }
                  return TensorList{make_view(x, s, st, x.offset())};
                },
            .grad =
                [](const GradCtx& c) {
                  return TensorList{transpose(c.g(), c.attrs.i(0), c.attrs.i(1))};
                }});

const OpDef& kPermute = def_op({.name = "permute",
                                .attr_names = {"dims"},
                                .traits = kView,
                                .infer =
                                    [](std::span<const Tensor> in, const Attrs& a) {
                                      auto p = perm_of(a, in[0].shape(), "permute");
                                      Shape s;
                                      for (auto d : p) s.push_back(in[0].shape()[d]);
                                      return one(in[0].dtype(), s);
                                    },
                                .view =
                                    [](std::span<const Tensor> in, const Attrs& a) {
                                      const Tensor& x = in[0];
                                      auto p = perm_of(a, x.shape(), "permute");
                                      Shape s;
                                      Strides st;
                                      for (auto d : p) {
                                        s.push_back(x.shape()[d]);
                                        st.push_back(x.strides()[d]);
                                      }
                                      return TensorList{make_view(x, s, st, x.offset())};
                                    },
                                .grad =
                                    [](const GradCtx& c) {
                                      auto p = c.attrs.ints(0);
                                      int64_t r = c.in(0).dim();
                                      std::vector<int64_t> inv(p.size());
                                      for (size_t i = 0; i < p.size(); ++i)
                                        inv[wrap_dim(p[i], r, "permute")] = static_cast<int64_t>(i);
                                      return TensorList{permute(c.g(), inv)};
                                    }});

const OpDef& kSliceGrad = def_op(
    {.name = "slice_grad",
     // slice_grad(g; input_shape, ...) or slice_grad(g, like; [], ...): the second form
     // takes the sliced tensor's shape from `like` at run time (a dynamic dim).
     .num_inputs = -1,
     .attr_names = {"input_shape", "dim", "start", "end", "step"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           if (in.size() != 1 && in.size() != 2)
             fail("slice_grad", "expected 1 or 2 inputs (g[, like]), got ", in.size());
           if (in.size() == 2) {
             if (in[1].dim() != in[0].dim())
               fail("slice_grad", "gradient ", in[0].shape(), " and sliced tensor ", in[1].shape(),
                    " differ in rank");
             (void)slice_args(in[1].shape(), Attrs{a.i(1), a.i(2), a.i(3), a.i(4)}, "slice_grad");
             return one(in[0].dtype(), in[1].shape());
           }
           (void)slice_args(Shape(a.ints(0)), Attrs{a.i(1), a.i(2), a.i(3), a.i(4)}, "slice_grad");
           return one(in[0].dtype(), Shape(a.ints(0)));
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           Tensor& o = out[0];
           std::memset(o.raw_data(), 0, static_cast<size_t>(o.numel()) * o.element_size());
           Attrs sa{a.i(1), a.i(2), a.i(3), a.i(4)};
           SliceArgs r = slice_args(o.shape(), sa, "slice_grad");
           Shape vs = o.shape();
           vs[r.dim] = r.len;
           Strides st = o.strides();
           // From the output's own offset: in a bound Session plan it sits inside the
           // arena, not at the start of a storage of its own.
           int64_t off = o.offset() + r.start * st[r.dim];
           st[r.dim] *= r.step;
           // The gradient must be exactly the slice's shape (copying another shape
           // would read past it).
           if (in[0].shape() != vs)
             fail("slice_grad", "gradient of shape ", in[0].shape(),
                  " does not match the slice's shape ", vs, " (slice of ", o.shape(), " along dim ",
                  r.dim, ")");
           Tensor dst = make_view(o, vs, st, off);
           op_util::copy_cast_kernel(in[0], dst);
         },
     .grad =
         [](const GradCtx& c) {
           const Attrs& a = c.attrs;
           TensorList r(c.inputs.size());
           r[0] = slice(c.g(), a.i(1), a.i(2), a.i(3), a.i(4));
           return r;
         },
     .native_dtypes = kAllDTypes});

const OpDef& kSlice = def_op(
    {.name = "slice",
     .attr_names = {"dim", "start", "end", "step"},
     .traits = kView,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           SliceArgs r = slice_args(in[0].shape(), a);
           Shape s = in[0].shape();
           // Slicing a dynamic dim gives a dynamic length (known only when the size is).
           s[r.dim] = s[r.dim] < 0 ? Dim::any() : r.len;
           return one(in[0].dtype(), s);
         },
     .view =
         [](std::span<const Tensor> in, const Attrs& a) {
           const Tensor& x = in[0];
           SliceArgs r = slice_args(x.shape(), a);
           Shape s = x.shape();
           Strides st = x.strides();
           s[r.dim] = r.len;
           int64_t off = x.offset() + r.start * st[r.dim];
           st[r.dim] *= r.step;
           return TensorList{make_view(x, s, st, off)};
         },
     .grad =
         [](const GradCtx& c) {
           // With a dynamic dim the shape and the clamped bounds are known only at run
           // time: the input itself gives them to slice_grad then, and symbolic bounds
           // (attributes 1-3) become slice_grad's (2-4).
           if (!c.patches.empty()) {
             const Attrs& a = c.attrs;
             return TensorList{op_util::patched_again(
                 kSliceGrad, {c.g(), c.in(0)},
                 {std::vector<int64_t>{}, a.i(0), a.i(1), a.i(2), a.i(3)}, c, 1)[0]};
           }
           if (!c.in(0).shape().is_static()) {
             const Attrs& a = c.attrs;
             return TensorList{call1(kSliceGrad, {c.g(), c.in(0)},
                                     {std::vector<int64_t>{}, a.i(0), a.i(1), a.i(2), a.i(3)})};
           }
           SliceArgs r = slice_args(c.in(0).shape(), c.attrs);
           return TensorList{
               call1(kSliceGrad, {c.g()}, {c.in(0).shape().vec(), r.dim, r.start, r.end, r.step})};
         }});

// Target shape of expand with -1 resolved; checks it (run by inference and by the view, which
// the dispatcher calls without inference).
Shape expanded_shape(const Shape& s, const std::vector<int64_t>& want_in) {
  Shape want(want_in);
  if (want.rank() < s.rank())
    fail("expand", "cannot expand shape ", s, " to fewer dims ", ints_str(want_in));
  size_t off = want.size() - s.size();
  for (size_t d = 0; d < want.size(); ++d) {
    if (want[d] == -1) {
      if (d < off)
        fail("expand", "-1 is not allowed in a new leading dim: ", ints_str(want_in), " for shape ",
             s);
      want[d] = s[d - off];
    } else if (want[d] < 0) {
      fail("expand", "invalid size ", want[d], " in ", ints_str(want_in), " for shape ", s);
    }
    // A dynamic input dim must be 1 or the target size when the graph runs (the view checks).
    if (d >= off && s[d - off] >= 0 && s[d - off] != 1 && s[d - off] != want[d])
      fail("expand", "cannot expand shape ", s, " to ", ints_str(want_in), " (dim ", d, ")");
  }
  return want;
}

const OpDef& kExpand =
    def_op({.name = "expand",
            .attr_names = {"shape"},
            .traits = kView,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  return one(in[0].dtype(), expanded_shape(in[0].shape(), a.ints(0)));
                },
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  const Tensor& x = in[0];
                  Shape want = expanded_shape(x.shape(), a.ints(0));
                  size_t off = want.size() - x.shape().size();
                  Strides st(want.size(), 0);
                  for (size_t d = off; d < want.size(); ++d) {
                    int64_t sd = x.shape()[d - off];
                    st[d] = (sd == 1 && want[d] != 1) ? 0 : x.strides()[d - off];
                  }
                  return TensorList{make_view(x, want, st, x.offset())};
                },
            .grad = [](const GradCtx& c) { return TensorList{sum_to(c.g(), c.in(0).shape())}; }});

// expand to another tensor's run-time shape (so gradients of broadcasts work with dynamic dims).
const OpDef& kExpandAs = def_op(
    {.name = "expand_as",
     .num_inputs = 2,
     .traits = kView,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           const Shape& s = in[0].shape();
           const Shape& want = in[1].shape();
           if (s.rank() > want.rank()) fail("expand_as", "cannot expand shape ", s, " to ", want);
           size_t off = want.size() - s.size();
           for (size_t d = 0; d < s.size(); ++d)
             if (s[d] != 1 && s[d] != want[d + off] && s[d] >= 0 && want[d + off] >= 0)
               fail("expand_as", "cannot expand shape ", s, " to ", want, " (dim ", d + off, ")");
           return one(in[0].dtype(), want);
         },
     .view =
         [](std::span<const Tensor> in, const Attrs&) {
           const Tensor& x = in[0];
           const Shape& want = in[1].shape();
           if (!broadcastable_to(x.shape(), want))
             fail("expand_as", "cannot expand shape ", x.shape(), " to ", want);
           size_t off = want.size() - x.shape().size();
           Strides st(want.size(), 0);
           for (size_t d = off; d < want.size(); ++d)
             st[d] = (x.shape()[d - off] == 1 && want[d] != 1) ? 0 : x.strides()[d - off];
           return TensorList{make_view(x, want, st, x.offset())};
         },
     .grad =
         [](const GradCtx& c) {
           return TensorList{sum_to(c.g(), c.in(0).shape()), Tensor()};
         }});

const OpDef& kSqueeze =
    def_op({.name = "squeeze",
            .attr_names = {"dim"},
            .traits = kView | kStaticShapes,
            .infer = [](std::span<const Tensor> in,
                        const Attrs& a) { return one(in[0].dtype(), squeezed(in[0].shape(), a)); },
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  const Tensor& x = in[0];
                  Shape s;
                  Strides st;
                  bool all = a.i(0) == INT64_MIN;
                  int64_t dim = all ? -1 : wrap_dim(a.i(0), x.shape(), "squeeze");
                  for (int64_t d = 0; d < x.dim(); ++d) {
                    bool drop = x.shape()[d] == 1 && (all || d == dim);
                    if (!drop) {
                      s.push_back(x.shape()[d]);
                      st.push_back(x.strides()[d]);
                    }
                  }
                  return TensorList{make_view(x, s, st, x.offset())};
                },
            .grad = [](const GradCtx& c) { return TensorList{reshape(c.g(), c.in(0).shape())}; },
            .doc = "drops size-1 dims (all, or the one named). Static shapes: whether a dynamic "
                   "dim is 1 decides the result's rank, so squeezing one needs its size (the jit "
                   "compiles such a call for the concrete shape)"});

const OpDef& kUnsqueeze =
    def_op({.name = "unsqueeze",
            .attr_names = {"dim"},
            .traits = kView,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  Shape s = in[0].shape();
                  int64_t d = wrap_dim(a.i(0), s, "unsqueeze", 1);
                  Shape out;
                  for (int64_t i = 0; i <= s.rank(); ++i) {
                    if (i == d) out.push_back(1);
                    if (i < s.rank()) out.push_back(s[i]);
                  }
                  return one(in[0].dtype(), out);
                },
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  const Tensor& x = in[0];
                  int64_t d = wrap_dim(a.i(0), x.shape(), "unsqueeze", 1);
                  Shape s;
                  Strides st;
                  for (int64_t i = 0; i <= x.dim(); ++i) {
                    if (i == d) {
                      s.push_back(1);
                      st.push_back(i < x.dim() ? x.strides()[i] * x.shape()[i] : 1);
                    }
                    if (i < x.dim()) {
                      s.push_back(x.shape()[i]);
                      st.push_back(x.strides()[i]);
                    }
                  }
                  return TensorList{make_view(x, s, st, x.offset())};
                },
            .grad = [](const GradCtx& c) { return TensorList{reshape(c.g(), c.in(0).shape())}; }});

const OpDef& kDetach =
    def_op({.name = "detach",
            .traits = kView,
            .infer = [](std::span<const Tensor> in,
                        const Attrs&) { return one(in[0].dtype(), in[0].shape()); },
            .view =
                [](std::span<const Tensor> in, const Attrs&) {
                  const Tensor& x = in[0];
                  return TensorList{make_view(x, x.shape(), x.strides(), x.offset())};
                }});

const OpDef& kClone =
    def_op({.name = "clone",
            .traits = kElementwise | kFusable,
            .infer = [](std::span<const Tensor> in,
                        const Attrs&) { return one(in[0].dtype(), in[0].shape()); },
            .kernel = [](std::span<const Tensor> in, std::span<Tensor> out,
                         const Attrs&) { op_util::copy_cast_kernel(in[0], out[0]); },
            .grad = [](const GradCtx& c) { return TensorList{c.g()}; },
            .expr = "$0",
            .native_dtypes = kAllDTypes});

const OpDef& kCast =
    def_op({.name = "cast",
            .attr_names = {"dtype"},
            .traits = kElementwise | kFusable,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  int64_t d = a.i(0);
                  if (!valid_dtype_code(d)) fail("cast", "unknown dtype code ", d);
                  return one(static_cast<DType>(d), in[0].shape());
                },
            .kernel = [](std::span<const Tensor> in, std::span<Tensor> out,
                         const Attrs&) { op_util::copy_cast_kernel(in[0], out[0]); },
            .grad =
                [](const GradCtx& c) {
                  if (!is_floating(c.in(0).dtype())) return TensorList{Tensor()};
                  return TensorList{cast(c.g(), c.in(0).dtype())};
                },
            .expr = "cast($0, @0)",
            .native_dtypes = kAllDTypes});

}  // namespace

Tensor reshape(const Tensor& a, const Shape& s) {
  // torch infers one dim; several -1s mean "keep this dynamic size" only in graphs and traces.
  if (a.defined() && a.is_concrete() && !capturing() && std::count(s.begin(), s.end(), -1) > 1)
    fail("reshape", "only one dim can be -1 in target shape ", ints_str(s.vec()), " for input ",
         a.shape());
  return call1(kReshape, {a}, {s.vec()});
}
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  return call1(kTranspose, {a}, {d0, d1});
}
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  return call1(kPermute, {a}, {dims});
}
Tensor slice(const Tensor& a, int64_t dim, SymInt start, SymInt end, SymInt step) {
  if (!start.is_symbolic() && !end.is_symbolic() && !step.is_symbolic()) [[likely]]
    return call1(kSlice, {a}, {dim, start.hint(), end.hint(), step.hint()});
  return op_util::call_sized(kSlice, {a}, Attrs{dim, int64_t{0}, int64_t{0}, int64_t{1}},
                             {{1, -1, start}, {2, -1, end}, {3, -1, step}})[0];
}
Tensor expand(const Tensor& a, const Shape& s) { return call1(kExpand, {a}, {s.vec()}); }
Tensor expand_as(const Tensor& a, const Tensor& like) { return call1(kExpandAs, {a, like}); }
Tensor squeeze(const Tensor& a, std::optional<int64_t> dim) {
  return call1(kSqueeze, {a}, {dim ? *dim : INT64_MIN});
}
Tensor unsqueeze(const Tensor& a, int64_t dim) { return call1(kUnsqueeze, {a}, {dim}); }
Tensor flatten(const Tensor& a, int64_t start, int64_t end) {
  if (a.dim() == 0) return reshape(a, {1});
  int64_t s = wrap_dim(start, a.shape(), "flatten"), e = wrap_dim(end, a.shape(), "flatten");
  if (s > e)
    fail("flatten", "start_dim ", start, " comes after end_dim ", end, " for shape ", a.shape());
  Shape out;
  for (int64_t i = 0; i < s; ++i) out.push_back(a.shape()[i]);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m = (m < 0 || a.shape()[i] < 0) ? -1 : m * a.shape()[i];
  out.push_back(m);
  bool dynamic_after = false;
  for (int64_t i = e + 1; i < a.dim(); ++i) {
    out.push_back(a.shape()[i]);
    dynamic_after = dynamic_after || a.shape()[i] < 0;
  }
  // The merged size and a later one both dynamic: a reshape target cannot say which -1 is
  // which (resolve_shape), so this needs the sizes.
  if (m < 0 && dynamic_after && s == e) return a;  // one dim: nothing merges
  if (m < 0 && dynamic_after)
    fail("flatten", "needs a static size: dims ", s, "..", e, " of shape ", a.shape(),
         " merge into a dynamic size and a later dim is dynamic too");
  return reshape(a, out);
}
Tensor contiguous(const Tensor& a) {
  if (a.is_concrete() && a.is_contiguous()) return a;
  return call1(kClone, {a});
}
Tensor clone(const Tensor& a) { return call1(kClone, {a}); }
Tensor cast(const Tensor& a, DType t) {
  if (a.defined() && a.dtype() == t) return a;
  return call1(kCast, {a}, {static_cast<int64_t>(t)});
}
Tensor detach(const Tensor& a) { return call1(kDetach, {a}); }
// flip, roll and repeat are compositions: index_select with a reversed index, two slices and a
// cat, an expand of interleaved size-1 dims and a reshape. Their gradients come from those ops.
// ---- Tensor methods that are ops -------------------------------------------------------------

Tensor Tensor::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const {
  if (is_concrete()) {
    Shape r = resolve_shape(shape(), s.vec(), "view");
    Strides st;
    if (!view_strides(*this, r, &st))
      fail("view", "shape ", shape(), " with strides cannot be viewed as ", s,
           " without a copy; use reshape()");
  }
  return kiln::reshape(*this, s);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return kiln::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  if (dim() != 2) fail("t", "expected a 2-D tensor, got shape ", shape());
  return kiln::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return kiln::permute(*this, dims);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return kiln::slice(*this, dim, start, end, step);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  if (this->dim() == 0) fail("narrow", "input must have at least 1 dim, got a 0-d tensor");
  int64_t d = wrap_dim(dim, shape(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    fail("narrow", "start ", start, " + length ", length, " exceeds dim ", d, " of shape ",
         shape());
  return kiln::slice(*this, d, start, start + length, 1);
}
Tensor Tensor::select(int64_t dim, int64_t i) const {
  if (this->dim() == 0) fail("select", "input must have at least 1 dim, got a 0-d tensor");
  int64_t d = wrap_dim(dim, shape(), "select");
  int64_t n = shape()[d];
  if (n < 0) {
    // A dynamic dim: a negative index counts from the end at run time, and the one-long slice
    // is reshaped away (the reshape checks at run time that the index was in range).
    Tensor piece = kiln::slice(*this, d, i, i == -1 ? INT64_MAX : i + 1, 1);
    Shape out;
    int dynamic = 0;
    for (int64_t k = 0; k < shape().rank(); ++k)
      if (k != d) {
        out.push_back(shape()[k]);
        dynamic += shape()[k] < 0;
      }
    if (dynamic > 1)
      fail("select", "index ", i, " along dynamic dim ", d, " of shape ", shape(),
           ": other dims are dynamic too; select on a tensor with at most two dynamic dims");
    for (auto& x : out)
      if (x < 0) x = -1;
    return kiln::reshape(piece, out);
  }
  if (i < -n || i >= n)
    fail("select", "index ", i, " out of range for dim ", d, " of shape ", shape());
  if (i < 0) i += n;
  return kiln::squeeze(kiln::slice(*this, d, i, i + 1, 1), d);
}
Tensor Tensor::expand(const Shape& s) const { return kiln::expand(*this, s); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return kiln::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return kiln::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return kiln::flatten(*this, s, e); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::to(DType t) const { return kiln::cast(*this, t); }
Tensor Tensor::detach() const { return kiln::detach(*this); }

namespace detail::op_util {
void copy_cast_kernel(const Tensor& src, Tensor& dst) { cpu::cast_copy(src, dst); }
}  // namespace detail::op_util

}  // namespace kiln
