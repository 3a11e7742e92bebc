// Average-pooling family: avg_pool2d (the full-window fast path) with its gradient, the N-D
// avg_pool_nd (1/2/3-D, ceil_mode, count_include_pad, divisor_override, adaptive bins) with its
// gradient, and the composites adaptive_avg_pool (one avg_pool2d when the bins are equal) and
// lp_pool. Each gradient op's own rule is the forward op, so gradients of gradients work.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/pool_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace pool_util;
using op_util::one;
using op_util::pair2;

// avg_pool2d and its gradient op call each other in their rules: wrappers defined below them.
Tensor avg_pool2d_fn(const Tensor& x, const Attrs& pool_attrs);
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& pool_attrs, int64_t H, int64_t W);

Attrs pool_only(const Attrs& a) { return Attrs{a[0], a[1], a[2]}; }

// Separable averaging. Every option's window set is a product of per-dim windows (start, count)
// and every divisor a product of per-dim factors (or divisor_override), so a pool is 1-D passes:
// sums of whole input rows along D and H (rows of W values), then sums along W, then a scaling.
// Where the windows of a dim are full, at stride 1, a pass runs as one long loop over the
// flattened plane that the compiler vectorizes; only border outputs walk their windows one by
// one. (The direct loop per output, a chain of dependent adds, was ~10x slower.)

// The interior of one dim: outputs [lo, hi) read start[lo] + (o - lo) s + j step, j < k.
struct Run {
  int64_t lo = 0, hi = 0, k = 0, s = 1;
};

Run interior(const Win& w) {
  const int64_t n = static_cast<int64_t>(w.count.size());
  auto at = [](int64_t o) { return static_cast<size_t>(o); };
  Run r;
  const int64_t kmax = *std::max_element(w.count.begin(), w.count.end());
  while (r.lo < n && w.count[at(r.lo)] != kmax) ++r.lo;
  if (r.lo == n || kmax == 0) return Run{};
  r.k = kmax;
  r.s = r.lo + 1 < n ? w.start[at(r.lo + 1)] - w.start[at(r.lo)] : 1;
  if (r.s <= 0) r.s = 1;
  r.hi = r.lo + 1;
  while (r.hi < n && w.count[at(r.hi)] == kmax && w.start[at(r.hi)] - w.start[at(r.hi - 1)] == r.s)
    ++r.hi;
  return r;
}

// y[i] = sum_j x[i s + j step] over n values (x is y's window start): the first two or three
// taps in one loop, as a copy loop would be a pass of its own.
template <typename T>
void span_sum(const T* __restrict x, T* __restrict y, int64_t n, int64_t k, int64_t step,
              int64_t s = 1) {
  const T *x1 = x + step, *x2 = x + 2 * step;
  if (s == 1) {
    if (k == 1)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    else if (k == 2)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] + x1[i];
    else
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] + x1[i] + x2[i];
    for (int64_t j = 3; j < k; ++j) {
      const T* xj = x + j * step;
      for (int64_t i = 0; i < n; ++i) y[i] += xj[i];
    }
    return;
  }
  if (k == 1)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i * s];
  else if (k == 2)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i * s] + x1[i * s];
  else
    for (int64_t i = 0; i < n; ++i) y[i] = x[i * s] + x1[i * s] + x2[i * s];
  for (int64_t j = 3; j < k; ++j) {
    const T* xj = x + j * step;
    for (int64_t i = 0; i < n; ++i) y[i] += xj[i * s];
  }
}

// Transpose of span_sum: x[i s + j step] += y[i].
template <typename T>
void span_spread(const T* __restrict y, T* __restrict x, int64_t n, int64_t k, int64_t step,
                 int64_t s = 1) {
  for (int64_t j = 0; j < k; ++j) {
    T* xj = x + j * step;
    if (s == 1)
      for (int64_t i = 0; i < n; ++i) xj[i] += y[i];
    else
      for (int64_t i = 0; i < n; ++i) xj[i * s] += y[i];
  }
}

