// Samples for the nn, normalization and indexing families (kiln/ops/nn_ops.cpp, norm.cpp,
// index_ops.cpp):
// softmax, log_softmax, layer_norm, batch_norm, embedding, gather, index_select, scatter_add,
// nll_loss, cross_entropy, mse_loss, binary_cross_entropy_with_logits, smooth_l1_loss,
// huber_loss, dropout, topk/sort/argsort, tril/triu, and the helper ops index_select_grad and
// nll_loss_grad (called through the registry). References are naive float64 loops.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "kiln/dispatch/dispatch.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using I64 = std::vector<int64_t>;

Tensor idx(const I64& v, const Shape& s) { return tensor(v, s); }
I64 ivals(const Tensor& t) { return t.to_vector<int64_t>(); }

I64 unravel(int64_t i, const Shape& s) {
  I64 c(static_cast<size_t>(s.rank()));
  for (int64_t d = s.rank() - 1; d >= 0; --d) {
    c[static_cast<size_t>(d)] = i % s[d];
    i /= s[d];
  }
  return c;
}
int64_t ravel(const I64& c, const Shape& s) {
  int64_t i = 0;
  for (int64_t d = 0; d < s.rank(); ++d) i = i * s[d] + c[static_cast<size_t>(d)];
  return i;
}
size_t z(int64_t i) { return static_cast<size_t>(i); }

// [outer, n, inner] split of a shape around dim.
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};
Split split_at(const Shape& s, int64_t dim) {
  Split r;
  for (int64_t d = 0; d < dim; ++d) r.outer *= s[d];
  r.n = s.rank() ? s[dim] : 1;
  for (int64_t d = dim + 1; d < s.rank(); ++d) r.inner *= s[d];
  return r;
}

// ---- references -------------------------------------------------------------------------------

Tensor ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.shape();
  if (dim < 0) dim += s.rank();
  Split p = split_at(s, dim);
  auto v = vals(x);
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t j = 0; j < p.inner; ++j) {
      auto at = [&](int64_t k) { return z((o * p.n + k) * p.inner + j); };
      double m = -INFINITY, sum = 0;
      for (int64_t k = 0; k < p.n; ++k) m = std::max(m, v[at(k)]);
      for (int64_t k = 0; k < p.n; ++k) sum += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < p.n; ++k)
        out[at(k)] = log ? v[at(k)] - m - std::log(sum) : std::exp(v[at(k)] - m) / sum;
    }
  return from_vals(out, s);
}

Tensor ref_layer_norm(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps) {
  const Shape& s = x.shape();
  int64_t n = 1;
  for (int64_t d = s.rank() - k; d < s.rank(); ++d) n *= s[d];
  int64_t rows = s.numel() / n;
  auto v = vals(x);
  std::vector<double> wv = w.defined() ? vals(w) : std::vector<double>(z(n), 1.0);
  std::vector<double> bv = b.defined() ? vals(b) : std::vector<double>(z(n), 0.0);
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) m += v[z(r * n + j)];
    m /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += (v[z(r * n + j)] - m) * (v[z(r * n + j)] - m);
    var /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j)
      out[z(r * n + j)] = (v[z(r * n + j)] - m) / std::sqrt(var + eps) * wv[z(j)] + bv[z(j)];
  }
  return from_vals(out, s);
}

// Batch norm over channel dim 1 with the given per-channel mean / var (or batch statistics).
Tensor ref_batch_norm(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w,
                      const Tensor& b, bool training, double eps) {
  const Shape& s = x.shape();
  int64_t C = s[1], inner = 1;
  for (int64_t d = 2; d < s.rank(); ++d) inner *= s[d];
  auto v = vals(x);
  std::vector<double> mean(z(C), 0), var(z(C), 0);
  if (training) {
    std::vector<double> cnt(z(C), 0);
    for (size_t i = 0; i < v.size(); ++i) {
      size_t c = (i / z(inner)) % z(C);
      mean[c] += v[i];
      cnt[c] += 1;
    }
    for (size_t c = 0; c < z(C); ++c) mean[c] /= cnt[c];
    for (size_t i = 0; i < v.size(); ++i) {
      size_t c = (i / z(inner)) % z(C);
      var[c] += (v[i] - mean[c]) * (v[i] - mean[c]);
    }
    for (size_t c = 0; c < z(C); ++c) var[c] /= cnt[c];
  } else {
    mean = vals(rm);
    var = vals(rv);
  }
  std::vector<double> wv = w.defined() ? vals(w) : std::vector<double>(z(C), 1.0);
  std::vector<double> bv = b.defined() ? vals(b) : std::vector<double>(z(C), 0.0);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    size_t c = (i / z(inner)) % z(C);
    out[i] = (v[i] - mean[c]) / std::sqrt(var[c] + eps) * wv[c] + bv[c];
  }
  return from_vals(out, s);
}

Tensor ref_embedding(const Tensor& w, const Tensor& ix) {
  auto wv = vals(w);
  auto iv = ivals(ix);
  int64_t D = w.shape()[1];
  std::vector<double> out;
  for (auto i : iv)
    for (int64_t d = 0; d < D; ++d) out.push_back(wv[z(i * D + d)]);
  Shape s = ix.shape();
  s.push_back(D);
  return from_vals(out, s);
}

Tensor ref_gather(const Tensor& a, int64_t dim, const Tensor& ix) {
  auto av = vals(a);
  auto iv = ivals(ix);
  std::vector<double> out;
  for (int64_t i = 0; i < ix.numel(); ++i) {
    I64 c = unravel(i, ix.shape());
    c[z(dim)] = iv[z(i)];
    out.push_back(av[z(ravel(c, a.shape()))]);
  }
  return from_vals(out, ix.shape());
}

Tensor ref_scatter_add(const Tensor& a, int64_t dim, const Tensor& ix, const Tensor& src) {
  auto out = vals(a);
  auto iv = ivals(ix);
  auto sv = vals(src);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    I64 c = unravel(i, ix.shape());
    double val = sv[z(ravel(c, src.shape()))];
    c[z(dim)] = iv[z(i)];
    out[z(ravel(c, a.shape()))] += val;
  }
  return from_vals(out, a.shape());
}

Tensor ref_index_select(const Tensor& a, int64_t dim, const Tensor& ix) {
  if (dim < 0) dim += a.dim();
  auto av = vals(a);
  auto iv = ivals(ix);
  Shape os = a.shape();
  os[dim] = static_cast<int64_t>(iv.size());
  std::vector<double> out;
  for (int64_t i = 0; i < os.numel(); ++i) {
    I64 c = unravel(i, os);
    c[z(dim)] = iv[z(c[z(dim)])];
    out.push_back(av[z(ravel(c, a.shape()))]);
  }
  return from_vals(out, os);
}

