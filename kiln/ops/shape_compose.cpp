// Composite shape functions: torch's pad (constant mode), flip, roll, repeat, unbind, movedim,
// tile, narrow, repeat_interleave, rot90, atleast_*d, broadcast_to/tensors, meshgrid and logspace,
// each built from the view and copy ops of shape_ops.cpp (and cat, index ops); a dynamic dim
// takes the symbolic forms (sym_int.h). No op of their own: the gradients are their parts'.
#include <algorithm>
#include <numeric>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {

// pad with a dynamic padded dim (a graph): crops are slices counted from either end, and each
// growth is a cat with a filled block shaped from the tensor at run time.
namespace {
Tensor pad_dynamic(const Tensor& a, const std::vector<int64_t>& pads, double value) {
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

}  // namespace

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

}  // namespace kiln
