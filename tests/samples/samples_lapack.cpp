// Samples for torch.linalg's LAPACK-backed primitives (kiln/ops/linalg_lapack.cpp): slogdet,
// inv, solve, cholesky, qr, svd, eigh, batched. References are naive float64 algorithms (LU with
// partial pivoting, Gauss-Jordan, Cholesky-Banachiewicz, modified Gram-Schmidt, cyclic Jacobi).
// Factors with a sign freedom are compared in a sign-free form (R with a positive diagonal,
// U diag(c) V^T, V diag(c) V^T), which is also what gradcheck differentiates.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using Mat = std::vector<double>;  // row-major

// Applies f to each matrix of x [..., m, n]; f returns the rows of its result and sets its
// trailing shape.
Tensor per_matrix(const Tensor& x,
                  const std::function<Mat(const Mat&, int64_t, int64_t, Shape&)>& f) {
  const Shape& s = x.shape();
  const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1];
  int64_t B = 1;
  for (int64_t d = 0; d + 2 < s.rank(); ++d) B *= s[d];
  auto v = vals(x);
  Mat out;
  Shape tail;
  for (int64_t b = 0; b < B; ++b) {
    Mat a(v.begin() + b * m * n, v.begin() + (b + 1) * m * n);
    Mat r = f(a, m, n, tail);
    out.insert(out.end(), r.begin(), r.end());
  }
  Shape os(s.begin(), s.end() - 2);
  for (auto t : tail) os.push_back(t);
  return from_vals(out, os);
}

Mat matmul_ref(const Mat& a, const Mat& b, int64_t m, int64_t k, int64_t n) {
  Mat c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < k; ++t) c[i * n + j] += a[i * k + t] * b[t * n + j];
  return c;
}
Mat transpose_ref(const Mat& a, int64_t m, int64_t n) {
  Mat t(a.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) t[j * m + i] = a[i * n + j];
  return t;
}

// log|det| by LU with partial pivoting.
double logabsdet_ref(Mat a, int64_t n) {
  double l = 0;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    for (int64_t j = 0; j < n; ++j) std::swap(a[c * n + j], a[p * n + j]);
    l += std::log(std::fabs(a[c * n + c]));
    for (int64_t r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (int64_t j = c; j < n; ++j) a[r * n + j] -= f * a[c * n + j];
    }
  }
  return l;
}

// Gauss-Jordan inverse with partial pivoting.
Mat inv_ref(Mat a, int64_t n) {
  Mat e(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) e[i * n + i] = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    for (int64_t j = 0; j < n; ++j) {
      std::swap(a[c * n + j], a[p * n + j]);
      std::swap(e[c * n + j], e[p * n + j]);
    }
    const double d = a[c * n + c];
    for (int64_t j = 0; j < n; ++j) {
      a[c * n + j] /= d;
      e[c * n + j] /= d;
    }
    for (int64_t r = 0; r < n; ++r)
      if (r != c) {
        const double f = a[r * n + c];
        for (int64_t j = 0; j < n; ++j) {
          a[r * n + j] -= f * a[c * n + j];
          e[r * n + j] -= f * e[c * n + j];
        }
      }
  }
  return e;
}

// The SPD matrix A A^T + n I that the cholesky samples factor.
Mat spd_of(const Mat& a, int64_t n) {
  Mat s = matmul_ref(a, transpose_ref(a, n, n), n, n, n);
  for (int64_t i = 0; i < n; ++i) s[i * n + i] += static_cast<double>(n);
  return s;
}
Tensor spd(const Tensor& a) {
  const int64_t n = a.shape()[a.dim() - 1];
  return add(matmul(a, transpose(a, -2, -1)), mul(eye(n, n, a.dtype()), static_cast<double>(n)));
}

Mat cholesky_ref(const Mat& a, int64_t n) {
  Mat l(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = i == j ? std::sqrt(s) : s / l[j * n + j];
    }
  return l;
}

// Modified Gram-Schmidt (m >= n): Q [m, n], R [n, n] with a positive diagonal.
void qr_ref(const Mat& a, int64_t m, int64_t n, Mat& q, Mat& r) {
  q = a;
  r.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    double nrm = 0;
    for (int64_t i = 0; i < m; ++i) nrm += q[i * n + j] * q[i * n + j];
    nrm = std::sqrt(nrm);
    r[j * n + j] = nrm;
    for (int64_t i = 0; i < m; ++i) q[i * n + j] /= nrm;
    for (int64_t k = j + 1; k < n; ++k) {
      double d = 0;
      for (int64_t i = 0; i < m; ++i) d += q[i * n + j] * q[i * n + k];
      r[j * n + k] = d;
      for (int64_t i = 0; i < m; ++i) q[i * n + k] -= d * q[i * n + j];
    }
  }
}

