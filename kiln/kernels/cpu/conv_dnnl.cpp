// oneDNN convolution primitives behind the ConvShape interface: the primitive picks its memory
// layouts (blocked ones for its jit kernels; on plain NCHW it falls back to its own im2col +
// GEMM, no faster than Kiln's), and reorders move Kiln's NCHW / (G)OIHW data in and out. One
// primitive per shape and direction in a small per-thread cache (a primitive's library-managed
// scratchpad makes concurrent use of one primitive unsafe, so threads do not share them).
#include "kiln/kernels/cpu/conv_dnnl.h"

#ifdef KILN_USE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include "kiln/kernels/cpu/conv_dnnl_prim.h"

namespace kiln::cpu {
using namespace dnnl_prim;
namespace {

enum class Dir { Fwd, BwdData, BwdWeights };

// A primitive keeps the OpenMP thread count it was built under, so the count is part of the key
// (set_num_threads between calls gets a primitive of its own).
struct Key {
  ConvShape s;
  Dir dir;
  int threads;
  bool bf16;  // every operand bfloat16 (else float32)
  bool operator==(const Key& o) const {
    return dir == o.dir && threads == o.threads && bf16 == o.bf16 &&
           std::memcmp(&s, &o.s, sizeof(ConvShape)) == 0;
  }
};

// One direction of one convolution shape. Argument i (two inputs, then the output) is bound to
// the caller's buffer through user[i]; when the primitive wants another layout (blocked
// nChw16c and the like: the fast jit kernels use them), inner[i] holds it and reorder[i] moves
// the data in (inputs) or out (the output).
struct Entry {
  Key key;
  dnnl_primitive_desc_t fwd_pd = nullptr, pd = nullptr;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t user[3] = {nullptr, nullptr, nullptr}, inner[3] = {nullptr, nullptr, nullptr};
  dnnl_primitive_desc_t reorder_pd[3] = {nullptr, nullptr, nullptr};
  dnnl_primitive_t reorder[3] = {nullptr, nullptr, nullptr};
  int arg[3] = {0, 0, 0};
  bool ok = false;
  bool gemm = false;  // oneDNN's im2col + GEMM kernel, not a direct one
  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {
    for (int i = 0; i < 3; ++i) {
      if (reorder[i]) dnnl_primitive_destroy(reorder[i]);
      if (reorder_pd[i]) dnnl_primitive_desc_destroy(reorder_pd[i]);
      if (inner[i]) dnnl_memory_destroy(inner[i]);
      if (user[i]) dnnl_memory_destroy(user[i]);
    }
    if (prim) dnnl_primitive_destroy(prim);
    if (pd && pd != fwd_pd) dnnl_primitive_desc_destroy(pd);
    if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  }
};

// A thread's primitives and stream; `fused` holds conv_dnnl_fused.cpp's cache (type-erased, so
// that file needs no thread_local of its own: see thread_stream in conv_dnnl_prim.h).
struct Cache {
  std::deque<std::unique_ptr<Entry>> entries;
  dnnl_stream_t stream = nullptr;
  std::shared_ptr<void> fused;
  ~Cache() {
    entries.clear();
    fused.reset();
    if (stream) dnnl_stream_destroy(stream);
  }
};

thread_local Cache t_cache;

// The memory descriptors of one convolution shape: u*, the caller's plain layouts; src, wei,
// dst, format "any" (the primitive's choice).
struct PlainDescs {
  dnnl_memory_desc_t usrc, uwei, udst, src, wei, dst;
  bool init(const ConvShape& s, dnnl_data_type_t f) {
    dnnl_dims_t sd = {s.N, s.C, s.H, s.W}, dd = {s.N, s.O, s.OH, s.OW};
    dnnl_dims_t wd4 = {s.O, s.C, s.kH, s.kW}, wd5 = {s.G, s.O / s.G, s.C / s.G, s.kH, s.kW};
    const int wn = s.G == 1 ? 4 : 5;
    auto* wd = s.G == 1 ? wd4 : wd5;
    return dnnl_memory_desc_init_by_tag(&usrc, 4, sd, f, dnnl_nchw) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&udst, 4, dd, f, dnnl_nchw) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&uwei, wn, wd, f, s.G == 1 ? dnnl_oihw : dnnl_goihw) ==
               dnnl_success &&
           dnnl_memory_desc_init_by_tag(&src, 4, sd, f, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&dst, 4, dd, f, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wei, wn, wd, f, dnnl_format_tag_any) == dnnl_success;
  }
};

