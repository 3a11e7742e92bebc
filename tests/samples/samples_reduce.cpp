// Samples for the reduction family (kiln/ops/reduce.cpp): sum, mean, max, min, var over various
// dims with keepdim both ways and over all dims; logsumexp; argmax/argmin (int64, not
// differentiable); the scan cumsum (forward and reverse, float and int64).
// The reference groups the float64 data by output index with a naive loop.
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using Group = std::function<double(const std::vector<double>&)>;

// Reduces x over `dims` (empty: all) applying f to each group of values (in row-major order of
// the reduced dims).
Tensor ref_reduce(const Tensor& x, std::vector<int64_t> dims, bool keepdim, const Group& f) {
  const Shape& s = x.shape();
  int64_t r = s.rank();
  std::vector<bool> red(static_cast<size_t>(r), dims.empty());
  for (auto d : dims) red[static_cast<size_t>(d < 0 ? d + r : d)] = true;
  Shape out;
  for (int64_t d = 0; d < r; ++d) {
    if (!red[static_cast<size_t>(d)])
      out.push_back(s[d]);
    else if (keepdim)
      out.push_back(1);
  }
  auto xv = vals(x);
  std::vector<std::vector<double>> groups(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < s.numel(); ++i) {
    int64_t rem = i, o = 0, mulo = 1;
    for (int64_t d = r - 1; d >= 0; --d) {
      int64_t c = rem % s[d];
      rem /= s[d];
      if (!red[static_cast<size_t>(d)]) {
        o += c * mulo;
        mulo *= s[d];
      }
    }
    groups[static_cast<size_t>(o)].push_back(xv[static_cast<size_t>(i)]);
  }
  std::vector<double> res;
  for (auto& g : groups) res.push_back(f(g));
  return from_vals(res, out);
}

double g_sum(const std::vector<double>& g) {
  double a = 0;
  for (double e : g) a += e;
  return a;
}
double g_mean(const std::vector<double>& g) { return g_sum(g) / static_cast<double>(g.size()); }
double g_max(const std::vector<double>& g) {
  double m = -INFINITY;
  for (double e : g) m = std::max(m, e);
  return m;
}
double g_min(const std::vector<double>& g) {
  double m = INFINITY;
  for (double e : g) m = std::min(m, e);
  return m;
}
Group g_var(int64_t correction) {
  return [correction](const std::vector<double>& g) {
    double m = g_mean(g), a = 0;
    for (double e : g) a += (e - m) * (e - m);
    return a / static_cast<double>(static_cast<int64_t>(g.size()) - correction);
  };
}
double g_argmax(const std::vector<double>& g) {
  size_t b = 0;
  for (size_t i = 1; i < g.size(); ++i)
    if (g[i] > g[b]) b = i;
  return static_cast<double>(b);
}
double g_argmin(const std::vector<double>& g) {
  size_t b = 0;
  for (size_t i = 1; i < g.size(); ++i)
    if (g[i] < g[b]) b = i;
  return static_cast<double>(b);
}

double g_logsumexp(const std::vector<double>& g) {
  double m = g_max(g), a = 0;
  if (std::isinf(m)) return m;  // all -inf (or empty): -inf; a +inf: +inf
  for (double e : g) a += std::exp(e - m);
  return m + std::log(a);
}

// Running sums of x along dim (from the end when reverse), in float64.
Tensor ref_cumsum(const Tensor& x, int64_t dim, bool reverse) {
  const Shape& s = x.shape();
  const int64_t r = s.rank(), d = dim < 0 ? dim + r : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= s[k];
  for (int64_t k = d + 1; k < r; ++k) inner *= s[k];
  const int64_t n = s[d];
  auto xv = vals(x);
  std::vector<double> out(xv.size());
  for (int64_t i = 0; i < outer; ++i)
    for (int64_t j = 0; j < inner; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t k = reverse ? n - 1 - t : t;
        const auto at = static_cast<size_t>((i * n + k) * inner + j);
        acc += xv[at];
        out[at] = acc;
      }
    }
  return from_vals(out, s);
}

// A scan along dim: f(state, x, t) gives the running output for each t of every line.
Tensor ref_scan(const Tensor& x, int64_t dim,
                const std::function<double(double, double, int64_t)>& f, double init) {
  const Shape& s = x.shape();
  const int64_t r = s.rank(), d = dim < 0 ? dim + r : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= s[k];
  for (int64_t k = d + 1; k < r; ++k) inner *= s[k];
  const int64_t n = s[d];
  auto xv = vals(x);
  std::vector<double> out(xv.size());
  for (int64_t i = 0; i < outer; ++i)
    for (int64_t j = 0; j < inner; ++j) {
      double acc = init;
      for (int64_t t = 0; t < n; ++t) {
        const auto at = static_cast<size_t>((i * n + t) * inner + j);
        acc = f(acc, xv[at], t);
        out[at] = acc;
      }
    }
  return from_vals(out, s);
}