// Rows of len values: out row o = sum_j in row start[o] + j step (n output rows).
template <typename T>
void col_sum(const T* in, T* out, const Win& w, const Run& r, int64_t n, int64_t len) {
  for (int64_t o = 0; o < n; ++o) {
    if (o == r.lo && r.s == 1 && r.hi > r.lo) {  // the interior rows as one flat span
      span_sum(in + w.start[static_cast<size_t>(o)] * len, out + o * len, (r.hi - r.lo) * len, r.k,
               w.step * len);
      o = r.hi - 1;
      continue;
    }
    const size_t u = static_cast<size_t>(o);
    if (w.count[u] == 0)
      std::fill(out + o * len, out + (o + 1) * len, T(0));
    else
      span_sum(in + w.start[u] * len, out + o * len, len, w.count[u], w.step * len);
  }
}

// Transpose of col_sum: nin input rows, each written. At stride 1 an input row t is covered by
// the interior output rows o with o + base <= t < o + base + k, so the transpose is itself a
// window sum (a gather that writes each row once, not k read-modify-write passes); border
// output rows are then spread onto it.
template <typename T>
void col_spread(const T* out, T* in, const Win& w, const Run& r, int64_t n, int64_t nin,
                int64_t len) {
  auto spread_edges = [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const size_t u = static_cast<size_t>(o);
      span_spread(out + o * len, in + w.start[u] * len, len, w.count[u], w.step * len);
    }
  };
  if (r.hi > r.lo && r.s == 1 && w.step == 1) {
    const int64_t base = w.start[static_cast<size_t>(r.lo)] - r.lo, k = r.k;
    const int64_t f0 = r.lo + base + k - 1, f1 = r.hi + base;  // input rows with k covers
    for (int64_t t = 0; t < nin; ++t) {
      if (t == f0 && f1 > f0) {
        span_sum(out + r.lo * len, in + t * len, (f1 - f0) * len, k, len);
        t = f1 - 1;
        continue;
      }
      const int64_t a = std::max(r.lo, t - base - k + 1), b = std::min(r.hi, t - base + 1);
      if (b <= a)
        std::fill(in + t * len, in + (t + 1) * len, T(0));
      else
        span_sum(out + a * len, in + t * len, len, b - a, len);
    }
    spread_edges(0, r.lo);
    spread_edges(r.hi, n);
    return;
  }
  std::fill(in, in + nin * len, T(0));
  spread_edges(0, n);
}

// rows rows of L values to rows of n: y[o] = sum_j x[start[o] + j step].
template <typename T>
void row_sum(const T* x, T* y, const Win& w, const Run& r, int64_t rows, int64_t L, int64_t n) {
  auto edge = [&](const T* xr, T* yr, int64_t o) {
    const size_t u = static_cast<size_t>(o);
    T s = 0;
    for (int64_t j = 0; j < w.count[u]; ++j) s += xr[w.start[u] + j * w.step];
    yr[o] = s;
  };
  const int64_t m = r.hi - r.lo, off = r.lo < r.hi ? w.start[static_cast<size_t>(r.lo)] : 0;
  if (m > 0 && r.s == 1 && n == L && r.k <= 8) {
    // Output column c of a row reads input columns c - lo + off + j step: with rows of equal
    // length the whole map is one span, from the first row's lo to the last row's hi. The
    // border columns it wrote with the neighbour row's values are then redone.
    span_sum(x + off, y + r.lo, (rows - 1) * n + m, r.k, w.step);
    // A border column at a time, down the rows (not a window walk per row and column).
    auto column = [&](int64_t o) {
      const size_t u = static_cast<size_t>(o);
      const T* xc = x + w.start[u];
      T* yc = y + o;
      for (int64_t i = 0; i < rows; ++i) yc[i * n] = 0;
      for (int64_t j = 0; j < w.count[u]; ++j)
        for (int64_t i = 0; i < rows; ++i) yc[i * n] += xc[i * L + j * w.step];
    };
    for (int64_t o = 0; o < r.lo; ++o) column(o);
    for (int64_t o = r.hi; o < n; ++o) column(o);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const T* xr = x + i * L;
    T* yr = y + i * n;
    for (int64_t o = 0; o < r.lo; ++o) edge(xr, yr, o);
    for (int64_t o = r.hi; o < n; ++o) edge(xr, yr, o);
    if (m <= 0) continue;
    if (r.k <= 8) {
      span_sum(xr + off, yr + r.lo, m, r.k, w.step, r.s);
    } else {
      // Strided or wide windows: one reduction per output, in independent partial sums.
      for (int64_t o = 0; o < m; ++o) {
        const T* p = xr + off + o * r.s;
        T a[4] = {0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 4 <= r.k; j += 4)
          for (int t = 0; t < 4; ++t) a[t] += p[(j + t) * w.step];
        for (; j < r.k; ++j) a[0] += p[j * w.step];
        yr[r.lo + o] = (a[0] + a[1]) + (a[2] + a[3]);
      }
    }
  }
}

