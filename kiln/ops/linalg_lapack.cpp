// torch.linalg's decompositions and solvers on LAPACK (LAPACKE over OpenBLAS): slogdet, inv,
// solve, cholesky, qr, svd, eigh as primitives batched over the leading dims, float32 and float64;
// det, svdvals, eigvalsh, pinv, matrix_rank, the matrix norms and norm as composites. Gradients are
// written with Kiln ops (solve, matmul, ...), so they work in eager, graph and JIT modes and can
// be differentiated again.
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

// ---- LAPACK by element type (row-major: LAPACKE transposes as needed) ------------------------
lapack_int getrf(lapack_int m, lapack_int n, double* a, lapack_int* ipiv) {
  return LAPACKE_dgetrf(LAPACK_ROW_MAJOR, m, n, a, n, ipiv);
}
lapack_int getrf(lapack_int m, lapack_int n, float* a, lapack_int* ipiv) {
  return LAPACKE_sgetrf(LAPACK_ROW_MAJOR, m, n, a, n, ipiv);
}
lapack_int getri(lapack_int n, double* a, const lapack_int* ipiv) {
  return LAPACKE_dgetri(LAPACK_ROW_MAJOR, n, a, n, ipiv);
}
lapack_int getri(lapack_int n, float* a, const lapack_int* ipiv) {
  return LAPACKE_sgetri(LAPACK_ROW_MAJOR, n, a, n, ipiv);
}
lapack_int getrs(lapack_int n, lapack_int k, const double* a, const lapack_int* ipiv, double* b) {
  return LAPACKE_dgetrs(LAPACK_ROW_MAJOR, 'N', n, k, a, n, ipiv, b, k);
}
lapack_int getrs(lapack_int n, lapack_int k, const float* a, const lapack_int* ipiv, float* b) {
  return LAPACKE_sgetrs(LAPACK_ROW_MAJOR, 'N', n, k, a, n, ipiv, b, k);
}
lapack_int potrf(lapack_int n, double* a) { return LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', n, a, n); }
lapack_int potrf(lapack_int n, float* a) { return LAPACKE_spotrf(LAPACK_ROW_MAJOR, 'L', n, a, n); }
lapack_int geqrf(lapack_int m, lapack_int n, double* a, lapack_int lda, double* tau) {
  return LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, m, n, a, lda, tau);
}
lapack_int geqrf(lapack_int m, lapack_int n, float* a, lapack_int lda, float* tau) {
  return LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, m, n, a, lda, tau);
}
lapack_int orgqr(lapack_int m, lapack_int n, lapack_int k, double* a, lapack_int lda,
                 const double* tau) {
  return LAPACKE_dorgqr(LAPACK_ROW_MAJOR, m, n, k, a, lda, tau);
}
lapack_int orgqr(lapack_int m, lapack_int n, lapack_int k, float* a, lapack_int lda,
                 const float* tau) {
  return LAPACKE_sorgqr(LAPACK_ROW_MAJOR, m, n, k, a, lda, tau);
}
lapack_int gesdd(char jobz, lapack_int m, lapack_int n, double* a, double* s, double* u,
                 lapack_int ldu, double* vt, lapack_int ldvt) {
  return LAPACKE_dgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, ldu, vt, ldvt);
}
lapack_int gesdd(char jobz, lapack_int m, lapack_int n, float* a, float* s, float* u,
                 lapack_int ldu, float* vt, lapack_int ldvt) {
  return LAPACKE_sgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, ldu, vt, ldvt);
}
lapack_int syevd(char uplo, lapack_int n, double* a, double* w) {
  return LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', uplo, n, a, n, w);
}
lapack_int syevd(char uplo, lapack_int n, float* a, float* w) {
  return LAPACKE_ssyevd(LAPACK_ROW_MAJOR, 'V', uplo, n, a, n, w);
}

// ---- shapes ----------------------------------------------------------------------------------
Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }
Shape with(Shape s, std::initializer_list<int64_t> tail) {
  for (auto x : tail) s.push_back(x);
  return s;
}
int64_t batch_count(const Shape& s) {
  int64_t b = 1;
  for (int64_t d = 0; d + 2 < s.rank(); ++d) b *= s[d];
  return b;
}

// Dims agree, or one of them is dynamic (a graph's placeholder or a jit's dynamic dim; the
// kernel's run checks the concrete sizes again).
bool dims_match(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }
bool shapes_match(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (!dims_match(a[d], b[d])) return false;
  return true;
}

// need_static: qr and svd (and the composites on them) size their outputs by min(m, n), which a
// dynamic dim leaves unknown, so their matrix sizes must be static (the ops declare
// kStaticShapes, and the jit compiles them per shape); the others take any dims dynamic.
void check_matrix(const char* op, const Tensor& a, bool square, bool need_static = false) {
  op_util::require_float(op, a);
  if (a.dim() < 2) fail(op, "input must have at least 2 dims ([..., m, n]), got shape ", a.shape());
  const Shape& s = a.shape();
  if (need_static && (s[s.rank() - 1] < 0 || s[s.rank() - 2] < 0))
    fail(op, "needs a static size, got shape ", s);
  if (square && !dims_match(s[s.rank() - 1], s[s.rank() - 2]))
    fail(op, "A must be batches of square matrices, but they are ", s[s.rank() - 2], " by ",
         s[s.rank() - 1], " matrices (shape ", s, ")");
}

