// Advanced-indexing family: index (a[i0, i1, ...] with integer and bool index tensors,
// broadcast together, as NumPy) and index_put (its assignment, accumulate: +=), with the
// composites index_fill, index_copy, take and take_along_dim built on them and on gather.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::check_eager_range;
using op_util::is_bool;
using op_util::one;
using op_util::prod;
using op_util::u8;

// ---- index_put --------------------------------------------------------------------------------
// Inputs: a, values, then one index tensor per indexed leading dim, all of one shape B (the
// wrapper broadcasts them), values of shape B + a.shape[k:]. Attr: accumulate.

MetaList infer_index_put(std::span<const Tensor> in, const Attrs& at) {
  if (in.size() < 3) fail("index_put", "needs the input, values and at least one index tensor");
  const Tensor& a = in[0];
  const Tensor& v = in[1];
  const bool acc = at.b(0);
  const int64_t k = static_cast<int64_t>(in.size()) - 2;
  if (k > a.dim())
    fail("index_put", "too many indices (", k, ") for an input of shape ", a.shape());
  if (acc) op_util::require_numeric("index_put", a);
  if (v.dtype() != a.dtype())
    fail("index_put", "values dtype ", v.dtype(), " ", v.shape(), " must equal the input's ",
         a.dtype(), " ", a.shape());
  // Dynamic dims (-1) are checked where known; the kernel runs on concrete shapes, which this
  // inference checks again then.
  const Shape& B = in[2].shape();
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& t = in[static_cast<size_t>(2 + i)];
    op_util::require_index("index_put", t, "indices");
    if (!op_util::dims_agree(t.shape(), B))
      fail("index_put", "index tensors must have one shape, got ", B, " and ", t.shape());
  }
  Shape want = B;
  for (int64_t d = k; d < a.dim(); ++d) want.push_back(a.shape()[d]);
  if (!op_util::dims_agree(v.shape(), want))
    fail("index_put", "values shape ", v.shape(), " must be ", want, " (input ", a.shape(), ")");
  return one(a.dtype(), a.shape());
}

void index_put_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& at) {
  const Tensor& a = in[0];
  const Tensor& v = in[1];
  const bool acc = at.b(0);
  const int64_t k = static_cast<int64_t>(in.size()) - 2;
  const Shape& as = a.shape();
  std::memcpy(out[0].raw_data(), a.raw_data(), static_cast<size_t>(a.numel()) * a.element_size());
  const int64_t nb = in[2].numel(), inner = prod(as, k, as.rank());
  std::vector<int64_t> off(static_cast<size_t>(nb), 0);
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& t = in[static_cast<size_t>(2 + i)];
    const int64_t size = as[i], stride = prod(as, i + 1, k) * inner;
    op_util::with_index(t, "index_put", [&](auto* ip) {
      for (int64_t p = 0; p < nb; ++p) {
        int64_t x = static_cast<int64_t>(ip[p]);
        if (x < -size || x >= size)
          fail("index_put", "index ", x, " is out of range for dim ", i, " of size ", size,
               " (input shape ", as, ", index shape ", t.shape(), ")");
        if (x < 0) x += size;
        off[static_cast<size_t>(p)] += x * stride;
      }
    });
  }
  if (nb * inner == 0) return;
  KILN_DISPATCH_ALL(a.dtype(), "index_put", [&] {
    using T = scalar_t;
    T* O = out[0].data_ptr<T>();
    const T* V = v.data_ptr<T>();
    // Tasks own column blocks of the inner slice, so repeated indices never race; within a
    // block the positions go in order (the last write wins, as on torch's CPU).
    const int64_t blk = 256, nblk = (inner + blk - 1) / blk;
    parallel_for(nblk, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t j0 = t * blk, j1 = std::min(inner, j0 + blk);
        for (int64_t p = 0; p < nb; ++p) {
          T* o = O + off[static_cast<size_t>(p)];
          const T* s = V + p * inner;
          if constexpr (std::is_same_v<T, bool>) {
            for (int64_t j = j0; j < j1; ++j) o[j] = acc ? (o[j] || s[j]) : s[j];
          } else if (acc) {
            for (int64_t j = j0; j < j1; ++j) o[j] = static_cast<T>(o[j] + s[j]);
          } else {
            for (int64_t j = j0; j < j1; ++j) o[j] = s[j];
          }
        }
      }
    });
  });
}

