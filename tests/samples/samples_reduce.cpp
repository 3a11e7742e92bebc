// Samples for the reduction family (kiln/ops/reduce.cpp): sum, mean, max, min, var over various
// dims with keepdim both ways and over all dims; argmax/argmin (int64, not differentiable).
// The reference groups the float64 data by output index with a naive loop.
#include <cmath>
#include <optional>

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