Tensor ref_index_select_grad(const Tensor& g, const Tensor& ix, int64_t dim, int64_t size) {
  auto gv = vals(g);
  auto iv = ivals(ix);
  Shape os = g.shape();
  os[dim] = size;
  std::vector<double> out(z(os.numel()), 0.0);
  for (int64_t i = 0; i < g.numel(); ++i) {
    I64 c = unravel(i, g.shape());
    c[z(dim)] = iv[z(c[z(dim)])];
    out[z(ravel(c, os))] += gv[z(i)];
  }
  return from_vals(out, os);
}

// lp [N, C, d...], target [N, d...].
Tensor ref_nll(const Tensor& lp, const Tensor& t, Reduction red, int64_t ignore) {
  auto lv = vals(lp);
  auto tv = ivals(t);
  int64_t C = lp.shape()[1], inner = t.numel() / t.shape()[0];
  std::vector<double> per;
  double acc = 0, cnt = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t n = i / inner, j = i % inner, c = tv[z(i)];
    double l = c == ignore ? 0.0 : -lv[z((n * C + c) * inner + j)];
    per.push_back(l);
    acc += l;
    cnt += c == ignore ? 0 : 1;
  }
  if (red == Reduction::None) return from_vals(per, t.shape());
  return scalar_tensor(red == Reduction::Sum ? acc : acc / cnt, Float64);
}

Tensor ref_nll_grad(const Tensor& g, const Tensor& t, Reduction red, int64_t ignore, int64_t C) {
  auto gv = vals(g);
  auto tv = ivals(t);
  int64_t N = t.shape()[0], inner = t.numel() / N;
  double cnt = 0;
  for (auto c : tv) cnt += c == ignore ? 0 : 1;
  Shape os{N, C};
  for (int64_t d = 1; d < t.dim(); ++d) os.push_back(t.shape()[d]);
  std::vector<double> out(z(os.numel()), 0.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t n = i / inner, j = i % inner, c = tv[z(i)];
    if (c == ignore) continue;
    double gi = red == Reduction::None ? gv[z(i)] : gv[0];
    if (red == Reduction::Mean) gi /= cnt;
    out[z((n * C + c) * inner + j)] = -gi;
  }
  return from_vals(out, os);
}

Tensor ref_mse(const Tensor& a, const Tensor& b, Reduction red) {
  auto av = vals(a), bv = vals(b);
  std::vector<double> sq;
  double acc = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    sq.push_back((av[i] - bv[i]) * (av[i] - bv[i]));
    acc += sq.back();
  }
  if (red == Reduction::None) return from_vals(sq, a.shape());
  return scalar_tensor(red == Reduction::Sum ? acc : acc / static_cast<double>(av.size()), Float64);
}

const char* red_str(Reduction r) {
  return r == Reduction::None ? "none" : (r == Reduction::Sum ? "sum" : "mean");
}

// ---- sample builders ----------------------------------------------------------------------------

OpSample softmax_sample(bool log, Shape s, int64_t dim, std::string name, double shift = 0,
                        double tol32 = 1e-5) {
  OpSample o;
  o.ops = {log ? "log_softmax" : "softmax"};
  o.name = std::move(name);
  o.inputs = [s, shift] { return In{add(rnd(s, 11, 2.0), shift)}; };
  o.run = [log, dim](const In& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); };
  o.reference = [log, dim](const In& in) { return ref_softmax(in[0], dim, log); };
  o.tol32 = tol32;
  return o;
}

// softmax_grad(g, y) against y * (g - sum(g y)) in loops; y is a real softmax output. Its
// gradcheck covers the double-backward rule.
OpSample softmax_grad_sample(Shape s, int64_t dim, std::string name) {
  OpSample o;
  o.ops = {"softmax_grad"};
  o.name = std::move(name);
  o.inputs = [s, dim] { return In{rnd(s, 12), softmax(rnd(s, 13, 2.0), dim)}; };
  o.run = [dim](const In& in) { return softmax_grad(in[0], in[1], dim); };
  o.reference = [s, dim](const In& in) {
    std::vector<double> g = vals(in[0]), y = vals(in[1]), out(g.size());
    int64_t d = dim < 0 ? dim + s.rank() : dim;
    int64_t outer = 1, inner = 1, n = s[d];
    for (int64_t i = 0; i < d; ++i) outer *= s[i];
    for (int64_t i = d + 1; i < s.rank(); ++i) inner *= s[i];
    for (int64_t o2 = 0; o2 < outer; ++o2)
      for (int64_t j = 0; j < inner; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < n; ++k) {
          size_t i = static_cast<size_t>((o2 * n + k) * inner + j);
          acc += g[i] * y[i];
        }
        for (int64_t k = 0; k < n; ++k) {
          size_t i = static_cast<size_t>((o2 * n + k) * inner + j);
          out[i] = y[i] * (g[i] - acc);
        }
      }
    return from_vals(out, s);
  };
  return o;
}

OpSample layer_norm_sample(Shape xs, Shape ns, bool w, bool b, std::string name) {
  OpSample o;
  o.ops = {"layer_norm"};
  o.name = std::move(name);
  o.inputs = [xs, ns, w, b] {
    In in{rnd(xs, 21)};
    if (w) in.push_back(uni(ns, 22, 0.5, 1.5));
    if (b) in.push_back(rnd(ns, 23));
    return in;
  };
  auto parts = [w, b](const In& in) {
    Tensor wt = w ? in[1] : Tensor();
    Tensor bt = b ? in[w ? 2 : 1] : Tensor();
    return std::make_pair(wt, bt);
  };
  o.run = [ns, parts](const In& in) {
    auto [wt, bt] = parts(in);
    return layer_norm(in[0], ns, wt, bt, 1e-5);
  };
  o.reference = [ns, parts](const In& in) {
    auto [wt, bt] = parts(in);
    return ref_layer_norm(in[0], ns.rank(), wt, bt, 1e-5);
  };
  o.tol32 = 1e-4;
  return o;
}

OpSample nll_sample(Shape lps, I64 target, Shape ts, Reduction red, int64_t ignore,
                    std::string name) {
  OpSample o;
  o.ops = {"nll_loss", "nll_loss_grad"};
  o.name = std::move(name);
  o.inputs = [lps, target, ts] { return In{rnd(lps, 31), idx(target, ts)}; };
  o.run = [red, ignore](const In& in) { return nll_loss(in[0], in[1], red, ignore); };
  o.reference = [red, ignore](const In& in) { return ref_nll(in[0], in[1], red, ignore); };
  return o;
}

OpSample ce_sample(Shape ls, I64 target, Shape ts, Reduction red, int64_t ignore,
                   std::string name) {
  OpSample o;
  o.ops = {"log_softmax", "nll_loss", "nll_loss_grad"};
  o.name = std::move(name);
  o.inputs = [ls, target, ts] { return In{rnd(ls, 41, 2.0), idx(target, ts)}; };
  o.run = [red, ignore](const In& in) { return cross_entropy(in[0], in[1], red, ignore); };
  o.reference = [red, ignore](const In& in) {
    return ref_nll(ref_softmax(in[0], 1, true), in[1], red, ignore);
  };
  return o;
}