// g with zeros at the indexed places. With dynamic sizes the zeros come shaped from g (a
// broadcast 0 would have no static target).
Tensor zero_at(const Tensor& g, const std::vector<Tensor>& idx) {
  if (g.shape().is_static()) return index_put(g, idx, scalar_tensor(0, g.dtype()));
  return index_put(g, idx, index(zeros_like(g), idx));
}

const OpDef& kIndexPut =
    def_op({.name = "index_put",
            .num_inputs = -1,
            .attr_names = {"accumulate"},
            .infer = infer_index_put,
            .kernel = index_put_kernel,
            // accumulate: out = a + A(values), else a with the indexed places replaced: a's
            // gradient is g (with 0 at those places), values' the gradient read at the places.
            .grad =
                [](const GradCtx& c) {
                  std::vector<Tensor> idx(c.inputs.begin() + 2, c.inputs.end());
                  TensorList r;
                  r.push_back(Tensor());
                  r.push_back(Tensor());
                  if (c.need(0)) r[0] = c.attrs.b(0) ? c.g() : zero_at(c.g(), idx);
                  if (c.need(1)) r[1] = index(c.g(), idx);
                  for (size_t i = 0; i < idx.size(); ++i) r.push_back(Tensor());
                  return r;
                },
            .contiguous_inputs = true,
            .doc = "copy of a with a[indices...] = values (accumulate: +=), as torch.index_put"});

// Bool masks among index tensors become one int64 index per mask dim (nonzero's columns).
std::vector<Tensor> int_indices(const char* op, const Tensor& a,
                                const std::vector<Tensor>& indices) {
  std::vector<Tensor> out;
  for (const Tensor& t : indices) {
    if (!t.defined()) fail(op, "an index tensor is undefined (input ", a.shape(), ")");
    if (t.dtype() == Bool) {
      const int64_t at = static_cast<int64_t>(out.size());
      if (t.dim() == 0 || at + t.dim() > a.dim())
        fail(op, "bool mask of shape ", t.shape(), " does not fit input shape ", a.shape(),
             " after ", at, " indexed dims");
      for (int64_t d = 0; d < t.dim(); ++d)
        if (t.shape()[d] != a.shape()[at + d])
          fail(op, "bool mask of shape ", t.shape(), " does not match input shape ", a.shape(),
               " at dim ", at + d);
      for (const Tensor& c : nonzero_tuple(t)) out.push_back(c);
    } else {
      op_util::require_index(op, t, "indices");
      out.push_back(t);
    }
  }
  if (out.empty()) fail(op, "needs at least one index tensor (input ", a.shape(), ")");
  if (static_cast<int64_t>(out.size()) > a.dim())
    fail(op, "too many indices (", out.size(), ") for an input of shape ", a.shape());
  return out;
}

Shape broadcast_all(const char* op, const std::vector<Tensor>& ts) {
  Shape s = ts[0].shape();
  for (size_t k = 1; k < ts.size(); ++k) s = broadcast_shapes(s, ts[k].shape(), op);
  return s;
}

// t (int64) with negative entries counted from the end.
Tensor wrap_index(const Tensor& t, int64_t size) {
  const Tensor x = t.dtype() == Int64 ? t : cast(t, Int64);
  if (x.is_concrete() && (x.numel() == 0 || min(x).item<int64_t>() >= 0)) return x;
  return add(x, mul(cast(lt(x, 0), Int64), size));
}

// The gathers below flatten a to [rows, rest...]: only dim 0 may be dynamic (the row count
// then is), as the strides of the other indexed dims and the reshapes need their sizes.
void require_static_past_0(const char* op, const Tensor& a) {
  for (int64_t d = 1; d < a.dim(); ++d)
    if (a.shape()[d] < 0)
      fail(op, "needs a static size: input shape ", a.shape(), " is dynamic past dim 0");
}