// Cyclic Jacobi on symmetric a: eigenvalues ascending, eigenvectors as columns of v.
void jacobi_ref(Mat a, int64_t n, Mat& w, Mat& v) {
  v.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (i != j) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-28) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (std::fabs(a[p * n + q]) < 1e-300) continue;
        const double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
        const double t = (th >= 0 ? 1.0 : -1.0) / (std::fabs(th) + std::sqrt(th * th + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {
          const double kp = a[k * n + p], kq = a[k * n + q];
          a[k * n + p] = c * kp - s * kq;
          a[k * n + q] = s * kp + c * kq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double pk = a[p * n + k], qk = a[q * n + k];
          a[p * n + k] = c * pk - s * qk;
          a[q * n + k] = s * pk + c * qk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double kp = v[k * n + p], kq = v[k * n + q];
          v[k * n + p] = c * kp - s * kq;
          v[k * n + q] = s * kp + c * kq;
        }
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t x, int64_t y) { return a[x * n + x] < a[y * n + y]; });
  Mat vs(v.size());
  w.assign(static_cast<size_t>(n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    w[j] = a[order[j] * n + order[j]];
    for (int64_t i = 0; i < n; ++i) vs[i * n + j] = v[i * n + order[j]];
  }
  v = vs;
}

// Weights c_j = 1 + j / 2 of the sign-free forms sum_j c_j u_j v_j^T.
Mat sum_weighted(const Mat& u, const Mat& v, int64_t m, int64_t n, int64_t k, int64_t ku,
                 int64_t kv) {
  Mat r(static_cast<size_t>(m * n), 0.0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t a = 0; a < m; ++a)
      for (int64_t b = 0; b < n; ++b)
        r[a * n + b] += (1 + 0.5 * static_cast<double>(j)) * u[a * ku + j] * v[b * kv + j];
  return r;
}
Tensor weights(int64_t k) {
  std::vector<double> c;
  for (int64_t j = 0; j < k; ++j) c.push_back(1 + 0.5 * static_cast<double>(j));
  return from_vals(c, {k});
}

// SVD through Jacobi on A^T A (m >= n): S descending, V's columns, U = A V / S.
void svd_ref(const Mat& a, int64_t m, int64_t n, Mat& u, Mat& s, Mat& v) {
  Mat w, vv;
  jacobi_ref(matmul_ref(transpose_ref(a, m, n), a, n, m, n), n, w, vv);
  s.assign(static_cast<size_t>(n), 0.0);
  v.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::sqrt(std::max(w[n - 1 - j], 0.0));
    for (int64_t i = 0; i < n; ++i) v[i * n + j] = vv[i * n + (n - 1 - j)];
  }
  u = matmul_ref(a, v, m, n, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) u[i * n + j] /= s[j];
}

Tensor sym(const Tensor& a) { return mul(add(a, transpose(a, -2, -1)), 0.5); }

OpSample sample(const char* op, std::string name, Shape shape, uint64_t seed,
                std::function<Tensor(const In&)> run,
                std::function<Mat(const Mat&, int64_t, int64_t, Shape&)> ref) {
  OpSample s;
  s.ops = {op};
  s.name = std::move(name);
  s.inputs = [shape, seed] { return In{rnd(shape, seed)}; };
  s.run = std::move(run);
  s.reference = [ref](const In& in) { return per_matrix(in[0], ref); };
  s.tol32 = 1e-4;
  s.gc_atol = 1e-4;
  return s;
}