OpSample nll_grad_sample(Shape gs, I64 target, Shape ts, Reduction red, int64_t ignore, int64_t C,
                         std::string name) {
  OpSample o;
  o.ops = {"nll_loss_grad", "nll_loss"};
  o.name = std::move(name);
  o.inputs = [gs, target, ts] { return In{rnd(gs, 51), idx(target, ts)}; };
  o.run = [red, ignore, C](const In& in) {
    return call1(OpRegistry::get().at("nll_loss_grad"), {in[0], in[1]},
                 {std::string(red_str(red)), ignore, C});
  };
  o.reference = [red, ignore, C](const In& in) {
    return ref_nll_grad(in[0], in[1], red, ignore, C);
  };
  return o;
}

// layer_norm_backward(g, x, mean, rstd[, w]) -> dx, dw, db, checked as one flat tensor
// [dx..., dw..., db...] against loops over the formula; mean and rstd are arbitrary per-row
// values (the formula holds for any); gradcheck covers its own gradient rule.
OpSample ln_backward_sample(Shape xs, int64_t k, bool w, std::string name) {
  OpSample o;
  o.ops = {"layer_norm_backward"};
  o.name = std::move(name);
  o.noncontig_inputs = {0, 1};  // mean and rstd end in size-1 dims: no strided form
  Shape ks = xs, ns;
  for (int64_t d = xs.rank() - k; d < xs.rank(); ++d) {
    ks[d] = 1;
    ns.push_back(xs[d]);
  }
  o.inputs = [xs, ks, ns, w] {
    In in{rnd(xs, 81), rnd(xs, 82), rnd(ks, 83), uni(ks, 84, 0.5, 2.0)};
    if (w) in.push_back(rnd(ns, 85));
    return in;
  };
  o.run = [k, w](const In& in) {
    TensorList r = call(OpRegistry::get().at("layer_norm_backward"),
                        std::span<const Tensor>(in.data(), in.size()), {k, w});
    return cat({flatten(r[0]), flatten(r[1]), flatten(r[2])}, 0);
  };
  o.reference = [w](const In& in) {
    std::vector<double> g = vals(in[0]), x = vals(in[1]), mu = vals(in[2]), rs = vals(in[3]);
    std::vector<double> wv = w ? vals(in[4]) : std::vector<double>();
    const size_t rows = mu.size(), n = g.size() / rows;
    std::vector<double> dx(g.size()), dw(n, 0.0), db(n, 0.0);
    for (size_t r = 0; r < rows; ++r) {
      double s1 = 0, s2 = 0;
      for (size_t j = 0; j < n; ++j) {
        double xh = (x[r * n + j] - mu[r]) * rs[r], gh = g[r * n + j] * (w ? wv[j] : 1.0);
        s1 += gh;
        s2 += gh * xh;
        dw[j] += w ? g[r * n + j] * xh : 0.0;
        db[j] += g[r * n + j];
      }
      for (size_t j = 0; j < n; ++j) {
        double xh = (x[r * n + j] - mu[r]) * rs[r], gh = g[r * n + j] * (w ? wv[j] : 1.0);
        dx[r * n + j] = rs[r] * (gh - s1 / double(n) - xh * s2 / double(n));
      }
    }
    dx.insert(dx.end(), dw.begin(), dw.end());
    dx.insert(dx.end(), db.begin(), db.end());
    return from_vals(dx, Shape{static_cast<int64_t>(dx.size())});
  };
  return o;
}

OpSample mse_sample(Reduction red, std::string name) {
  OpSample o;
  o.ops = {"sub", "mul", red == Reduction::Sum ? "sum" : "mean"};
  o.name = std::move(name);
  o.inputs = [] { return In{rnd({3, 4}, 61), rnd({3, 4}, 62)}; };
  o.run = [red](const In& in) { return mse_loss(in[0], in[1], red); };
  o.reference = [red](const In& in) { return ref_mse(in[0], in[1], red); };
  return o;
}

// Fraction of zeros near p, kept elements scaled by 1/(1-p), same seed -> same mask, another
// seed -> another mask.
std::string dropout_check(const In& in, const Tensor& out, double p, uint64_t seed,
                          double frac_tol) {
  auto x = vals(in[0]), y = vals(out);
  if (out.shape() != in[0].shape()) return "shape " + out.shape().str();
  double zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) {
      ++zeros;
      continue;
    }
    double want = x[i] / (1 - p);
    if (std::fabs(y[i] - want) > 1e-6 * (1 + std::fabs(want)))
      return "kept element " + std::to_string(i) + " is " + std::to_string(y[i]) + ", expected " +
             std::to_string(want);
  }
  double frac = zeros / static_cast<double>(y.size());
  if (std::fabs(frac - p) > frac_tol)
    return "fraction of zeros " + std::to_string(frac) + " for p = " + std::to_string(p);
  manual_seed(seed);
  auto again = vals(dropout(in[0], p, true));
  if (again != y) return "same seed gave a different mask";
  manual_seed(seed + 1);
  auto other = vals(dropout(in[0], p, true));
  if (y.size() > 64 && other == y) return "a different seed gave the same mask";
  return "";
}

OpSample dropout_sample(Shape s, double p, bool differentiable, double frac_tol, std::string name) {
  OpSample o;
  o.ops = {"dropout"};
  o.name = std::move(name);
  // Inputs away from zero, so a zero in the output always means a dropped element.
  o.inputs = [s] { return In{uni(s, 71, 1.0, 2.0)}; };
  // Re-seeding inside run makes the mask the same on every call (gradcheck evaluates many).
  o.run = [p](const In& in) {
    manual_seed(1234);
    return dropout(in[0], p, true);
  };
  o.check = [p, frac_tol](const In& in, const Tensor& out) {
    return dropout_check(in, out, p, 1234, frac_tol);
  };
  o.differentiable = differentiable;
  return o;
}

OpSample dropout_identity_sample(double p, bool training, std::string name) {
  OpSample o;
  o.ops = {"dropout"};
  o.name = std::move(name);
  o.inputs = [] { return In{rnd({3, 4}, 72)}; };
  o.run = [p, training](const In& in) { return dropout(in[0], p, training); };
  o.reference = [](const In& in) { return from_vals(vals(in[0]), in[0].shape()); };
  return o;
}