Tensor contig(const Tensor& x) { return x.is_contiguous() ? x : raw_contiguous_copy(x); }
Tensor mT(const Tensor& x) { return transpose(x, -2, -1); }
Tensor eye_like(int64_t n, DType dt) { return eye(n, n, dt); }
lapack_int li(int64_t v) { return static_cast<lapack_int>(v); }

// ---- slogdet ---------------------------------------------------------------------------------
const OpDef& kSlogdet =
    def_op({.name = "linalg_slogdet",
            .num_outputs = 2,
            .infer =
                [](std::span<const Tensor> in, const Attrs&) {
                  check_matrix("linalg_slogdet", in[0], true);
                  MetaList m = one(in[0].dtype(), batch_of(in[0].shape()));
                  m.push_back(TensorMeta{in[0].dtype(), batch_of(in[0].shape())});
                  return m;
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                  const Tensor a = contig(in[0]);
                  const int64_t n = a.shape()[a.dim() - 1], B = batch_count(a.shape());
                  KILN_DISPATCH_FLOAT(a.dtype(), "linalg_slogdet", [&] {
                    using T = scalar_t;
                    std::vector<T> w(static_cast<size_t>(n * n));
                    std::vector<lapack_int> piv(static_cast<size_t>(std::max<int64_t>(n, 1)));
                    T* sg = out[0].data_ptr<T>();
                    T* la = out[1].data_ptr<T>();
                    for (int64_t b = 0; b < B; ++b) {
                      if (n == 0) {
                        sg[b] = 1;
                        la[b] = 0;
                        continue;
                      }
                      std::memcpy(w.data(), a.data_ptr<T>() + b * n * n, sizeof(T) * n * n);
                      const lapack_int info = getrf(li(n), li(n), w.data(), piv.data());
                      if (info < 0) fail("linalg_slogdet", "LAPACK getrf failed (info ", info, ")");
                      double s = 1, l = 0;
                      for (int64_t i = 0; i < n; ++i) {
                        const double u = static_cast<double>(w[i * n + i]);
                        if (piv[i] != i + 1) s = -s;
                        if (u < 0) s = -s;
                        l += std::log(std::fabs(u));
                      }
                      if (info > 0) {
                        s = 0;
                        l = -INFINITY;
                      }
                      sg[b] = static_cast<T>(s);
                      la[b] = static_cast<T>(l);
                    }
                  });
                },
            // d log|det A| = tr(A^-1 dA): the gradient is g A^-T (the sign is piecewise constant).
            .grad =
                [](const GradCtx& c) {
                  if (!c.flowed(1)) return TensorList{zeros_like(c.in(0))};
                  const Tensor g = unsqueeze(unsqueeze(c.g(1), -1), -1);
                  return TensorList{mul(g, mT(linalg::inv(c.in(0))))};
                },
            // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
            .autocast = AutocastPolicy::kFloat32});

// ---- inv ---------------------------------------------------------------------------------------
const OpDef& kInv = def_op(
    {.name = "linalg_inv",
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           check_matrix("linalg_inv", in[0], true);
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const Tensor a = contig(in[0]);
           const int64_t n = a.shape()[a.dim() - 1], B = batch_count(a.shape());
           if (n == 0) return;
           KILN_DISPATCH_FLOAT(a.dtype(), "linalg_inv", [&] {
             using T = scalar_t;
             std::vector<lapack_int> piv(static_cast<size_t>(n));
             T* o = out[0].data_ptr<T>();
             std::memcpy(o, a.data_ptr<T>(), sizeof(T) * B * n * n);
             for (int64_t b = 0; b < B; ++b) {
               lapack_int info = getrf(li(n), li(n), o + b * n * n, piv.data());
               if (info > 0)
                 fail("linalg_inv", "(batch element ", b, "): the diagonal element ", info,
                      " is zero, the inversion could not be completed because the input matrix "
                      "is singular (shape ",
                      a.shape(), ")");
               if (info == 0) info = getri(li(n), o + b * n * n, piv.data());
               if (info != 0) fail("linalg_inv", "LAPACK failed (info ", info, ")");
             }
           });
         },
     // d(A^-1) = -A^-1 dA A^-1, so gA = -Y^T g Y^T with Y = A^-1.
     .grad =
         [](const GradCtx& c) {
           const Tensor yt = mT(c.out(0));
           return TensorList{neg(matmul(matmul(yt, c.g()), yt))};
         },
     // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
     .autocast = AutocastPolicy::kFloat32});