std::vector<OpSample> all() {
  std::vector<OpSample> v;
  for (const auto& [nm, shape] :
       {std::pair<const char*, Shape>{"3x3", {3, 3}}, {"batch_2x4x4", {2, 4, 4}}}) {
    const Shape sh = shape;
    v.push_back(sample(
        "linalg_slogdet", std::string("logabsdet_") + nm, sh, 10,
        [](const In& in) { return linalg::slogdet(in[0]).second; },
        [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {};
          return Mat{logabsdet_ref(a, n)};
        }));
    v.push_back(sample(
        "linalg_slogdet", std::string("det_") + nm, sh, 11,
        [](const In& in) { return linalg::det(in[0]); },
        [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {};
          Mat m = a;
          // det = the product of U's diagonal with the pivoting sign: exp(logabsdet) * sign.
          const double l = logabsdet_ref(a, n);
          // The sign from the reference inverse's determinant relation is awkward; use LU again.
          double sg = 1;
          for (int64_t c = 0; c < n; ++c) {
            int64_t p = c;
            for (int64_t r = c + 1; r < n; ++r)
              if (std::fabs(m[r * n + c]) > std::fabs(m[p * n + c])) p = r;
            if (p != c) sg = -sg;
            for (int64_t j = 0; j < n; ++j) std::swap(m[c * n + j], m[p * n + j]);
            if (m[c * n + c] < 0) sg = -sg;
            for (int64_t r = c + 1; r < n; ++r) {
              const double f = m[r * n + c] / m[c * n + c];
              for (int64_t j = c; j < n; ++j) m[r * n + j] -= f * m[c * n + j];
            }
          }
          return Mat{sg * std::exp(l)};
        }));
    v.push_back(sample(
        "linalg_inv", nm, sh, 12, [](const In& in) { return linalg::inv(in[0]); },
        [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {n, n};
          return inv_ref(a, n);
        }));
    v.push_back(sample(
        "linalg_cholesky", nm, sh, 13, [](const In& in) { return linalg::cholesky(spd(in[0])); },
        [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {n, n};
          return cholesky_ref(spd_of(a, n), n);
        }));
    v.push_back(sample(
        "linalg_eigh", std::string("eigenvalues_") + nm, sh, 14,
        [](const In& in) { return linalg::eigh(sym(in[0])).first; },
        [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {n};
          Mat w, vv;
          jacobi_ref(a, n, w, vv);
          return w;
        }));
  }
  // eigh's inputs symmetrized in the reference too.
  for (auto& s : v)
    if (s.ops[0] == "linalg_eigh")
      s.reference = [](const In& in) {
        return per_matrix(in[0], [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {n};
          Mat sa(a.size()), w, vv;
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) sa[i * n + j] = 0.5 * (a[i * n + j] + a[j * n + i]);
          jacobi_ref(sa, n, w, vv);
          return w;
        });
      };
  {
    OpSample s = sample(
        "linalg_eigh", "eigenvectors_upper", {2, 4, 4}, 15,
        [](const In& in) {
          auto [w, V] = linalg::eigh(sym(in[0]), "U");
          return matmul(mul(V, cast(weights(4), V.dtype())), transpose(V, -2, -1));
        },
        [](const Mat& a, int64_t, int64_t n, Shape& t) {
          t = {n, n};
          Mat sa(a.size()), w, vv;
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) sa[i * n + j] = 0.5 * (a[i * n + j] + a[j * n + i]);
          jacobi_ref(sa, n, w, vv);
          return sum_weighted(vv, vv, n, n, n, n, n);
        });
    v.push_back(std::move(s));
  }
  {
    // solve with a matrix and with a batch of vectors (B's rank one less than A's).
    OpSample s;
    s.ops = {"linalg_solve"};
    s.name = "batch_matrix_rhs";
    s.inputs = [] { return In{rnd({2, 3, 3}, 20), rnd({2, 3, 2}, 21)}; };
    s.run = [](const In& in) { return linalg::solve(in[0], in[1]); };
    s.reference = [](const In& in) {
      auto av = vals(in[0]), bv = vals(in[1]);
      Mat out;
      for (int64_t b = 0; b < 2; ++b) {
        Mat a(av.begin() + b * 9, av.begin() + (b + 1) * 9),
            r(bv.begin() + b * 6, bv.begin() + (b + 1) * 6);
        Mat x = matmul_ref(inv_ref(a, 3), r, 3, 3, 2);
        out.insert(out.end(), x.begin(), x.end());
      }
      return from_vals(out, {2, 3, 2});
    };
    s.tol32 = 1e-4;
    s.gc_atol = 1e-4;
    v.push_back(s);
    s.name = "vector_rhs_batch";
    s.inputs = [] { return In{rnd({2, 3, 3}, 22), rnd({2, 3}, 23)}; };
    s.reference = [](const In& in) {
      auto av = vals(in[0]), bv = vals(in[1]);
      Mat out;
      for (int64_t b = 0; b < 2; ++b) {
        Mat a(av.begin() + b * 9, av.begin() + (b + 1) * 9),
            r(bv.begin() + b * 3, bv.begin() + (b + 1) * 3);
        Mat x = matmul_ref(inv_ref(a, 3), r, 3, 3, 1);
        out.insert(out.end(), x.begin(), x.end());
      }
      return from_vals(out, {2, 3});
    };
    v.push_back(s);
    s.name = "broadcast_A";
    s.inputs = [] { return In{rnd({3, 3}, 24), rnd({2, 3, 2}, 25)}; };
    s.reference = [](const In& in) {
      auto av = vals(in[0]), bv = vals(in[1]);
      const Mat ai = inv_ref(Mat(av.begin(), av.end()), 3);
      Mat out;
      for (int64_t b = 0; b < 2; ++b) {
        Mat r(bv.begin() + b * 6, bv.begin() + (b + 1) * 6);
        Mat x = matmul_ref(ai, r, 3, 3, 2);
        out.insert(out.end(), x.begin(), x.end());
      }
      return from_vals(out, {2, 3, 2});
    };
    v.push_back(s);
  }
  // qr: R and Q with R's diagonal made positive (the Gram-Schmidt convention).
  for (const auto& [nm, shape] :
       {std::pair<const char*, Shape>{"4x3", {4, 3}}, {"batch_2x3x3", {2, 3, 3}}}) {
    const int64_t n = shape[shape.rank() - 1];
    auto signs = [](const Tensor& R) { return sign(diagonal(R, 0, -2, -1)); };
    v.push_back(sample(
        "linalg_qr", std::string("R_") + nm, shape, 30,
        [signs](const In& in) {
          auto [Q, R] = linalg::qr(in[0]);
          return mul(R, unsqueeze(signs(R), -1));
        },
        [n](const Mat& a, int64_t m, int64_t, Shape& t) {
          t = {n, n};
          Mat q, r;
          qr_ref(a, m, n, q, r);
          return r;
        }));
    v.push_back(sample(
        "linalg_qr", std::string("Q_") + nm, shape, 31,
        [signs](const In& in) {
          auto [Q, R] = linalg::qr(in[0]);
          return mul(Q, unsqueeze(signs(R), -2));
        },
        [n](const Mat& a, int64_t m, int64_t, Shape& t) {
          t = {m, n};
          Mat q, r;
          qr_ref(a, m, n, q, r);
          return q;
        }));
  }
  // svd: S, and U diag(c) Vh (free of the sign choice), tall and wide, reduced and full.
  struct SvdCase {
    const char* name;
    Shape shape;
    bool full;
  };
  for (const auto& c :
       {SvdCase{"tall_4x3", {4, 3}, false}, SvdCase{"wide_batch_2x3x5", {2, 3, 5}, true},
        SvdCase{"square_3x3", {3, 3}, true}}) {
    const bool full = c.full;
    const int64_t m = c.shape[c.shape.rank() - 2], n = c.shape[c.shape.rank() - 1];
    const int64_t k = std::min(m, n);
    auto ref_parts = [](const Mat& a, int64_t m, int64_t n, Mat& u, Mat& s, Mat& vv) {
      if (m >= n) {
        svd_ref(a, m, n, u, s, vv);
      } else {
        svd_ref(transpose_ref(a, m, n), n, m, vv, s, u);  // A^T = V S U^T
      }
    };
    v.push_back(sample(
        "linalg_svd", std::string("S_") + c.name, c.shape, 40,
        [full](const In& in) { return std::get<1>(linalg::svd(in[0], full)); },
        [ref_parts, k](const Mat& a, int64_t m, int64_t n, Shape& t) {
          t = {k};
          Mat u, s, vv;
          ref_parts(a, m, n, u, s, vv);
          return s;
        }));
    v.push_back(sample(
        "linalg_svd", std::string("UcVh_") + c.name, c.shape, 41,
        [full, k](const In& in) {
          auto [U, S, Vh] = linalg::svd(in[0], full);
          U = slice(U, -1, 0, k);
          Vh = slice(Vh, -2, 0, k);
          return matmul(mul(U, cast(weights(k), U.dtype())), Vh);
        },
        [ref_parts, k](const Mat& a, int64_t m, int64_t n, Shape& t) {
          t = {m, n};
          Mat u, s, vv;
          ref_parts(a, m, n, u, s, vv);
          return sum_weighted(u, vv, m, n, k, k, k);
        }));
  }
  return v;
}

SampleRegistrar reg(all());

}  // namespace
}  // namespace kiln::testing
