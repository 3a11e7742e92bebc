// Shape family: views (reshape, transpose, permute, slice, expand, squeeze, unsqueeze,
// as_strided) that alias their input, and copies (contiguous, clone, cast, slice_grad,
// as_strided_scatter). Composite shape functions (flatten, pad, flip, roll, repeat) are built
// from these in the wrappers. Joining and splitting are in join_ops.cpp, in-place writes in
// inplace_ops.cpp.
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
// pad with a dynamic padded dim (a graph): crops are slices counted from either end, and each
// growth is a cat with a filled block shaped from the tensor at run time.
static Tensor pad_dynamic(const Tensor& a, const std::vector<int64_t>& pads, double value) {
  constexpr int64_t kLimit = int64_t(1) << 40;
  Tensor x = a;
  for (size_t k = 0; 2 * k < pads.size(); ++k) {
    const int64_t d = a.dim() - 1 - static_cast<int64_t>(k);
    const int64_t lo = pads[2 * k], hi = pads[2 * k + 1];
    if (lo > kLimit || hi > kLimit || lo < -kLimit || hi < -kLimit)
      fail("pad", "pad amounts must be within 2^40, got ", ints_str(pads));
    if (lo + hi < 0)  // eager's check, when the graph runs
      x = op_util::check_numel(
          x, {d}, -(lo + hi), "pad",
          str_cat("pads ", ints_str(pads), " crop dim ", d, " below 0: shape "));
    if (lo < 0 || hi < 0) x = slice(x, d, std::max<int64_t>(0, -lo), hi < 0 ? hi : INT64_MAX);
    auto block = [&](int64_t len) {
      Shape s(static_cast<size_t>(x.dim()), -1);
      s[d] = len;
      return expand(cast(full_like(sum(x, {d}, true), value), x.dtype()), s);
    };
    std::vector<Tensor> parts;
    if (lo > 0) parts.push_back(block(lo));
    parts.push_back(x);
    if (hi > 0) parts.push_back(block(hi));
    if (parts.size() > 1) x = cat(parts, d);
  }
  return x.is_same(a) ? clone(a) : x;
}

// torch.nn.functional.pad (constant mode): negative amounts crop (slices), positive ones place
// the tensor inside a filled one (as_strided_scatter, so the gradient is the inner region).
Tensor pad(const Tensor& a, const std::vector<int64_t>& pads, double value) {
  const char* op = "pad";
  if (!a.defined()) fail(op, "input is undefined");
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size()) > 2 * a.dim())
    fail(op, "pads must be pairs (last dim first), at most 2 per dim: got ", ints_str(pads),
         " for shape ", a.shape());
  const int64_t n = static_cast<int64_t>(pads.size()) / 2;
  // Any dynamic dim (a graph or a jit trace), padded or not: the filled output below needs
  // every size, so slices and cats shaped from the tensor at run time build it instead.
  if (!a.shape().is_static()) return pad_dynamic(a, pads, value);
  Tensor x = a;
  Shape out = a.shape();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t d = a.dim() - 1 - k;
    const int64_t lo = pads[static_cast<size_t>(2 * k)], hi = pads[static_cast<size_t>(2 * k + 1)];
    const int64_t len = a.size(d);
    if (len < 0) fail(op, "needs static sizes in the padded dims, got shape ", a.shape());
    constexpr int64_t kLimit = int64_t(1) << 40;
    if (lo > kLimit || hi > kLimit || lo < -kLimit || hi < -kLimit)
      fail(op, "pad amounts must be within 2^40, got ", ints_str(pads));
    if (len + lo + hi < 0)
      fail(op, "pads ", ints_str(pads), " crop dim ", d, " of shape ", a.shape(), " below 0");
    if (lo < 0 || hi < 0)
      x = slice(x, d, std::max<int64_t>(0, -lo), len - std::max<int64_t>(0, -hi));
    out[d] = len + lo + hi;
  }
  bool grow = false;
  for (int64_t k = 0; k < 2 * n; ++k) grow = grow || pads[static_cast<size_t>(k)] > 0;
  if (!grow) return x.is_same(a) ? clone(a) : x;
  // Where x lands in the row-major elements of the output.
  std::vector<int64_t> strides(static_cast<size_t>(out.rank()));
  int64_t st = 1, offset = 0;
  for (int64_t d = out.rank() - 1; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = st;
    const int64_t k = a.dim() - 1 - d;
    if (k < n) offset += std::max<int64_t>(0, pads[static_cast<size_t>(2 * k)]) * st;
    st *= out[d];
  }
  return as_strided_scatter(full(out, value, a.dtype()), x, x.shape().vec(), strides, offset);
}