// ---- solve: A X = B, A [..., n, n], B [..., n, k] with equal batch dims (the wrapper
// broadcasts) ----------------------------------------------------------------------------------
const OpDef& kSolve = def_op(
    {.name = "linalg_solve",
     .num_inputs = 2,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           check_matrix("linalg_solve", in[0], true);
           check_matrix("linalg_solve", in[1], false);
           op_util::require_same_dtype("linalg_solve", in[0], in[1]);
           const Shape &sa = in[0].shape(), &sb = in[1].shape();
           // A 2-D A is shared by every matrix of B (the wrapper's broadcast without an
           // expand, which a dynamic batch dim would not allow).
           if ((sa.rank() != 2 && !shapes_match(batch_of(sa), batch_of(sb))) ||
               !dims_match(sb[sb.rank() - 2], sa[sa.rank() - 1]))
             fail("linalg_solve", "A ", sa, " and B ", sb, " do not match: B must be [..., ",
                  sa[sa.rank() - 1], ", k] with A's batch dims (or A 2-D)");
           return one(in[1].dtype(), sb);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const Tensor a = contig(in[0]), bm = contig(in[1]);
           const int64_t n = a.shape()[a.dim() - 1], k = bm.shape()[bm.dim() - 1];
           const int64_t B = batch_count(bm.shape());
           const bool shared = a.dim() == 2;  // one A for every matrix of B: factored once
           if (n == 0 || k == 0) return;
           KILN_DISPATCH_FLOAT(a.dtype(), "linalg_solve", [&] {
             using T = scalar_t;
             std::vector<T> w(static_cast<size_t>(n * n));
             std::vector<lapack_int> piv(static_cast<size_t>(n));
             T* o = out[0].data_ptr<T>();
             std::memcpy(o, bm.data_ptr<T>(), sizeof(T) * B * n * k);
             lapack_int info = 0;
             for (int64_t b = 0; b < B; ++b) {
               if (!shared || b == 0) {
                 std::memcpy(w.data(), a.data_ptr<T>() + (shared ? 0 : b) * n * n,
                             sizeof(T) * n * n);
                 info = getrf(li(n), li(n), w.data(), piv.data());
               }
               if (info > 0)
                 fail("linalg_solve", "(batch element ", b, "): the diagonal element ", info,
                      " is zero, the solve could not be completed because the input matrix is "
                      "singular (shape ",
                      a.shape(), ")");
               if (info == 0) info = getrs(li(n), li(k), w.data(), piv.data(), o + b * n * k);
               if (info != 0) fail("linalg_solve", "LAPACK failed (info ", info, ")");
             }
           });
         },
     // X = A^-1 B: gB = A^-T g, gA = -gB X^T.
     .grad =
         [](const GradCtx& c) {
           const Tensor gb = call1(kSolve, {mT(c.in(0)), c.g()});
           Tensor ga;
           if (c.need(0)) {
             ga = neg(matmul(gb, mT(c.out(0))));
             // a shared 2-D A collects the gradient of every matrix of B
             if (c.in(0).dim() == 2 && ga.dim() > 2) {
               std::vector<int64_t> lead(static_cast<size_t>(ga.dim() - 2));
               for (size_t d = 0; d < lead.size(); ++d) lead[d] = static_cast<int64_t>(d);
               ga = sum(ga, lead);
             }
           }
           return TensorList{ga, gb};
         },
     // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
     .autocast = AutocastPolicy::kFloat32});

Tensor solve_raw(const Tensor& a, const Tensor& b) { return call1(kSolve, {a, b}); }
// X A^-1 (= (A^-T X^T)^T).
Tensor solve_right(const Tensor& x, const Tensor& a) { return mT(solve_raw(mT(a), mT(x))); }

// ---- cholesky (lower) --------------------------------------------------------------------------
const OpDef& kCholesky = def_op(
    {.name = "linalg_cholesky",
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           check_matrix("linalg_cholesky", in[0], true);
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const Tensor a = contig(in[0]);
           const int64_t n = a.shape()[a.dim() - 1], B = batch_count(a.shape());
           if (n == 0) return;
           KILN_DISPATCH_FLOAT(a.dtype(), "linalg_cholesky", [&] {
             using T = scalar_t;
             T* o = out[0].data_ptr<T>();
             std::memcpy(o, a.data_ptr<T>(), sizeof(T) * B * n * n);
             for (int64_t b = 0; b < B; ++b) {
               T* m = o + b * n * n;
               const lapack_int info = potrf(li(n), m);
               if (info > 0)
                 fail("linalg_cholesky", "(batch element ", b,
                      "): the factorization could not be "
                      "completed because the input is not positive-definite (the leading minor of "
                      "order ",
                      info, " is not positive-definite; shape ", a.shape(), ")");
               if (info < 0) fail("linalg_cholesky", "LAPACK potrf failed (info ", info, ")");
               for (int64_t i = 0; i < n; ++i)
                 for (int64_t j = i + 1; j < n; ++j) m[i * n + j] = 0;
             }
           });
         },
     // torch's rule: with phi(X) = tril(X) with its diagonal halved,
     // gA = L^-T phi(L^T gL) L^-1, symmetrized.
     .grad =
         [](const GradCtx& c) {
           const Tensor& L = c.out(0);
           const Tensor m = matmul(mT(L), c.g());
           // (the diagonal halved with tril alone: n may be a dynamic dim)
           const Tensor below = tril(m, -1);
           const Tensor phi = add(below, mul(sub(tril(m), below), 0.5));
           const Tensor ga = solve_right(solve_raw(mT(L), phi), L);
           return TensorList{mul(add(ga, mT(ga)), 0.5)};
         },
     // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
     .autocast = AutocastPolicy::kFloat32});

