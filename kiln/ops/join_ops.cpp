// Join and split family: cat, and split/split_like (one view per piece); the composites built
// on them (stack, split by size, chunk). Split's gradient is one cat of the pieces' gradients.
#include <algorithm>
#include <cstring>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

// split: one view per piece of `sizes` along dim. Its gradient is one cat of the pieces'
// gradients (zeros where none flowed), where a slice per piece would give each piece's gradient
// as a whole-input slice_grad and a chain of adds: an LSTM reading its [T, B, 4H] input
// projection one step at a time paid T slice_grads of the whole tensor (T^2 memory traffic).
MetaList split_metas(std::span<const Tensor> in, const Attrs& a) {
  const Shape& s = in[0].shape();
  if (s.rank() == 0) fail("split", "cannot split a 0-d tensor");
  int64_t d = wrap_dim(a.i(0), s, "split");
  const auto& sizes = a.ints(1);
  int64_t total = 0;
  for (auto z : sizes) {
    if (z < 0) fail("split", "negative split size ", z, " for shape ", s);
    total += z;
  }
  if (s[d] >= 0 && total != s[d])
    fail("split", "sizes sum to ", total, " but dim ", d, " of shape ", s, " is ", s[d]);
  MetaList m;
  for (auto z : sizes) {
    Shape o = s;
    o[d] = z;
    m.push_back(TensorMeta{in[0].dtype(), o});
  }
  return m;
}

// Views of x's consecutive pieces of `sizes` along d (the caller checked they fit).
TensorList pieces_along(const Tensor& x, int64_t d, const std::vector<int64_t>& sizes) {
  TensorList outs;
  int64_t at = 0;
  for (auto z : sizes) {
    Shape o = x.shape();
    o[d] = z;
    outs.push_back(make_view(x, o, x.strides(), x.offset() + at * x.strides()[d]));
    at += z;
  }
  return outs;
}

const OpDef& kSplit =
    def_op({.name = "split",
            .num_outputs = -1,
            .attr_names = {"dim", "sizes"},
            .traits = kView,
            .infer = split_metas,
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  // The dispatcher runs a view op's view without its infer: validate here too.
                  (void)split_metas(in, a);
                  return pieces_along(in[0], wrap_dim(a.i(0), in[0].shape(), "split"), a.ints(1));
                },
            .grad =
                [](const GradCtx& c) {
                  std::vector<Tensor> gs(c.grads.begin(), c.grads.end());
                  return TensorList{cat(gs, c.attrs.i(0))};
                },
            .doc = "views of consecutive pieces of `sizes` along dim (torch.split)"});

// split_like(g, x0, ..., xn-1; dim): views of consecutive pieces of g along dim, each as long
// as x_k there. The gradient of cat when a size along dim is dynamic: the offsets are the
// inputs' run-time sizes.
MetaList split_like_metas(std::span<const Tensor> in, const Attrs& a) {
  if (in.size() < 2)
    fail("split_like", "expected g and at least one tensor, got ", in.size(), " inputs");
  const Shape& g = in[0].shape();
  if (g.rank() == 0) fail("split_like", "cannot split a 0-d tensor");
  int64_t d = wrap_dim(a.i(0), g, "split_like");
  MetaList m;
  int64_t total = 0;
  bool known_sizes = true;
  for (size_t k = 1; k < in.size(); ++k) {
    const Shape& s = in[k].shape();
    if (s.rank() != g.rank())
      fail("split_like", "tensor ", k, " has shape ", s, ", expected rank ", g.rank(), " like g ",
           g);
    Shape o = g;
    o[d] = s[d];
    if (s[d] < 0) known_sizes = false;
    total += std::max<int64_t>(s[d], 0);
    m.push_back(TensorMeta{in[0].dtype(), o});
  }
  if (known_sizes && g[d] >= 0 && total != g[d])
    fail("split_like", "pieces sum to ", total, " along dim ", d, " but g has shape ", g);
  return m;
}

const OpDef& kSplitLike =
    def_op({.name = "split_like",
            .num_inputs = -1,
            .num_outputs = -1,
            .attr_names = {"dim"},
            .traits = kView,
            .infer = split_like_metas,
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  (void)split_like_metas(in, a);
                  const int64_t d = wrap_dim(a.i(0), in[0].shape(), "split_like");
                  std::vector<int64_t> sizes;
                  for (size_t k = 1; k < in.size(); ++k) sizes.push_back(in[k].shape()[d]);
                  return pieces_along(in[0], d, sizes);
                },
            .grad =
                [](const GradCtx& c) {
                  TensorList r(c.inputs.size());
                  if (c.need(0)) {
                    std::vector<Tensor> gs(c.grads.begin(), c.grads.end());
                    r[0] = cat(gs, c.attrs.i(0));
                  }
                  return r;
                },
            .doc = "pieces of g along dim as long as each further input there (gradient of cat)"});