Tensor as_strided(const Tensor& a, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides, int64_t offset) {
  return call1(kAsStrided, {a}, {sizes, strides, offset});
}
Tensor detail::as_strided_scatter(const Tensor& base, const Tensor& src,
                                  const std::vector<int64_t>& sizes,
                                  const std::vector<int64_t>& strides, int64_t offset) {
  return call1(kAsStridedScatter, {base, src}, {sizes, strides, offset});
}
// flip, roll and repeat are compositions: index_select with a reversed index, two slices and a
// cat, an expand of interleaved size-1 dims and a reshape. Their gradients come from those ops.
Tensor flip(const Tensor& a, const std::vector<int64_t>& dims) {
  if (!a.defined()) fail("flip", "input is undefined");
  std::vector<int64_t> ds;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, a.shape(), "flip");
    if (std::find(ds.begin(), ds.end(), w) != ds.end())
      fail("flip", "dim ", d, " appears twice in ", ints_str(dims), " (shape ", a.shape(), ")");
    ds.push_back(w);
  }
  Tensor x = a;
  for (int64_t d : ds) {
    const int64_t n = a.size(d);
    if (n < 0) {
      // A dynamic dim (a graph): the reversed index n-1-i from ones along d, built at run time.
      std::vector<int64_t> others;
      for (int64_t e = 0; e < a.dim(); ++e)
        if (e != d) others.push_back(e);
      Tensor ones =
          cast(others.empty() ? ones_like(a) : gt(sum(ones_like(a), others), -1.0), Int64);
      x = index_select(x, d, sub(sum(ones), cumsum(ones, 0)));
      continue;
    }
    if (n <= 1) continue;
    x = index_select(x, d, arange(static_cast<double>(n - 1), -1, -1, Int64));
  }
  return x.is_same(a) ? clone(a) : x;
}

Tensor roll(const Tensor& a, int64_t shift, int64_t dim) {
  if (!a.defined()) fail("roll", "input is undefined");
  const int64_t d = wrap_dim(dim, a.shape(), "roll");
  const int64_t n = a.size(d);
  if (n < 0) fail("roll", "needs a static size in dim ", d, ", got shape ", a.shape());
  if (n == 0) return clone(a);
  const int64_t s = ((shift % n) + n) % n;  // element i moves to (i + shift) mod n
  if (s == 0) return clone(a);
  return cat({slice(a, d, n - s, n), slice(a, d, 0, n - s)}, d);
}

Tensor repeat(const Tensor& a, const std::vector<int64_t>& reps) {
  if (!a.defined()) fail("repeat", "input is undefined");
  if (static_cast<int64_t>(reps.size()) < a.dim())
    fail("repeat", "needs at least one repeat count per dim: ", ints_str(reps), " for shape ",
         a.shape());
  const int64_t r = static_cast<int64_t>(reps.size()), lead = r - a.dim();
  if (!a.shape().is_static()) {  // a dynamic dim: the same views with its size a symbol
    for (int64_t rep : reps)
      if (rep < 0) fail("repeat", "repeat counts must be >= 0, got ", ints_str(reps));
    std::vector<SymInt> inter, expanded, out;
    for (int64_t d = 0; d < r; ++d) {
      const SymInt sz = d < lead ? SymInt(1) : sym_size(a, d - lead);
      const int64_t rep = reps[static_cast<size_t>(d)];
      inter.insert(inter.end(), {SymInt(1), sz});
      expanded.insert(expanded.end(), {SymInt(rep), sz});
      out.push_back(sz * rep);
    }
    return reshape_symint(expand_symint(reshape_symint(a, inter), expanded), out);
  }
  // [1]*lead + shape, then [rep, 1, ...] interleaved: [.., 1, s_d, ..] expanded to [.., rep_d,
  // s_d, ..], reshaped to [.., rep_d * s_d, ..].
  Shape inter, expanded, out;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t rep = reps[static_cast<size_t>(d)];
    const int64_t sz = d < lead ? 1 : a.size(d - lead);
    if (rep < 0) fail("repeat", "repeat counts must be >= 0, got ", ints_str(reps));
    if (sz < 0) fail("repeat", "needs static sizes, got shape ", a.shape());
    int64_t total = 0;
    if (__builtin_mul_overflow(rep, sz, &total) || total > (int64_t(1) << 40))
      fail("repeat", "result dim ", d, " would have ", rep, " x ", sz, " elements");
    inter.push_back(1);
    inter.push_back(sz);
    expanded.push_back(rep);
    expanded.push_back(sz);
    out.push_back(total);
  }
  return reshape(expand(reshape(a, inter), expanded), out);
}