// ---- qr ----------------------------------------------------------------------------------------
int qr_mode(const std::string& m) {
  if (m == "reduced") return 0;
  if (m == "complete") return 1;
  if (m == "r") return 2;
  fail("linalg_qr", "mode must be 'reduced', 'complete' or 'r', got '", m, "'");
}

const OpDef& kQr = def_op(
    {.name = "linalg_qr",
     .num_outputs = 2,
     .attr_names = {"mode"},
     .traits = kStaticShapes,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           check_matrix("linalg_qr", in[0], false, true);
           const int mode = qr_mode(a.s(0));
           const Shape& s = in[0].shape();
           const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], k = std::min(m, n);
           const Shape bs = batch_of(s);
           MetaList r = one(in[0].dtype(), mode == 2 ? Shape{0} : with(bs, {m, mode == 1 ? m : k}));
           r.push_back(TensorMeta{in[0].dtype(), with(bs, {mode == 1 ? m : k, n})});
           return r;
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Tensor x = contig(in[0]);
           const int mode = qr_mode(a.s(0));
           const Shape& s = x.shape();
           const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], k = std::min(m, n);
           const int64_t qc = mode == 1 ? m : k, rr = mode == 1 ? m : k, ld = std::max(n, qc);
           const int64_t B = batch_count(s);
           if (B == 0) return;
           KILN_DISPATCH_FLOAT(x.dtype(), "linalg_qr", [&] {
             using T = scalar_t;
             std::vector<T> w(static_cast<size_t>(std::max<int64_t>(m * ld, 1)));
             std::vector<T> tau(static_cast<size_t>(std::max<int64_t>(k, 1)));
             T* R = out[1].data_ptr<T>();
             for (int64_t b = 0; b < B; ++b) {
               std::fill(w.begin(), w.end(), T(0));
               for (int64_t i = 0; i < m; ++i)
                 std::memcpy(&w[i * ld], x.data_ptr<T>() + (b * m + i) * n, sizeof(T) * n);
               if (m > 0 && n > 0) {
                 const lapack_int info = geqrf(li(m), li(n), w.data(), li(ld), tau.data());
                 if (info != 0) fail("linalg_qr", "LAPACK geqrf failed (info ", info, ")");
               }
               T* r = R + b * rr * n;
               for (int64_t i = 0; i < rr; ++i)
                 for (int64_t j = 0; j < n; ++j)
                   r[i * n + j] = j >= i && i < m ? w[i * ld + j] : T(0);
               if (mode == 2) continue;
               T* q = out[0].data_ptr<T>() + b * m * qc;
               if (m > 0 && qc > 0) {
                 const lapack_int info = orgqr(li(m), li(qc), li(k), w.data(), li(ld), tau.data());
                 if (info != 0) fail("linalg_qr", "LAPACK orgqr failed (info ", info, ")");
               }
               for (int64_t i = 0; i < m; ++i)
                 for (int64_t j = 0; j < qc; ++j) q[i * qc + j] = w[i * ld + j];
             }
           });
         },
     // m >= n with Q [m, n]: M = R gR^T - gQ^T Q, gA = (gQ + Q copyltu(M)) R^-T, copyltu
     // mirroring the lower triangle up (as TensorFlow and JAX; torch's rule is the same map).
     .grad =
         [](const GradCtx& c) {
           const Tensor& Q = c.out(0);
           const Tensor& R = c.out(1);
           const int64_t m = R.dim() >= 2 ? Q.shape()[Q.dim() - 2] : 0;
           const int64_t n = R.shape()[R.dim() - 1];
           if (c.attrs.s(0) == "r" || Q.dim() < 2 || Q.shape()[Q.dim() - 1] != n || m < n)
             fail("linalg_qr",
                  "the gradient is only implemented for mode='reduced' (or "
                  "'complete' with square inputs) with rows >= columns, got Q ",
                  Q.shape(), " and R ", R.shape());
           const Tensor M = sub(matmul(R, mT(c.g(1))), matmul(mT(c.g(0)), Q));
           const Tensor cl = add(tril(M), mT(tril(M, -1)));
           const Tensor x = add(c.g(0), matmul(Q, cl));
           return TensorList{solve_right(x, mT(R))};
         },
     // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
     .autocast = AutocastPolicy::kFloat32,
     .doc = "QR factorization (reduced, complete or r), as torch.linalg.qr. Static shapes: Q and "
            "R are sized by min(m, n) and the gradient holds only for m >= n, so a dynamic "
            "matrix dim needs its size (dynamic batch dims are fine; the jit compiles such a "
            "call for the concrete shape)"});