// topk along dim: the k first of the entries ordered by (value desc/asc, index), as values
// (which = 0) or indices (which = 1).
Tensor ref_topk(const Tensor& x, int64_t k, int64_t dim, bool largest, int which) {
  const Shape& s = x.shape();
  if (dim < 0) dim += s.rank();
  Split p = split_at(s, dim);
  if (k < 0) k = p.n;
  auto v = vals(x);
  Shape os = s;
  os[dim] = k;
  std::vector<double> out(static_cast<size_t>(p.outer * k * p.inner));
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t j = 0; j < p.inner; ++j) {
      std::vector<std::pair<double, int64_t>> e;
      for (int64_t t = 0; t < p.n; ++t) e.push_back({v[z((o * p.n + t) * p.inner + j)], t});
      // NaN above every number (torch's order); ties keep index order.
      auto key = [](double x) { return std::isnan(x) ? INFINITY : x; };
      std::stable_sort(e.begin(), e.end(), [&](const auto& a, const auto& b) {
        const bool na = std::isnan(a.first), nb = std::isnan(b.first);
        if (na != nb) return largest ? na : nb;
        if (na) return false;
        return largest ? key(a.first) > key(b.first) : key(a.first) < key(b.first);
      });
      for (int64_t t = 0; t < k; ++t)
        out[z((o * k + t) * p.inner + j)] =
            which == 0 ? e[z(t)].first : static_cast<double>(e[z(t)].second);
    }
  return from_vals(out, os);
}

Tensor ref_tri(const Tensor& x, int64_t diag, bool upper) {
  const Shape& s = x.shape();
  const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
  auto v = vals(x);
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / C % R, c = static_cast<int64_t>(i) % C;
    const bool keep = upper ? c - r >= diag : c - r <= diag;
    if (!keep) v[i] = 0;
  }
  return from_vals(v, s);
}

double reduce_ref(const std::vector<double>& l, Reduction red) {
  double a = 0;
  for (double e : l) a += e;
  return red == Reduction::Sum ? a : a / static_cast<double>(l.size());
}

