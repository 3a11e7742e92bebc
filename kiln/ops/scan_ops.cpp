// Ops along one dim: the scans cumsum (forward or reversed), cumprod (with a one-pass exact
// gradient op), cummax/cummin and logcumsumexp, and the order statistics mode and median. Each
// runs over the lines of a contiguous tensor along the dim.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/reduce_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using reduce_util::bool_back;
using reduce_util::ordered;
using reduce_util::WrapAcc;

// cumsum along one dim; `reverse` sums from the end (the gradient of a forward cumsum, as
// jax.lax.cumsum's reverse). Float32 accumulates in double (torch's CPU kernel does too).
const OpDef& kCumsum = def_op(
    {.name = "cumsum",
     .attr_names = {"dim", "reverse"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const Tensor& x = in[0];
           op_util::require_numeric("cumsum", x);
           if (x.dtype() == Bool)
             fail("cumsum", "input must be numeric, not bool (", x.shape(), "); cast it first");
           (void)a.b(1);
           if (x.dim() > 0)
             wrap_dim(a.i(0), x.shape(), "cumsum");
           else if (a.i(0) != 0 && a.i(0) != -1)
             fail("cumsum", "dim ", a.i(0), " is out of range for a 0-d tensor");
           return one(x.dtype(), x.shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Tensor& x0 = in[0];
           if (x0.numel() == 0) return;
           const Tensor x = x0.is_contiguous() ? x0 : raw_contiguous_copy(x0);
           const int64_t rank = x.dim();
           const int64_t d = rank == 0 ? 0 : wrap_dim(a.i(0), x.shape(), "cumsum");
           const int64_t n = rank == 0 ? 1 : x.shape()[d];
           int64_t outer = 1, inner = 1;
           for (int64_t k = 0; k < d; ++k) outer *= x.shape()[k];
           for (int64_t k = d + 1; k < rank; ++k) inner *= x.shape()[k];
           const bool rev = a.b(1);
           KILN_DISPATCH_NUMERIC(x.dtype(), "cumsum", [&] {
             using T = scalar_t;
             using Acc = typename WrapAcc<T>::type;
             const T* p = x.data_ptr<T>();
             T* o = out[0].data_ptr<T>();
             parallel_for(outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(n * inner, 1)),
                          [&](int64_t b, int64_t e) {
                            std::vector<Acc> acc(static_cast<size_t>(inner));
                            for (int64_t i = b; i < e; ++i) {
                              std::fill(acc.begin(), acc.end(), Acc(0));
                              for (int64_t t = 0; t < n; ++t) {
                                const int64_t k = rev ? n - 1 - t : t;
                                const int64_t base = (i * n + k) * inner;
                                for (int64_t j = 0; j < inner; ++j) {
                                  acc[static_cast<size_t>(j)] += static_cast<Acc>(p[base + j]);
                                  o[base + j] = static_cast<T>(acc[static_cast<size_t>(j)]);
                                }
                              }
                            }
                          });
           });
         },
     // y_k = sum_{i <= k} x_i, so dL/dx_i = sum_{k >= i} g_k: the reverse cumsum of g.
     .grad =
         [](const GradCtx& c) { return TensorList{cumsum(c.g(), c.attrs.i(0), !c.attrs.b(1))}; }});

struct Lines {
  int64_t outer = 1, n = 1, inner = 1, dim = 0;
};
// The dim a scan runs along (a 0-d tensor is one line of one element) and its line layout.
Lines scan_lines(const char* op, const Shape& s, int64_t dim) {
  Lines l;
  if (s.rank() == 0) {
    if (dim != 0 && dim != -1) fail(op, "dim ", dim, " is out of range for a 0-d tensor");
    return l;
  }
  l.dim = wrap_dim(dim, s, op);
  l.n = s[l.dim];
  for (int64_t k = 0; k < l.dim; ++k) l.outer *= s[k];
  for (int64_t k = l.dim + 1; k < s.rank(); ++k) l.inner *= s[k];
  return l;
}

// Calls f(line base pointer offset, stride = inner) for every line of a contiguous tensor.
template <typename F>
void for_each_line(const Lines& l, F&& f) {
  parallel_for(l.outer * l.inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(l.n, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) f((r / l.inner) * l.n * l.inner + r % l.inner);
               });
}