// ---- svd ---------------------------------------------------------------------------------------
const OpDef& kSvd = def_op(
    {.name = "linalg_svd",
     .num_outputs = 3,
     .attr_names = {"full_matrices"},
     .traits = kStaticShapes,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           check_matrix("linalg_svd", in[0], false, true);
           const Shape& s = in[0].shape();
           const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], k = std::min(m, n);
           const bool full = a.b(0);
           const Shape bs = batch_of(s);
           MetaList r = one(in[0].dtype(), with(bs, {m, full ? m : k}));
           Shape ss = bs;
           ss.push_back(k);
           r.push_back(TensorMeta{in[0].dtype(), ss});
           r.push_back(TensorMeta{in[0].dtype(), with(bs, {full ? n : k, n})});
           return r;
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Tensor x = contig(in[0]);
           const Shape& s = x.shape();
           const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], k = std::min(m, n);
           const bool full = a.b(0);
           const int64_t uc = full ? m : k, vr = full ? n : k, B = batch_count(s);
           KILN_DISPATCH_FLOAT(x.dtype(), "linalg_svd", [&] {
             using T = scalar_t;
             std::vector<T> w(static_cast<size_t>(std::max<int64_t>(m * n, 1)));
             for (int64_t b = 0; b < B; ++b) {
               T* U = out[0].data_ptr<T>() + b * m * uc;
               T* S = out[1].data_ptr<T>() + b * k;
               T* V = out[2].data_ptr<T>() + b * vr * n;
               if (k == 0) {  // the identity completes an empty factorization
                 for (int64_t i = 0; i < m * uc; ++i) U[i] = i % (uc + 1) == 0 ? 1 : 0;
                 for (int64_t i = 0; i < vr * n; ++i) V[i] = i % (n + 1) == 0 ? 1 : 0;
                 continue;
               }
               std::memcpy(w.data(), x.data_ptr<T>() + b * m * n, sizeof(T) * m * n);
               const lapack_int info =
                   gesdd(full ? 'A' : 'S', li(m), li(n), w.data(), S, U, li(uc), V, li(n));
               if (info > 0)
                 fail("linalg_svd", "(batch element ", b,
                      "): the algorithm failed to converge "
                      "because the input matrix is ill-conditioned or has too many repeated "
                      "singular values (shape ",
                      s, ")");
               if (info < 0) fail("linalg_svd", "LAPACK gesdd failed (info ", info, ")");
             }
           });
         },
     // torch's svd_backward (real case), on the reduced factors (full_matrices narrows them):
     // gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS)] V^T plus the parts of gU, gV
     // outside span(U), span(V); E_jk = S_k^2 - S_j^2. Needs distinct singular values.
     .grad =
         [](const GradCtx& c) {
           Tensor U = c.out(0), S = c.out(1), Vh = c.out(2);
           const int64_t m = U.shape()[U.dim() - 2], n = Vh.shape()[Vh.dim() - 1];
           const int64_t k = S.shape()[S.dim() - 1];
           const bool gu = c.flowed(0), gv = c.flowed(2);
           Tensor gU = c.g(0), gS = c.g(1), gVh = c.g(2);
           if (U.shape()[U.dim() - 1] != k) {
             U = slice(U, -1, 0, k);
             gU = slice(gU, -1, 0, k);
           }
           if (Vh.shape()[Vh.dim() - 2] != k) {
             Vh = slice(Vh, -2, 0, k);
             gVh = slice(gVh, -2, 0, k);
           }
           if (!gu && !gv) return TensorList{matmul(U, mul(unsqueeze(gS, -1), Vh))};
           const Tensor V = mT(Vh), gV = mT(gVh);
           auto skew = [](const Tensor& x) { return sub(x, mT(x)); };
           const Tensor UhgU = skew(matmul(mT(U), gU)), VhgV = skew(matmul(Vh, gV));
           const Tensor S2 = mul(S, S);
           const Tensor E = add(sub(unsqueeze(S2, -2), unsqueeze(S2, -1)), eye_like(k, S.dtype()));
           Tensor ga = div(add(mul(UhgU, unsqueeze(S, -2)), mul(unsqueeze(S, -1), VhgV)), E);
           ga = add(ga, diag_embed(gS));
           if (m > k) {
             ga = matmul(U, ga);
             const Tensor gUS = div(gU, unsqueeze(S, -2));
             ga = sub(add(ga, gUS), matmul(U, matmul(mT(U), gUS)));
             ga = matmul(ga, Vh);
           } else if (n > k) {
             ga = matmul(ga, Vh);
             const Tensor SgVh = div(gVh, unsqueeze(S, -1));
             ga = sub(add(ga, SgVh), matmul(matmul(SgVh, V), Vh));
             ga = matmul(U, ga);
           } else {
             ga = matmul(U, matmul(ga, Vh));
           }
           return TensorList{ga};
         },
     // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
     .autocast = AutocastPolicy::kFloat32,
     .doc = "singular value decomposition U, S, Vh, as torch.linalg.svd. Static shapes: the "
            "factors are sized by min(m, n) and the gradient's form depends on whether m or n "
            "is the larger, so a dynamic matrix dim needs its size (dynamic batch dims are "
            "fine; the jit compiles such a call for the concrete shape)"});