// Running max / min value or its index (the last of ties) along dim.
Tensor ref_cumext(const Tensor& x, int64_t dim, bool is_max, bool index) {
  const Shape& s = x.shape();
  const int64_t r = s.rank(), d = dim < 0 ? dim + r : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= s[k];
  for (int64_t k = d + 1; k < r; ++k) inner *= s[k];
  const int64_t n = s[d];
  auto xv = vals(x);
  std::vector<double> out(xv.size());
  for (int64_t i = 0; i < outer; ++i)
    for (int64_t j = 0; j < inner; ++j) {
      double best = 0;
      int64_t at = 0;
      for (int64_t t = 0; t < n; ++t) {
        const double v = xv[static_cast<size_t>((i * n + t) * inner + j)];
        if (t == 0 || (is_max ? v >= best : v <= best)) {
          best = v;
          at = t;
        }
        out[static_cast<size_t>((i * n + t) * inner + j)] = index ? static_cast<double>(at) : best;
      }
    }
  return from_vals(out, s);
}

// Small integers as float64 (many ties): round(scale * randn).
Tensor rounded(const Shape& shape, uint64_t seed, double scale) {
  auto v = vals(rnd(shape, seed));
  for (auto& x : v) x = std::round(x * scale);
  return from_vals(v, shape);
}

double g_prod(const std::vector<double>& g) {
  double a = 1;
  for (double e : g) a *= e;
  return a;
}
// The most frequent value, the smallest of ties.
double g_mode(const std::vector<double>& g) {
  double best = 0;
  size_t best_n = 0;
  for (double e : g) {
    size_t c = 0;
    for (double f : g) c += f == e;
    if (c > best_n || (c == best_n && e < best)) {
      best = e;
      best_n = c;
    }
  }
  return best;
}

using RedFn = Tensor (*)(const Tensor&, const std::vector<int64_t>&, bool);

OpSample red(const std::string& op, const std::string& name, Shape shape, uint64_t seed,
             std::vector<int64_t> dims, bool keepdim, std::function<Tensor(const Tensor&)> run,
             Group f) {
  OpSample s;
  s.ops = {op};
  s.name = name;
  s.inputs = [shape, seed] { return In{rnd(shape, seed)}; };
  s.run = [run](const In& in) { return run(in[0]); };
  s.reference = [dims, keepdim, f](const In& in) { return ref_reduce(in[0], dims, keepdim, f); };
  return s;
}