// Transpose of row_sum: x[start[o] + j step] += y[o] over rows rows of L values, each written.
// The flat stride-1 case gathers as col_spread does: x[i] = sum_j y[i + d + j] over the map
// with the border outputs taken out (the windows of a row's interior stay in that row, so a
// neighbour row's values read across the row end are border ones), then spreads those.
template <typename T>
void row_spread(T* y, T* x, const Win& w, const Run& r, int64_t rows, int64_t L, int64_t n, T* ev) {
  auto edge = [&](T v, T* xr, int64_t o) {
    const size_t u = static_cast<size_t>(o);
    for (int64_t j = 0; j < w.count[u]; ++j) xr[w.start[u] + j * w.step] += v;
  };
  const int64_t m = r.hi - r.lo, off = r.lo < r.hi ? w.start[static_cast<size_t>(r.lo)] : 0;
  if (m > 0 && r.s == 1 && n == L && r.k <= 8 && w.step == 1) {
    const int64_t N = rows * n, k = r.k, d = r.lo - off - (k - 1);
    // The border columns move to ev (column e of the n - m at ev + e rows), zeros in their place.
    auto take = [&](int64_t o, T* e) {
      for (int64_t i = 0; i < rows; ++i) e[i] = y[i * n + o], y[i * n + o] = 0;
    };
    for (int64_t o = 0; o < r.lo; ++o) take(o, ev + o * rows);
    for (int64_t o = r.hi; o < n; ++o) take(o, ev + (o - m) * rows);
    const T* yz = y;
    const int64_t i0 = std::min(N, std::max<int64_t>(0, -d)),
                  i1 = std::max(i0, std::min(N, N - d - k + 1));
    auto tail = [&](int64_t i) {
      T s = 0;
      for (int64_t j = std::max<int64_t>(0, -(i + d)); j < k && i + d + j < N; ++j)
        s += yz[i + d + j];
      x[i] = s;
    };
    for (int64_t i = 0; i < i0; ++i) tail(i);
    span_sum(yz + i0 + d, x + i0, i1 - i0, k, 1);
    for (int64_t i = i1; i < N; ++i) tail(i);
    auto give = [&](int64_t o, const T* e) {
      const size_t u = static_cast<size_t>(o);
      for (int64_t j = 0; j < w.count[u]; ++j) {
        T* xc = x + w.start[u] + j * w.step;
        for (int64_t i = 0; i < rows; ++i) xc[i * L] += e[i];
      }
    };
    for (int64_t o = 0; o < r.lo; ++o) give(o, ev + o * rows);
    for (int64_t o = r.hi; o < n; ++o) give(o, ev + (o - m) * rows);
    return;
  }
  std::fill(x, x + rows * L, T(0));
  for (int64_t i = 0; i < rows; ++i) {
    const T* yr = y + i * n;
    T* xr = x + i * L;
    for (int64_t o = 0; o < r.lo; ++o) edge(yr[o], xr, o);
    for (int64_t o = r.hi; o < n; ++o) edge(yr[o], xr, o);
    if (m <= 0) continue;
    span_spread(yr + r.lo, xr + off, m, r.k, w.step, r.s);
  }
}

// One plane's window tables, interiors and reciprocal divisors.
template <typename T>
struct SepPlan {
  std::array<Win, 3> w;
  std::array<Run, 3> run;
  std::array<int64_t, 3> L, O;
  bool has_d = false;  // a real D dim (3-D pooling) to sum over
  bool whole = false;  // one window, the whole plane (global pooling)
  T uniform = 0;       // the reciprocal divisor when all outputs share it, else 0
  std::vector<T> inv;  // else 1 / divisor of each output