Tensor contig(const Tensor& x) { return x.is_contiguous() ? x : raw_contiguous_copy(x); }

Tensor cumprod_grad(const Tensor& x, const Tensor& g, int64_t dim);

const OpDef& kCumprod = def_op(
    {.name = "cumprod",
     .attr_names = {"dim"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           op_util::require_numeric("cumprod", in[0]);
           scan_lines("cumprod", in[0].shape(), a.i(0));
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Tensor x = contig(in[0]);
           const Lines l = scan_lines("cumprod", x.shape(), a.i(0));
           if (x.numel() == 0) return;
           KILN_DISPATCH_NUMERIC(x.dtype(), "cumprod", [&] {
             using T = scalar_t;
             using Acc = typename WrapAcc<T>::type;
             const T* p = x.data_ptr<T>();
             T* o = out[0].data_ptr<T>();
             for_each_line(l, [&](int64_t base) {
               Acc acc = Acc(1);
               for (int64_t t = 0; t < l.n; ++t) {
                 acc *= static_cast<Acc>(p[base + t * l.inner]);
                 o[base + t * l.inner] = static_cast<T>(acc);
               }
             });
           });
         },
     .grad =
         [](const GradCtx& c) { return TensorList{cumprod_grad(c.in(0), c.g(), c.attrs.i(0))}; }});

// dL/dx_i = sum_{k >= i} g_k prod_{j <= k, j != i} x_j = L_i S_i with L_i = prod_{j < i} x_j and
// S_i = g_i + x_{i+1} S_{i+1}: one backward and one forward pass, exact where x has zeros
// (dividing y by x is not). Inputs: x, g.
const OpDef& kCumprodGrad = def_op(
    {.name = "cumprod_grad",
     .num_inputs = 2,
     .attr_names = {"dim"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           op_util::require_float("cumprod_grad", in[0]);
           op_util::require_same_dtype("cumprod_grad", in[0], in[1]);
           if (!op_util::dims_agree(in[0].shape(), in[1].shape()))
             fail("cumprod_grad", "x ", in[0].shape(), " and grad ", in[1].shape(), " differ");
           scan_lines("cumprod_grad", in[0].shape(), a.i(0));
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Tensor x = contig(in[0]), g = contig(in[1]);
           const Lines l = scan_lines("cumprod_grad", x.shape(), a.i(0));
           if (x.numel() == 0) return;
           KILN_DISPATCH_FLOAT(x.dtype(), "cumprod_grad", [&] {
             using T = scalar_t;
             const T* xp = x.data_ptr<T>();
             const T* gp = g.data_ptr<T>();
             T* o = out[0].data_ptr<T>();
             for_each_line(l, [&](int64_t base) {
               const int64_t st = l.inner;
               double s = 0;
               for (int64_t t = l.n - 1; t >= 0; --t) {  // o holds S_i for now
                 s = static_cast<double>(gp[base + t * st]) +
                     (t + 1 < l.n ? static_cast<double>(xp[base + (t + 1) * st]) * s : 0.0);
                 o[base + t * st] = static_cast<T>(s);
               }
               double left = 1;
               for (int64_t t = 0; t < l.n; ++t) {
                 o[base + t * st] = static_cast<T>(left * static_cast<double>(o[base + t * st]));
                 left *= static_cast<double>(xp[base + t * st]);
               }
             });
           });
         }});

// Running max (IsMax) or min and the index reached: a later equal value takes over (the last
// index of ties, as torch's CPU kernel); the first NaN sticks.
template <bool IsMax>
void cumext_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const char* op = IsMax ? "cummax" : "cummin";
  const Tensor x = contig(in[0]);
  const Lines l = scan_lines(op, x.shape(), a.i(0));
  if (x.numel() == 0) return;
  int64_t* oi = out[1].data_ptr<int64_t>();
  KILN_DISPATCH_NUMERIC(x.dtype(), op, [&] {
    using T = scalar_t;
    const T* p = x.data_ptr<T>();
    T* ov = out[0].data_ptr<T>();
    for_each_line(l, [&](int64_t base) {
      T cur = p[base];
      int64_t at = 0;
      for (int64_t t = 0; t < l.n; ++t) {
        const T v = p[base + t * l.inner];
        if (cur == cur && (v != v || (IsMax ? v >= cur : v <= cur))) {
          cur = v;
          at = t;
        }
        ov[base + t * l.inner] = cur;
        oi[base + t * l.inner] = at;
      }
    });
  });
}

