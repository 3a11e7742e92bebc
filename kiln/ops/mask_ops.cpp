// Masking family: tril/triu (entries kept by their position) and their index lists, and the
// ops whose result size depends on values, read on the host: nonzero (argwhere, where(cond)),
// masked_select, masked_scatter, unique, unique_consecutive, repeat_interleave by a tensor.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using op_util::prod;

// ---- tril / triu -----------------------------------------------------------------------------
// Over the last two dims: tril keeps x[..., i, j] with j - i <= diagonal, triu those with
// j - i >= diagonal; the rest become 0. Linear and self-adjoint: the gradient is the same op.

template <bool Upper>
void tri_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor x = in[0].is_contiguous() ? in[0] : raw_contiguous_copy(in[0]);
  const Shape& s = x.shape();
  const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
  // Diagonals past either corner keep everything or nothing; clamped so i + diag cannot overflow.
  const int64_t B = prod(s, 0, s.rank() - 2), diag = std::clamp<int64_t>(a.i(0), -R - 1, C + 1);
  if (B * R * C == 0) return;
  KILN_DISPATCH_ALL_TYPES(x.dtype(), Upper ? "triu" : "tril", [&] {
    using T = scalar_t;
    const T* p = x.data_ptr<T>();
    T* o = out[0].data_ptr<T>();
    parallel_for(B * R, std::max<int64_t>(1, 32768 / std::max<int64_t>(C, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const int64_t i = r % R;
                     // kept columns: [0, i + diag] (tril) or [i + diag, C) (triu)
                     const int64_t cut = std::clamp<int64_t>(i + diag + (Upper ? 0 : 1), 0, C);
                     const T* src = p + r * C;
                     T* dst = o + r * C;
                     for (int64_t j = 0; j < C; ++j)
                       dst[j] = (Upper ? j >= cut : j < cut) ? src[j] : T(0);
                   }
                 });
  });
}

template <const char* Name>
MetaList infer_tri(std::span<const Tensor> in, const Attrs& a) {
  if (in[0].dim() < 2)
    fail(Name, "input must have at least 2 dims ([..., rows, cols]), got shape ", in[0].shape());
  (void)a.i(0);
  return one(in[0].dtype(), in[0].shape());
}

constexpr char kTrilN[] = "tril", kTriuN[] = "triu";
const OpDef& kTril =
    def_op({.name = kTrilN,
            .attr_names = {"diagonal"},
            .infer = infer_tri<kTrilN>,
            .kernel = tri_kernel<false>,
            .grad = [](const GradCtx& c) { return TensorList{tril(c.g(), c.attrs.i(0))}; },
            .doc = "x[..., i, j] where j - i <= diagonal, else 0",
            .native_dtypes = kAllDTypes});
const OpDef& kTriu =
    def_op({.name = kTriuN,
            .attr_names = {"diagonal"},
            .infer = infer_tri<kTriuN>,
            .kernel = tri_kernel<true>,
            .grad = [](const GradCtx& c) { return TensorList{triu(c.g(), c.attrs.i(0))}; },
            .doc = "x[..., i, j] where j - i >= diagonal, else 0",
            .native_dtypes = kAllDTypes});

}  // namespace

// nonzero and masked_select have shapes that depend on values: the mask is read on the host.
// Eagerly that is a copy out; under jit the read is a graph break whose value becomes a guard
// (as torch.compile breaks on nonzero); in a static graph it raises.
// The host read, with the reason a static graph cannot give it. (Under jit the read is answered:
// a graph break.)
static std::vector<int64_t> read_mask(const char* op, const Tensor& m,
                                      const std::source_location& loc) {
  try {
    return m.to_vector<int64_t>(loc);
  } catch (const Error& e) {
    if (!m.is_symbolic()) throw;
    fail(op, "the result's size depends on the values of ", m.shape(),
         ", which a static graph does not know: call it eagerly or under jit, where it is a "
         "graph break (",
         e.what(), ")");
  }
}

Tensor nonzero(const Tensor& a, const std::source_location& loc) {
  if (!a.defined()) fail("nonzero", "input is undefined");
  const Tensor m = a.dtype() == Bool ? cast(a, Int64) : cast(ne(a, 0.0), Int64);
  const std::vector<int64_t> v = read_mask("nonzero", m, loc);
  const int64_t r = a.dim();
  // Coordinates need the run-time sizes: under jit a dim may be dynamic (-1) in the traced
  // shape. Each such size is read too: the length of a sum over every other dim.
  Shape s = a.shape();
  for (int64_t d = 0; d < r; ++d)
    if (s[d] < 0) {
      std::vector<int64_t> others;
      for (int64_t e = 0; e < r; ++e)
        if (e != d) others.push_back(e);
      s[d] = static_cast<int64_t>(
          read_mask("nonzero", others.empty() ? m : sum(m, others), loc).size());
    }
  std::vector<int64_t> coords;
  int64_t n = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i]) continue;
    ++n;
    int64_t rem = static_cast<int64_t>(i);
    const size_t at = coords.size();
    coords.resize(at + static_cast<size_t>(r));
    for (int64_t d = r - 1; d >= 0; --d) {
      coords[at + static_cast<size_t>(d)] = rem % s[d];
      rem /= s[d];
    }
  }
  return tensor(coords, {n, r});
}