const OpDef& kCat =
    def_op({.name = "cat",
            .num_inputs = -1,
            .attr_names = {"dim"},
            .traits = kConcat,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  if (in.empty()) fail("cat", "expected at least one tensor");
                  const Shape& s0 = in[0].shape();
                  if (s0.rank() == 0)
                    fail("cat", "zero-dimensional tensor (shape ", s0, ") cannot be concatenated");
                  int64_t d = wrap_dim(a.i(0), s0, "cat");
                  Shape out = s0;
                  for (size_t k = 1; k < in.size(); ++k) {
                    const Shape& s = in[k].shape();
                    if (in[k].dtype() != in[0].dtype())
                      fail("cat", "tensor ", k, " has dtype ", in[k].dtype(), " (shape ", s,
                           "), expected ", in[0].dtype(), " like tensor 0 (shape ", s0, ")");
                    if (s.rank() != s0.rank())
                      fail("cat", "tensor ", k, " has shape ", s, ", expected rank ", s0.rank(),
                           " like ", s0);
                    for (int64_t i = 0; i < s.rank(); ++i) {
                      if (i == d || s[i] == out[i]) continue;
                      // A dynamic dim must equal the other inputs' at run time (the kernel's
                      // copy checks it); the static size wins.
                      if (s[i] < 0) continue;
                      if (out[i] < 0) {
                        out[i] = s[i];
                        continue;
                      }
                      fail("cat", "tensor ", k, " has shape ", s, ", which differs from ", s0,
                           " outside dim ", d);
                    }
                    out[d] = (out[d] < 0 || s[d] < 0) ? -1 : out[d] + s[d];
                  }
                  return one(in[0].dtype(), out);
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  Tensor& o = out[0];
                  int64_t d = wrap_dim(a.i(0), o.dim(), "cat");
                  int64_t at = 0;
                  for (const auto& t : in) {
                    Shape vs = o.shape();
                    vs[d] = t.shape()[d];
                    Tensor dst = make_view(o, vs, o.strides(), o.offset() + at * o.strides()[d]);
                    // A piece a Session planned in place is already there (kConcat); strides
                    // of size-1 dims do not matter.
                    bool placed = t.dtype() == o.dtype() && t.raw_data() == dst.raw_data();
                    for (int64_t k = 0; placed && k < t.dim(); ++k)
                      placed = t.shape()[k] == 1 || t.strides()[k] == dst.strides()[k];
                    if (t.numel() > 0 && !placed) op_util::copy_cast_kernel(t, dst);
                    at += t.shape()[d];
                  }
                },
            .grad =
                [](const GradCtx& c) {
                  int64_t d = wrap_dim(c.attrs.i(0), c.g().dim(), "cat");
                  TensorList gs;
                  bool dynamic = false;
                  for (const Tensor& x : c.inputs) dynamic = dynamic || x.shape()[d] < 0;
                  if (dynamic) {
                    // Offsets known only at run time: pieces shaped like the inputs.
                    std::vector<Tensor> ins{c.g()};
                    ins.insert(ins.end(), c.inputs.begin(), c.inputs.end());
                    TensorList p =
                        call(kSplitLike, std::span<const Tensor>(ins.data(), ins.size()), {d});
                    for (size_t k = 0; k < c.inputs.size(); ++k)
                      gs.push_back(c.need(k) ? p[k] : Tensor());
                    return gs;
                  }
                  int64_t at = 0;
                  for (size_t k = 0; k < c.inputs.size(); ++k) {
                    int64_t n = c.in(k).shape()[d];
                    gs.push_back(c.need(k) ? slice(c.g(), d, at, at + n, 1) : Tensor());
                    at += n;
                  }
                  return gs;
                },
            .native_dtypes = kAllDTypes});

}  // namespace

