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

namespace kiln::cpu {
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

// Whether oneDNN would run the primitive on its reference kernel ("ref:any"): plain loops,
// 100-1000x slower than its jit or gemm kernels. It picks it for dilated convolutions whose
// padding its jit kernels do not take (ASPP's dilation 12-36 on a 33x33 map in nChw16c: 40 s a
// call); Kiln's im2col + GEMM is then far faster.
const char* impl_name(const_dnnl_primitive_desc_t pd) {
  const char* impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "";
  return impl;
}
bool is_ref(const_dnnl_primitive_desc_t pd) { return std::strncmp(impl_name(pd), "ref", 3) == 0; }

dnnl_engine_t engine() {
  static dnnl_engine_t e = [] {
    dnnl_engine_t x = nullptr;
    if (dnnl_engine_create(&x, dnnl_cpu, 0) != dnnl_success) x = nullptr;
    return x;
  }();
  return e;
}

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

struct Cache {
  std::deque<std::unique_ptr<Entry>> entries;
  dnnl_stream_t stream = nullptr;
  ~Cache() {
    entries.clear();
    if (stream) dnnl_stream_destroy(stream);
  }
};

thread_local Cache t_cache;

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

bool make_reorder(const dnnl_memory_desc_t* from, const dnnl_memory_desc_t* to,
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

// The cached entry for the shape and direction (built on first use; null without a stream).
Entry* lookup(const ConvShape& s, Dir dir, bool bf16) {
  Cache& c = t_cache;
  if (!c.stream) {
    dnnl_engine_t eng = engine();
    if (!eng || dnnl_stream_create(&c.stream, eng, dnnl_stream_default_flags) != dnnl_success) {
      c.stream = nullptr;
      return nullptr;
    }
  }
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

// ---- inference convolution with bias, residual sum and relu fused (ConvFused) ---------------

dnnl_format_tag_t blocked_act(int64_t b) { return b == 16 ? dnnl_nChw16c : dnnl_nChw8c; }
dnnl_format_tag_t blocked_wei(int64_t b) { return b == 16 ? dnnl_OIhw16i16o : dnnl_OIhw8i8o; }

// Arguments: 0 src, 1 weights, 2 bias, 3 dst. user[i] wraps the caller's buffer; inner[i] the
// primitive's layout when it differs (reorder[i] moves it in; reorder[3] out, back[3] moves the
// residual held in y into the inner dst before the convolution accumulates onto it).
struct FusedEntry {
  ConvFused key;
  int threads = 0;
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t user[4] = {}, inner[4] = {};
  dnnl_primitive_desc_t reorder_pd[4] = {}, back_pd = nullptr;
  dnnl_primitive_t reorder[4] = {}, back = nullptr;
  bool ok = false;
  // Constant weights (ConvFused::w_const) already in the primitive's layout, one per weight:
  // layers of one shape share the primitive but not their weights.
  std::deque<std::unique_ptr<struct WeightSlot>> w_slots;
  FusedEntry() = default;
  FusedEntry(const FusedEntry&) = delete;
  FusedEntry& operator=(const FusedEntry&) = delete;
  ~FusedEntry() {
    for (int i = 0; i < 4; ++i) {
      if (reorder[i]) dnnl_primitive_destroy(reorder[i]);
      if (reorder_pd[i]) dnnl_primitive_desc_destroy(reorder_pd[i]);
      if (inner[i]) dnnl_memory_destroy(inner[i]);
      if (user[i]) dnnl_memory_destroy(user[i]);
    }
    if (back) dnnl_primitive_destroy(back);
    if (back_pd) dnnl_primitive_desc_destroy(back_pd);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
  }
};

// One constant weight laid out for a primitive: its storage (held weakly: compared by control
// block, so a freed storage never matches a new one at the same address), data and version.
struct WeightSlot {
  std::weak_ptr<const void> owner;
  const void* data = nullptr;
  uint32_t version = 0;
  dnnl_memory_t mem = nullptr;
  WeightSlot() = default;
  WeightSlot(const WeightSlot&) = delete;
  WeightSlot& operator=(const WeightSlot&) = delete;
  ~WeightSlot() {
    if (mem) dnnl_memory_destroy(mem);
  }
};

thread_local std::deque<std::unique_ptr<FusedEntry>> t_fused;

// The laid-out copy of constant weight w for e: found (reordered again only if its version
// moved) or made. Null when it cannot be made (the caller then reorders into e.inner[1]).
dnnl_memory_t weight_slot(FusedEntry& e, const void* w, const std::shared_ptr<const void>& owner,
                          uint32_t version, dnnl_stream_t stream) {
  auto same = [&](const WeightSlot& s) {
    return s.data == w && !s.owner.owner_before(owner) && !owner.owner_before(s.owner);
  };
  WeightSlot* slot = nullptr;
  for (auto& s : e.w_slots)
    if (same(*s)) slot = s.get();
  if (slot && slot->version == version) return slot->mem;
  if (!slot) {
    std::erase_if(e.w_slots, [](const auto& s) { return s->owner.expired(); });
    auto n = std::make_unique<WeightSlot>();
    const dnnl_memory_desc_t* want = dnnl_primitive_desc_query_md(e.pd, dnnl_query_weights_md, 0);
    if (!want ||
        dnnl_memory_create(&n->mem, want, engine(), DNNL_MEMORY_ALLOCATE) != dnnl_success) {
      n->mem = nullptr;
      return nullptr;
    }
    n->owner = owner;
    n->data = w;
    if (e.w_slots.size() >= 512) e.w_slots.pop_front();
    e.w_slots.push_back(std::move(n));
    slot = e.w_slots.back().get();
  }
  dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, e.user[1]}, {DNNL_ARG_TO, slot->mem}};
  if (dnnl_primitive_execute(e.reorder[1], stream, 2, ra) != dnnl_success) {
    slot->data = nullptr;
    return nullptr;
  }
  slot->version = version;
  return slot->mem;
}

// The memory descriptors of a fused convolution: umd, the caller's layouts of src, weights,
// bias, dst; md, what the primitive is asked for. Blocked activations and weights are also what
// the primitive gets, so it computes in them (format "any" elsewhere: the primitive's choice,
// reordered to). any_src / any_dst: the activations in format "any", the fallback.
struct FusedDescs {
  dnnl_memory_desc_t umd[4], md[4], any_src, any_dst;
  bool init(const ConvFused& f) {
    const ConvShape& s = f.s;
    const dnnl_data_type_t t = dnnl_f32;
    dnnl_dims_t sd = {s.N, s.C, s.H, s.W}, dd = {s.N, s.O, s.OH, s.OW}, bd = {s.O};
    dnnl_dims_t wd4 = {s.O, s.C, s.kH, s.kW}, wd5 = {s.G, s.O / s.G, s.C / s.G, s.kH, s.kW};
    const int wn = s.G == 1 ? 4 : 5;
    auto* wd = s.G == 1 ? wd4 : wd5;
    const bool ok_descs =
        dnnl_memory_desc_init_by_tag(
            &umd[0], 4, sd, t, f.in_block ? blocked_act(f.in_block) : dnnl_nchw) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&umd[1], wn, wd, t,
                                     f.w_blocked ? blocked_wei(f.in_block)
                                     : s.G == 1  ? dnnl_oihw
                                                 : dnnl_goihw) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&umd[2], 1, bd, t, dnnl_x) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&umd[3], 4, dd, t,
                                     f.out_block ? blocked_act(f.out_block) : dnnl_nchw) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_tag(&md[1], wn, wd, t, dnnl_format_tag_any) == dnnl_success;
    if (!ok_descs) return false;
    md[0] = umd[0], md[2] = umd[2], md[3] = umd[3];
    if (!f.in_block && dnnl_memory_desc_init_by_tag(&md[0], 4, sd, t, dnnl_format_tag_any))
      return false;
    if (!f.out_block && dnnl_memory_desc_init_by_tag(&md[3], 4, dd, t, dnnl_format_tag_any))
      return false;
    return !dnnl_memory_desc_init_by_tag(&any_src, 4, sd, t, dnnl_format_tag_any) &&
           !dnnl_memory_desc_init_by_tag(&any_dst, 4, dd, t, dnnl_format_tag_any);
  }
};

// Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions on blocked activations (oneDNN's
// jit_wino_4x3 on AVX-512): 2.25x fewer multiplications than direct; on ResNet-18's 3x3
// stride-1 layers (W9, batch 32) 18-27 ms against 37-40 ms each. Its rounding differs from a
// direct sum (measured in docs/onnx.md); KILN_CONV_WINOGRAD=0 keeps every conv direct. Where
// oneDNN has no Winograd kernel (AVX2) the direct one is built instead.
bool wants_winograd(const ConvFused& f) {
  static const bool winograd_on = [] {
    const char* e = std::getenv("KILN_CONV_WINOGRAD");
    return !(e && std::string(e) == "0");
  }();
  const ConvShape& s = f.s;
  // The kernel transforms the weights on every call (O x C x 36 values), which only pays off
  // over enough output pixels: measured on this host at 1 thread, Winograd and direct break
  // even near 400 pixels (N x OH x OW) for 64 to 512 channels alike (512 channels at 7x7: batch
  // 1 3.8 ms against 1.7 direct, batch 16 13.1 against 18.4). Nor over few input channels on a
  // large map (an image's input over 1 MiB: its transformed tiles leave the cache while the
  // products over so few channels are cheap): inception_v3's 32-channel 3x3 convs on 147x147
  // took 2.5-2.6 and 4.3 ms a call against 1.7-1.9 and 3.6-3.7 direct; squeezenet's 16-48
  // channel ones on 27x27 and 54x54 maps are faster in Winograd (0.35 / 0.47, 0.63 / 0.85 ms),
  // as are inception's 64- and 80-channel ones (0.47 / 0.56 and 3.7 / 7.4).
  return winograd_on && f.in_block && s.kH == 3 && s.kW == 3 && s.sH == 1 && s.sW == 1 &&
         s.dH == 1 && s.dW == 1 && s.N * s.OH * s.OW >= 512 &&
         (s.C >= 64 || s.H * s.W * s.C <= (int64_t{1} << 18));
}

