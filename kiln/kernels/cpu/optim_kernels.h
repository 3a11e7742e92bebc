// In-place optimizer updates, one pass over each parameter and its slots: what eager
// Optimizer::step() runs (torch.optim's fused/foreach paths do the same), instead of ~15
// whole-tensor ops and three copies per parameter for Adam.
#pragma once
#include <cmath>
#include <cstdint>

#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  double bc1, bc2;  // bias corrections 1 - beta^t
};

/// m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr (m/bc1 / (sqrt(v/bc2) + eps) [+ wd p]),
/// g' = g [+ wd p] (Adam's L2 form when not decoupled). All arrays contiguous, n elements.
template <typename T>
void adam_update(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                 int64_t n, const AdamParams& a) {
  const T b1 = T(a.beta1), c1 = T(1 - a.beta1), b2 = T(a.beta2), c2 = T(1 - a.beta2);
  const T ibc1 = T(1 / a.bc1), ibc2 = T(1 / a.bc2), eps = T(a.eps), lr = T(a.lr);
  const T wd = T(a.weight_decay);
  const T l2 = a.decoupled ? T(0) : wd, dwd = a.decoupled ? wd : T(0);
  parallel_for(n, kParallelGrain, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T gi = g[i] + l2 * p[i];
      const T mi = b1 * m[i] + c1 * gi;
      const T vi = b2 * v[i] + c2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const T upd = (mi * ibc1) / (std::sqrt(vi * ibc2) + eps) + dwd * p[i];
      p[i] = p[i] - lr * upd;
    }
  });
}

struct SgdParams {
  double lr, momentum, weight_decay;
  bool nesterov;
};

/// g' = g + wd p; with momentum: buf = momentum buf + g', step = nesterov ? g' + momentum buf
/// : buf; p -= lr step. `buf` is null without momentum.
template <typename T>
void sgd_update(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n,
                const SgdParams& a) {
  const T lr = T(a.lr), mom = T(a.momentum), wd = T(a.weight_decay);
  const bool nest = a.nesterov;
  parallel_for(n, kParallelGrain, [=](int64_t lo, int64_t hi) {
    if (!buf) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) p[i] = p[i] - lr * (g[i] + wd * p[i]);
      return;
    }
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T gi = g[i] + wd * p[i];
      const T bi = mom * buf[i] + gi;
      buf[i] = bi;
      p[i] = p[i] - lr * (nest ? gi + mom * bi : bi);
    }
  });
}

}  // namespace kiln::cpu