  SepPlan(const NdP& q, const std::array<int64_t, 3>& L_, const std::array<int64_t, 3>& O_)
      : L(L_), O(O_) {
    w = nd_windows(q, L.data() + 3 - q.nd, O.data() + 3 - q.nd);
    for (size_t i = 0; i < 3; ++i) run[i] = interior(w[i]);
    has_d = L[0] != 1 || O[0] != 1 || w[0].count[0] != 1 || w[0].start[0] != 0;
    whole = true;
    for (size_t i = 0; i < 3; ++i)
      whole = whole && O[i] == 1 && w[i].start[0] == 0 && w[i].count[0] == L[i];
    auto same = [](const std::vector<int64_t>& f) {
      return std::all_of(f.begin(), f.end(), [&](int64_t v) { return v == f[0]; });
    };
    if (q.divisor > 0 || (same(w[0].factor) && same(w[1].factor) && same(w[2].factor))) {
      const int64_t d =
          q.divisor > 0 ? q.divisor : w[0].factor[0] * w[1].factor[0] * w[2].factor[0];
      if (d > 0) {
        uniform = T(1) / static_cast<T>(d);
        return;
      }
    }
    inv.resize(static_cast<size_t>(O[0] * O[1] * O[2]));
    size_t i = 0;
    for (int64_t a : w[0].factor)
      for (int64_t b : w[1].factor)
        for (int64_t c : w[2].factor) {
          const int64_t d = q.divisor > 0 ? q.divisor : a * b * c;
          inv[i++] = d > 0 ? T(1) / static_cast<T>(d) : T(0);
        }
  }

  void scale(const T* src, T* dst) const {
    const int64_t n = O[0] * O[1] * O[2];
    if (inv.empty()) {
      const T u = uniform;
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * u;
    } else {
      const T* m = inv.data();
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * m[i];
    }
  }
};

// y = A x for one plane: D, then H sums of whole input rows, W sums, the scaling. s1, s2:
// scratch (see sep_avg).
template <typename T>
void sep_fwd(const SepPlan<T>& P, const T* x, T* y, T* s1, T* s2) {
  const auto &L = P.L, &O = P.O;
  if (P.whole) {  // one contiguous sum, in vector lanes (as reduce_rows)
    const int64_t n = L[0] * L[1] * L[2];
    T a = 0;
#pragma omp simd reduction(+ : a)
    for (int64_t i = 0; i < n; ++i) a += x[i];
    y[0] = a;
    P.scale(y, y);
    return;
  }
  const T* t = x;
  if (P.has_d) {
    col_sum(x, s1, P.w[0], P.run[0], O[0], L[1] * L[2]);
    t = s1;
  }
  for (int64_t a = 0; a < O[0]; ++a)
    col_sum(t + a * L[1] * L[2], s2 + a * O[1] * L[2], P.w[1], P.run[1], O[1], L[2]);
  row_sum(s2, y, P.w[2], P.run[2], O[0] * O[1], L[2], O[2]);
  P.scale(y, y);
}

// dx = A^T g for one plane: the transposed passes in reverse order.
template <typename T>
void sep_bwd(const SepPlan<T>& P, const T* g, T* dx, T* s1, T* s2, T* s3) {
  const auto &L = P.L, &O = P.O;
  P.scale(g, s3);
  if (P.whole) {
    std::fill(dx, dx + L[0] * L[1] * L[2], s3[0]);
    return;
  }
  row_spread(s3, s2, P.w[2], P.run[2], O[0] * O[1], L[2], O[2], s1);
  T* t = P.has_d ? s1 : dx;
  for (int64_t a = 0; a < O[0]; ++a)
    col_spread(s2 + a * O[1] * L[2], t + a * L[1] * L[2], P.w[1], P.run[1], O[1], L[1], L[2]);
  if (P.has_d) col_spread(s1, dx, P.w[0], P.run[0], O[0], L[0], L[1] * L[2]);
}

