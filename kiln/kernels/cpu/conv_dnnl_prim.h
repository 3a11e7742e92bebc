// oneDNN primitive plumbing the convolution files share (conv_dnnl.cpp's plain primitives,
// conv_dnnl_fused.cpp's fused inference convolution): the engine, the reference-kernel test,
// geometry as oneDNN takes it, reorders and argument binding. Internal to kernels/cpu.
#pragma once
#ifdef KILN_USE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <memory>

#include "kiln/kernels/cpu/conv_dnnl.h"

namespace kiln::cpu::dnnl_prim {

// Whether oneDNN would run the primitive on its reference kernel ("ref:any"): plain loops,
// 100-1000x slower than its jit or gemm kernels. It picks it for dilated convolutions whose
// padding its jit kernels do not take (ASPP's dilation 12-36 on a 33x33 map in nChw16c: 40 s a
// call); Kiln's im2col + GEMM is then far faster.
inline const char* impl_name(const_dnnl_primitive_desc_t pd) {
  const char* impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "";
  return impl;
}
inline bool is_ref(const_dnnl_primitive_desc_t pd) {
  return std::strncmp(impl_name(pd), "ref", 3) == 0;
}

inline dnnl_engine_t engine() {
  static dnnl_engine_t e = [] {
    dnnl_engine_t x = nullptr;
    if (dnnl_engine_create(&x, dnnl_cpu, 0) != dnnl_success) x = nullptr;
    return x;
  }();
  return e;
}

// Strides, dilations and paddings as oneDNN takes them: dilation counted from 0 (dense = 0),
// and the right/bottom padding that makes the output size come out as given (it may be smaller
// than the left padding).
struct Geometry {
  dnnl_dims_t st, dil, pl, pr;
  explicit Geometry(const ConvShape& s)
      : st{s.sH, s.sW},
        dil{s.dH - 1, s.dW - 1},
        pl{s.pH, s.pW},
        pr{(s.OH - 1) * s.sH + (s.kH - 1) * s.dH + 1 - s.H - s.pH,
           (s.OW - 1) * s.sW + (s.kW - 1) * s.dW + 1 - s.W - s.pW} {}
};

inline bool make_reorder(const dnnl_memory_desc_t* from, const dnnl_memory_desc_t* to,
                         dnnl_primitive_desc_t* rpd, dnnl_primitive_t* r) {
  dnnl_engine_t eng = engine();
  if (dnnl_reorder_primitive_desc_create(rpd, from, eng, to, eng, nullptr) != dnnl_success) {
    *rpd = nullptr;
    return false;
  }
  if (dnnl_primitive_create(r, *rpd) != dnnl_success) {
    *r = nullptr;
    return false;
  }
  return true;
}

// Binds argument i of e's primitive (Entry, FusedEntry): user[i] wraps the caller's buffer, of
// layout umd; when the primitive wants another layout (query q, index qi), inner[i] holds it and
// reorder[i] moves the data in, or for an output (out) back to the caller's buffer. *want: that
// layout, or null when the caller's is the primitive's.
template <class E>
bool bind_arg(E& e, int i, const dnnl_memory_desc_t* umd, dnnl_query_t q, int qi, bool out,
              const dnnl_memory_desc_t** want) {
  *want = nullptr;
  if (dnnl_memory_create(&e.user[i], umd, engine(), DNNL_MEMORY_NONE) != dnnl_success) {
    e.user[i] = nullptr;
    return false;
  }
  const dnnl_memory_desc_t* w = dnnl_primitive_desc_query_md(e.pd, q, qi);
  if (!w) return false;
  if (dnnl_memory_desc_equal(w, umd)) return true;
  if (dnnl_memory_create(&e.inner[i], w, engine(), DNNL_MEMORY_ALLOCATE) != dnnl_success) {
    e.inner[i] = nullptr;
    return false;
  }
  *want = w;
  return make_reorder(out ? w : umd, out ? umd : w, &e.reorder_pd[i], &e.reorder[i]);
}

/// The calling thread's oneDNN stream (made on first use; null if oneDNN refuses) and a slot
/// for the fused primitives' cache, both kept in conv_dnnl.cpp's one thread_local: libkiln's
/// static TLS has no room to spare (see core/allocator.cpp; a second file's thread_local with
/// its init guard grew it by 64 bytes, and `import torch` after `import kiln` then failed
/// with "cannot allocate memory in static TLS block").
dnnl_stream_t thread_stream();
std::shared_ptr<void>& thread_fused_cache();

}  // namespace kiln::cpu::dnnl_prim

#endif