// Loss samples for functions composed of registry ops: elementwise loss f(a, b), reduced.
OpSample loss_sample(std::vector<std::string> ops, std::string name, Reduction red,
                     std::function<In()> make, std::function<Tensor(const In&)> run,
                     std::function<double(double, double)> f) {
  OpSample o;
  o.ops = std::move(ops);
  o.name = std::move(name);
  o.inputs = std::move(make);
  o.run = std::move(run);
  o.reference = [red, f](const In& in) {
    auto a = vals(in[0]), b = vals(in[1]);
    std::vector<double> l;
    for (size_t i = 0; i < a.size(); ++i) l.push_back(f(a[i], b[i]));
    if (red == Reduction::None) return from_vals(l, in[0].shape());
    return from_vals({reduce_ref(l, red)}, Shape{});
  };
  return o;
}

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  v.push_back(softmax_grad_sample({3, 5}, -1, "last_dim"));
  v.push_back(softmax_grad_sample({2, 3, 4}, 1, "middle_dim"));
  for (bool log : {false, true}) {
    v.push_back(softmax_sample(log, {3, 5}, -1, "last_dim"));
    v.push_back(softmax_sample(log, {2, 3, 4}, 1, "middle_dim"));
    v.push_back(softmax_sample(log, {4, 3}, 0, "first_dim"));
    v.push_back(softmax_sample(log, {6}, 0, "vector"));
    v.push_back(softmax_sample(log, {1, 3, 4}, 0, "size1_dim"));
    v.push_back(softmax_sample(log, {2, 7}, 1, "large_logits", 1000.0, 1e-3));
  }

  v.push_back(layer_norm_sample({3, 4}, {4}, true, true, "affine_last"));
  v.push_back(layer_norm_sample({2, 3, 4}, {3, 4}, false, false, "two_dims_plain"));
  v.push_back(layer_norm_sample({2, 5}, {5}, true, false, "weight_only"));
  v.push_back(layer_norm_sample({4, 3}, {3}, false, true, "bias_only"));
  v.push_back(ln_backward_sample({4, 6}, 1, true, "weight"));
  v.push_back(ln_backward_sample({2, 3, 4}, 2, false, "two_dims_no_weight"));

  {
    OpSample o;
    o.ops = {"mean", "var", "sub", "rsqrt", "mul", "add"};
    o.name = "batch_norm_train_2d";
    o.inputs = [] { return In{rnd({5, 3}, 81), uni({3}, 82, 0.5, 1.5), rnd({3}, 83)}; };
    o.run = [](const In& in) {
      return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5);
    };
    o.reference = [](const In& in) {
      return ref_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 1e-5);
    };
    o.tol32 = 1e-4;
    v.push_back(o);
  }
  {
    OpSample o;
    o.ops = {"mean", "var", "sub", "rsqrt", "mul", "add"};
    o.name = "batch_norm_train_4d";
    o.inputs = [] { return In{rnd({2, 3, 2, 2}, 84), uni({3}, 85, 0.5, 1.5), rnd({3}, 86)}; };
    o.run = [](const In& in) {
      return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5);
    };
    o.reference = [](const In& in) {
      return ref_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 1e-5);
    };
    o.tol32 = 1e-4;
    v.push_back(o);
  }
  {
    OpSample o;
    o.ops = {"sub", "rsqrt", "mul", "add"};
    o.name = "batch_norm_eval";
    o.inputs = [] {
      return In{rnd({4, 3, 2}, 87), rnd({3}, 88), uni({3}, 89, 0.5, 1.5), uni({3}, 90, 0.5, 1.5),
                rnd({3}, 91)};
    };
    o.run = [](const In& in) {
      return batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.1, 1e-5);
    };
    o.reference = [](const In& in) {
      return ref_batch_norm(in[0], in[1], in[2], in[3], in[4], false, 1e-5);
    };
    v.push_back(o);
  }

  {
    OpSample o;
    o.ops = {"embedding", "index_select_grad"};
    o.name = "repeated_rows";
    o.inputs = [] { return In{rnd({5, 3}, 101), idx({0, 4, 1, 4, 4, 2}, {2, 3})}; };
    o.run = [](const In& in) { return embedding(in[0], in[1]); };
    o.reference = [](const In& in) { return ref_embedding(in[0], in[1]); };
    v.push_back(o);
  }
  {
    OpSample o;
    o.ops = {"embedding", "index_select_grad"};
    o.name = "int32_indices";
    o.inputs = [] { return In{rnd({4, 2}, 102), tensor(std::vector<int32_t>{3, 0, 3}, {3})}; };
    o.run = [](const In& in) { return embedding(in[0], in[1]); };
    o.reference = [](const In& in) { return ref_embedding(in[0], in[1]); };
    v.push_back(o);
  }

  auto gather_s = [](Shape as, int64_t dim, I64 iv, Shape is, std::string name) {
    OpSample o;
    o.ops = {"gather", "scatter_add"};
    o.name = std::move(name);
    o.inputs = [as, iv, is] { return In{rnd(as, 111), idx(iv, is)}; };
    o.run = [dim](const In& in) { return gather(in[0], dim, in[1]); };
    o.reference = [dim](const In& in) { return ref_gather(in[0], dim, in[1]); };
    o.noncontig_inputs = {0, 1};
    return o;
  };
  v.push_back(gather_s({3, 4}, 1, {0, 3, 1, 1, 2, 0}, {3, 2}, "dim1"));
  v.push_back(gather_s({3, 4}, 0, {2, 0, 1, 2, 0, 0, 2, 1}, {2, 4}, "dim0"));
  v.push_back(gather_s({3, 4}, 0, {2, 0, 1, 1}, {2, 2}, "index_smaller"));
  v.push_back(gather_s({2, 3, 4}, 1, {0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 0, 1, 2, 1, 0,
                                      0, 0, 1, 2, 2, 1, 0, 1, 0, 2, 2, 2, 1, 0, 1},
                       {2, 5, 3}, "rank3_repeats"));

  auto scatter_s = [](Shape as, int64_t dim, I64 iv, Shape is, Shape ss, std::string name) {
    OpSample o;
    o.ops = {"scatter_add", "gather"};
    o.name = std::move(name);
    o.inputs = [as, iv, is, ss] { return In{rnd(as, 121), idx(iv, is), rnd(ss, 122)}; };
    o.run = [dim](const In& in) { return scatter_add(in[0], dim, in[1], in[2]); };
    o.reference = [dim](const In& in) { return ref_scatter_add(in[0], dim, in[1], in[2]); };
    o.noncontig_inputs = {0, 1, 2};
    return o;
  };
  v.push_back(scatter_s({3, 4}, 1, {0, 0, 3, 1, 2, 2}, {3, 2}, {3, 2}, "dim1_duplicates"));
  v.push_back(scatter_s({3, 4}, 1, {1, 0, 3, 3, 2, 0}, {3, 2}, {3, 3}, "src_larger"));
  v.push_back(scatter_s({3, 4}, 0, {0, 1, 2, 0, 2, 2, 1, 0, 1, 1, 0, 2, 0, 0, 0, 1}, {4, 4}, {4, 4},
                        "dim0"));

  auto isel_s = [](Shape as, int64_t dim, I64 iv, std::string name) {
    OpSample o;
    o.ops = {"index_select", "index_select_grad"};
    o.name = std::move(name);
    int64_t n = static_cast<int64_t>(iv.size());
    o.inputs = [as, iv, n] { return In{rnd(as, 131), idx(iv, {n})}; };
    o.run = [dim](const In& in) { return index_select(in[0], dim, in[1]); };
    o.reference = [dim](const In& in) { return ref_index_select(in[0], dim, in[1]); };
    return o;
  };
  // index_add: out = a with src's slices along dim added at index (repeats accumulate).
  auto iadd_s = [](Shape as, int64_t dim, I64 iv, Shape ss, std::string name) {
    OpSample o;
    o.ops = {"index_add", "index_select"};
    o.name = std::move(name);
    int64_t n = static_cast<int64_t>(iv.size());
    o.inputs = [as, iv, n, ss] { return In{rnd(as, 141), idx(iv, {n}), rnd(ss, 142)}; };
    o.run = [dim](const In& in) { return index_add(in[0], dim, in[1], in[2]); };
    o.reference = [as, dim, ss](const In& in) {
      std::vector<double> out = vals(in[0]), sv = vals(in[2]);
      I64 ix = ivals(in[1]);
      int64_t d = dim < 0 ? dim + as.rank() : dim;
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < d; ++i) outer *= as[i];
      for (int64_t i = d + 1; i < as.rank(); ++i) inner *= as[i];
      for (int64_t o2 = 0; o2 < outer; ++o2)
        for (int64_t i = 0; i < ss[d]; ++i)
          for (int64_t j = 0; j < inner; ++j)
            out[static_cast<size_t>((o2 * as[d] + ix[static_cast<size_t>(i)]) * inner + j)] +=
                sv[static_cast<size_t>((o2 * ss[d] + i) * inner + j)];
      return from_vals(out, as);
    };
    return o;
  };
  v.push_back(iadd_s({4, 3}, 0, {2, 0, 2}, {3, 3}, "dim0_repeat"));
  v.push_back(iadd_s({2, 4, 3}, 1, {3, 1, 1, 0, 2}, {2, 5, 3}, "rank3_middle"));
  v.push_back(isel_s({4, 3}, 0, {2, 0, 2}, "dim0_repeat"));
  v.push_back(isel_s({4, 3}, 1, {1, 1, 0, 2}, "dim1"));
  v.push_back(isel_s({2, 3, 4}, -2, {2, 1}, "rank3_middle"));

  {
    OpSample o;
    o.ops = {"index_select_grad", "index_select"};
    o.name = "direct";
    o.inputs = [] { return In{rnd({2, 4, 3}, 141), idx({1, 0, 1, 3}, {4})}; };
    o.run = [](const In& in) {
      return call1(OpRegistry::get().at("index_select_grad"), {in[0], in[1]},
                   {int64_t(1), int64_t(5)});
    };
    o.reference = [](const In& in) { return ref_index_select_grad(in[0], in[1], 1, 5); };
    v.push_back(o);
  }

  v.push_back(nll_sample({4, 5}, {1, 4, 0, 2}, {4}, Reduction::Mean, -100, "mean"));
  v.push_back(nll_sample({4, 5}, {1, -100, 0, 1}, {4}, Reduction::Mean, -100, "mean_ignore"));
  v.push_back(nll_sample({4, 5}, {1, 3, 3, 2}, {4}, Reduction::Sum, 3, "sum_ignore"));
  v.push_back(nll_sample({4, 5}, {1, 3, 0, 2}, {4}, Reduction::None, 0, "none_ignore"));
  v.push_back(nll_sample({2, 3, 2}, {0, 2, 1, 1}, {2, 2}, Reduction::Mean, -100, "spatial"));
  v.push_back(nll_grad_sample({}, {1, -100, 4}, {3}, Reduction::Mean, -100, 5, "mean"));
  v.push_back(nll_grad_sample({3}, {1, 2, 4}, {3}, Reduction::None, 2, 5, "none"));
  v.push_back(nll_grad_sample({}, {0, 1, 1, 2}, {2, 2}, Reduction::Sum, -100, 3, "sum_spatial"));

  v.push_back(ce_sample({4, 5}, {1, 4, 0, 2}, {4}, Reduction::Mean, -100, "mean"));
  v.push_back(ce_sample({4, 5}, {1, 4, -100, 2}, {4}, Reduction::Sum, -100, "sum_ignore"));
  v.push_back(ce_sample({3, 4}, {1, 2, 3}, {3}, Reduction::None, 2, "none_ignore"));
  v.push_back(ce_sample({2, 3, 2}, {0, 2, 1, 1}, {2, 2}, Reduction::Mean, -100, "spatial"));

  v.push_back(mse_sample(Reduction::Mean, "mse_loss_mean"));
  v.push_back(mse_sample(Reduction::Sum, "mse_loss_sum"));
  v.push_back(mse_sample(Reduction::None, "mse_loss_none"));

  // ---- topk / sort / argsort ---------------------------------------------------------------
  struct TopkCase {
    const char* name;
    Shape shape;
    int64_t k, dim;
    bool largest;
  };
  const TopkCase tcases[] = {
      {"k2_last", {3, 6}, 2, -1, true}, {"k3_smallest", {4, 5}, 3, 1, false},
      {"k2_dim0", {5, 3}, 2, 0, true},  {"k1_middle_dim", {2, 5, 3}, 1, 1, true},
      {"k_all", {2, 4}, 4, 1, true},    {"k0", {3, 4}, 0, 1, true},
  };
  uint64_t tseed = 1500;
  for (const auto& c : tcases) {
    for (int which : {0, 1}) {
      OpSample o;
      o.ops = {"topk", "scatter_add"};
      o.name = std::string(c.name) + (which == 0 ? "_values" : "_indices");
      const Shape shape = c.shape;
      const int64_t k = c.k, dim = c.dim;
      const bool largest = c.largest;
      const uint64_t sd = tseed++;
      o.inputs = [shape, sd] { return In{rnd(shape, sd)}; };
      o.run = [k, dim, largest, which](const In& in) {
        auto [val, ind] = topk(in[0], k, dim, largest);
        return which == 0 ? val : ind;
      };
      o.reference = [k, dim, largest, which](const In& in) {
        return ref_topk(in[0], k, dim, largest, which);
      };
      o.differentiable = which == 0;
      v.push_back(std::move(o));
    }
  }
  {
    // Ties keep index order (a stable sort), ascending and descending.
    for (bool desc : {false, true}) {
      OpSample o;
      o.ops = {"topk"};
      o.name = desc ? "sort_ties_descending" : "sort_ties_ascending";
      o.inputs = [] {
        return In{tensor(std::vector<double>{2, 1, 2, 0, 1, 2, 3, 3, 1, 0, 0, 3}, Shape{2, 6})};
      };
      o.run = [desc](const In& in) { return argsort(in[0], 1, desc); };
      o.reference = [desc](const In& in) { return ref_topk(in[0], -1, 1, desc, 1); };
      o.differentiable = false;
      v.push_back(std::move(o));
    }
    for (bool largest : {true, false}) {
      OpSample o;
      o.ops = {"topk"};
      o.name = largest ? "nan_counts_largest" : "nan_last_when_smallest";
      o.inputs = [] {
        const double n = NAN;
        return In{tensor(std::vector<double>{1, n, 3, -INFINITY, n, 0, INFINITY, 2}, Shape{2, 4})};
      };
      o.run = [largest](const In& in) { return topk(in[0], 3, 1, largest).second; };
      o.reference = [largest](const In& in) { return ref_topk(in[0], 3, 1, largest, 1); };
      o.differentiable = false;
      v.push_back(std::move(o));
    }
    OpSample o;
    o.ops = {"topk", "scatter_add"};
    o.name = "sort_values_dim0";
    o.inputs = [] { return In{rnd({5, 3}, 1520)}; };
    o.run = [](const In& in) { return sort(in[0], 0).first; };
    o.reference = [](const In& in) { return ref_topk(in[0], -1, 0, false, 0); };
    v.push_back(std::move(o));
    OpSample i;
    i.ops = {"topk"};
    i.name = "int64_input";
    i.inputs = [] { return In{idx({5, -2, 7, 7, 0, 3}, {2, 3})}; };
    i.run = [](const In& in) { return topk(in[0], 2, 1).first; };
    i.reference = [](const In& in) { return ref_topk(in[0], 2, 1, true, 0); };
    i.differentiable = false;
    v.push_back(std::move(i));
  }

  // ---- tril / triu --------------------------------------------------------------------------
  struct TriCase {
    const char* name;
    Shape shape;
    int64_t diag;
  };
  const TriCase tri_cases[] = {
      {"square", {4, 4}, 0},     {"wide_diag1", {3, 5}, 1}, {"tall_diag_neg1", {5, 3}, -1},
      {"batched", {2, 3, 4}, 0}, {"far_diag", {3, 3}, 7},   {"far_neg_diag", {3, 4}, -5},
  };
  uint64_t triseed = 1600;
  for (const auto& c : tri_cases) {
    for (bool upper : {false, true}) {
      OpSample o;
      o.ops = {upper ? "triu" : "tril"};
      o.name = c.name;
      const Shape shape = c.shape;
      const int64_t dg = c.diag;
      const uint64_t sd = triseed++;
      o.inputs = [shape, sd] { return In{rnd(shape, sd)}; };
      o.run = [dg, upper](const In& in) { return upper ? triu(in[0], dg) : tril(in[0], dg); };
      o.reference = [dg, upper](const In& in) { return ref_tri(in[0], dg, upper); };
      v.push_back(std::move(o));
    }
  }
  {
    OpSample o;  // bool masks are the common use (causal attention masks)
    o.ops = {"tril"};
    o.name = "bool_mask";
    o.inputs = [] { return In{gt(rnd({4, 4}, 1620), -10.0)}; };
    o.run = [](const In& in) { return tril(in[0]); };
    o.reference = [](const In& in) { return ref_tri(cast(in[0], Float64), 0, false); };
    o.differentiable = false;
    v.push_back(std::move(o));
  }

  // ---- losses composed of ops ---------------------------------------------------------------
  auto bce = [](double x, double y) {
    const double s = 1 / (1 + std::exp(-x));
    return -(y * std::log(s) + (1 - y) * std::log(1 - s));
  };
  for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    v.push_back(loss_sample(
        {"softplus", "neg", "mul"},
        std::string("bce_with_logits_") + (red == Reduction::Mean  ? "mean"
                                           : red == Reduction::Sum ? "sum"
                                                                   : "none"),
        red,
        [] {
          return In{rnd({3, 4}, 1700, 2.0), uni({3, 4}, 1701, 0, 1)};
        },
        [red](const In& in) { return binary_cross_entropy_with_logits(in[0], in[1], red); }, bce));
  }
  v.push_back(loss_sample(
      {"softplus", "neg", "mul"}, "bce_with_logits_pos_weight", Reduction::None,
      [] {
        return In{rnd({2, 3}, 1702, 2.0), uni({2, 3}, 1703, 0, 1)};
      },
      [](const In& in) {
        return binary_cross_entropy_with_logits(in[0], in[1], Reduction::None,
                                                full({3}, 2.5, in[0].dtype()));
      },
      [](double x, double y) {
        const double s = 1 / (1 + std::exp(-x));
        return -(2.5 * y * std::log(s) + (1 - y) * std::log(1 - s));
      }));
  // Logits of +-60: naive log(sigmoid) would give log(0) in float32.
  v.push_back(loss_sample(
      {"softplus", "neg", "mul"}, "bce_with_logits_large", Reduction::None,
      [] {
        return In{tensor(std::vector<double>{60, -60, 30, -30}, Shape{4}),
                  tensor(std::vector<double>{0, 1, 0.25, 1}, Shape{4})};
      },
      [](const In& in) { return binary_cross_entropy_with_logits(in[0], in[1], Reduction::None); },
      [](double x, double y) {
        // log(1 + exp(-|x|)) + max(x, 0) - x y: exact in float64 for these values
        return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0) - x * y;
      }));
  // d kept away from the kinks at 0 and +-beta.
  auto pair_away = [](uint64_t seed, double beta) {
    return [seed, beta] {
      auto a = vals(rnd({3, 4}, seed, 1.5));
      auto b = vals(rnd({3, 4}, seed + 1, 1.5));
      for (size_t i = 0; i < a.size(); ++i) {
        double d = a[i] - b[i];
        if (std::fabs(std::fabs(d) - beta) < 0.05 || std::fabs(d) < 0.05) a[i] += 0.2;
      }
      return In{from_vals(a, {3, 4}), from_vals(b, {3, 4})};
    };
  };
  auto sl1 = [](double beta) {
    return [beta](double a, double b) {
      const double d = std::fabs(a - b);
      return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
    };
  };
  v.push_back(loss_sample(
      {"abs", "where", "mean"}, "smooth_l1_mean", Reduction::Mean, pair_away(1710, 1.0),
      [](const In& in) { return smooth_l1_loss(in[0], in[1]); }, sl1(1.0)));
  v.push_back(loss_sample(
      {"abs", "where", "sum"}, "smooth_l1_beta_half_sum", Reduction::Sum, pair_away(1712, 0.5),
      [](const In& in) { return smooth_l1_loss(in[0], in[1], Reduction::Sum, 0.5); }, sl1(0.5)));
  v.push_back(loss_sample(
      {"abs", "where"}, "huber_delta2_none", Reduction::None, pair_away(1714, 2.0),
      [](const In& in) { return huber_loss(in[0], in[1], Reduction::None, 2.0); },
      [](double a, double b) {
        const double d = std::fabs(a - b);
        return d < 2.0 ? 0.5 * d * d : 2.0 * (d - 1.0);
      }));

  v.push_back(dropout_sample({128, 64}, 0.3, false, 0.03, "stats_p03"));
  v.push_back(dropout_sample({64, 64}, 0.8, false, 0.04, "stats_p08"));
  v.push_back(dropout_sample({4, 5}, 0.5, true, 0.5, "grad_small"));
  v.push_back(dropout_identity_sample(0.5, false, "eval_identity"));
  v.push_back(dropout_identity_sample(0.0, true, "p0_identity"));
  return v;
}