// t (int64) with negative entries counted from the end of a's dynamic dim d, whose size comes
// from a at run time (ones summed along d).
Tensor wrap_index_dynamic(const Tensor& t, const Tensor& a, int64_t d) {
  const Tensor x = t.dtype() == Int64 ? t : cast(t, Int64);
  std::vector<int64_t> others;
  for (int64_t e = 0; e < a.dim(); ++e)
    if (e != d) others.push_back(e);
  const Tensor ones = others.empty() ? ones_like(a) : gt(sum(ones_like(a), others), -1.0);
  const Tensor n = sum(cast(ones, Int64));
  return add(x, mul(cast(lt(x, 0), Int64), n));
}

// A tensor of the index tensors' broadcast shape B (their sum: only its run-time shape is
// used), for expand_as where B has dynamic sizes: expand's -1 would mean "keep".
Tensor broadcast_like(const std::vector<Tensor>& idx) {
  Tensor r = idx[0];
  for (size_t i = 1; i < idx.size(); ++i) r = add(r, idx[i]);
  return r;
}

}  // namespace

Tensor index(const Tensor& a, const std::vector<Tensor>& indices) {
  if (!a.defined()) fail("index", "input is undefined");
  const std::vector<Tensor> idx = int_indices("index", a, indices);
  require_static_past_0("index", a);
  const int64_t k = static_cast<int64_t>(idx.size());
  const Shape B = broadcast_all("index", idx);
  Tensor lin;
  int64_t stride = 1;
  for (int64_t i = k - 1; i >= 0; --i) {
    const Tensor& t0 = idx[static_cast<size_t>(i)];
    check_eager_range("index", t0, a.shape()[i], true, "dim " + std::to_string(i));
    Tensor t = a.shape()[i] < 0 ? wrap_index_dynamic(t0, a, i) : wrap_index(t0, a.shape()[i]);
    if (stride != 1) t = mul(t, stride);
    lin = lin.defined() ? add(lin, t) : t;
    stride *= a.shape()[i];
  }
  Shape flat{a.shape()[0] < 0 ? -1 : stride}, out = B;
  for (int64_t d = k; d < a.dim(); ++d) {
    flat.push_back(a.shape()[d]);
    out.push_back(a.shape()[d]);
  }
  if (lin.shape() != B) lin = expand(lin, B);
  return reshape(index_select(reshape(a, flat), 0, reshape(lin, Shape{-1})), out);
}

Tensor index_put(const Tensor& a, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate) {
  if (!a.defined() || !values.defined()) fail("index_put", "undefined input");
  const std::vector<Tensor> idx = int_indices("index_put", a, indices);
  const int64_t k = static_cast<int64_t>(idx.size());
  for (int64_t i = 0; i < k; ++i)
    check_eager_range("index_put", idx[static_cast<size_t>(i)], a.shape()[i], true,
                      "dim " + std::to_string(i));
  const Shape B = broadcast_all("index_put", idx);
  Shape want = B;
  for (int64_t d = k; d < a.dim(); ++d) want.push_back(a.shape()[d]);
  if (!broadcastable_to(values.shape(), want))
    fail("index_put", "values of shape ", values.shape(), " do not broadcast to the indexed shape ",
         want, " (input ", a.shape(), ")");
  const bool b = accumulate && is_bool(a);  // accumulating bools is logical or (torch)
  const Tensor v = b ? u8(values) : values;
  // With dynamic sizes in the target, expand's -1 would mean "keep" (and equal shapes with a
  // dynamic dim may still differ at run time): values and indices are broadcast to tensors of
  // the target shapes at run time instead (expand_as).
  std::vector<Tensor> ins{b ? u8(a) : a};
  if (want.is_static()) {
    ins.push_back(v.shape() == want ? v : expand(v, want));
  } else {
    Tensor like = broadcast_like(idx);
    Shape target(static_cast<size_t>(B.rank()), -1);
    bool dynamic_rest = false;
    for (int64_t d = k; d < a.dim(); ++d) {
      like = unsqueeze(like, -1);
      target.push_back(a.shape()[d]);
      dynamic_rest = dynamic_rest || a.shape()[d] < 0;
    }
    if (dynamic_rest) {  // a's trailing sizes at run time: a summed over the indexed dims
      std::vector<int64_t> lead(static_cast<size_t>(k));
      std::iota(lead.begin(), lead.end(), int64_t(0));
      like = add(like, sum(a, lead));
    } else if (k < a.dim()) {
      like = expand(like, target);
    }
    ins.push_back(expand_as(v, like));
  }
  for (const Tensor& t : idx)
    ins.push_back(t.shape() == B && (B.is_static() || idx.size() == 1) ? t
                  : B.is_static()                                      ? expand(t, B)
                                  : expand_as(t, broadcast_like(idx)));
  const Tensor r = call1(kIndexPut, std::span<const Tensor>(ins.data(), ins.size()), {accumulate});
  return b ? ne(r, 0) : r;
}

