// oneDNN's inference convolution with its epilogue fused (ConvFused, see conv_dnnl.h): bias,
// residual sum and activation as post-ops, activations in the caller's channel blocks, constant
// weights laid out once per weight, and for a constant 3x3 at stride 1 the choice between the
// direct form and Winograd with its weights transformed once. One primitive per shape in a small
// per-thread cache, as conv_dnnl.cpp's plain ones.
#include "kiln/kernels/cpu/conv_dnnl.h"

#ifdef KILN_USE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kernels/cpu/conv_dnnl_prim.h"
#include "kiln/kernels/cpu/silu_avx512.h"

namespace kiln::cpu {
using namespace dnnl_prim;
namespace {

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
  // Weights oneDNN cannot reorder into the primitive's layout directly (blocked into Winograd's):
  // pre_w moves them to OIHW in plain_w first, reorder[1] on from there.
  dnnl_primitive_desc_t pre_w_pd = nullptr;
  dnnl_primitive_t pre_w = nullptr;
  dnnl_memory_t plain_w = nullptr;
  bool ok = false;
  // Constant weights (ConvFused::w_const) already in the primitive's layout, one per weight:
  // layers of one shape share the primitive but not their weights.
  std::deque<std::unique_ptr<struct WeightSlot>> w_slots;
  // A constant weight's 3x3 convolution also built as inference Winograd (its weights
  // transformed once, in their slot); which of the two runs is timed on the first call.
  std::unique_ptr<FusedEntry> wino;
  int chosen = -1;  ///< the Winograd mode the choice was made under (-1: none yet)
  bool use_wino = false;
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
    if (pre_w) dnnl_primitive_destroy(pre_w);
    if (pre_w_pd) dnnl_primitive_desc_destroy(pre_w_pd);
    if (plain_w) dnnl_memory_destroy(plain_w);
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

// The thread's fused primitives, in the slot conv_dnnl.cpp's thread_local keeps for them.
using FusedCache = std::deque<std::unique_ptr<FusedEntry>>;
FusedCache& fused_cache() {
  std::shared_ptr<void>& slot = thread_fused_cache();
  if (!slot) slot = std::make_shared<FusedCache>();
  return *static_cast<FusedCache*>(slot.get());
}

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
  dnnl_exec_arg_t pa[2] = {{DNNL_ARG_FROM, e.user[1]}, {DNNL_ARG_TO, e.plain_w}};
  dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, e.pre_w ? e.plain_w : e.user[1]},
                           {DNNL_ARG_TO, slot->mem}};
  if ((e.pre_w && dnnl_primitive_execute(e.pre_w, stream, 2, pa) != dnnl_success) ||
      dnnl_primitive_execute(e.reorder[1], stream, 2, ra) != dnnl_success) {
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
// KILN_CONV_WINOGRAD: 0 no Winograd, 1 the inference form wherever oneDNN has it, unset (2)
// the faster form on each shape's first call; set_winograd_mode overrides it (tests).
std::atomic<int> g_winograd_mode{-1};
int winograd_mode() {
  int m = g_winograd_mode.load(std::memory_order_relaxed);
  if (m >= 0) return m;
  const char* e = std::getenv("KILN_CONV_WINOGRAD");
  m = e && std::string(e) == "0"   ? kWinogradOff
      : e && std::string(e) == "1" ? kWinogradAlways
                                   : kWinogradTimed;
  g_winograd_mode.store(m, std::memory_order_relaxed);
  return m;
}
bool winograd_on() { return winograd_mode() != kWinogradOff; }

bool wants_winograd(const ConvFused& f) {
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
  return winograd_on() && f.in_block && s.kH == 3 && s.kW == 3 && s.sH == 1 && s.sW == 1 &&
         s.dH == 1 && s.dW == 1 && s.N * s.OH * s.OW >= 512 &&
         (s.C >= 64 || s.H * s.W * s.C <= (int64_t{1} << 18));
}

// SiLU runs after the primitive, over its output in place (silu_avx512.h), where AVX-512 is
// built in: oneDNN's swish post-op took 2.5x as long (efficientnet_b0's 16 -> 96 1x1 at
// 112x112: 174 us without it, 551 with it; silu_inplace over its 1.2M outputs ~210 us).
bool own_silu(const ConvFused& f) {
#if defined(__AVX512F__)
  return f.act == 2;
#else
  return false;
#endif
}

// The fused epilogue as oneDNN post-ops: the residual sum, then the activation (1 relu, 2 SiLU
// unless own_silu, 3 hardswish). Null when oneDNN refuses it.
dnnl_primitive_attr_t epilogue_attr(const ConvFused& f) {
  dnnl_post_ops_t po = nullptr;
  dnnl_primitive_attr_t attr = nullptr;
  if (dnnl_post_ops_create(&po) != dnnl_success) return nullptr;
  const bool made =
      dnnl_primitive_attr_create(&attr) == dnnl_success &&
      (!f.residual || dnnl_post_ops_append_sum(po, 1.f) == dnnl_success) &&
      (f.act == 0 || own_silu(f) ||
       dnnl_post_ops_append_eltwise(po, 1.f,
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

// The inference form of Winograd (jit_wino_4x3, jit_fp32_wino_2x3): weights in oneDNN's
// Winograd layout, transformed once (a constant's slot) instead of on every call, which pays
// off on small maps too (256 -> 256 at 14x14, batch 1: 412 against 786 us direct). Only for a
// constant weight's undilated 3x3 at stride 1; null pd where oneDNN has no such kernel.
bool winograd_inference_pd(FusedEntry& e, FusedDescs& d, dnnl_primitive_attr_t attr) {
  const ConvFused& f = e.key;
  const ConvShape& s = f.s;
  const Geometry g(s);
  if (!f.w_const || s.G != 1 || s.kH != 3 || s.kW != 3 || s.sH != 1 || s.sW != 1 || s.dH != 1 ||
      s.dW != 1)
    return false;
  dnnl_convolution_desc_t cd;
  if (dnnl_dilated_convolution_forward_desc_init(
          &cd, dnnl_forward_inference, dnnl_convolution_winograd, &d.md[0], &d.md[1],
          f.bias ? &d.md[2] : nullptr, &d.md[3], g.st, g.dil, g.pl, g.pr) != dnnl_success ||
      dnnl_primitive_desc_create(&e.pd, &cd, attr, engine(), nullptr) != dnnl_success) {
    e.pd = nullptr;
    return false;
  }
  return true;
}

// Weights into a Winograd layout, which oneDNN reorders only from plain OIHW (not from the
// blocks the block_layout pass gives a constant): through OIHW in two reorders.
bool bind_weights_via_plain(FusedEntry& e, const dnnl_memory_desc_t* umd) {
  const ConvShape& s = e.key.s;
  dnnl_dims_t wd = {s.O, s.C, s.kH, s.kW};
  dnnl_memory_desc_t plain;
  const dnnl_memory_desc_t* want = dnnl_primitive_desc_query_md(e.pd, dnnl_query_weights_md, 0);
  if (!want || dnnl_memory_desc_init_by_tag(&plain, 4, wd, dnnl_f32, dnnl_oihw) != dnnl_success ||
      dnnl_memory_create(&e.user[1], umd, engine(), DNNL_MEMORY_NONE) != dnnl_success)
    return false;
  if (dnnl_memory_desc_equal(umd, &plain))
    return make_reorder(umd, want, &e.reorder_pd[1], &e.reorder[1]);
  if (dnnl_memory_create(&e.plain_w, &plain, engine(), DNNL_MEMORY_ALLOCATE) != dnnl_success) {
    e.plain_w = nullptr;
    return false;
  }
  return make_reorder(umd, &plain, &e.pre_w_pd, &e.pre_w) &&
         make_reorder(&plain, want, &e.reorder_pd[1], &e.reorder[1]);
}

// e's primitive and its arguments' layouts: the direct (or training Winograd) convolution, or
// with winograd set its inference Winograd form.
bool build_fused(FusedEntry& e, bool winograd = false) {
  const ConvFused& f = e.key;
  if (!engine()) return false;
  FusedDescs d;
  if (!d.init(f)) return false;
  dnnl_primitive_attr_t attr = epilogue_attr(f);
  if (!attr) return false;
  const bool made = winograd ? winograd_inference_pd(e, d, attr) : fused_pd(e, d, attr);
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
    if (i == 1 && winograd) {
      if (!bind_weights_via_plain(e, &d.umd[1])) return false;
      continue;
    }
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

namespace {

// One call of e's primitive on the caller's buffers (reorders in and out around it).
bool run_fused(FusedEntry& e, dnnl_stream_t stream, const float* x, const float* w,
               const float* bias, float* y, const std::shared_ptr<const void>& w_owner,
               uint32_t w_version) {
  const void* h[4] = {x, w, bias, y};
  for (int i = 0; i < 4; ++i)
    if (e.user[i]) dnnl_memory_set_data_handle(e.user[i], const_cast<void*>(h[i]));
  auto exec = [&](dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(p, stream, 2, ra) == dnnl_success;
  };
  // A constant weight is laid out once per weight (weight_slot), not on every call.
  dnnl_memory_t w_mem = nullptr;
  if (e.key.w_const && w_owner && e.reorder[1])
    w_mem = weight_slot(e, w, w_owner, w_version, stream);
  if (e.pre_w && !w_mem) return false;  // (its reorder[1] starts from plain_w)
  for (int i = 0; i < 3; ++i)
    if (e.reorder[i] && !(i == 1 && w_mem) && !exec(e.reorder[i], e.user[i], e.inner[i]))
      return false;
  if (e.back && !exec(e.back, e.user[3], e.inner[3])) return false;
  const int arg[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  dnnl_exec_arg_t args[4];
  int na = 0;
  for (int i = 0; i < 4; ++i)
    if (e.user[i])
      args[na++] = {arg[i], i == 1 && w_mem ? w_mem : e.inner[i] ? e.inner[i] : e.user[i]};
  if (dnnl_primitive_execute(e.prim, stream, na, args) != dnnl_success) return false;
  if (e.reorder[3] && !exec(e.reorder[3], e.inner[3], e.user[3])) return false;
  if (dnnl_stream_wait(stream) != dnnl_success) return false;
  if (own_silu(e.key)) {
    const dnnl_memory_desc_t* ymd = nullptr;
    if (dnnl_memory_get_memory_desc(e.user[3], &ymd) != dnnl_success) return false;
    silu_inplace(y, static_cast<int64_t>(dnnl_memory_desc_get_size(ymd) / sizeof(float)));
  }
  return true;
}

// The first call of a shape with a Winograd form times both forms on it (a run each to warm,
// lay out the weights and touch the scratchpads, then a timed one) and keeps the faster, by a
// margin. oneDNN's Winograd kernels block their products by register counts that divide the
// channel blocks, so whether they win follows no simple rule: at 14x14, batch 1, 1 thread,
// 128 -> 256 took 0.54 of direct's time, 96 -> 208 1.73 (13 output blocks: one register row).
// A residual in y is kept aside and put back before every run.
// Returns whether y already holds the call's result (the direct form ran last and stays).
bool choose_form(FusedEntry& e, dnnl_stream_t stream, const float* x, const float* w,
                 const float* bias, float* y, const std::shared_ptr<const void>& w_owner,
                 uint32_t w_version) {
  e.chosen = winograd_mode();
  e.use_wino = false;
  e.wino.reset();
  if (!w_owner || e.chosen == kWinogradOff) return false;
  auto wino = std::make_unique<FusedEntry>();
  wino->key = e.key;
  wino->threads = e.threads;
  if (!build_fused(*wino, true)) return false;
  if (e.chosen == kWinogradAlways) {
    e.use_wino = true;
    e.wino = std::move(wino);
    return false;
  }
  const dnnl_memory_desc_t* ymd = nullptr;
  dnnl_memory_get_memory_desc(e.user[3], &ymd);
  std::vector<char> kept;
  if (e.key.residual) {
    const size_t n = dnnl_memory_desc_get_size(ymd);
    kept.assign(reinterpret_cast<const char*>(y), reinterpret_cast<const char*>(y) + n);
  }
  auto timed = [&](FusedEntry& f, double* sec) {
    for (int k = 0; k < 2; ++k) {
      if (!kept.empty()) std::memcpy(y, kept.data(), kept.size());
      const auto t0 = std::chrono::steady_clock::now();
      if (!run_fused(f, stream, x, w, bias, y, w_owner, w_version)) return false;
      *sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return true;
  };
  double tw = 0, td = 0;
  const bool ran = timed(*wino, &tw) && timed(e, &td);
  if (!kept.empty()) std::memcpy(y, kept.data(), kept.size());
  e.use_wino = ran && tw < 0.9 * td;
  if (e.use_wino) e.wino = std::move(wino);
  return ran && !e.use_wino && kept.empty();
}

}  // namespace

bool dnnl_conv2d_fused(const ConvFused& f, const float* x, const float* w, const float* bias,
                       float* y, const std::shared_ptr<const void>& w_owner, uint32_t w_version) {
  dnnl_stream_t stream = thread_stream();
  if (!stream) return false;
  const int threads = omp_get_max_threads();
  FusedEntry* e = nullptr;
  FusedCache& t_fused = fused_cache();
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
  if (f.w_const && e->chosen != winograd_mode() &&
      choose_form(*e, stream, x, w, bias, y, w_owner, w_version))
    return true;
  if (e->use_wino && run_fused(*e->wino, stream, x, w, bias, y, w_owner, w_version)) return true;
  return run_fused(*e, stream, x, w, bias, y, w_owner, w_version);
}

void set_winograd_mode(int mode) { g_winograd_mode.store(mode, std::memory_order_relaxed); }

}  // namespace kiln::cpu

#else  // CBLAS build: no oneDNN, the callers use their own convolutions.
#include <cstring>

namespace kiln::cpu {
bool ConvFused::operator==(const ConvFused& o) const {
  return std::memcmp(&s, &o.s, sizeof(ConvShape)) == 0 && in_block == o.in_block &&
         out_block == o.out_block && w_blocked == o.w_blocked && bias == o.bias &&
         residual == o.residual && act == o.act && w_const == o.w_const;
}
bool dnnl_conv2d_fused(const ConvFused&, const float*, const float*, const float*, float*,
                       const std::shared_ptr<const void>&, uint32_t) {
  return false;
}
void set_winograd_mode(int) {}
}  // namespace kiln::cpu

#endif
