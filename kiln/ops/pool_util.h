// Shared pieces of the pooling families (max_pool.cpp, avg_pool.cpp): the 2-D ops' attributes
// {kernel, stride, padding} and shape checks, the N-D ops' attributes and window tables, the
// per-plane parallel loop, and the wrappers' argument expansion and unbatched-input handling.
#pragma once
#include <algorithm>
#include <array>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"

namespace kiln::detail::pool_util {

using op_util::out_size;
using Ints = std::vector<int64_t>;

// ---- pooling: attributes {kernel, stride, padding} (+ input_size for the gradients) ----------

struct PoolP {
  int64_t kH, kW, sH, sW, pH, pW;
};

inline PoolP pool_params(const char* op, const Attrs& a) {
  const Ints &k = a.ints(0), &s = a.ints(1), &p = a.ints(2);
  if (k.size() != 2 || s.size() != 2 || p.size() != 2)
    fail(op, "kernel, stride and padding must have 2 values each, got ", Shape(k), ", ", Shape(s),
         ", ", Shape(p));
  if (k[0] <= 0 || k[1] <= 0) fail(op, "kernel must be positive, got ", Shape(k));
  if (s[0] <= 0 || s[1] <= 0) fail(op, "stride must be positive, got ", Shape(s));
  op_util::check_window_params(op, "kernel", k);
  op_util::check_window_params(op, "stride", s);
  // As PyTorch: a wider pad would give windows that see only padding.
  if (p[0] < 0 || p[1] < 0 || p[0] > k[0] / 2 || p[1] > k[1] / 2)
    fail(op, "padding ", Shape(p), " must be non-negative and at most half the kernel ", Shape(k));
  return PoolP{k[0], k[1], s[0], s[1], p[0], p[1]};
}

// Checks an input shape [N, C, H, W] (dynamic dims pass); returns the pooled shape.
inline Shape check_pool(const char* op, const Shape& s, const PoolP& p) {
  if (s.rank() != 4) fail(op, "input must be 4-D [N, C, H, W], got shape ", s);
  // As PyTorch: only the batch may be empty (an empty plane with padding gave windows of padding
  // alone: -inf maxima and indices into nothing).
  if (s[1] == 0 || s[2] == 0 || s[3] == 0)
    fail(op, "input must have non-empty C, H and W (only N may be 0), got shape ", s);
  if ((s[2] >= 0 && s[2] + 2 * p.pH < p.kH) || (s[3] >= 0 && s[3] + 2 * p.pW < p.kW))
    fail(op, "kernel [", p.kH, ", ", p.kW, "] is larger than the padded input ", s[2] + 2 * p.pH,
         "x", s[3] + 2 * p.pW, " (input shape ", s, ", padding [", p.pH, ", ", p.pW, "])");
  return Shape{s[0], s[1], out_size(s[2], p.kH, p.pH, p.sH), out_size(s[3], p.kW, p.pW, p.sW)};
}

// input_size of a pooling gradient: two positive sizes (-1: a dynamic dim of a graph).
inline void check_input_size(const char* op, const Ints& hw) {
  if (hw.size() != 2 || hw[0] == 0 || hw[1] == 0 || hw[0] < -1 || hw[1] < -1) {
    fail(op, "input_size must be 2 positive sizes, got ", ints_str(hw));
  }
}

// Spatial input size for a pooling gradient: input_size attribute (4th), checked against g.
inline Shape pool_grad_shape(const char* op, const Tensor& g, const Attrs& a, const PoolP& p) {
  if (g.dim() != 4) fail(op, "grad_output must be 4-D [N, C, OH, OW], got shape ", g.shape());
  op_util::require_float(op, g);
  const Ints& hw = a.ints(3);
  check_input_size(op, hw);
  Shape xs{g.size(0), g.size(1), hw[0], hw[1]};
  Shape ys = check_pool(op, xs, p);
  if ((ys[2] >= 0 && g.size(2) >= 0 && ys[2] != g.size(2)) ||
      (ys[3] >= 0 && g.size(3) >= 0 && ys[3] != g.size(3)))
    fail(op, "grad_output shape ", g.shape(), " does not match the pooled size ", ys, " of input ",
         xs);
  return xs;
}

// Calls f(plane) for each of the N*C planes, in parallel when the work is large.
template <typename F>
void for_planes(int64_t planes, int64_t work_per_plane, F&& f) {
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work_per_plane, 1));
  parallel_for(planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) f(i);
  });
}

