// GEMM dispatch to oneDNN or CBLAS. float64 always goes to CBLAS (oneDNN has no dgemm).
#include "kiln/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/gemm_small.h"

#ifdef KILN_USE_ONEDNN
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#endif

namespace kiln {

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  // Small products run on a kernel compiled ahead of time: oneDNN generates its sgemm kernels on
  // the first call (~60 ms, a small model's whole start-up budget in kiln-run) and its
  // per-call dispatch is ~0.3 us. Against warm dnnl_sgemm at one thread (AMD Zen 4, 2026-12-05):
  // 4x64x32 0.22 vs 0.45 us, 16^3 0.16 vs 0.38, 32^3 0.85 vs 0.69, 1x64x64 with B transposed
  // 0.39 vs 0.29, 2x128x128 transposed 2.2 vs 0.76 (the worst case).
  if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <= kSmallGemmMacs) {
    sgemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#ifdef KILN_USE_ONEDNN
  // Small products lose more to thread start-up than they gain (64^3 at 2 threads measured
  // 81 GFLOP/s vs 173 on one), so they run on the calling thread alone.
  const bool small =
      static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < 2.0e6;
  const int prev = small ? omp_get_max_threads() : 0;
  if (small && prev > 1) omp_set_num_threads(1);
  dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (small && prev > 1) omp_set_num_threads(prev);
  if (st != dnnl_success) fail("matmul", "dnnl_sgemm failed with status ", static_cast<int>(st));
#else
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
#endif
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0 : beta * c[i * ldc + j];
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

#ifdef KILN_USE_ONEDNN
namespace {
struct BiasKey {
  int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb;
  int threads;  // a primitive keeps the OpenMP thread count it was built under
  bool operator==(const BiasKey& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
           ta == o.ta && tb == o.tb && threads == o.threads;
  }
};
struct BiasKeyHash {
  size_t operator()(const BiasKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v :
         {k.m, k.n, k.k, k.lda, k.ldb, k.ldc, int64_t(k.ta), int64_t(k.tb), int64_t(k.threads)})
      h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};
struct BiasEntry {
  bool ok = false;  // false: oneDNN declined the shape (remembered, so it is asked once)
  dnnl::matmul prim;
  dnnl::memory a, b, bias, c;
};
dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
}  // namespace

bool sgemm_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc) {
  static const bool on = [] {
    const char* e = std::getenv("KILN_GEMM_BIAS_PRIM");
    return !(e && std::string(e) == "0");
  }();
  // Small products stay on fill + sgemm: the epilogue saves a pass over a small C, while
  // executing a primitive costs a few microseconds and allocates (oneDNN builds an argument map
  // per execution; dnnl_sgemm allocates nothing).
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (!on || work < 2.0e6) return false;
  // One primitive per shape and thread, built on the shape's first call (~110 us; oneDNN's own
  // primitive cache makes a rebuild after eviction cheaper). Always the same path for a shape,
  // so repeated calls give identical bits (the fill + sgemm fallback rounds differently).
  thread_local std::unordered_map<BiasKey, BiasEntry, BiasKeyHash> cache;
  thread_local dnnl::stream strm(dnnl_engine());
  BiasKey key{m, n, k, lda, ldb, ldc, ta, tb, omp_get_max_threads()};
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 1024) cache.clear();
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    md amd({m, k}, dt::f32, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    md bmd({k, n}, dt::f32, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    md bias_md({1, n}, dt::f32, dnnl::memory::dims{n, 1});
    md cmd({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    BiasEntry e;
    try {
      auto pd =
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, bmd, bias_md, cmd), dnnl_engine());
      e.prim = dnnl::matmul(pd);
      e.a = dnnl::memory(amd, dnnl_engine(), nullptr);
      e.b = dnnl::memory(bmd, dnnl_engine(), nullptr);
      e.bias = dnnl::memory(bias_md, dnnl_engine(), nullptr);
      e.c = dnnl::memory(cmd, dnnl_engine(), nullptr);
      e.ok = true;
    } catch (const dnnl::error&) {
      e = BiasEntry{};
    }
    it = cache.emplace(key, std::move(e)).first;
  }
  BiasEntry& e = it->second;
  if (!e.ok) return false;
  e.a.set_data_handle(const_cast<float*>(a));
  e.b.set_data_handle(const_cast<float*>(b));
  e.bias.set_data_handle(const_cast<float*>(bias));
  e.c.set_data_handle(c);
  // The C call: the C++ execute() takes its arguments as an unordered_map (four more
  // allocations per GEMM).
  const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e.a.get()},
                                   {DNNL_ARG_WEIGHTS, e.b.get()},
                                   {DNNL_ARG_BIAS, e.bias.get()},
                                   {DNNL_ARG_DST, e.c.get()}};
  dnnl_status_t st = dnnl_primitive_execute(e.prim.get(), strm.get(), 4, args);
  if (st != dnnl_success)
    fail("matmul", "oneDNN matmul primitive failed with status ", static_cast<int>(st), " (", m,
         "x", k, " @ ", k, "x", n, " + bias)");
  return true;
}
#else
bool sgemm_bias(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                const float*, float*, int64_t) {
  return false;
}
#endif

const char* gemm_backend() {
#ifdef KILN_USE_ONEDNN
  return "onednn";
#else
  return "cblas";
#endif
}

}  // namespace kiln