template <const char* Name>
MetaList infer_cumext(std::span<const Tensor> in, const Attrs& a) {
  op_util::require_numeric(Name, in[0]);
  scan_lines(Name, in[0].shape(), a.i(0));
  MetaList m = one(in[0].dtype(), in[0].shape());
  m.push_back(TensorMeta{Int64, in[0].shape()});
  return m;
}

// values = gather(x, dim, indices): the gradient goes back to the positions picked.
TensorList select_grad(const GradCtx& c, int64_t dim) {
  if (!c.flowed(0)) return TensorList{Tensor()};
  const Tensor& x = c.in(0);
  if (x.dim() == 0) return TensorList{c.g(0)};
  Tensor idx = c.out(1), g = c.g(0);
  if (idx.dim() < x.dim()) {  // values without keepdim
    idx = unsqueeze(idx, dim);
    g = unsqueeze(g, dim);
  }
  Tensor z = zeros_like(x);
  if (z.dtype() != g.dtype()) z = cast(z, g.dtype());
  return TensorList{scatter_add(z, dim, idx, g)};
}

constexpr char kCummaxN[] = "cummax", kCumminN[] = "cummin";
const OpDef& kCummax =
    def_op({.name = kCummaxN,
            .num_outputs = 2,
            .attr_names = {"dim"},
            .infer = infer_cumext<kCummaxN>,
            .kernel = cumext_kernel<true>,
            .grad = [](const GradCtx& c) {
              return select_grad(
                  c, c.in(0).dim() == 0 ? 0 : wrap_dim(c.attrs.i(0), c.in(0).shape(), "cummax"));
            }});
const OpDef& kCummin =
    def_op({.name = kCumminN,
            .num_outputs = 2,
            .attr_names = {"dim"},
            .infer = infer_cumext<kCumminN>,
            .kernel = cumext_kernel<false>,
            .grad = [](const GradCtx& c) {
              return select_grad(
                  c, c.in(0).dim() == 0 ? 0 : wrap_dim(c.attrs.i(0), c.in(0).shape(), "cummin"));
            }});

Tensor logcumsumexp_dir(const Tensor& a, int64_t dim, bool reverse);

// log(exp(a) + exp(b)) without overflow; -inf + -inf stays -inf.
inline double log_add_exp(double a, double b) {
  if (a != a || b != b) return NAN;
  const double m = std::max(a, b);
  if (m == -INFINITY) return -INFINITY;
  if (m == INFINITY) return INFINITY;
  return m + std::log1p(std::exp(std::min(a, b) - m));
}

const OpDef& kLogcumsumexp =
    def_op({.name = "logcumsumexp",
            .attr_names = {"dim", "reverse"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  op_util::require_float("logcumsumexp", in[0]);
                  (void)a.b(1);
                  scan_lines("logcumsumexp", in[0].shape(), a.i(0));
                  return one(in[0].dtype(), in[0].shape());
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  const Tensor x = contig(in[0]);
                  const Lines l = scan_lines("logcumsumexp", x.shape(), a.i(0));
                  const bool rev = a.b(1);
                  if (x.numel() == 0) return;
                  KILN_DISPATCH_FLOAT(x.dtype(), "logcumsumexp", [&] {
                    using T = scalar_t;
                    const T* p = x.data_ptr<T>();
                    T* o = out[0].data_ptr<T>();
                    for_each_line(l, [&](int64_t base) {
                      double acc = -INFINITY;
                      for (int64_t t = 0; t < l.n; ++t) {
                        const int64_t k = base + (rev ? l.n - 1 - t : t) * l.inner;
                        acc = log_add_exp(acc, static_cast<double>(p[k]));
                        o[k] = static_cast<T>(acc);
                      }
                    });
                  });
                },
            // dL/dx_i = sum_{k >= i} g_k exp(x_i - y_k), summed in log space for the positive and
            // the negative parts of g separately (TensorFlow's and torch's scheme): no overflow.
            .grad =
                [](const GradCtx& c) {
                  const Tensor& x = c.in(0);
                  const Tensor& y = c.out(0);
                  const Tensor& g = c.g();
                  const int64_t dim = c.attrs.i(0);
                  const bool rev = !c.attrs.b(1);
                  const Tensor zero = op_util::scalar_like(g, 0);
                  const Tensor lp = sub(log(where(gt(g, 0.0), g, zero)), y);
                  const Tensor ln = sub(log(where(lt(g, 0.0), neg(g), zero)), y);
                  const Tensor pos = exp(add(logcumsumexp_dir(lp, dim, rev), x));
                  const Tensor negp = exp(add(logcumsumexp_dir(ln, dim, rev), x));
                  return TensorList{sub(pos, negp)};
                }});