// ---- N-D pooling with every torch option -----------------------------------------------------
// One max op (values + flat plane indices), one average op and its gradient cover 1, 2 and 3
// spatial dims, ceil_mode, dilation, count_include_pad, divisor_override and adaptive bins.
// Attributes {kernel, stride, padding, dilation, ceil_mode, count_include_pad,
// divisor_override, output_size}: an empty kernel means adaptive pooling to output_size.
// C and the spatial dims must be static (N may be dynamic).

struct NdP {
  size_t nd = 0;
  Ints k, s, p, d, osz;
  bool ceil = false, include_pad = true;
  int64_t divisor = 0;
  bool adaptive() const { return k.empty(); }
};

inline NdP nd_params(const char* op, const Attrs& a) {
  NdP q;
  q.k = a.ints(0);
  q.s = a.ints(1);
  q.p = a.ints(2);
  q.d = a.ints(3);
  q.ceil = a.b(4);
  q.include_pad = a.b(5);
  q.divisor = a.i(6);
  q.osz = a.ints(7);
  if (q.adaptive()) {
    q.nd = q.osz.size();
    if (q.nd < 1 || q.nd > 3) fail(op, "output_size must have 1 to 3 values, got ", Shape(q.osz));
    for (int64_t o : q.osz)
      if (o <= 0 || o > (int64_t(1) << 30))
        fail(op, "output_size must be positive, got ", Shape(q.osz));
    return q;
  }
  q.nd = q.k.size();
  if (q.nd < 1 || q.nd > 3 || q.s.size() != q.nd || q.p.size() != q.nd || q.d.size() != q.nd)
    fail(op, "kernel, stride, padding and dilation must have 1 to 3 values each, alike, got ",
         Shape(q.k), ", ", Shape(q.s), ", ", Shape(q.p), ", ", Shape(q.d));
  for (const Ints* v : {&q.k, &q.s, &q.p, &q.d}) op_util::check_window_params(op, "window", *v);
  for (size_t i = 0; i < q.nd; ++i) {
    if (q.k[i] <= 0) fail(op, "kernel_size must be positive, got ", Shape(q.k));
    if (q.s[i] <= 0) fail(op, "stride must be positive, got ", Shape(q.s));
    if (q.d[i] <= 0) fail(op, "dilation must be positive, got ", Shape(q.d));
    if (q.p[i] < 0 || q.p[i] > q.k[i] / 2)
      fail(op, "pad should be at most half of kernel size: padding ", Shape(q.p), ", kernel ",
           Shape(q.k));
  }
  if (q.divisor < 0) fail(op, "divisor_override must be positive, got ", q.divisor);
  return q;
}

// torch's pooling_output_shape.
inline int64_t nd_out(int64_t L, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t num = L + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= L + p) --o;
  return o;
}

inline Shape nd_check(const char* op, const Shape& xs, const NdP& q) {
  if (xs.rank() != static_cast<int64_t>(q.nd) + 2)
    fail(op, "input must be ", q.nd + 2, "-D [N, C, ",
         q.nd == 1   ? "L"
         : q.nd == 2 ? "H, W"
                     : "D, H, W",
         "] (or ", q.nd + 1, "-D unbatched), got shape ", xs);
  // Dynamic dims (-1, a graph or a jit trace) stay dynamic: N and C pass through, a dynamic
  // spatial dim pools to a dynamic size (adaptive bins to output_size); the kernel sees the
  // concrete shape and these checks run again on it.
  Shape ys = xs;
  if (xs[1] == 0) fail(op, "input must have non-empty channels (only N may be 0), got shape ", xs);
  for (size_t i = 0; i < q.nd; ++i) {
    const int64_t L = xs[static_cast<int64_t>(i) + 2];
    if (L < 0) {
      ys[static_cast<int64_t>(i) + 2] = q.adaptive() ? q.osz[i] : -1;
      continue;
    }
    if (L == 0) fail(op, "input has an empty spatial dim: shape ", xs);
    int64_t o = q.adaptive() ? q.osz[i] : nd_out(L, q.k[i], q.s[i], q.p[i], q.d[i], q.ceil);
    if (o < 1)
      fail(op, "output size is too small: input ", xs, " with kernel ", Shape(q.k), ", stride ",
           Shape(q.s), ", padding ", Shape(q.p), ", dilation ", Shape(q.d), " gives ", o,
           " in dim ", i + 2);
    ys[static_cast<int64_t>(i) + 2] = o;
  }
  return ys;
}