// forward = true: y = A x (average over each window); false: dx = A^T g.
template <typename T>
void sep_avg(const Tensor& src, Tensor& dst, const NdP& q, bool forward) {
  const Tensor& xin = forward ? src : dst;  // the input-shaped tensor
  const Tensor& yout = forward ? dst : src;
  const SepPlan<T> P(q, sp3(xin, q.nd), sp3(yout, q.nd));
  const int64_t In = P.L[0] * P.L[1] * P.L[2], On = P.O[0] * P.O[1] * P.O[2];
  const T* ps = src.data_ptr<T>();
  T* pd = dst.data_ptr<T>();
  // (as for_planes, with scratch per chunk of planes: thread_local storage would not fit the
  // static TLS block that dlopen leaves once torch or numpy are loaded)
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(In + On * 4, 1));
  parallel_for(planes_of(xin), grain, [&](int64_t lo, int64_t hi) {
    // Scratch: s1 holds O0 L1 L2 (or the border outputs, at most O0 O1 O2), s2 O0 O1 L2, s3
    // O0 O1 O2; uninitialized, as every pass writes before it reads.
    const int64_t n1 = std::max(P.O[0] * P.L[1] * P.L[2], On), n2 = P.O[0] * P.O[1] * P.L[2];
    std::unique_ptr<T[]> buf(new T[static_cast<size_t>(n1 + n2 + On)]);
    T *s1 = buf.get(), *s2 = s1 + n1, *s3 = s2 + n2;
    for (int64_t pl = lo; pl < hi; ++pl) {
      if (forward)
        sep_fwd(P, ps + pl * In, pd + pl * On, s1, s2);
      else
        sep_bwd(P, ps + pl * On, pd + pl * In, s1, s2, s3);
    }
  });
}

// The 2-D op's windows: count_include_pad, no ceil_mode, divisor kH kW.
NdP nd_of(const PoolP& p) {
  NdP q;
  q.nd = 2;
  q.k = {p.kH, p.kW};
  q.s = {p.sH, p.sW};
  q.p = {p.pH, p.pW};
  q.d = {1, 1};
  return q;
}

const OpDef& kAvgPool2d = def_op(
    {.name = "avg_pool2d",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           Shape ys = check_pool("avg_pool2d", in[0].shape(), pool_params("avg_pool2d", a));
           op_util::require_float("avg_pool2d", in[0]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           PoolP p = pool_params("avg_pool2d", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool2d",
                               [&] { sep_avg<scalar_t>(in[0], out[0], nd_of(p), true); });
         },
     // y = A x with A[o, i] = 1/(kH kW) for i in window o: dx = A^T g (avg_pool2d_grad).
     .grad =
         [](const GradCtx& c) {
           return TensorList{avg_pool2d_grad_fn(c.g(), c.attrs, c.in(0).size(2), c.in(0).size(3))};
         },
     .contiguous_inputs = true,
     .doc = "2-D average pooling, count_include_pad = true"});

const OpDef& kAvgPool2dGrad =
    def_op({.name = "avg_pool2d_grad",
            .num_inputs = 1,
            .attr_names = {"kernel", "stride", "padding", "input_size"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  PoolP p = pool_params("avg_pool2d_grad", a);
                  return one(in[0].dtype(), pool_grad_shape("avg_pool2d_grad", in[0], a, p));
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  PoolP p = pool_params("avg_pool2d_grad", a);
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool2d_grad",
                                      [&] { sep_avg<scalar_t>(in[0], out[0], nd_of(p), false); });
                },
            // dx = A^T g is linear in g; its adjoint is A: the g-gradient is avg_pool2d(gg).
            .grad = [](const GradCtx& c) { return TensorList{avg_pool2d_fn(c.g(), c.attrs)}; },
            .contiguous_inputs = true,
            .doc = "gradient of avg_pool2d: spreads grad_output / (kH kW) over each window"});

Tensor avg_pool2d_fn(const Tensor& x, const Attrs& a) {
  return call1(kAvgPool2d, {x}, pool_only(a));
}
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& a, int64_t H, int64_t W) {
  return call1(kAvgPool2dGrad, {g}, {a[0], a[1], a[2], Ints{H, W}});
}

Tensor nd_avg_fn(const Tensor& x, const Attrs& a);
Tensor nd_avg_grad_fn(const Tensor& g, const Attrs& a, const Tensor& x);