Tensor index_fill(const Tensor& a, int64_t dim, const Tensor& index, double value) {
  if (!a.defined() || !index.defined()) fail("index_fill", "undefined input");
  op_util::require_index("index_fill", index);
  if (index.dim() > 1) fail("index_fill", "index must be 0-d or 1-d, got shape ", index.shape());
  if (a.dim() == 0) return index_fill(reshape(a, Shape{1}), 0, index, value).reshape(Shape{});
  const int64_t d = wrap_dim(dim, a.shape(), "index_fill");
  check_eager_range("index_fill", index, a.shape()[d], true, "dim " + std::to_string(d));
  const Tensor r =
      index_put(movedim(a, d, 0), {reshape(index, Shape{-1})}, scalar_tensor(value, a.dtype()));
  return movedim(r, 0, d);
}

Tensor index_copy(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  if (!a.defined() || !index.defined() || !src.defined()) fail("index_copy", "undefined input");
  op_util::require_index("index_copy", index);
  if (index.dim() > 1) fail("index_copy", "index must be 0-d or 1-d, got shape ", index.shape());
  if (a.dim() == 0)
    return index_copy(reshape(a, Shape{1}), 0, index, reshape(src, Shape{1})).reshape(Shape{});
  const int64_t d = wrap_dim(dim, a.shape(), "index_copy");
  Shape want = a.shape();
  want[d] = index.numel();
  if (!op_util::dims_agree(src.shape(), want))
    fail("index_copy", "src shape ", src.shape(), " must be ", want, " (input ", a.shape(),
         ", index of ", index.numel(), " entries along dim ", d, ")");
  if (src.dtype() != a.dtype())
    fail("index_copy", "src dtype ", src.dtype(), " must equal the input's ", a.dtype());
  check_eager_range("index_copy", index, a.shape()[d], false, "dim " + std::to_string(d));
  const Tensor r = index_put(movedim(a, d, 0), {reshape(index, Shape{-1})}, movedim(src, d, 0));
  return movedim(r, 0, d);
}

Tensor take(const Tensor& a, const Tensor& index) {
  if (!a.defined() || !index.defined()) fail("take", "undefined input");
  op_util::require_index("take", index);
  check_eager_range("take", index, a.numel(), true, "the flattened input");
  return kiln::index(reshape(a, Shape{-1}), {index});
}

Tensor take_along_dim(const Tensor& a, const Tensor& indices, std::optional<int64_t> dim) {
  if (!a.defined() || !indices.defined()) fail("take_along_dim", "undefined input");
  op_util::require_index("take_along_dim", indices);
  if (!dim) {
    check_eager_range("take_along_dim", indices, a.numel(), false, "the flattened input");
    return gather(reshape(a, Shape{-1}), 0, reshape(indices, Shape{-1}));
  }
  if (a.dim() == 0)
    fail("take_along_dim", "input must have at least 1 dim with dim given, got a 0-d tensor");
  if (a.dim() != indices.dim())
    fail("take_along_dim", "input ", a.shape(), " and indices ", indices.shape(),
         " must have the same number of dims");
  const int64_t d = wrap_dim(*dim, a.shape(), "take_along_dim");
  check_eager_range("take_along_dim", indices, a.shape()[d], false, "dim " + std::to_string(d));
  Shape sa = a.shape(), si = indices.shape();
  sa[d] = 1;
  si[d] = 1;
  Shape s = broadcast_shapes(sa, si, "take_along_dim");
  Shape ta = s, ti = s;
  ta[d] = a.shape()[d];
  ti[d] = indices.shape()[d];
  return gather(a.shape() == ta ? a : expand(a, ta), d,
                indices.shape() == ti ? indices : expand(indices, ti));
}

}  // namespace kiln