SampleRegistrar reg(make_samples());

// ---- N-D pooling (kiln/ops/pool.cpp: max_pool_nd, avg_pool_nd, avg_pool_nd_grad, max_unpool):
// references sweep every (output, kernel offset) pair of [N, C, spatial...] with torch's rules.

struct NdCfg {
  I64 k, s, p, d;  // empty k: adaptive to `out`
  bool ceil = false, include_pad = true;
  int64_t divisor = 0;
  I64 out;
};

int64_t nd_len(int64_t L, const NdCfg& c, size_t i) {
  if (c.k.empty()) return c.out[i];
  const int64_t num = L + 2 * c.p[i] - c.d[i] * (c.k[i] - 1) - 1 + (c.ceil ? c.s[i] - 1 : 0);
  int64_t o = num / c.s[i] + 1;
  if (c.ceil && (o - 1) * c.s[i] >= L + c.p[i]) --o;
  return o;
}

// Calls f(output flat index, input flat index or -1 for a pad position, divisor) per pair.
template <typename F>
Shape nd_sweep(const Shape& xs, const NdCfg& c, F&& f) {
  const size_t nd = static_cast<size_t>(xs.rank() - 2);
  Shape ys{xs[0], xs[1]};
  for (size_t i = 0; i < nd; ++i) ys.push_back(nd_len(xs[static_cast<int64_t>(i) + 2], c, i));
  const I64 yv = ys.vec(), xv = xs.vec();
  Shape sp(yv.begin() + 2, yv.end()), xsp(xv.begin() + 2, xv.end());
  for (int64_t pl = 0; pl < xs[0] * xs[1]; ++pl)
    for (int64_t o = 0; o < sp.numel(); ++o) {
      const I64 oc = unravel(o, sp);
      // per dim: the list of input positions and the divisor share
      std::vector<I64> pos(nd);
      int64_t div = 1;
      for (size_t i = 0; i < nd; ++i) {
        const int64_t L = xsp[static_cast<int64_t>(i)];
        if (c.k.empty()) {
          const int64_t b = oc[i] * L / c.out[i], e = ((oc[i] + 1) * L + c.out[i] - 1) / c.out[i];
          for (int64_t q = b; q < e; ++q) pos[i].push_back(q);
          div *= e - b;
          continue;
        }
        const int64_t base = oc[i] * c.s[i] - c.p[i];
        for (int64_t j = 0; j < c.k[i]; ++j) {
          const int64_t q = base + j * c.d[i];
          if (q >= 0 && q < L) pos[i].push_back(q);
        }
        div *= c.include_pad ? std::min(base + c.k[i], L + c.p[i]) - base
                             : static_cast<int64_t>(pos[i].size());
      }
      if (c.divisor > 0) div = c.divisor;
      // cartesian product of the positions, in row-major order
      I64 at(nd, 0);
      bool any = true;
      for (size_t i = 0; i < nd; ++i) any = any && !pos[i].empty();
      while (any) {
        I64 ic(nd);
        for (size_t i = 0; i < nd; ++i) ic[i] = pos[i][z(at[i])];
        f(pl * sp.numel() + o, pl * xsp.numel() + ravel(ic, xsp), div);
        size_t i = nd;
        while (i > 0) {
          --i;
          if (++at[i] < static_cast<int64_t>(pos[i].size())) break;
          at[i] = 0;
          if (i == 0) any = false;
        }
      }
    }
  return ys;
}