// torch.mode: per line the most frequent value, the smallest of equally frequent ones, and the
// last index where it occurs.
const OpDef& kMode = def_op(
    {.name = "mode",
     .num_outputs = 2,
     .attr_names = {"dim", "keepdim"},
     .traits = kReduction,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           op_util::require_numeric("mode", in[0]);
           const Shape& s = in[0].shape();
           const Lines l = scan_lines("mode", s, a.i(0));
           if (s.rank() > 0 && l.n == 0) fail("mode", "dim ", l.dim, " of shape ", s, " is empty");
           Shape o;
           for (int64_t d = 0; d < s.rank(); ++d)
             if (d != l.dim || a.b(1)) o.push_back(d == l.dim ? 1 : s[d]);
           MetaList m = one(in[0].dtype(), o);
           m.push_back(TensorMeta{Int64, o});
           return m;
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Tensor x = contig(in[0]);
           const Lines l = scan_lines("mode", x.shape(), a.i(0));
           if (out[0].numel() == 0) return;
           int64_t* oi = out[1].data_ptr<int64_t>();
           KILN_DISPATCH_NUMERIC(x.dtype(), "mode", [&] {
             using T = scalar_t;
             const T* p = x.data_ptr<T>();
             T* ov = out[0].data_ptr<T>();
             parallel_for(l.outer * l.inner, 64, [&](int64_t b, int64_t e) {
               std::vector<std::pair<T, int64_t>> v(static_cast<size_t>(l.n));
               for (int64_t r = b; r < e; ++r) {
                 const int64_t base = (r / l.inner) * l.n * l.inner + r % l.inner;
                 for (int64_t t = 0; t < l.n; ++t)
                   v[static_cast<size_t>(t)] = {p[base + t * l.inner], t};
                 // NaNs sort last and count as equal to each other.
                 std::sort(v.begin(), v.end(), [](const auto& u, const auto& w) {
                   const bool nu = u.first != u.first, nw = w.first != w.first;
                   if (nu || nw) return !nu && nw ? true : (nu == nw && u.second < w.second);
                   return u.first < w.first || (u.first == w.first && u.second < w.second);
                 });
                 auto same = [](T u, T w) { return u == w || (u != u && w != w); };
                 size_t best = 0, best_n = 0;
                 for (size_t i = 0; i < v.size();) {
                   size_t j = i;
                   while (j < v.size() && same(v[j].first, v[i].first)) ++j;
                   if (j - i > best_n) {
                     best_n = j - i;
                     best = j - 1;
                   }
                   i = j;
                 }
                 ov[r] = v[best].first;
                 oi[r] = v[best].second;
               }
             });
           });
         },
     .grad =
         [](const GradCtx& c) {
           const Tensor& x = c.in(0);
           return select_grad(c, x.dim() == 0 ? 0 : wrap_dim(c.attrs.i(0), x.shape(), "mode"));
         }});

Tensor cumprod_grad(const Tensor& x, const Tensor& g, int64_t dim) {
  return call1(kCumprodGrad, {x, g}, {dim});
}
Tensor logcumsumexp_dir(const Tensor& a, int64_t dim, bool reverse) {
  return call1(kLogcumsumexp, {a}, {dim, reverse});
}

}  // namespace

Tensor cumsum(const Tensor& a, int64_t dim, bool reverse) {
  // Integers and bools sum as int64, as torch.cumsum.
  const Tensor x =
      a.defined() && !is_floating(a.dtype()) && a.dtype() != Int64 ? cast(a, Int64) : a;
  return call1(kCumsum, {x}, {dim, reverse});
}