// e.pd for e's direction (the forward one is e.fwd_pd itself; the backward ones take it as
// their hint), refused where oneDNN has only its reference kernel; umds and q: the caller's
// layout and the primitive's query of each argument, in e.arg's order (two inputs, the output).
bool direction_pd(Entry& e, const PlainDescs& d, const Geometry& g,
                  const dnnl_memory_desc_t* umds[3], dnnl_query_t q[3]) {
  if (e.key.dir == Dir::Fwd) {
    e.pd = e.fwd_pd;
    umds[0] = &d.usrc, umds[1] = &d.uwei, umds[2] = &d.udst;
    q[0] = dnnl_query_src_md, q[1] = dnnl_query_weights_md, q[2] = dnnl_query_dst_md;
    e.arg[0] = DNNL_ARG_SRC, e.arg[1] = DNNL_ARG_WEIGHTS, e.arg[2] = DNNL_ARG_DST;
    return true;
  }
  dnnl_convolution_desc_t bd;
  if (e.key.dir == Dir::BwdData) {
    if (dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &d.src,
                                                         &d.wei, &d.dst, g.st, g.dil, g.pl,
                                                         g.pr) != dnnl_success)
      return false;
    umds[0] = &d.udst, umds[1] = &d.uwei, umds[2] = &d.usrc;
    q[0] = dnnl_query_diff_dst_md, q[1] = dnnl_query_weights_md, q[2] = dnnl_query_diff_src_md;
    e.arg[0] = DNNL_ARG_DIFF_DST, e.arg[1] = DNNL_ARG_WEIGHTS, e.arg[2] = DNNL_ARG_DIFF_SRC;
  } else {
    if (dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &d.src,
                                                            &d.wei, nullptr, &d.dst, g.st, g.dil,
                                                            g.pl, g.pr) != dnnl_success)
      return false;
    umds[0] = &d.usrc, umds[1] = &d.udst, umds[2] = &d.uwei;
    q[0] = dnnl_query_src_md, q[1] = dnnl_query_diff_dst_md, q[2] = dnnl_query_diff_weights_md;
    e.arg[0] = DNNL_ARG_SRC, e.arg[1] = DNNL_ARG_DIFF_DST, e.arg[2] = DNNL_ARG_DIFF_WEIGHTS;
  }
  if (dnnl_primitive_desc_create(&e.pd, &bd, nullptr, engine(), e.fwd_pd) != dnnl_success) {
    e.pd = nullptr;
    return false;
  }
  return !is_ref(e.pd);
}