Tensor ref_nd_max(const Tensor& x, const NdCfg& c) {
  const auto xv = vals(x);
  std::vector<double> y;
  Shape ys = nd_sweep(x.shape(), c, [&](int64_t o, int64_t i, int64_t) {
    if (z(o) >= y.size()) y.resize(z(o) + 1, -INFINITY);
    y[z(o)] = std::max(y[z(o)], xv[z(i)]);
  });
  y.resize(z(ys.numel()), -INFINITY);
  return from_vals(y, ys);
}

Tensor ref_nd_avg(const Tensor& x, const NdCfg& c) {
  const auto xv = vals(x);
  std::vector<double> y(z(x.numel()) * 8 + 64, 0.0);
  Shape ys = nd_sweep(x.shape(), c, [&](int64_t o, int64_t i, int64_t div) {
    y[z(o)] += xv[z(i)] / static_cast<double>(div);
  });
  y.resize(z(ys.numel()));
  return from_vals(y, ys);
}

Tensor ref_nd_avg_grad(const Tensor& g, const Shape& xs, const NdCfg& c) {
  const auto gv = vals(g);
  std::vector<double> dx(z(xs.numel()), 0.0);
  nd_sweep(xs, c, [&](int64_t o, int64_t i, int64_t div) {
    dx[z(i)] += gv[z(o)] / static_cast<double>(div);
  });
  return from_vals(dx, xs);
}