Tensor masked_select(const Tensor& a, const Tensor& mask, const std::source_location& loc) {
  if (!a.defined() || !mask.defined()) fail("masked_select", "undefined input");
  if (mask.dtype() != Bool)
    fail("masked_select", "mask must be bool, got ", mask.dtype(), mask.shape(), " (input ",
         a.shape(), ")");
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_select");
  const Tensor m = mask.shape() == s ? mask : expand(mask, s);
  const std::vector<int64_t> v = read_mask("masked_select", cast(m, Int64), loc);
  std::vector<int64_t> at;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i]) at.push_back(static_cast<int64_t>(i));
  const Tensor x = a.shape() == s ? a : expand(a, s);
  return index_select(reshape(x, {-1}), 0, tensor(at, {static_cast<int64_t>(at.size())}));
}

Tensor tril(const Tensor& a, int64_t diagonal) { return call1(kTril, {a}, {diagonal}); }
Tensor triu(const Tensor& a, int64_t diagonal) { return call1(kTriu, {a}, {diagonal}); }

Tensor masked_scatter(const Tensor& a, const Tensor& mask, const Tensor& source,
                      const std::source_location& loc) {
  if (!a.defined() || !mask.defined() || !source.defined())
    fail("masked_scatter", "undefined input");
  if (mask.dtype() != Bool)
    fail("masked_scatter", "mask must be bool, got ", mask.dtype(), mask.shape());
  if (source.dtype() != a.dtype())
    fail("masked_scatter", "source dtype ", source.dtype(), " must equal the input's ", a.dtype());
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_scatter");
  const Tensor m = mask.shape() == s ? mask : expand(mask, s);
  const std::vector<int64_t> v = read_mask("masked_scatter", cast(m, Int64), loc);
  std::vector<int64_t> at;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i]) at.push_back(static_cast<int64_t>(i));
  const int64_t n = static_cast<int64_t>(at.size());
  if (source.numel() < n)
    fail("masked_scatter", "source has ", source.numel(), " elements (shape ", source.shape(),
         ") but the mask selects ", n);
  const Tensor x = reshape(a.shape() == s ? a : expand(a, s), Shape{-1});
  const Tensor src = slice(reshape(source, Shape{-1}), 0, 0, n, 1);
  return reshape(index_put(x, {tensor(at, {n})}, src), s);
}

// ---- host-read ops: nonzero's forms, unique, repeat counts -----------------------------------

std::vector<Tensor> nonzero_tuple(const Tensor& a, const std::source_location& loc) {
  if (!a.defined()) fail("nonzero", "input is undefined");
  const Tensor nz = nonzero(a.dim() == 0 ? reshape(a, Shape{1}) : a, loc);
  std::vector<Tensor> out;
  for (int64_t d = 0; d < nz.shape()[1]; ++d) out.push_back(contiguous(nz.select(1, d)));
  return out;
}

Tensor argwhere(const Tensor& a, const std::source_location& loc) { return nonzero(a, loc); }

std::vector<Tensor> where(const Tensor& cond, const std::source_location& loc) {
  return nonzero_tuple(cond, loc);
}