// Mixed dtypes promote to their common dtype first, as torch.cat does (every input counts as a
// tensor with dims there, 0-d ones are refused by the op's inference).
Tensor cat(const std::vector<Tensor>& xs_in, int64_t dim) {
  // torch's legacy rule: a 1-D empty tensor (shape [0]) is skipped next to tensors of another
  // rank (cat([x, torch.tensor([])]) is common in accumulation loops).
  const std::vector<Tensor>* src = &xs_in;
  std::vector<Tensor> kept;
  bool other_rank = false;
  for (const auto& x : xs_in) other_rank = other_rank || (x.defined() && x.dim() != 1);
  if (other_rank) {
    for (const auto& x : xs_in)
      if (!(x.defined() && x.dim() == 1 && x.shape()[0] == 0)) kept.push_back(x);
    if (!kept.empty() && kept.size() != xs_in.size()) src = &kept;
  }
  const std::vector<Tensor>& xs = *src;
  bool mixed = false;
  for (const auto& x : xs) mixed = mixed || (x.defined() && x.dtype() != xs[0].dtype());
  if (!mixed) return call1(kCat, std::span<const Tensor>(xs.data(), xs.size()), {dim});
  ResultType rt;
  for (const auto& x : xs) rt.add(x.dtype(), 1);
  const DType t = rt.dtype();
  std::vector<Tensor> cs;
  for (const auto& x : xs) cs.push_back(x.dtype() == t ? x : cast(x, t));
  return call1(kCat, std::span<const Tensor>(cs.data(), cs.size()), {dim});
}
Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) fail("stack", "expected at least one tensor");
  for (size_t k = 1; k < xs.size(); ++k)
    if (xs[k].shape() != xs[0].shape())
      fail("stack", "tensor ", k, " has shape ", xs[k].shape(), ", expected ", xs[0].shape());
  int64_t d = wrap_dim(dim, xs[0].shape(), "stack", 1);
  std::vector<Tensor> us;
  for (const auto& x : xs) us.push_back(unsqueeze(x, d));
  return cat(us, d);
}
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  // (a 0-d tensor has no dim to read: shape()[0] would be out of bounds)
  if (a.dim() == 0) fail("split", "expects at least a 1-dimensional tensor, got a 0-d tensor");
  int64_t d = wrap_dim(dim, a.shape(), "split");
  int64_t total = 0;
  for (auto s : sizes) {
    if (s < 0) fail("split", "negative split size ", s, " for shape ", a.shape());
    total += s;
  }
  // A dynamic dim is checked against the sizes when the graph runs (split's view).
  if (a.shape()[d] >= 0 && total != a.shape()[d])
    fail("split", "sizes sum to ", total, " but dim ", d, " of shape ", a.shape(), " is ",
         a.shape()[d]);
  std::vector<Tensor> out;
  if (sizes.size() > 1 || a.shape()[d] < 0) {
    // Attrs built by push: GCC 12 reports a braced Attrs holding a vector as maybe-uninitialized.
    Attrs at;
    at.push(d);
    at.push(sizes);
    TensorList v = call(kSplit, {a}, at);
    out.assign(v.begin(), v.end());
    return out;
  }
  int64_t at = 0;
  for (auto s : sizes) {
    out.push_back(slice(a, d, at, at + s, 1));
    at += s;
  }
  return out;
}
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  if (split_size <= 0)
    fail("split", "split_size must be positive, got ", split_size, " (shape ", a.shape(), ")");
  if (a.dim() == 0) fail("split", "expects at least a 1-dimensional tensor, got a 0-d tensor");
  int64_t d = wrap_dim(dim, a.shape(), "split");
  int64_t n = a.shape()[d];
  if (n < 0)
    fail("split", "needs a static size: dim ", d, " of shape ", a.shape(),
         " is dynamic, so the number of pieces of ", split_size, " is unknown");
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(a, sizes, d);
}
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  if (chunks <= 0)
    fail("chunk", "chunks must be positive, got ", chunks, " (shape ", a.shape(), ")");
  if (a.dim() == 0) fail("chunk", "expects at least a 1-dimensional tensor, got a 0-d tensor");
  int64_t d = wrap_dim(dim, a.shape(), "chunk");
  int64_t n = a.shape()[d];
  if (n < 0)
    fail("chunk", "needs a static size: dim ", d, " of shape ", a.shape(),
         " is dynamic, so the pieces' sizes are unknown");
  return split(a, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

// ---- torch's split and stack variants (views and cat) -------------------------------------------

std::vector<Tensor> tensor_split(const Tensor& a, const std::vector<int64_t>& indices,
                                 int64_t dim) {
  if (!a.defined()) fail("tensor_split", "input is undefined");
  if (a.dim() == 0) fail("tensor_split", "input must have at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, a.shape(), "tensor_split");
  const int64_t n = a.size(d);
  if (n < 0) fail("tensor_split", "needs a static size: dim ", d, " of shape ", a.shape());
  std::vector<Tensor> out;
  int64_t at = 0;
  // Each piece is a[prev:cut] with Python's slice rules (cuts clamp to [0, n]; a cut before the
  // previous one gives an empty piece, and the next piece starts at it), as torch.
  for (int64_t i : indices) {
    const int64_t e = std::clamp<int64_t>(i < 0 ? i + n : i, 0, n);
    out.push_back(slice(a, d, at, std::max(e, at), 1));
    at = e;
  }
  out.push_back(slice(a, d, at, n, 1));
  return out;
}

std::vector<Tensor> tensor_split(const Tensor& a, int64_t sections, int64_t dim) {
  if (!a.defined()) fail("tensor_split", "input is undefined");
  if (a.dim() == 0) fail("tensor_split", "input must have at least 1 dim, got a 0-d tensor");
  if (sections <= 0) fail("tensor_split", "sections must be positive, got ", sections);
  const int64_t d = wrap_dim(dim, a.shape(), "tensor_split");
  const int64_t n = a.size(d);
  if (n < 0) fail("tensor_split", "needs a static size: dim ", d, " of shape ", a.shape());
  std::vector<int64_t> cuts;
  const int64_t q = n / sections, r = n % sections;
  int64_t at = 0;
  for (int64_t s = 0; s + 1 < sections; ++s) {
    at += q + (s < r ? 1 : 0);
    cuts.push_back(at);
  }
  return tensor_split(a, cuts, d);
}

namespace {
std::vector<Tensor> split_even(const char* op, const Tensor& a, int64_t sections, int64_t dim) {
  if (!a.defined()) fail(op, "input is undefined");
  if (sections <= 0 || a.size(dim) < 0 || a.size(dim) % sections != 0)
    fail(op, "dim ", dim, " of shape ", a.shape(), " does not divide into ", sections,
         " equal sections");
  return tensor_split(a, sections, dim);
}
int64_t hdim(const char* op, const Tensor& a) {
  if (!a.defined() || a.dim() < 1) fail(op, "input must have at least 1 dim");
  return a.dim() == 1 ? 0 : 1;
}
void need_rank(const char* op, const Tensor& a, int64_t r) {
  if (!a.defined() || a.dim() < r)
    fail(op, "input must have at least ", r, " dims, got ", a.defined() ? a.shape() : Shape{});
}
}  // namespace

std::vector<Tensor> hsplit(const Tensor& a, int64_t sections) {
  return split_even("hsplit", a, sections, hdim("hsplit", a));
}
std::vector<Tensor> hsplit(const Tensor& a, const std::vector<int64_t>& indices) {
  return tensor_split(a, indices, hdim("hsplit", a));
}
std::vector<Tensor> vsplit(const Tensor& a, int64_t sections) {
  need_rank("vsplit", a, 2);
  return split_even("vsplit", a, sections, 0);
}
std::vector<Tensor> vsplit(const Tensor& a, const std::vector<int64_t>& indices) {
  need_rank("vsplit", a, 2);
  return tensor_split(a, indices, 0);
}
std::vector<Tensor> dsplit(const Tensor& a, int64_t sections) {
  need_rank("dsplit", a, 3);
  return split_even("dsplit", a, sections, 2);
}
std::vector<Tensor> dsplit(const Tensor& a, const std::vector<int64_t>& indices) {
  need_rank("dsplit", a, 3);
  return tensor_split(a, indices, 2);
}

Tensor hstack(const std::vector<Tensor>& xs) {
  if (xs.empty()) fail("hstack", "expected at least one tensor");
  std::vector<Tensor> ys;
  for (const Tensor& x : xs) ys.push_back(atleast_1d(x));
  return cat(ys, ys[0].dim() == 1 ? 0 : 1);
}
Tensor vstack(const std::vector<Tensor>& xs) {
  if (xs.empty()) fail("vstack", "expected at least one tensor");
  std::vector<Tensor> ys;
  for (const Tensor& x : xs) ys.push_back(atleast_2d(x));
  return cat(ys, 0);
}
Tensor dstack(const std::vector<Tensor>& xs) {
  if (xs.empty()) fail("dstack", "expected at least one tensor");
  std::vector<Tensor> ys;
  for (const Tensor& x : xs) ys.push_back(atleast_3d(x));
  return cat(ys, 2);
}
Tensor column_stack(const std::vector<Tensor>& xs) {
  if (xs.empty()) fail("column_stack", "expected at least one tensor");
  std::vector<Tensor> ys;
  for (const Tensor& x : xs) ys.push_back(x.dim() <= 1 ? reshape(x, Shape{x.numel(), 1}) : x);
  return cat(ys, 1);
}

}  // namespace kiln