// One spatial dim's windows: output o reads positions start[o] + j step, j < count[o]; its
// share of the average's divisor is factor[o].
struct Win {
  std::vector<int64_t> start, count, factor;
  int64_t step = 1;
};

// The three dims (leading ones of size 1 when nd < 3) of input sizes L and output sizes O.
inline std::array<Win, 3> nd_windows(const NdP& q, const int64_t* L, const int64_t* O) {
  std::array<Win, 3> w;
  const size_t off = 3 - q.nd;
  for (size_t i = 0; i < 3; ++i) {
    Win& v = w[i];
    if (i < off) {
      v.start = {0};
      v.count = {1};
      v.factor = {1};
      continue;
    }
    const size_t j = i - off;
    const int64_t l = L[j], n = O[j];
    v.start.resize(static_cast<size_t>(n));
    v.count.resize(static_cast<size_t>(n));
    v.factor.resize(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
      const size_t u = static_cast<size_t>(o);
      if (q.adaptive()) {
        const int64_t b = o * l / n, e = ((o + 1) * l + n - 1) / n;
        v.start[u] = b;
        v.count[u] = v.factor[u] = e - b;
        continue;
      }
      const int64_t k = q.k[j], st = q.s[j], p = q.p[j], d = q.d[j];
      const int64_t base = o * st - p;
      const int64_t j0 = base < 0 ? (-base + d - 1) / d : 0;
      const int64_t jend = base > l - 1 ? 0 : base + (k - 1) * d < l ? k : (l - 1 - base) / d + 1;
      v.start[u] = base + j0 * d;
      v.count[u] = std::max<int64_t>(0, jend - j0);
      v.factor[u] = q.include_pad ? std::min(base + k, l + p) - base : v.count[u];
      v.step = d;
    }
  }
  return w;
}

// Spatial sizes (padded to 3) of a [N, C, ...] tensor.
inline std::array<int64_t, 3> sp3(const Tensor& t, size_t nd) {
  std::array<int64_t, 3> r{1, 1, 1};
  for (size_t i = 0; i < nd; ++i) r[3 - nd + i] = t.size(static_cast<int64_t>(i) + 2);
  return r;
}

inline int64_t planes_of(const Tensor& t) { return t.size(0) * t.size(1); }

// n values from a 1- or n-value argument (kernel_size=3 or (3, 3, 3)).
inline Ints expand_n(const char* op, const char* what, const Ints& v, size_t n) {
  if (v.size() == 1) return Ints(n, v[0]);
  if (v.size() != n) fail(op, what, " must have 1 or ", n, " values, got ", Shape(v));
  return v;
}

// Adds a batch dim to an unbatched input ([C, *] with nd spatial dims) around f.
template <typename F>
auto nd_call(const char* op, const Tensor& x, size_t nd, F&& f) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  const int64_t r = static_cast<int64_t>(nd);
  if (x.dim() != r + 1 && x.dim() != r + 2)
    fail(op, "input must be ", r + 1, "-D (unbatched) or ", r + 2, "-D (batched), got shape ",
         x.shape());
  return f(x.dim() == r + 1 ? unsqueeze(x, 0) : x, x.dim() == r + 1);
}

inline Attrs nd_attrs(const char* op, size_t nd, const Ints& kernel, const Ints& stride,
                      const Ints& padding, const Ints& dilation, bool ceil, bool include_pad,
                      int64_t divisor) {
  Ints k = expand_n(op, "kernel_size", kernel, nd);
  Ints s = stride.empty() ? k : expand_n(op, "stride", stride, nd);
  return Attrs{k,
               s,
               expand_n(op, "padding", padding, nd),
               expand_n(op, "dilation", dilation, nd),
               ceil,
               include_pad,
               divisor,
               Ints{}};
}

// Pooling accepts [C, H, W] too (as PyTorch): a batch dim is added and removed around the op.
template <typename F>
Tensor pool_call(const char* op, const Tensor& x, F&& f) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() == 3) return squeeze(f(unsqueeze(x, 0)), 0);
  if (x.dim() != 4)
    fail(op, "input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape ", x.shape());
  return f(x);
}

}  // namespace kiln::detail::pool_util