const OpDef& kAvgPoolNd = def_op(
    {.name = "avg_pool_nd",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "avg_pool_nd";
           Shape ys = nd_check(op, in[0].shape(), nd_params(op, a));
           op_util::require_float(op, in[0]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           NdP q = nd_params("avg_pool_nd", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool_nd",
                               [&] { sep_avg<scalar_t>(in[0], out[0], q, true); });
         },
     // y = A x: dx = A^T g (avg_pool_nd_grad).
     .grad = [](const GradCtx& c) { return TensorList{nd_avg_grad_fn(c.g(), c.attrs, c.in(0))}; },
     .contiguous_inputs = true,
     .doc = "1/2/3-D average pooling (ceil_mode, count_include_pad, divisor_override, adaptive "
            "bins). Any dim may be dynamic (a dynamic spatial dim pools to a dynamic size)"});

const OpDef& kAvgPoolNdGrad = def_op(
    {.name = "avg_pool_nd_grad",
     .num_inputs = -1,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size", "input_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "avg_pool_nd_grad";
           NdP q = nd_params(op, a);
           const Tensor& g = in[0];
           op_util::require_float(op, g, "grad_output");
           // An optional input 1 (the pooled input, its values unread) gives the input
           // size where input_size has dynamic dims: it cannot be read back from g
           // (strided windows round).
           if (in.size() != 1 && in.size() != 2)
             fail(op, "takes grad_output and an optional input, got ", in.size(), " inputs");
           const Ints& sz = a.ints(8);
           if (g.dim() != static_cast<int64_t>(q.nd) + 2 || sz.size() != q.nd ||
               (in.size() == 2 && in[1].dim() != g.dim()))
             fail(op, "grad_output ", g.shape(), " and input_size ", Shape(sz), " must have ",
                  q.nd + 2, " and ", q.nd, " dims");
           Shape xs{g.size(0), g.size(1)};
           for (size_t i = 0; i < q.nd; ++i) {
             const int64_t v = in.size() == 2 ? in[1].size(static_cast<int64_t>(i) + 2) : sz[i];
             if (v < 0 && in.size() == 1)
               fail(op, "needs a static size: input_size ", Shape(sz),
                    " has a dynamic dim and no input gives it (grad_output ", g.shape(), ")");
             xs.push_back(v);
           }
           Shape ys = nd_check(op, xs, q);
           for (int64_t d = 2; d < g.dim(); ++d)
             if (g.size(d) >= 0 && ys[d] != g.size(d))
               fail(op, "grad_output shape ", g.shape(), " does not match the pooled size ", ys,
                    " of input ", xs);
           return one(g.dtype(), xs);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           NdP q = nd_params("avg_pool_nd_grad", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool_nd_grad",
                               [&] { sep_avg<scalar_t>(in[0], out[0], q, false); });
         },
     // dx = A^T g is linear in g; its adjoint is A.
     .grad =
         [](const GradCtx& c) {
           TensorList r{nd_avg_fn(c.g(), Attrs{c.attrs[0], c.attrs[1], c.attrs[2], c.attrs[3],
                                               c.attrs[4], c.attrs[5], c.attrs[6], c.attrs[7]})};
           if (c.inputs.size() == 2) r.push_back(Tensor());
           return r;
         },
     .contiguous_inputs = true,
     .doc = "gradient of avg_pool_nd: spreads grad_output / divisor over each window"});

Tensor nd_avg_fn(const Tensor& x, const Attrs& a) { return call1(kAvgPoolNd, {x}, a); }
Tensor nd_avg_grad_fn(const Tensor& g, const Attrs& a, const Tensor& x) {
  const Ints all = x.shape().vec();
  Ints sz(all.begin() + 2, all.end());
  const Attrs ga{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], sz};
  // A dynamic spatial size: x itself gives it when the graph runs (its values are not read).
  if (std::any_of(sz.begin(), sz.end(), [](int64_t v) { return v < 0; }))
    return call1(kAvgPoolNdGrad, {g, x}, ga);
  return call1(kAvgPoolNdGrad, {g}, ga);
}

Tensor adaptive_avg_nd(const char* op, size_t nd, const Tensor& x, const Ints& output_size) {
  Attrs a{Ints{}, Ints{}, Ints{},     Ints{},
          false,  true,   int64_t(0), expand_n(op, "output_size", output_size, nd)};
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));
    Tensor y = call1(kAvgPoolNd, {xb}, a);
    return unb ? squeeze(y, 0) : y;
  });
}