// ---- torch shape helpers: compositions of views, flip and cat ----------------------------------

std::vector<Tensor> unbind(const Tensor& a, int64_t dim) {
  if (!a.defined()) fail("unbind", "input is undefined");
  if (a.dim() == 0) fail("unbind", "input must have at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, a.shape(), "unbind");
  const int64_t n = a.size(d);
  if (n < 0) fail("unbind", "needs a static size: dim ", d, " of shape ", a.shape(), " is dynamic");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(a.select(d, i));
  return out;
}

Tensor movedim(const Tensor& a, const std::vector<int64_t>& source,
               const std::vector<int64_t>& destination) {
  if (!a.defined()) fail("movedim", "input is undefined");
  if (source.size() != destination.size())
    fail("movedim", "source ", ints_str(source), " and destination ", ints_str(destination),
         " must have the same number of dims");
  const int64_t r = a.dim();
  if (r == 0) {  // only dim 0 (or -1) names a scalar's one position: nothing moves
    for (size_t k = 0; k < source.size(); ++k) {
      (void)wrap_dim(source[k], a.shape(), "movedim");
      (void)wrap_dim(destination[k], a.shape(), "movedim");
    }
    return a;
  }
  std::vector<int64_t> perm(static_cast<size_t>(r), -1);
  std::vector<bool> src_used(static_cast<size_t>(r), false);
  for (size_t k = 0; k < source.size(); ++k) {
    const int64_t s = wrap_dim(source[k], a.shape(), "movedim");
    const int64_t t = wrap_dim(destination[k], a.shape(), "movedim");
    if (src_used[static_cast<size_t>(s)] || perm[static_cast<size_t>(t)] >= 0)
      fail("movedim", "repeated dim in source ", ints_str(source), " or destination ",
           ints_str(destination));
    src_used[static_cast<size_t>(s)] = true;
    perm[static_cast<size_t>(t)] = s;
  }
  int64_t next = 0;
  for (int64_t t = 0; t < r; ++t) {
    if (perm[static_cast<size_t>(t)] >= 0) continue;
    while (src_used[static_cast<size_t>(next)]) ++next;
    perm[static_cast<size_t>(t)] = next++;
  }
  bool ident = true;
  for (int64_t t = 0; t < r; ++t) ident = ident && perm[static_cast<size_t>(t)] == t;
  return ident ? a : permute(a, perm);
}

Tensor movedim(const Tensor& a, int64_t source, int64_t destination) {
  return movedim(a, std::vector<int64_t>{source}, std::vector<int64_t>{destination});
}

Tensor swapaxes(const Tensor& a, int64_t axis0, int64_t axis1) {
  return transpose(a, axis0, axis1);
}

Tensor tile(const Tensor& a, const std::vector<int64_t>& reps) {
  if (!a.defined()) fail("tile", "input is undefined");
  std::vector<int64_t> r = reps;
  if (static_cast<int64_t>(r.size()) < a.dim()) r.insert(r.begin(), a.dim() - r.size(), 1);
  return repeat(a, r);
}

Tensor narrow(const Tensor& a, int64_t dim, SymInt start, SymInt length) {
  if (!a.defined()) fail("narrow", "input is undefined");
  if (!start.is_symbolic() && !length.is_symbolic())
    return a.narrow(dim, start.hint(), length.hint());
  // A symbolic start counts from the front (a size is never negative).
  return slice(a, dim, start, start + length);
}

Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim) {
  if (!a.defined()) fail("repeat_interleave", "input is undefined");
  if (repeats < 0) fail("repeat_interleave", "repeats must be >= 0, got ", repeats);
  const Tensor x = dim && a.dim() > 0 ? a : reshape(a, Shape{-1});
  const int64_t d = dim && a.dim() > 0 ? wrap_dim(*dim, x.shape(), "repeat_interleave") : 0;
  // [.., n, ..] -> [.., n, 1, ..] expanded to [.., n, repeats, ..] -> [.., n * repeats, ..]
  std::vector<int64_t> exv = x.shape().vec();
  exv.insert(exv.begin() + d + 1, repeats);
  const Shape ex(exv);
  Shape out = x.shape();
  out[d] = x.shape()[d] < 0 ? -1 : x.shape()[d] * repeats;
  for (int64_t e = 0; e < x.dim(); ++e)
    if (e != d && x.shape()[e] < 0)
      fail("repeat_interleave", "needs a static size: shape ", x.shape(), " is dynamic");
  return reshape(expand(unsqueeze(x, d + 1), ex), out);
}