namespace {
// The values of `a` read on the host as double (integers beyond 2^53 as int64 keys), with the
// static-graph refusal read_mask gives.
template <typename T>
std::vector<T> read_values(const char* op, const Tensor& a, const std::source_location& loc) {
  try {
    return a.to_vector<T>(loc);
  } catch (const Error& e) {
    if (!a.is_symbolic()) throw;
    fail(op, "the result's size depends on the values of ", a.shape(),
         ", which a static graph does not know: call it eagerly or under jit, where it is a "
         "graph break (",
         e.what(), ")");
  }
}

template <typename T>
bool is_nan_v(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// Groups equal values: order[i] lists positions, runs delimited where values differ (NaNs never
// equal, as torch's ==). Fills values, inverse and counts.
template <typename T>
UniqueResult unique_impl(const Tensor& a, const std::vector<T>& v,
                         const std::vector<int64_t>& order) {
  std::vector<T> vals;
  std::vector<int64_t> inv(v.size()), counts;
  for (size_t k = 0; k < order.size(); ++k) {
    const T x = v[static_cast<size_t>(order[k])];
    if (k == 0 || !(x == vals.back())) {
      vals.push_back(x);
      counts.push_back(0);
    }
    ++counts.back();
    inv[static_cast<size_t>(order[k])] = static_cast<int64_t>(vals.size()) - 1;
  }
  const int64_t n = static_cast<int64_t>(vals.size());
  UniqueResult r;
  r.values = cast(tensor(vals, {n}), a.dtype());
  r.inverse = tensor(inv, a.shape());
  r.counts = tensor(counts, {n});
  return r;
}

template <typename T>
UniqueResult unique_typed(const Tensor& a, bool consecutive, const std::source_location& loc) {
  const char* op = consecutive ? "unique_consecutive" : "unique";
  const std::vector<T> v = read_values<T>(op, a, loc);
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!consecutive)
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      const T x = v[static_cast<size_t>(i)], y = v[static_cast<size_t>(j)];
      if (is_nan_v(x) || is_nan_v(y)) return !is_nan_v(x) && is_nan_v(y);
      return x < y;
    });
  return unique_impl(a, v, order);
}

UniqueResult unique_any(const Tensor& a, bool consecutive, const std::source_location& loc) {
  if (!a.defined()) fail(consecutive ? "unique_consecutive" : "unique", "input is undefined");
  if (is_floating(a.dtype())) return unique_typed<double>(a, consecutive, loc);
  return unique_typed<int64_t>(a, consecutive, loc);
}
}  // namespace

UniqueResult unique(const Tensor& a, bool /*sorted*/, const std::source_location& loc) {
  return unique_any(a, false, loc);
}

UniqueResult unique_consecutive(const Tensor& a, const std::source_location& loc) {
  return unique_any(a, true, loc);
}

Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim,
                         const std::source_location& loc) {
  if (!a.defined() || !repeats.defined()) fail("repeat_interleave", "undefined input");
  if (repeats.dtype() != Int64 && repeats.dtype() != Int32)
    fail("repeat_interleave", "repeats must be int64 or int32, got ", repeats.dtype());
  if (repeats.dim() > 1)
    fail("repeat_interleave", "repeats must be 0-d or 1-d, got shape ", repeats.shape());
  const std::vector<int64_t> r = read_values<int64_t>("repeat_interleave", repeats, loc);
  if (r.size() == 1) return repeat_interleave(a, r[0], dim);
  const Tensor x = dim ? a : reshape(a, Shape{-1});
  const int64_t d = dim ? wrap_dim(*dim, x.shape(), "repeat_interleave") : 0;
  if (x.shape()[d] != static_cast<int64_t>(r.size()))
    fail("repeat_interleave", "repeats has ", r.size(), " entries but dim ", d, " of shape ",
         x.shape(), " has ", x.shape()[d]);
  std::vector<int64_t> at;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] < 0) fail("repeat_interleave", "repeats must be >= 0, got ", r[i]);
    at.insert(at.end(), static_cast<size_t>(r[i]), static_cast<int64_t>(i));
  }
  return index_select(x, d, tensor(at, {static_cast<int64_t>(at.size())}));
}

Tensor repeat_interleave(const Tensor& repeats, const std::source_location& loc) {
  if (!repeats.defined()) fail("repeat_interleave", "repeats is undefined");
  if (repeats.dim() > 1)
    fail("repeat_interleave", "repeats must be 0-d or 1-d, got shape ", repeats.shape());
  return repeat_interleave(arange(0, static_cast<double>(repeats.numel()), 1, repeats.dtype()),
                           repeats.dim() == 0 ? reshape(repeats, Shape{1}) : repeats, 0, loc);
}

Tensor triu_indices(int64_t row, int64_t col, int64_t offset) {
  if (row < 0 || col < 0) fail("triu_indices", "row and col must be >= 0, got ", row, ", ", col);
  std::vector<int64_t> rs, cs;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = std::max<int64_t>(0, i + offset); j < col; ++j) {
      rs.push_back(i);
      cs.push_back(j);
    }
  const int64_t n = static_cast<int64_t>(rs.size());
  rs.insert(rs.end(), cs.begin(), cs.end());
  return tensor(rs, {2, n});
}

Tensor tril_indices(int64_t row, int64_t col, int64_t offset) {
  if (row < 0 || col < 0) fail("tril_indices", "row and col must be >= 0, got ", row, ", ", col);
  std::vector<int64_t> rs, cs;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = 0; j < std::min(col, i + offset + 1); ++j) {
      rs.push_back(i);
      cs.push_back(j);
    }
  const int64_t n = static_cast<int64_t>(rs.size());
  rs.insert(rs.end(), cs.begin(), cs.end());
  return tensor(rs, {2, n});
}

}  // namespace kiln