Tensor avg_pool_nd(const char* op, size_t nd, const Tensor& x, const Ints& kernel,
                   const Ints& stride, const Ints& padding, bool ceil, bool include_pad,
                   int64_t divisor) {
  Attrs a = nd_attrs(op, nd, kernel, stride, padding, Ints{1}, ceil, include_pad, divisor);
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));
    Tensor y = call1(kAvgPoolNd, {xb}, a);
    return unb ? squeeze(y, 0) : y;
  });
}

// torch's lp_pool: (sign(s) relu(|s|) * kernel_numel)^(1/p) with s = avg_pool(x^p).
Tensor lp_pool_nd(const char* op, size_t nd, const Tensor& x, double norm_type, const Ints& kernel,
                  const Ints& stride, bool ceil) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  const Ints k = expand_n(op, "kernel_size", kernel, nd);
  int64_t numel = 1;
  for (int64_t v : k) numel *= v;
  Tensor s = avg_pool_nd(op, nd, pow(x, norm_type), k, stride, Ints{0}, ceil, true, 0);
  return pow(mul(mul(sign(s), relu(abs(s))), static_cast<double>(numel)), 1.0 / norm_type);
}

}  // namespace

Tensor avg_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad) {
  return avg_pool_nd("avg_pool1d", 1, x, kernel, stride, padding, ceil_mode, count_include_pad, 0);
}
Tensor avg_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  return avg_pool_nd("avg_pool3d", 3, x, kernel, stride, padding, ceil_mode, count_include_pad,
                     divisor_override);
}
Tensor lp_pool1d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, bool ceil_mode) {
  return lp_pool_nd("lp_pool1d", 1, x, norm_type, kernel, stride, ceil_mode);
}
Tensor lp_pool2d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, bool ceil_mode) {
  return lp_pool_nd("lp_pool2d", 2, x, norm_type, kernel, stride, ceil_mode);
}
Tensor adaptive_avg_pool1d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_avg_nd("adaptive_avg_pool1d", 1, x, output_size);
}
Tensor adaptive_avg_pool3d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_avg_nd("adaptive_avg_pool3d", 3, x, output_size);
}

// torch's bins: output i of n over a length L averages [floor(i L / n), ceil((i + 1) L / n)).
// The bins of a rectangle are products of row and column ranges, so averaging over rows, then
// columns, is the rectangle's mean. Equal bins (L divisible by n) are one avg_pool2d.
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  const char* op = "adaptive_avg_pool2d";
  Ints o = pair2(op, "output_size", output_size);
  if (o[0] <= 0 || o[1] <= 0) fail(op, "output_size must be positive, got ", Shape(o));
  // (uneven bins cost one op per output row and column)
  if (o[0] > 65536 || o[1] > 65536)
    fail(op, "output_size must be at most 65536 per dim, got ", Shape(o));
  return pool_call(op, x, [&](const Tensor& x4) {
    if (!is_floating(x4.dtype()))
      fail(op, "input must be floating point, got ", x4.dtype(), x4.shape());
    const int64_t H = x4.size(2), W = x4.size(3);
    if (H < 0 || W < 0) fail(op, "needs static H and W, got shape ", x4.shape());
    if (H == 0 || W == 0) fail(op, "input has an empty spatial dim: shape ", x4.shape());
    if (H % o[0] == 0 && W % o[1] == 0) return avg_pool2d(x4, {H / o[0], W / o[1]});
    // Uneven bins: the N-D op's adaptive windows.
    return adaptive_avg_nd(op, 2, x4, o);
  });
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  // The fast op divides by the full window and never sees a window past the padding.
  if (ceil_mode || !count_include_pad || divisor_override != 0)
    return avg_pool_nd("avg_pool2d", 2, x, kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override);
  Ints k = pair2("avg_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("avg_pool2d", "stride", stride);
  Ints p = pair2("avg_pool2d", "padding", padding);
  return pool_call("avg_pool2d", x, [&](const Tensor& x4) {
    return call1(kAvgPool2d, {x4}, {k, s, p});
  });
}

}  // namespace kiln