Tensor fliplr(const Tensor& a) {
  if (!a.defined() || a.dim() < 2)
    fail("fliplr", "input must have at least 2 dims, got ", a.defined() ? a.shape() : Shape{});
  return flip(a, {1});
}

Tensor flipud(const Tensor& a) {
  if (!a.defined() || a.dim() < 1)
    fail("flipud", "input must have at least 1 dim, got ", a.defined() ? a.shape() : Shape{});
  return flip(a, {0});
}

Tensor rot90(const Tensor& a, int64_t k, const std::vector<int64_t>& dims) {
  if (!a.defined()) fail("rot90", "input is undefined");
  if (dims.size() != 2 || a.dim() < 2)
    fail("rot90", "needs 2 dims and an input of rank >= 2, got dims ", ints_str(dims),
         " for shape ", a.shape());
  const int64_t d0 = wrap_dim(dims[0], a.shape(), "rot90"),
                d1 = wrap_dim(dims[1], a.shape(), "rot90");
  if (d0 == d1) fail("rot90", "dims must differ, got ", ints_str(dims));
  switch (((k % 4) + 4) % 4) {
    case 1:
      return transpose(flip(a, {d1}), d0, d1);
    case 2:
      return flip(a, {d0, d1});
    case 3:
      return flip(transpose(a, d0, d1), {d1});
    default:
      return clone(a);
  }
}

Tensor atleast_1d(const Tensor& a) {
  if (!a.defined()) fail("atleast_1d", "input is undefined");
  return a.dim() >= 1 ? a : reshape(a, Shape{1});
}
Tensor atleast_2d(const Tensor& a) {
  if (!a.defined()) fail("atleast_2d", "input is undefined");
  if (a.dim() >= 2) return a;
  return a.dim() == 0 ? reshape(a, Shape{1, 1}) : unsqueeze(a, 0);
}
Tensor atleast_3d(const Tensor& a) {
  if (!a.defined()) fail("atleast_3d", "input is undefined");
  if (a.dim() >= 3) return a;
  if (a.dim() == 0) return reshape(a, Shape{1, 1, 1});
  if (a.dim() == 1) return unsqueeze(unsqueeze(a, 0), 2);
  return unsqueeze(a, 2);
}

Tensor broadcast_to(const Tensor& a, const Shape& shape) {
  if (!a.defined()) fail("broadcast_to", "input is undefined");
  return expand(a, shape);
}

std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& xs) {
  if (xs.empty()) return {};
  Shape s = xs[0].shape();
  for (size_t k = 1; k < xs.size(); ++k)
    s = broadcast_shapes(s, xs[k].shape(), "broadcast_tensors");
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.shape() == s ? x : expand(x, s));
  return out;
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& xs, const std::string& indexing) {
  if (indexing != "ij" && indexing != "xy")
    fail("meshgrid", "indexing must be 'ij' or 'xy', got '", indexing, "'");
  if (xs.empty()) fail("meshgrid", "expected at least one tensor");
  for (const Tensor& x : xs)
    if (!x.defined() || x.dim() > 1)
      fail("meshgrid", "expected 0-d or 1-d tensors, got shape ",
           x.defined() ? x.shape() : Shape{});
  const bool swap = indexing == "xy" && xs.size() >= 2;
  // Cartesian indexing: the ij grids of (xs[1], xs[0], xs[2], ...), the first two swapped back.
  std::vector<Tensor> in = xs;
  if (swap) std::swap(in[0], in[1]);
  Shape s;
  for (const Tensor& x : in) s.push_back(x.numel());
  std::vector<Tensor> out;
  for (size_t k = 0; k < in.size(); ++k) {
    std::vector<int64_t> v(static_cast<size_t>(s.rank()), 1);
    v[k] = s[static_cast<int64_t>(k)];
    Tensor g = expand(reshape(in[k], Shape(v)), s);
    out.push_back(g);
  }
  if (swap) std::swap(out[0], out[1]);
  return out;
}

Tensor logspace(double start, double end, int64_t steps, double base, DType dtype) {
  if (steps < 0) fail("logspace", "steps must be >= 0, got ", steps);
  std::vector<double> v(static_cast<size_t>(steps));
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  // As torch's linspace: from the start for the first half, from the end for the rest.
  for (int64_t i = 0; i < steps; ++i)
    v[static_cast<size_t>(i)] = std::pow(
        base, steps == 1 || i < steps / 2 ? start + step * static_cast<double>(i)
                                          : end - step * static_cast<double>(steps - 1 - i));
  return cast(tensor(v, {steps}), dtype);
}

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