// The fused epilogue as oneDNN post-ops: the residual sum, then the activation (1 relu, 2 SiLU,
// 3 hardswish). Null when oneDNN refuses it.
dnnl_primitive_attr_t epilogue_attr(const ConvFused& f) {
  dnnl_post_ops_t po = nullptr;
  dnnl_primitive_attr_t attr = nullptr;
  if (dnnl_post_ops_create(&po) != dnnl_success) return nullptr;
  const bool made =
      dnnl_primitive_attr_create(&attr) == dnnl_success &&
      (!f.residual || dnnl_post_ops_append_sum(po, 1.f) == dnnl_success) &&
      (f.act == 0 || dnnl_post_ops_append_eltwise(po, 1.f,
                                                  f.act == 1   ? dnnl_eltwise_relu
                                                  : f.act == 2 ? dnnl_eltwise_swish
                                                               : dnnl_eltwise_hardswish,
                                                  f.act == 2 ? 1.f : 0.f, 0.f) == dnnl_success) &&
      dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;  // attr keeps a copy of po
  dnnl_post_ops_destroy(po);
  if (!made && attr) {
    dnnl_primitive_attr_destroy(attr);
    attr = nullptr;
  }
  return attr;
}

// e.pd: activations in the caller's blocks first; where oneDNN has only its reference kernel
// for them (dilated convolutions with large padding), the primitive's own choice (its gemm
// kernel, on NCHW), reordered to and from. Winograd first where wanted, else direct.
// forward_training, not _inference: with the latter oneDNN 2.6 picks its brgemm convolutions
// here (slower on ResNet-18's layers: W9 33.5 against 40.9 images/s), and its Winograd kernel
// wants weights it transformed beforehand.
bool fused_pd(FusedEntry& e, FusedDescs& d, dnnl_primitive_attr_t attr) {
  const ConvFused& f = e.key;
  const Geometry g(f.s);
  const bool winograd = wants_winograd(f);
  for (int free_layouts = 0; free_layouts < 2; ++free_layouts) {
    if (free_layouts) {
      if (!f.in_block && !f.out_block) break;
      d.md[0] = d.any_src, d.md[3] = d.any_dst;
    }
    for (auto alg : {dnnl_convolution_winograd, dnnl_convolution_direct}) {
      if (alg == dnnl_convolution_winograd && !winograd) continue;
      dnnl_convolution_desc_t cd;
      if (dnnl_dilated_convolution_forward_desc_init(
              &cd, dnnl_forward_training, alg, &d.md[0], &d.md[1], f.bias ? &d.md[2] : nullptr,
              &d.md[3], g.st, g.dil, g.pl, g.pr) == dnnl_success &&
          dnnl_primitive_desc_create(&e.pd, &cd, attr, engine(), nullptr) == dnnl_success) {
        if (!is_ref(e.pd)) return true;
        dnnl_primitive_desc_destroy(e.pd);
      }
      e.pd = nullptr;
    }
  }
  return false;
}