OpSample max_nd_sample(std::string name, Shape xs, NdCfg c, uint64_t seed) {
  return OpSample{.ops = {"max_pool_nd", "max_pool2d_grad"},
                  .name = std::move(name),
                  .inputs = [=] { return In{rnd(xs, seed)}; },
                  .run =
                      [=](const In& in) {
                        if (c.k.empty()) {
                          if (c.out.size() == 1) return adaptive_max_pool1d(in[0], c.out);
                          if (c.out.size() == 2) return adaptive_max_pool2d(in[0], c.out);
                          return adaptive_max_pool3d(in[0], c.out);
                        }
                        if (c.k.size() == 1) return max_pool1d(in[0], c.k, c.s, c.p, c.d, c.ceil);
                        if (c.k.size() == 2) return max_pool2d(in[0], c.k, c.s, c.p, c.d, c.ceil);
                        return max_pool3d(in[0], c.k, c.s, c.p, c.d, c.ceil);
                      },
                  .reference = [=](const In& in) { return ref_nd_max(in[0], c); }};
}

OpSample avg_nd_sample(std::string name, Shape xs, NdCfg c, uint64_t seed) {
  return OpSample{.ops = {"avg_pool_nd", "avg_pool_nd_grad"},
                  .name = std::move(name),
                  .inputs = [=] { return In{rnd(xs, seed)}; },
                  .run =
                      [=](const In& in) {
                        if (c.k.empty()) {
                          if (c.out.size() == 1) return adaptive_avg_pool1d(in[0], c.out);
                          if (c.out.size() == 2) return adaptive_avg_pool2d(in[0], c.out);
                          return adaptive_avg_pool3d(in[0], c.out);
                        }
                        if (c.k.size() == 1)
                          return avg_pool1d(in[0], c.k, c.s, c.p, c.ceil, c.include_pad);
                        if (c.k.size() == 2)
                          return avg_pool2d(in[0], c.k, c.s, c.p, c.ceil, c.include_pad, c.divisor);
                        return avg_pool3d(in[0], c.k, c.s, c.p, c.ceil, c.include_pad, c.divisor);
                      },
                  .reference = [=](const In& in) { return ref_nd_avg(in[0], c); }};
}

Attrs nd_attrs_of(const NdCfg& c) {
  return Attrs{c.k, c.s, c.p, c.d, c.ceil, c.include_pad, c.divisor, c.out};
}

std::vector<OpSample> make_pool_nd_samples() {
  std::vector<OpSample> v;
  // max: ceil_mode, padding and dilation in 1, 2 and 3 dims; adaptive bins.
  v.push_back(max_nd_sample("max1d_ceil_dil", {2, 3, 11}, {{3}, {2}, {1}, {2}, true}, 2001));
  v.push_back(max_nd_sample("max2d_ceil_pad_dil", {2, 2, 7, 8},
                            {{3, 2}, {2, 3}, {1, 1}, {2, 1}, true}, 2003));
  v.push_back(max_nd_sample("max3d_pad", {1, 2, 5, 6, 5},
                            {{2, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 1, 2}, true}, 2005));
  v.push_back(max_nd_sample("adaptive_max2d", {2, 2, 7, 5},
                            {{}, {}, {}, {}, false, true, 0, {3, 4}}, 2007));
  v.push_back(max_nd_sample("adaptive_max1d_unbatched", {3, 10},
                            {{}, {}, {}, {}, false, true, 0, {4}}, 2009));
  v.back().reference = [](const In& in) {
    NdCfg c{{}, {}, {}, {}, false, true, 0, {4}};
    Tensor r = ref_nd_max(unsqueeze(in[0], 0), c);
    return reshape(r, Shape{3, 4});
  };
  // avg: ceil_mode with and without the padding counted, divisor_override, adaptive.
  v.push_back(
      avg_nd_sample("avg1d_ceil_nopad", {2, 2, 9}, {{3}, {2}, {1}, {1}, true, false}, 2011));
  v.push_back(avg_nd_sample("avg2d_ceil_pad", {2, 2, 6, 7},
                            {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true}, 2013));
  v.push_back(avg_nd_sample("avg2d_divisor", {1, 3, 5, 5},
                            {{2, 3}, {2, 1}, {1, 0}, {1, 1}, false, true, 5}, 2015));
  v.push_back(avg_nd_sample("avg3d_ceil_nopad", {1, 2, 5, 4, 6},
                            {{2, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 1, 1}, true, false}, 2017));
  v.push_back(avg_nd_sample("adaptive_avg3d", {1, 2, 5, 4, 7},
                            {{}, {}, {}, {}, false, true, 0, {2, 3, 3}}, 2019));
  v.push_back(
      avg_nd_sample("adaptive_avg1d", {2, 3, 10}, {{}, {}, {}, {}, false, true, 0, {4}}, 2021));
  // The gradient op directly (its own gradient is avg_pool_nd).
  {
    NdCfg c{{3, 2}, {2, 2}, {1, 1}, {1, 1}, true, false};
    const Shape xs{2, 2, 6, 7};
    v.push_back(OpSample{.ops = {"avg_pool_nd_grad", "avg_pool_nd"},
                         .name = "avg_grad_direct",
                         .inputs =
                             [=] {
                               return In{rnd(Shape{2, 2, 4, 4}, 2023)};
                             },
                         .run =
                             [=](const In& in) {
                               Attrs a = nd_attrs_of(c);
                               return call1(
                                   OpRegistry::get().at("avg_pool_nd_grad"), {in[0]},
                                   {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], I64{6, 7}});
                             },
                         .reference = [=](const In& in) { return ref_nd_avg_grad(in[0], xs, c); }});
  }
  // max_unpool: distinct indices per plane (values land once each); the gradient gathers.
  v.push_back(OpSample{.ops = {"max_unpool", "max_pool2d_gather"},
                       .name = "unpool2d",
                       .inputs =
                           [] {
                             return In{rnd(Shape{2, 3, 2, 2}, 2025),
                                       idx(I64{0, 3, 9,  14, 1,  2, 5, 7, 15, 11, 4,  0,
                                               6, 8, 10, 12, 13, 2, 3, 1, 0,  15, 14, 9},
                                           Shape{2, 3, 2, 2})};
                           },
                       .run =
                           [](const In& in) {
                             return max_unpool2d(in[0], in[1], {2}, {2}, {0}, {4, 4});
                           },
                       .reference =
                           [](const In& in) {
                             const auto xv = vals(in[0]);
                             const auto iv = ivals(in[1]);
                             std::vector<double> y(6 * 16, 0.0);
                             for (size_t q = 0; q < xv.size(); ++q)
                               y[q / 4 * 16 + z(iv[q])] = xv[q];
                             return from_vals(y, Shape{2, 3, 4, 4});
                           }});
  return v;
}

SampleRegistrar reg_pool_nd(make_pool_nd_samples());

}  // namespace
}  // namespace kiln::testing