// ---- eigh --------------------------------------------------------------------------------------
char uplo_of(const std::string& u) {
  if (u == "L" || u == "l") return 'L';
  if (u == "U" || u == "u") return 'U';
  fail("linalg_eigh", "UPLO must be 'L' or 'U', got '", u, "'");
}

const OpDef& kEigh =
    def_op({.name = "linalg_eigh",
            .num_outputs = 2,
            .attr_names = {"uplo"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  check_matrix("linalg_eigh", in[0], true);
                  uplo_of(a.s(0));
                  const Shape& s = in[0].shape();
                  Shape ws = batch_of(s);
                  ws.push_back(s[s.rank() - 1]);
                  MetaList r = one(in[0].dtype(), ws);
                  r.push_back(TensorMeta{in[0].dtype(), s});
                  return r;
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  const Tensor x = contig(in[0]);
                  const int64_t n = x.shape()[x.dim() - 1], B = batch_count(x.shape());
                  const char uplo = uplo_of(a.s(0));
                  if (n == 0) return;
                  KILN_DISPATCH_FLOAT(x.dtype(), "linalg_eigh", [&] {
                    using T = scalar_t;
                    T* V = out[1].data_ptr<T>();
                    std::memcpy(V, x.data_ptr<T>(), sizeof(T) * B * n * n);
                    for (int64_t b = 0; b < B; ++b) {
                      const lapack_int info =
                          syevd(uplo, li(n), V + b * n * n, out[0].data_ptr<T>() + b * n);
                      if (info > 0)
                        fail("linalg_eigh", "(batch element ", b,
                             "): the algorithm failed to converge; ", info,
                             " off-diagonal elements of an intermediate tridiagonal form did not "
                             "converge to zero (shape ",
                             x.shape(), ")");
                      if (info < 0) fail("linalg_eigh", "LAPACK syevd failed (info ", info, ")");
                    }
                  });
                },
            // torch's rule: gA = V (diag(gw) + skew_half(V^T gV) / E) V^T with E_ij = w_j - w_i (a
            // symmetric gradient). Needs distinct eigenvalues.
            .grad =
                [](const GradCtx& c) {
                  const Tensor& w = c.out(0);
                  const Tensor& V = c.out(1);
                  Tensor inner = diag_embed(c.g(0));
                  if (c.flowed(1)) {
                    const Tensor x = matmul(mT(V), c.g(1));
                    const Tensor sk = mul(sub(x, mT(x)), 0.5);
                    const Tensor E =
                        add(sub(unsqueeze(w, -2), unsqueeze(w, -1)), diag_embed(ones_like(w)));
                    inner = add(inner, div(sk, E));
                  }
                  return TensorList{matmul(V, matmul(inner, mT(V)))};
                },
            // torch.autocast runs linear algebra in float32 (its CPU fp32 list)
            .autocast = AutocastPolicy::kFloat32});

double default_rtol(const Tensor& a) {
  const int64_t m = a.shape()[a.dim() - 2], n = a.shape()[a.dim() - 1];
  const double eps = a.dtype() == Float32 ? std::numeric_limits<float>::epsilon()
                                          : std::numeric_limits<double>::epsilon();
  return static_cast<double>(std::max(m, n)) * eps;
}

// Reduction over the two matrix dims with keepdim, then the dims dropped (keepdim false).
std::pair<int64_t, int64_t> matrix_dims(const Tensor& a, const std::vector<int64_t>& dims) {
  if (dims.size() != 2) fail("linalg_matrix_norm", "dim must be a pair of dims, got ", Shape(dims));
  if (a.dim() < 2)
    fail("linalg_matrix_norm", "input must have at least 2 dims, got shape ", a.shape());
  const int64_t d1 = wrap_dim(dims[0], a.shape(), "linalg_matrix_norm");
  const int64_t d2 = wrap_dim(dims[1], a.shape(), "linalg_matrix_norm");
  if (d1 == d2) fail("linalg_matrix_norm", "dims must be different, got ", Shape(dims));
  return {d1, d2};
}
Tensor drop2(const Tensor& t, int64_t d1, int64_t d2, bool keepdim) {
  if (keepdim) return t;
  return squeeze(squeeze(t, std::max(d1, d2)), std::min(d1, d2));
}
// The singular values with the matrix dims (d1, d2) moved last, kept as size-1 dims at d1, d2
// after reducing with f.
Tensor sv_reduce(const Tensor& a, int64_t d1, int64_t d2, bool keepdim, bool largest, bool sum_) {
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (d != d1 && d != d2) perm.push_back(d);
  perm.push_back(d1);
  perm.push_back(d2);
  const Tensor s = linalg::svdvals(permute(a, perm));
  Tensor r = sum_ ? sum(s, {-1}) : (largest ? max(s, {-1}) : min(s, {-1}));
  if (!keepdim) return r;
  r = unsqueeze(r, std::min(d1, d2));
  return unsqueeze(r, std::max(d1, d2));
}

}  // namespace