// Standard cases for one reduction: one dim, a negative dim, two non-adjacent dims with keepdim,
// leading dim, all dims (both keepdim modes), a 1-D vector and a 0-d input.
void family(std::vector<OpSample>& v, const std::string& op, RedFn fn, Group f, uint64_t seed) {
  struct Case {
    const char* name;
    Shape shape;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  const Case cases[] = {
      {"dim1", {3, 4, 5}, {1}, false},
      {"dim_last_keepdim", {3, 4, 5}, {-1}, true},
      {"dims_0_2_keepdim", {3, 4, 5}, {0, 2}, true},
      {"dims_0_2", {3, 4, 5}, {2, 0}, false},
      {"leading_dim", {4, 6}, {0}, false},
      {"all_dims", {3, 4}, {}, false},
      {"all_dims_keepdim", {2, 3, 2}, {}, true},
      {"vector", {7}, {0}, false},
  };
  for (const auto& c : cases) {
    auto dims = c.dims;
    bool kd = c.keepdim;
    v.push_back(red(
        op, c.name, c.shape, seed++, dims, kd,
        [fn, dims, kd](const Tensor& x) { return fn(x, dims, kd); }, f));
  }
}

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  family(
      v, "sum", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return sum(x, d, k); },
      g_sum, 100);
  family(
      v, "mean",
      [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return mean(x, d, k); }, g_mean,
      200);
  family(
      v, "max", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return max(x, d, k); },
      g_max, 300);
  family(
      v, "min", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return min(x, d, k); },
      g_min, 400);
  family(
      v, "var", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return var(x, d, k); },
      g_var(1), 500);

  family(
      v, "logsumexp",
      [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return logsumexp(x, d, k); },
      g_logsumexp, 800);
  // Large logits: exp alone would overflow float32 and float64 alike.
  {
    OpSample s = red(
        "logsumexp", "large_values", {3, 4}, 810, {1}, false,
        [](const Tensor& x) { return logsumexp(mul(x, 1000.0), {1}); },
        [](const std::vector<double>& g) {
          std::vector<double> h;
          for (double e : g) h.push_back(1000 * e);
          return g_logsumexp(h);
        });
    s.gc_atol = 1e-3;
    v.push_back(std::move(s));
  }

  {
    // Masked scores (-inf), one row entirely masked: -inf there, as torch.
    OpSample s;
    s.ops = {"logsumexp"};
    s.name = "masked_rows";
    s.inputs = [] {
      const double n = -INFINITY;
      return In{tensor(std::vector<double>{0.5, n, 2, n, n, n, n, -1, 3}, Shape{3, 3})};
    };
    s.run = [](const In& in) { return logsumexp(in[0], {1}); };
    s.reference = [](const In& in) { return ref_reduce(in[0], {1}, false, g_logsumexp); };
    s.differentiable = false;
    v.push_back(std::move(s));
    OpSample e;
    e.ops = {"logsumexp"};
    e.name = "empty_group";
    e.inputs = [] { return In{zeros({3, 0}, Float64)}; };
    e.run = [](const In& in) { return logsumexp(in[0], {1}, true); };
    e.reference = [](const In&) { return full({3, 1}, -INFINITY, Float64); };
    e.differentiable = false;
    v.push_back(std::move(e));
  }

  // vector_norm: ord 2, 1, 3, inf, -inf, 0 over dims (values away from 0 and from ties, where
  // the norm is not differentiable).
  struct NormCase {
    const char* name;
    double ord;
    Shape shape;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  const NormCase norms[] = {
      {"l2_dim1", 2, {3, 4}, {1}, false},
      {"l1_dim0_keepdim", 1, {3, 4}, {0}, true},
      {"l3_all", 3, {2, 3}, {}, false},
      {"inf_dims_0_2", INFINITY, {2, 3, 4}, {0, 2}, false},
      {"neg_inf_last", -INFINITY, {3, 5}, {-1}, false},
      {"l0_counts", 0, {3, 4}, {1}, false},
  };
  uint64_t nseed = 950;
  for (const auto& c : norms) {
    const double ord = c.ord;
    const auto dims = c.dims;
    const bool kd = c.keepdim;
    OpSample s = red(
        "vector_norm", c.name, c.shape, nseed++, dims, kd,
        [ord, dims, kd](const Tensor& x) { return vector_norm(x, ord, dims, kd); },
        [ord](const std::vector<double>& g) {
          double acc = std::isinf(ord) && ord < 0 ? INFINITY : 0.0;
          for (double e : g) {
            const double v = std::fabs(e);
            if (std::isinf(ord))
              acc = ord > 0 ? std::max(acc, v) : std::min(acc, v);
            else if (ord == 0)
              acc += v != 0;
            else
              acc += std::pow(v, ord);
          }
          return std::isinf(ord) || ord == 0 ? acc : std::pow(acc, 1 / ord);
        });
    // Inputs kept away from 0 (|x| >= 0.1), where |x| has its kink.
    const Shape shape = c.shape;
    const uint64_t sd = nseed + 100;
    s.inputs = [shape, sd] {
      auto v = vals(rnd(shape, sd));
      for (auto& x : v) x = x < 0 ? std::min(x, -0.1) : std::max(x, 0.1);
      return In{from_vals(v, shape)};
    };
    v.push_back(std::move(s));
  }

  // ---- prod, cumprod, cummax / cummin, logcumsumexp, mode -------------------------------------
  family(
      v, "prod",
      [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return prod(x, d, k); }, g_prod,
      1000);
  {
    // Zeros: a row with one (the gradient there is the product of the others), a row with two
    // (no gradient), a row without.
    OpSample s = red(
        "prod", "zeros", {3, 4}, 1010, {1}, false, [](const Tensor& x) { return prod(x, {1}); },
        g_prod);
    s.inputs = [] {
      return In{from_vals({0.5, 0, -1.5, 2, 0, 1.25, 0, -0.75, 1.1, -0.9, 1.3, 0.7}, {3, 4})};
    };
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"prod"};
    s.name = "int32_as_int64";
    s.inputs = [] { return In{cast(rounded({2, 5}, 1020, 2.0), Int32)}; };
    s.run = [](const In& in) { return prod(in[0], {1}); };
    s.reference = [](const In& in) { return ref_reduce(cast(in[0], Float64), {1}, false, g_prod); };
    s.differentiable = false;
    s.check = [](const In&, const Tensor& out) {
      return out.dtype() == Int64 ? std::string() : std::string("prod of int32 must be int64");
    };
    v.push_back(std::move(s));
  }
  const std::pair<Shape, int64_t> scan_dims[] = {{{3, 4, 5}, 1}, {{4, 3}, 0}, {{2, 3, 6}, -1}};
  uint64_t cseed = 1100;
  for (const auto& [shape, dim] : scan_dims) {
    const uint64_t sd = cseed++;
    const Shape sh = shape;
    const int64_t d = dim;
    const std::string nm = "dim" + std::to_string(dim) + "_rank" + std::to_string(shape.rank());
    OpSample p;
    p.ops = {"cumprod", "cumprod_grad"};
    p.name = nm;
    p.inputs = [sh, sd] { return In{rnd(sh, sd)}; };
    p.run = [d](const In& in) { return cumprod(in[0], d); };
    p.reference = [d](const In& in) {
      return ref_scan(
          in[0], d, [](double a, double x, int64_t) { return a * x; }, 1.0);
    };
    v.push_back(p);
    for (const bool is_max : {true, false}) {
      OpSample c;
      c.ops = {is_max ? "cummax" : "cummin"};
      c.name = nm;
      c.inputs = p.inputs;
      c.run = [d, is_max](const In& in) {
        return is_max ? cummax(in[0], d).first : cummin(in[0], d).first;
      };
      c.reference = [d, is_max](const In& in) { return ref_cumext(in[0], d, is_max, false); };
      v.push_back(c);
      c.name = nm + "_indices";
      c.inputs = [sh, sd] { return In{rounded(sh, sd, 1.5)}; };  // ties
      c.run = [d, is_max](const In& in) {
        return is_max ? cummax(in[0], d).second : cummin(in[0], d).second;
      };
      c.reference = [d, is_max](const In& in) { return ref_cumext(in[0], d, is_max, true); };
      c.differentiable = false;
      v.push_back(c);
    }
    OpSample l;
    l.ops = {"logcumsumexp"};
    l.name = nm;
    l.inputs = [sh, sd] { return In{mul(rnd(sh, sd), 3.0)}; };
    l.run = [d](const In& in) { return logcumsumexp(in[0], d); };
    l.reference = [d](const In& in) {
      return ref_scan(
          in[0], d, [](double a, double x, int64_t) { return std::log(std::exp(a) + std::exp(x)); },
          -INFINITY);
    };
    v.push_back(l);
  }
  {
    OpSample p;
    p.ops = {"cumprod", "cumprod_grad"};
    p.name = "zeros";
    p.inputs = [] {
      return In{from_vals({0.5, 0, -1.5, 2, 0, 1.25, 0, -0.75, 1.1, -0.9, 1.3, 0.7}, {2, 6})};
    };
    p.run = [](const In& in) { return cumprod(in[0], 1); };
    p.reference = [](const In& in) {
      return ref_scan(
          in[0], 1, [](double a, double x, int64_t) { return a * x; }, 1.0);
    };
    v.push_back(p);
  }
  {
    // Large values: exp would overflow; the log-space scan does not.
    OpSample l;
    l.ops = {"logcumsumexp"};
    l.name = "large_values";
    l.inputs = [] { return In{rnd({3, 5}, 1150)}; };
    l.run = [](const In& in) { return logcumsumexp(mul(in[0], 800.0), 1); };
    l.reference = [](const In& in) {
      return ref_scan(
          in[0], 1,
          [](double a, double x, int64_t) {
            x *= 800;
            const double m = std::max(a, x);
            return m + std::log(std::exp(a - m) + std::exp(x - m));
          },
          -INFINITY);
    };
    l.gc_atol = 1e-3;
    l.tol32 = 1e-4;
    v.push_back(l);
  }
  {
    // Distinct values: the mode is the smallest (each occurs once); differentiable there.
    OpSample s = red(
        "mode", "distinct_dim1", {3, 5}, 1200, {1}, false,
        [](const Tensor& x) { return mode(x, 1).first; }, g_mode);
    v.push_back(std::move(s));
    OpSample t = red(
        "mode", "ties_dim0_keepdim", {6, 4}, 1201, {0}, true,
        [](const Tensor& x) { return mode(x, 0, true).first; }, g_mode);
    t.inputs = [] { return In{rounded({6, 4}, 1201, 1.0)}; };
    t.differentiable = false;
    v.push_back(std::move(t));
  }

  struct ScanCase {
    const char* name;
    Shape shape;
    int64_t dim;
    bool reverse;
  };
  const ScanCase scans[] = {
      {"dim1", {3, 4, 5}, 1, false},      {"dim0", {4, 3}, 0, false},
      {"dim_last", {2, 3, 6}, -1, false}, {"reverse_dim1", {3, 5}, 1, true},
      {"vector", {9}, 0, false},          {"reverse_dim0", {4, 2, 3}, 0, true},
  };
  uint64_t sseed = 900;
  for (const auto& c : scans) {
    OpSample s;
    s.ops = {"cumsum"};
    s.name = c.name;
    const Shape shape = c.shape;
    const int64_t dim = c.dim;
    const bool rev = c.reverse;
    const uint64_t sd = sseed++;
    s.inputs = [shape, sd] { return In{rnd(shape, sd)}; };
    s.run = [dim, rev](const In& in) { return cumsum(in[0], dim, rev); };
    s.reference = [dim, rev](const In& in) { return ref_cumsum(in[0], dim, rev); };
    v.push_back(std::move(s));
  }
  {
    // Integers and bools sum as int64 (exactly).
    OpSample s;
    s.ops = {"cumsum"};
    s.name = "bool_counts_int64";
    s.inputs = [] { return In{gt(rnd({3, 5}, 920), 0.0)}; };
    s.run = [](const In& in) { return cumsum(in[0], 1); };
    s.reference = [](const In& in) { return ref_cumsum(cast(in[0], Float64), 1, false); };
    s.check = [](const In&, const Tensor& out) {
      return out.dtype() == Int64 ? std::string()
                                  : "expected int64, got " + std::string(dtype_name(out.dtype()));
    };
    s.differentiable = false;
    v.push_back(std::move(s));
  }

  v.push_back(red(
      "var", "population_correction0", {3, 5}, 600, {1}, false,
      [](const Tensor& x) { return var(x, {1}, false, 0); }, g_var(0)));
  v.push_back(red(
      "sum", "method_all", {2, 3}, 601, {}, false, [](const Tensor& x) { return x.sum(); }, g_sum));
  v.push_back(red(
      "mean", "method_all", {2, 3}, 602, {}, false, [](const Tensor& x) { return x.mean(); },
      g_mean));
  {
    OpSample s = red(
        "sum", "scalar_input", {}, 603, {}, false, [](const Tensor& x) { return sum(x); }, g_sum);
    v.push_back(std::move(s));
  }
  {
    // Integer sum stays integral.
    OpSample s;
    s.ops = {"sum"};
    s.name = "int64_dim0";
    s.inputs = [] {
      manual_seed(604);
      return In{randint(-5, 5, {3, 4})};
    };
    s.run = [](const In& in) { return sum(in[0], {0}); };
    s.reference = [](const In& in) { return ref_reduce(in[0], {0}, false, g_sum); };
    s.check = [](const In&, const Tensor& out) {
      return out.dtype() == Int64 ? std::string()
                                  : "expected int64, got " + std::string(dtype_name(out.dtype()));
    };
    s.differentiable = false;
    v.push_back(std::move(s));
  }

  // ---- argmax / argmin ----------------------------------------------------------------------
  struct ArgCase {
    const char* name;
    Shape shape;
    std::optional<int64_t> dim;
    bool keepdim;
  };
  const ArgCase acases[] = {
      {"flat", {3, 4}, std::nullopt, false},
      {"dim1", {3, 4, 5}, 1, false},
      {"dim_last_keepdim", {3, 4}, -1, true},
      {"dim0", {5, 2}, 0, false},
  };
  uint64_t seed = 700;
  for (bool is_max : {true, false}) {
    for (const auto& c : acases) {
      OpSample s;
      s.ops = {is_max ? "argmax" : "argmin"};
      s.name = c.name;
      Shape shape = c.shape;
      auto dim = c.dim;
      bool kd = c.keepdim;
      uint64_t sd = seed++;
      s.inputs = [shape, sd] { return In{rnd(shape, sd)}; };
      s.run = [is_max, dim, kd](const In& in) {
        return is_max ? argmax(in[0], dim, kd) : argmin(in[0], dim, kd);
      };
      s.reference = [is_max, dim, kd](const In& in) {
        Group f = is_max ? Group(g_argmax) : Group(g_argmin);
        if (!dim) {
          Tensor flat = from_vals(vals(in[0]), {in[0].numel()});
          return ref_reduce(flat, {}, false, f);
        }
        return ref_reduce(in[0], {*dim}, kd, f);
      };
      s.check = [](const In&, const Tensor& out) {
        return out.dtype() == Int64 ? std::string()
                                    : "expected int64, got " + std::string(dtype_name(out.dtype()));
      };
      s.differentiable = false;
      v.push_back(std::move(s));
    }
  }
  return v;
}

static SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