Tensor cumprod(const Tensor& a, int64_t dim) {
  if (!a.defined()) fail("cumprod", "input is undefined");
  const Tensor x = !is_floating(a.dtype()) && a.dtype() != Int64 ? cast(a, Int64) : a;
  return call1(kCumprod, {x}, {dim});
}
std::pair<Tensor, Tensor> cummax(const Tensor& a, int64_t dim) {
  TensorList r = call(kCummax, {ordered(a)}, {dim});
  return {bool_back(r[0], a), r[1]};
}
std::pair<Tensor, Tensor> cummin(const Tensor& a, int64_t dim) {
  TensorList r = call(kCummin, {ordered(a)}, {dim});
  return {bool_back(r[0], a), r[1]};
}
Tensor logcumsumexp(const Tensor& a, int64_t dim) {
  if (!a.defined()) fail("logcumsumexp", "input is undefined");
  return logcumsumexp_dir(elementwise_util::float_in(a), dim, false);
}
// The lower median through a sort: the element at (n - 1) / 2 of the sorted values (NaN sorts
// last). The gradient reaches the one element picked, as torch's.
Tensor median(const Tensor& a) {
  if (!a.defined()) fail("median", "input is undefined");
  // An empty float tensor's median is NaN (torch); torch's integer answer is the dtype's
  // lowest value, which Kiln refuses instead (docs/torch_differences.md).
  if (a.numel() == 0) {
    // (through a's sum: a node in a graph, and an (empty) gradient for a, as torch's)
    if (is_floating(a.dtype())) return add(mul(sum(a), 0), NAN);
    fail("median", "cannot take the median of an empty ", a.dtype(), " tensor of shape ",
         a.shape());
  }
  const Tensor flat = reshape(a, Shape{-1});
  const Tensor v = sort(flat, 0).first;
  const int64_t k = (a.numel() - 1) / 2;
  Tensor m = reshape(slice(v, 0, k, k + 1), Shape{});
  if (!is_floating(a.dtype())) return m;
  // torch splits the gradient evenly among the elements equal to the median: m + the mean of
  // (x - m) over them, which is m exactly in value (each term is 0) and 1/ties in gradient.
  if (a.requires_grad()) {
    const Tensor md = m.detach();
    const Tensor tie = eq(flat, md);
    const Tensor dev = where(tie, sub(flat, md), zeros_like(md));
    m = add(md, div(sum(dev), sum(cast(tie, a.dtype()))));
  }
  // NaN propagates (torch), where the sort would put it last and pick a number.
  return where(any(isnan(flat), {}, false), scalar_tensor(NAN, a.dtype()), m);
}
std::pair<Tensor, Tensor> median(const Tensor& a, int64_t dim, bool keepdim) {
  if (!a.defined()) fail("median", "input is undefined");
  if (a.dim() == 0) {
    if (dim != 0 && dim != -1) fail("median", "dim ", dim, " is out of range for a 0-d tensor");
    return {a, zeros(Shape{}, Int64)};
  }
  const int64_t d = wrap_dim(dim, a.shape(), "median");
  const int64_t n = a.shape()[d];
  if (n == 0) fail("median", "dim ", d, " of shape ", a.shape(), " is empty");
  if (n < 0) fail("median", "needs a static size along dim ", d, ", got shape ", a.shape());
  auto [v, i] = sort(a, d);
  const int64_t k = (n - 1) / 2;
  Tensor mv = slice(v, d, k, k + 1), mi = slice(i, d, k, k + 1);
  if (!keepdim) {
    mv = squeeze(mv, d);
    mi = squeeze(mi, d);
  }
  if (!is_floating(a.dtype())) return {mv, mi};
  // A row with a NaN has median NaN at its first NaN (torch).
  const Tensor nan = isnan(a);
  const Tensor has = any(nan, {d}, keepdim);
  return {where(has, scalar_tensor(NAN, a.dtype()), mv), where(has, argmax(nan, d, keepdim), mi)};
}
std::pair<Tensor, Tensor> mode(const Tensor& a, int64_t dim, bool keepdim) {
  TensorList r = call(kMode, {ordered(a)}, {dim, keepdim});
  return {bool_back(r[0], a), r[1]};
}

}  // namespace kiln