namespace linalg {

Tensor vector_norm(const Tensor& a, double ord, const std::vector<int64_t>& dims, bool keepdim) {
  return kiln::vector_norm(a, ord, dims, keepdim);
}

Tensor matrix_norm(const Tensor& a_, double ord, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a_.defined()) fail("linalg_matrix_norm", "input is undefined");
  const Tensor a = autocast_arg(AutocastPolicy::kFloat32, a_);  // (torch's fp32 list)
  op_util::require_float("linalg_matrix_norm", a);
  const auto [d1, d2] = matrix_dims(a, dims);
  if (ord == 1 || ord == -1)
    return drop2(ord > 0 ? max(sum(abs(a), {d1}, true), {d2}, true)
                         : min(sum(abs(a), {d1}, true), {d2}, true),
                 d1, d2, keepdim);
  if (std::isinf(ord))
    return drop2(ord > 0 ? max(sum(abs(a), {d2}, true), {d1}, true)
                         : min(sum(abs(a), {d2}, true), {d1}, true),
                 d1, d2, keepdim);
  if (ord == 2 || ord == -2) return sv_reduce(a, d1, d2, keepdim, ord > 0, false);
  fail("linalg_matrix_norm", "order ", ord,
       " not supported (1, -1, 2, -2, inf, -inf, 'fro', "
       "'nuc')");
}

Tensor matrix_norm(const Tensor& a_, const std::string& ord, const std::vector<int64_t>& dims,
                   bool keepdim) {
  if (!a_.defined()) fail("linalg_matrix_norm", "input is undefined");
  const Tensor a = autocast_arg(AutocastPolicy::kFloat32, a_);  // (torch's fp32 list)
  op_util::require_float("linalg_matrix_norm", a);
  const auto [d1, d2] = matrix_dims(a, dims);
  if (ord == "fro") return kiln::vector_norm(a, 2, {d1, d2}, keepdim);
  if (ord == "nuc") return sv_reduce(a, d1, d2, keepdim, true, true);
  fail("linalg_matrix_norm", "order '", ord, "' not supported ('fro', 'nuc' or a number)");
}

Tensor norm(const Tensor& a, std::optional<double> ord, const std::vector<int64_t>& dims,
            bool keepdim) {
  if (!a.defined()) fail("linalg_norm", "input is undefined");
  if (dims.size() > 2) fail("linalg_norm", "dim must have 1 or 2 dims, got ", Shape(dims));
  if (!ord) {
    if (dims.size() == 2) return matrix_norm(a, "fro", dims, keepdim);
    return kiln::vector_norm(a, 2, dims, keepdim);
  }
  if (dims.size() == 1) return kiln::vector_norm(a, *ord, dims, keepdim);
  if (dims.size() == 2) return matrix_norm(a, *ord, dims, keepdim);
  if (a.dim() == 1) return kiln::vector_norm(a, *ord, {}, keepdim);
  if (a.dim() == 2) return matrix_norm(a, *ord, {-2, -1}, keepdim);
  fail("linalg_norm", "if dim is not given with an ord, the input must be 1-D or 2-D, got shape ",
       a.shape());
}

Tensor norm(const Tensor& a, const std::string& ord, const std::vector<int64_t>& dims,
            bool keepdim) {
  if (!a.defined()) fail("linalg_norm", "input is undefined");
  if (dims.empty()) {
    if (a.dim() != 2)
      fail("linalg_norm", "ord '", ord, "' needs a 2-D input or two dims, got shape ", a.shape());
    return matrix_norm(a, ord, {-2, -1}, keepdim);
  }
  return matrix_norm(a, ord, dims, keepdim);
}

std::pair<Tensor, Tensor> slogdet(const Tensor& a) {
  if (!a.defined()) fail("linalg_slogdet", "input is undefined");
  TensorList r = call(kSlogdet, {a});
  return {r[0], r[1]};
}

// sign * exp(log|det|): the gradient det A^-T follows through both (it needs A invertible).
Tensor det(const Tensor& a) {
  auto [s, l] = slogdet(a);
  return mul(s, exp(l));
}

Tensor inv(const Tensor& a) {
  if (!a.defined()) fail("linalg_inv", "input is undefined");
  return call1(kInv, {a});
}