bool build_fused(FusedEntry& e) {
  const ConvFused& f = e.key;
  if (!engine()) return false;
  FusedDescs d;
  if (!d.init(f)) return false;
  dnnl_primitive_attr_t attr = epilogue_attr(f);
  if (!attr) return false;
  const bool made = fused_pd(e, d, attr);
  dnnl_primitive_attr_destroy(attr);
  if (!made) return false;
  if (dnnl_primitive_create(&e.prim, e.pd) != dnnl_success) {
    e.prim = nullptr;
    return false;
  }
  const dnnl_query_t q[4] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_weights_md,
                             dnnl_query_dst_md};
  for (int i = 0; i < 4; ++i) {
    if (i == 2 && !f.bias) continue;
    const dnnl_memory_desc_t* want;
    if (!bind_arg(e, i, &d.umd[i], q[i], i == 2 ? 1 : 0, i == 3, &want)) return false;
    // The residual held in y moves into the inner dst before the convolution accumulates.
    if (want && i == 3 && f.residual && !make_reorder(&d.umd[i], want, &e.back_pd, &e.back))
      return false;
  }
  return true;
}

}  // namespace

bool ConvFused::operator==(const ConvFused& o) const {
  return std::memcmp(&s, &o.s, sizeof(ConvShape)) == 0 && in_block == o.in_block &&
         out_block == o.out_block && w_blocked == o.w_blocked && bias == o.bias &&
         residual == o.residual && act == o.act && w_const == o.w_const;
}

bool dnnl_conv2d_fused(const ConvFused& f, const float* x, const float* w, const float* bias,
                       float* y, const std::shared_ptr<const void>& w_owner, uint32_t w_version) {
  Cache& c = t_cache;
  if (!c.stream) {
    dnnl_engine_t eng = engine();
    if (!eng || dnnl_stream_create(&c.stream, eng, dnnl_stream_default_flags) != dnnl_success) {
      c.stream = nullptr;
      return false;
    }
  }
  const int threads = omp_get_max_threads();
  FusedEntry* e = nullptr;
  for (auto& x : t_fused)
    if (x->key == f && x->threads == threads) e = x.get();
  if (!e) {
    auto n = std::make_unique<FusedEntry>();
    n->key = f;
    n->threads = threads;
    n->ok = build_fused(*n);
    if (t_fused.size() >= 64) t_fused.pop_front();
    t_fused.push_back(std::move(n));
    e = t_fused.back().get();
  }
  if (!e->ok) return false;
  const void* h[4] = {x, w, bias, y};
  for (int i = 0; i < 4; ++i)
    if (e->user[i]) dnnl_memory_set_data_handle(e->user[i], const_cast<void*>(h[i]));
  auto exec = [&](dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(p, c.stream, 2, ra) == dnnl_success;
  };
  // A constant weight is laid out once per weight (weight_slot), not on every call.
  dnnl_memory_t w_mem = nullptr;
  if (f.w_const && w_owner && e->reorder[1])
    w_mem = weight_slot(*e, w, w_owner, w_version, c.stream);
  for (int i = 0; i < 3; ++i)
    if (e->reorder[i] && !(i == 1 && w_mem) && !exec(e->reorder[i], e->user[i], e->inner[i]))
      return false;
  if (e->back && !exec(e->back, e->user[3], e->inner[3])) return false;
  const int arg[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  dnnl_exec_arg_t args[4];
  int na = 0;
  for (int i = 0; i < 4; ++i)
    if (e->user[i])
      args[na++] = {arg[i], i == 1 && w_mem ? w_mem : e->inner[i] ? e->inner[i] : e->user[i]};
  if (dnnl_primitive_execute(e->prim, c.stream, na, args) != dnnl_success) return false;
  if (e->reorder[3] && !exec(e->reorder[3], e->inner[3], e->user[3])) return false;
  return dnnl_stream_wait(c.stream) == dnnl_success;
}

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
bool ConvFused::operator==(const ConvFused& o) const {
  return std::memcmp(&s, &o.s, sizeof(ConvShape)) == 0 && in_block == o.in_block &&
         out_block == o.out_block && w_blocked == o.w_blocked && bias == o.bias &&
         residual == o.residual && act == o.act && w_const == o.w_const;
}
bool dnnl_conv2d_fused(const ConvFused&, const float*, const float*, const float*, float*,
                       const std::shared_ptr<const void>&, uint32_t) {
  return false;
}
int64_t dnnl_channel_block() { return 0; }
}  // namespace kiln::cpu

#endif