bool build(Entry& e) {
  dnnl_engine_t eng = engine();
  if (!eng) return false;
  PlainDescs d;
  if (!d.init(e.key.s, e.key.bf16 ? dnnl_bf16 : dnnl_f32)) return false;
  const Geometry g(e.key.s);
  dnnl_convolution_desc_t fd;
  if (dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                 dnnl_convolution_direct, &d.src, &d.wei, nullptr,
                                                 &d.dst, g.st, g.dil, g.pl, g.pr) != dnnl_success)
    return false;
  if (dnnl_primitive_desc_create(&e.fwd_pd, &fd, nullptr, eng, nullptr) != dnnl_success) {
    e.fwd_pd = nullptr;
    return false;
  }
  if (e.key.dir == Dir::Fwd && is_ref(e.fwd_pd)) return false;
  e.gemm = std::strstr(impl_name(e.fwd_pd), "gemm") != nullptr;
  const dnnl_memory_desc_t* umds[3];
  dnnl_query_t q[3];
  if (!direction_pd(e, d, g, umds, q)) return false;
  if (dnnl_primitive_create(&e.prim, e.pd) != dnnl_success) {
    e.prim = nullptr;
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    const dnnl_memory_desc_t* want;
    if (!bind_arg(e, i, umds[i], q[i], 0, i == 2, &want)) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<void>& dnnl_prim::thread_fused_cache() { return t_cache.fused; }

dnnl_stream_t dnnl_prim::thread_stream() {
  Cache& c = t_cache;
  if (!c.stream) {
    dnnl_engine_t eng = engine();
    if (!eng || dnnl_stream_create(&c.stream, eng, dnnl_stream_default_flags) != dnnl_success)
      c.stream = nullptr;
  }
  return c.stream;
}

namespace {

// The cached entry for the shape and direction (built on first use; null without a stream).
Entry* lookup(const ConvShape& s, Dir dir, bool bf16) {
  Cache& c = t_cache;
  if (!thread_stream()) return nullptr;
  Key k{s, dir, omp_get_max_threads(), bf16};
  Entry* e = nullptr;
  for (auto& x : c.entries)
    if (x->key == k) e = x.get();
  if (!e) {
    auto n = std::make_unique<Entry>();
    n->key = k;
    n->ok = build(*n);
    if (c.entries.size() >= 64) c.entries.pop_front();
    c.entries.push_back(std::move(n));
    e = c.entries.back().get();
  }
  return e;
}

bool run(const ConvShape& s, Dir dir, bool bf16, const void* a, const void* b, void* out) {
  Entry* e = lookup(s, dir, bf16);
  if (!e || !e->ok) return false;
  Cache& c = t_cache;
  dnnl_memory_set_data_handle(e->user[0], const_cast<void*>(a));
  dnnl_memory_set_data_handle(e->user[1], const_cast<void*>(b));
  dnnl_memory_set_data_handle(e->user[2], out);
  auto reorder = [&](int i, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(e->reorder[i], c.stream, 2, ra) == dnnl_success;
  };
  for (int i = 0; i < 2; ++i)
    if (e->reorder[i] && !reorder(i, e->user[i], e->inner[i])) return false;
  dnnl_memory_t m[3];
  for (int i = 0; i < 3; ++i) m[i] = e->inner[i] ? e->inner[i] : e->user[i];
  dnnl_exec_arg_t args[3] = {{e->arg[0], m[0]}, {e->arg[1], m[1]}, {e->arg[2], m[2]}};
  if (dnnl_primitive_execute(e->prim, c.stream, 3, args) != dnnl_success) return false;
  if (e->reorder[2] && !reorder(2, e->inner[2], e->user[2])) return false;
  return dnnl_stream_wait(c.stream) == dnnl_success;
}

}  // namespace

int64_t dnnl_channel_block() {
  static const int64_t b = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    auto has = [&](dnnl_cpu_isa_t want) {
      return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
    };
    return has(dnnl_cpu_isa_avx512_core) ? int64_t{16} : has(dnnl_cpu_isa_avx2) ? int64_t{8} : 0;
  }();
  return b;
}

bool dnnl_conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y) {
  return run(s, Dir::Fwd, false, x, w, y);
}
bool dnnl_conv2d_forward_direct(const ConvShape& s) {
  const Entry* e = lookup(s, Dir::Fwd, false);
  return e && e->ok && !e->gemm;
}
bool dnnl_conv2d_backward_data(const ConvShape& s, const float* gy, const float* w, float* gx) {
  return run(s, Dir::BwdData, false, gy, w, gx);
}
bool dnnl_conv2d_backward_weights(const ConvShape& s, const float* x, const float* gy, float* gw) {
  return run(s, Dir::BwdWeights, false, x, gy, gw);
}
bool dnnl_conv2d_forward_bf16(const ConvShape& s, const uint16_t* x, const uint16_t* w,
                              uint16_t* y) {
  return run(s, Dir::Fwd, true, x, w, y);
}
bool dnnl_conv2d_backward_data_bf16(const ConvShape& s, const uint16_t* gy, const uint16_t* w,
                                    uint16_t* gx) {
  return run(s, Dir::BwdData, true, gy, w, gx);
}
bool dnnl_conv2d_backward_weights_bf16(const ConvShape& s, const uint16_t* x, const uint16_t* gy,
                                       uint16_t* gw) {
  return run(s, Dir::BwdWeights, true, x, gy, gw);
}

}  // namespace kiln::cpu

#else  // CBLAS build: no oneDNN, the callers use im2col + GEMM.
#include <cstring>

namespace kiln::cpu {
bool dnnl_conv2d_forward(const ConvShape&, const float*, const float*, float*) { return false; }
bool dnnl_conv2d_forward_direct(const ConvShape&) { return false; }
bool dnnl_conv2d_backward_data(const ConvShape&, const float*, const float*, float*) {
  return false;
}
bool dnnl_conv2d_backward_weights(const ConvShape&, const float*, const float*, float*) {
  return false;
}
bool dnnl_conv2d_forward_bf16(const ConvShape&, const uint16_t*, const uint16_t*, uint16_t*) {
  return false;
}
bool dnnl_conv2d_backward_data_bf16(const ConvShape&, const uint16_t*, const uint16_t*, uint16_t*) {
  return false;
}
bool dnnl_conv2d_backward_weights_bf16(const ConvShape&, const uint16_t*, const uint16_t*,
                                       uint16_t*) {
  return false;
}
int64_t dnnl_channel_block() { return 0; }
}  // namespace kiln::cpu

#endif