Tensor solve(const Tensor& a, const Tensor& b, bool left) {
  if (!a.defined() || !b.defined()) fail("linalg_solve", "inputs must be defined");
  check_matrix("linalg_solve", a, true);
  if (!left) return mT(solve(mT(a), mT(b), true));
  // B is a batch of vectors when it is 1-D or has A's shape without the last dim (torch's rule).
  bool vec = b.dim() == 1;
  if (b.dim() == a.dim() - 1) {
    vec = true;
    for (int64_t d = 0; d < b.dim(); ++d) vec = vec && b.shape()[d] == a.shape()[d];
  }
  Tensor bm = vec ? unsqueeze(b, -1) : b;
  if (bm.dim() < 2) fail("linalg_solve", "B must be at least 1-D, got shape ", b.shape());
  Shape batch = broadcast_shapes(batch_of(a.shape()), batch_of(bm.shape()), "linalg_solve");
  const Shape as = with(batch, {a.shape()[a.dim() - 2], a.shape()[a.dim() - 1]});
  const Shape bs = with(batch, {bm.shape()[bm.dim() - 2], bm.shape()[bm.dim() - 1]});
  // A 2-D A goes to the op as it is (the kernel shares it), so only a batched A or B that
  // must grow needs static sizes.
  const bool share_a = a.dim() == 2;
  if (((!share_a && a.shape() != as) || bm.shape() != bs) && batch.numel() < 0)
    fail("linalg_solve", "needs a static size to broadcast the batch dims of A ", a.shape(),
         " and B ", b.shape());
  const Tensor ae = share_a || a.shape() == as ? a : expand(a, as);
  if (bm.shape() != bs) bm = expand(bm, bs);
  const Tensor x = solve_raw(ae, bm);
  return vec ? squeeze(x, -1) : x;
}

Tensor cholesky(const Tensor& a, bool upper) {
  if (!a.defined()) fail("linalg_cholesky", "input is undefined");
  const Tensor l = call1(kCholesky, {a});
  return upper ? mT(l) : l;
}

std::pair<Tensor, Tensor> qr(const Tensor& a, const std::string& mode) {
  if (!a.defined()) fail("linalg_qr", "input is undefined");
  qr_mode(mode);
  TensorList r = call(kQr, {a}, {mode});
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& a, bool full_matrices) {
  if (!a.defined()) fail("linalg_svd", "input is undefined");
  TensorList r = call(kSvd, {a}, {full_matrices});
  return {r[0], r[1], r[2]};
}

Tensor svdvals(const Tensor& a) { return std::get<1>(svd(a, false)); }

std::pair<Tensor, Tensor> eigh(const Tensor& a, const std::string& uplo) {
  if (!a.defined()) fail("linalg_eigh", "input is undefined");
  uplo_of(uplo);
  TensorList r = call(kEigh, {a}, {uplo});
  return {r[0], r[1]};
}

Tensor eigvalsh(const Tensor& a, const std::string& uplo) { return eigh(a, uplo).first; }

Tensor pinv(const Tensor& a, double rtol, bool hermitian) {
  if (!a.defined()) fail("linalg_pinv", "input is undefined");
  check_matrix("linalg_pinv", a, hermitian, true);
  const double rt = rtol < 0 ? default_rtol(a) : rtol;
  auto inv_above = [&](const Tensor& s, const Tensor& mag) {
    const Tensor tol = mul(max(mag, {-1}, true), rt);
    const Tensor keep = gt(mag, tol);
    const Tensor safe = where(keep, s, op_util::scalar_like(s, 1));
    return where(keep, div(1.0, safe), op_util::scalar_like(s, 0));
  };
  if (hermitian) {
    auto [w, V] = eigh(a);
    const Tensor wi = inv_above(w, abs(w));
    return matmul(mul(V, unsqueeze(wi, -2)), mT(V));
  }
  auto [U, S, Vh] = svd(a, false);
  const Tensor si = inv_above(S, S);
  return matmul(mT(Vh), mul(unsqueeze(si, -1), mT(U)));
}

Tensor matrix_rank(const Tensor& a, double atol, double rtol, bool hermitian) {
  if (!a.defined()) fail("linalg_matrix_rank", "input is undefined");
  check_matrix("linalg_matrix_rank", a, hermitian, true);
  // torch: an unset rtol is max(m, n) eps, or 0 when atol > 0 is given.
  const double rt = rtol >= 0 ? rtol : (atol > 0 ? 0.0 : default_rtol(a));
  const Tensor s = hermitian ? abs(eigvalsh(a)) : svdvals(a);
  const Tensor tol = maximum(mul(max(s, {-1}, true), rt), op_util::scalar_like(s, atol));
  return sum(cast(gt(s, tol), Int64), {-1});
}

Tensor cross(const Tensor& a, const Tensor& b, int64_t dim) { return kiln::cross(a, b, dim); }

}  // namespace linalg
}  // namespace kiln
