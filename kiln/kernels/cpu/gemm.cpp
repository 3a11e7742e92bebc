// GEMM dispatch to oneDNN or CBLAS. float64 always goes to CBLAS (oneDNN has no dgemm).
#include "kiln/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/gemm_small.h"
#include "kiln/kernels/cpu/parallel.h"

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
  // One row times a transposed B (a Linear layer at batch 1, x @ W^T) streams W once for one
  // multiply-add an element: bound by memory, it runs as dot products of x with W's rows, the
  // rows split across the threads (at least 64 K multiply-adds each). oneDNN's sgemm and matmul
  // primitive took 185 / 164 us at 1 / 2 threads for efficientnet_b0's classifier (1 x 1280 @
  // 1280 x 1000, a 5 MiB weight) against onnxruntime's 61 us at 2.
  if (m == 1 && tb && !ta) {
    parallel_for(n, std::max<int64_t>(1, (int64_t(1) << 16) / k), [&](int64_t lo, int64_t hi) {
      sgemm_small(false, true, 1, hi - lo, k, alpha, a, lda, b + lo * ldb, ldb, beta, c + lo, ldc);
    });
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
  if (!on || work < 2.0e6 || (m == 1 && tb && !ta)) return false;  // (sgemm's GEMV for one row)
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

namespace {
// One bfloat16 matmul primitive per shape, layout and thread count (as BiasKey; alpha and beta
// are part of the primitive: output scale and sum post-op).
struct Bf16Key {
  int64_t batch, m, n, k, lda, ldb, ldc, sa, sb, sc;
  float alpha, beta;
  bool ta, tb, bias, c_bf16;
  int threads;
  bool operator==(const Bf16Key& o) const {
    return batch == o.batch && m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb &&
           ldc == o.ldc && sa == o.sa && sb == o.sb && sc == o.sc && alpha == o.alpha &&
           beta == o.beta && ta == o.ta && tb == o.tb && bias == o.bias && c_bf16 == o.c_bf16 &&
           threads == o.threads;
  }
};
struct Bf16KeyHash {
  size_t operator()(const Bf16Key& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v :
         {k.batch, k.m, k.n, k.k, k.lda, k.ldb, k.ldc, k.sa, k.sb, k.sc,
          int64_t(k.ta) | int64_t(k.tb) << 1 | int64_t(k.bias) << 2 | int64_t(k.c_bf16) << 3,
          int64_t(k.threads)})
      h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

// The bfloat16 matmul primitive for one key, its memories not yet bound to data; not ok where
// oneDNN would run its reference loops or has nothing (the caller then converts to float32).
BiasEntry make_bf16_matmul(const Bf16Key& key) {
  const int64_t batch = key.batch, m = key.m, n = key.n, k = key.k, lda = key.lda, ldb = key.ldb,
                ldc = key.ldc, sa = key.sa, sb = key.sb, sc = key.sc;
  const float alpha = key.alpha, beta = key.beta;
  const bool ta = key.ta, tb = key.tb, bias = key.bias, c_bf16 = key.c_bf16;
  using md = dnnl::memory::desc;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  // Plain 2-D descriptors for one matrix, 3-D ones for a batch, and a batch dim of 1 (a
  // shared operand) strided as if dense: oneDNN's fast (brgemm) kernels take only layouts it
  // recognizes as plain, and fall back to its reference loops otherwise (~50x slower).
  const int64_t ba = sa == 0 ? 1 : batch, bb = sb == 0 ? 1 : batch;
  const int64_t sad = sa == 0 ? (ta ? k * lda : m * lda) : sa;
  const int64_t sbd = sb == 0 ? (tb ? n * ldb : k * ldb) : sb;
  const dt cdt = c_bf16 ? dt::bf16 : dt::f32;
  md amd, bmd, bias_md, cmd;
  if (batch == 1) {
    amd = md({m, k}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
    bmd = md({k, n}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
    bias_md = md({1, n}, dt::bf16, dims{n, 1});
    cmd = md({m, n}, cdt, dims{ldc, 1});
  } else {
    amd = md({ba, m, k}, dt::bf16, ta ? dims{sad, 1, lda} : dims{sad, lda, 1});
    bmd = md({bb, k, n}, dt::bf16, tb ? dims{sbd, 1, ldb} : dims{sbd, ldb, 1});
    bias_md = md({1, 1, n}, dt::bf16, dims{n, n, 1});
    cmd = md({batch, m, n}, cdt, dims{sc, ldc, 1});
  }
  BiasEntry e;
  try {
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    auto d = bias ? dnnl::matmul::desc(amd, bmd, bias_md, cmd) : dnnl::matmul::desc(amd, bmd, cmd);
    auto pd = dnnl::matmul::primitive_desc(d, attr, dnnl_engine());
    // oneDNN's reference loops are slower than converting to float32 and running sgemm.
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0)
      throw dnnl::error(dnnl_unimplemented, "ref");
    e.prim = dnnl::matmul(pd);
    e.a = dnnl::memory(amd, dnnl_engine(), nullptr);
    e.b = dnnl::memory(bmd, dnnl_engine(), nullptr);
    if (bias) e.bias = dnnl::memory(bias_md, dnnl_engine(), nullptr);
    e.c = dnnl::memory(cmd, dnnl_engine(), nullptr);
    e.ok = true;
  } catch (const dnnl::error&) {
    e = BiasEntry{};
  }
  return e;
}
}  // namespace

bool gemm_bf16(bool ta, bool tb, int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, int64_t sa, const uint16_t* b, int64_t ldb,
               int64_t sb, const uint16_t* bias, float beta, void* c, int64_t ldc, int64_t sc,
               bool c_bf16) {
  if (batch <= 0 || m <= 0 || n <= 0) return true;
  // oneDNN broadcasts a batch operand through a batch dim of 1, not through stride 0; k == 0
  // (nothing to multiply) is left to the caller's float32 path.
  if (k <= 0 || (batch > 1 && sa == 0 && sb == 0)) return false;
  const double work = static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                      static_cast<double>(k);
  // As sgemm: small products run on the calling thread alone.
  const bool small = work < 2.0e6;
  const int prev = small ? omp_get_max_threads() : 0;
  if (small && prev > 1) omp_set_num_threads(1);
  struct Restore {
    int prev;
    ~Restore() {
      if (prev > 1) omp_set_num_threads(prev);
    }
  } restore{small ? prev : 0};
  thread_local std::unordered_map<Bf16Key, BiasEntry, Bf16KeyHash> cache;
  thread_local dnnl::stream strm(dnnl_engine());
  Bf16Key key{batch,
              m,
              n,
              k,
              lda,
              ldb,
              ldc,
              sa,
              sb,
              sc,
              alpha,
              beta,
              ta,
              tb,
              bias != nullptr,
              c_bf16,
              omp_get_max_threads()};
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 1024) cache.clear();
    it = cache.emplace(key, make_bf16_matmul(key)).first;
  }
  BiasEntry& e = it->second;
  if (!e.ok) return false;
  e.a.set_data_handle(const_cast<uint16_t*>(a));
  e.b.set_data_handle(const_cast<uint16_t*>(b));
  if (bias) e.bias.set_data_handle(const_cast<uint16_t*>(bias));
  e.c.set_data_handle(c);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e.a.get()},
                             {DNNL_ARG_WEIGHTS, e.b.get()},
                             {DNNL_ARG_DST, e.c.get()},
                             {DNNL_ARG_BIAS, bias ? e.bias.get() : nullptr}};
  dnnl_status_t st = dnnl_primitive_execute(e.prim.get(), strm.get(), bias ? 4 : 3, args);
  if (st != dnnl_success)
    fail("matmul", "oneDNN bfloat16 matmul failed with status ", static_cast<int>(st), " (", batch,
         " x ", m, "x", k, " @ ", k, "x", n, ")");
  return true;
}

const char* dnnl_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    default:
      return "other";
  }
}
#else
bool gemm_bf16(bool, bool, int64_t, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
               int64_t, const uint16_t*, int64_t, int64_t, const uint16_t*, float, void*, int64_t,
               int64_t, bool) {
  return false;
}
const char* dnnl_isa() { return "none (CBLAS build)"; }
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
