// The `fused` op: the per-program state table, the driver that walks the output in rows
// (broadcast inputs read in place, never expanded) and the tile interpreter; the program text
// (which ops may be instructions, parsing) is fused_program.cpp's.
// Generated code, when kiln/codegen is linked and a compiler exists, replaces the interpreter
// for a (program, dtype, input pattern) specialization; results agree to rounding.
#include "kiln/ops/fused.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/stream.h"
#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln::detail::fused {
namespace {

constexpr int64_t kTile = 256;
// Elements computed into cache before streaming out. Small pieces let the stores of one overlap
// the arithmetic and loads of the next (W2 gelu at 2 threads: 1024 -> 38 GB/s, 128 -> 44).
constexpr int64_t kStreamChunk = 128;
constexpr int kMaxSpecs = 16;
constexpr int64_t kMaxPrograms = 1 << 16;

struct Spec {
  DType dtype;
  uint64_t pattern;
  bool codegen;  // generated code was allowed when this was made
  std::vector<DType> in_dtypes;
  // Null: interpret. Set later by a background compile (CompilerHook), read by every call.
  std::atomic<KernelPtr> fn{nullptr};
};

// Per program: the parsed code, the interpreter's buffer assignment and the specializations.
struct State {
  Program prog;
  std::vector<int> buf;     // per instruction: its tile buffer (inputs use 0..num_inputs-1)
  std::vector<int> out_of;  // per instruction: the output it is, or -1
  int num_bufs = 0;
  bool has_generic = false;  // an instruction runs its op's kernel on whole tiles
  Spec specs[kMaxSpecs];
  std::atomic<int> num_specs{0};
  mutable std::atomic<int> generic_checked{0};  // bit 0: float32, bit 1: float64
  std::mutex mu;
};

std::atomic<State*> g_table[kMaxPrograms];
std::atomic<int64_t> g_count{0};
std::mutex g_mu;
std::unordered_map<std::string, int64_t> g_ids;
std::atomic<CompilerHook> g_compiler{nullptr};
std::atomic<int64_t> g_specs{0}, g_compiled{0};
std::atomic<bool> g_codegen{[] {
  const char* e = std::getenv("KILN_CODEGEN");
  return !(e && std::string(e) == "0");
}()};

// Linear scan: an instruction's buffer is freed after its last use, so a chain of 1000 ops needs
// two buffers.
void assign_buffers(State& s) {
  const auto& code = s.prog.code;
  std::vector<int> last(code.size(), -1);
  for (size_t i = 0; i < code.size(); ++i)
    for (int a : code[i].args)
      if (a < 0) last[static_cast<size_t>(-1 - a)] = static_cast<int>(i);
  std::vector<int> free_list;
  int next = s.prog.num_inputs;
  s.buf.assign(code.size(), -1);
  for (size_t i = 0; i < code.size(); ++i) {
    if (!free_list.empty()) {
      s.buf[i] = free_list.back();
      free_list.pop_back();
    } else {
      s.buf[i] = next++;
    }
    // Release arguments whose last use is here (after choosing ours, so none aliases it);
    // an argument used twice (mul(t1,t1)) is released once.
    for (int a : code[i].args)
      if (a < 0 && last[static_cast<size_t>(-1 - a)] == static_cast<int>(i)) {
        last[static_cast<size_t>(-1 - a)] = -1;
        free_list.push_back(s.buf[static_cast<size_t>(-1 - a)]);
      }
  }
  s.num_bufs = next;
  s.out_of.assign(code.size(), -1);
  for (size_t k = 0; k < s.prog.outputs.size(); ++k)
    s.out_of[static_cast<size_t>(s.prog.outputs[k])] = static_cast<int>(k);
}

State& state_for(const Attrs& a) {
  int64_t kid = a.i(1);
  if (kid >= 0 && kid < g_count.load(std::memory_order_acquire)) {
    State* s = g_table[kid].load(std::memory_order_acquire);
    if (s && s->prog.text == a.s(0)) return *s;
  }
  return *g_table[register_program(a.s(0))].load(std::memory_order_acquire);
}

// ---- interpreter ----------------------------------------------------------------------------

using vec_math::gelu_erf;
using vec_math::gelu_tanh;

#define KILN_LOOP(EXPR)                          \
  for (int64_t j = 0; j < n; ++j) d[j] = (EXPR); \
  break;

// The two- and three-operand instructions (arithmetic, comparisons, logic, where); false for
// any other opcode.
template <typename T>
bool run_binary_instr(const Instr& ins, T* d, const T* a, const T* b, const T* c, int64_t n) {
  switch (ins.code) {
    case kAdd:
      KILN_LOOP(a[j] + b[j])
    case kSub:
      KILN_LOOP(a[j] - b[j])
    case kMul:
      KILN_LOOP(a[j] * b[j])
    case kDiv:
      KILN_LOOP(a[j] / b[j])
    case kPow:
      KILN_LOOP(static_cast<T>(std::pow(a[j], b[j])))
    case kMax:
      KILN_LOOP(a[j] != a[j] ? a[j] : (a[j] > b[j] ? a[j] : b[j]))
    case kMin:
      KILN_LOOP(a[j] != a[j] ? a[j] : (a[j] < b[j] ? a[j] : b[j]))
    case kLt:
      KILN_LOOP(T(a[j] < b[j]))
    case kLe:
      KILN_LOOP(T(a[j] <= b[j]))
    case kGt:
      KILN_LOOP(T(a[j] > b[j]))
    case kGe:
      KILN_LOOP(T(a[j] >= b[j]))
    case kEq:
      KILN_LOOP(T(a[j] == b[j]))
    case kNe:
      KILN_LOOP(T(a[j] != b[j]))
    case kAnd:
      KILN_LOOP(T(a[j] != T(0) && b[j] != T(0)))
    case kOr:
      KILN_LOOP(T(a[j] != T(0) || b[j] != T(0)))
    case kNot:
      KILN_LOOP(T(a[j] == T(0)))
    case kWhere:
      KILN_LOOP(a[j] != T(0) ? b[j] : c[j])
    default:
      return false;
  }
  return true;
}

template <typename T>
void run_instr(const Instr& ins, T* d, const T* a, const T* b, const T* c, int64_t n) {
  if (run_binary_instr(ins, d, a, b, c, n)) return;
  switch (ins.code) {
    case kNeg:
      KILN_LOOP(-a[j])
    case kExp:
      KILN_LOOP(vec_math::exp<T>(a[j]))
    case kLog:
      KILN_LOOP(std::log(a[j]))
    case kSqrt:
      KILN_LOOP(std::sqrt(a[j]))
    case kRsqrt:
      KILN_LOOP(T(1) / std::sqrt(a[j]))
    case kAbs:
      KILN_LOOP(a[j] < 0 ? -a[j] : a[j])
    case kSign:
      KILN_LOOP(a[j] != a[j] ? a[j] : T((a[j] > 0) - (a[j] < 0)))
    case kErf:
      KILN_LOOP(vec_math::erf<T>(a[j]))
    case kClamp: {
      T lo = T(ins.attrs[0]), hi = T(ins.attrs[1]);
      KILN_LOOP(a[j] < lo ? lo : (a[j] > hi ? hi : a[j]))
    }
    case kRelu:
      KILN_LOOP(a[j] <= T(0) ? T(0) : a[j])
    case kLeaky: {
      T s = T(ins.attrs[0]);
      KILN_LOOP(a[j] < T(0) ? a[j] * s : a[j])
    }
    case kSigmoid:
      KILN_LOOP(vec_math::sigmoid<T>(a[j]))
    case kTanh:
      KILN_LOOP(vec_math::tanh<T>(a[j]))
    case kGelu:
      if (ins.attrs[0] != 0) {
        KILN_LOOP(gelu_tanh<T>(a[j]))
      } else {
        KILN_LOOP(gelu_erf<T>(a[j]))
      }
    case kSilu:
      KILN_LOOP(a[j] * vec_math::sigmoid<T>(a[j]))
    case kCopy:
      KILN_LOOP(a[j])
    default:
      fail("fused", "unknown opcode ", ins.code);
  }
#undef KILN_LOOP
}

// An op without a loop here: its own kernel over 1-D tensors that wrap the tile buffers. The
// wrappers are kept per thread and buffer address (the scratch buffers are stable), so a tile
// costs one kernel call, not allocations.
template <typename T>
const Tensor& tile_tensor(const T* p) {
  struct Entry {
    const void* p;
    Tensor t;
  };
  thread_local std::vector<Entry> cache;
  for (const Entry& e : cache)
    if (e.p == p) return e.t;
  if (cache.size() >= 64) cache.clear();
  auto impl = make_tensor_impl();
  impl->storage = std::make_shared<Storage>(const_cast<T*>(p), sizeof(T) * kTile, nullptr, nullptr);
  impl->shape = Shape{kTile};
  impl->strides = Strides{1};
  impl->dtype = std::is_same_v<T, float> ? Float32 : Float64;
  cache.push_back({p, Tensor(std::move(impl))});
  return cache.back().t;
}

template <typename T>
void run_generic(const Instr& ins, T* d, const T* a, const T* b, const T* c) {
  Tensor in[3];
  const T* args[3] = {a, b, c};
  const size_t na = ins.args.size();
  for (size_t k = 0; k < na; ++k) in[k] = tile_tensor<T>(args[k]);
  Tensor out[1] = {tile_tensor<T>(d)};
  ins.op->kernel(std::span<const Tensor>(in, na), std::span<Tensor>(out, 1), ins.kernel_attrs);
}

template <typename T>
void load_input(T* dst, const void* src, DType dt, int64_t n, bool varying) {
  if (dt == Bool) {
    const bool* s = static_cast<const bool*>(src);
    if (varying)
      for (int64_t j = 0; j < n; ++j) dst[j] = T(s[j]);
    else
      for (int64_t j = 0; j < n; ++j) dst[j] = T(s[0]);
  } else {
    const T* s = static_cast<const T*>(src);
    if (varying)
      std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(T));
    else
      for (int64_t j = 0; j < n; ++j) dst[j] = s[0];
  }
}

// Runs the program over n elements tile by tile: each tile passes through every instruction
// while it is in L1; the last instruction writes straight to output 0, other outputs are copied
// out of their tile buffers.
template <typename T>
void interpret(const State& s, const Spec& sp, int64_t n, const void* const* in, void* const* out) {
  thread_local std::vector<T> scratch;
  size_t need = static_cast<size_t>(s.num_bufs) * kTile;
  if (scratch.size() < need) scratch.resize(need);
  T* buf = scratch.data();
  const Program& p = s.prog;
  int ni = p.num_inputs;
  // A broadcast input fills its tile once, as far as this call reaches (a call is often one
  // short row: a batch norm's per-channel rows of a small image).
  for (int k = 0; k < ni; ++k)
    if (!((sp.pattern >> k) & 1))
      load_input<T>(buf + k * kTile, in[k], sp.in_dtypes[static_cast<size_t>(k)],
                    std::min(kTile, n), false);
  // Advancing inputs of the group's dtype are read in place, not copied into a tile first;
  // unless an op's kernel reads whole tiles (past the end of the input), or an extra output,
  // written while the tile is still being computed, overlaps an input.
  bool in_place = !s.has_generic;
  const int no = static_cast<int>(p.outputs.size());
  for (int k = 1; k < no && in_place; ++k) {
    const char* o0 = static_cast<const char*>(out[k]);
    const char* o1 = o0 + n * static_cast<int64_t>(sizeof(T));
    for (int j = 0; j < ni && in_place; ++j) {
      const char* a0 = static_cast<const char*>(in[j]);
      const char* a1 =
          a0 + n * static_cast<int64_t>(dtype_size(sp.in_dtypes[static_cast<size_t>(j)]));
      in_place = o1 <= a0 || a1 <= o0;
    }
  }
  const T* src[kMaxInputs];
  for (int k = 0; k < ni; ++k) src[k] = buf + k * kTile;
  T* o = static_cast<T*>(out[0]);
  for (int64_t i0 = 0; i0 < n; i0 += kTile) {
    int64_t len = std::min(kTile, n - i0);
    for (int k = 0; k < ni; ++k)
      if ((sp.pattern >> k) & 1) {
        DType dt = sp.in_dtypes[static_cast<size_t>(k)];
        const char* base =
            static_cast<const char*>(in[k]) + i0 * static_cast<int64_t>(dtype_size(dt));
        if (dt == Bool || !in_place)
          load_input<T>(buf + k * kTile, base, dt, len, true);
        else
          src[k] = reinterpret_cast<const T*>(base);
      }
    size_t last = p.code.size() - 1;
    for (size_t i = 0; i < p.code.size(); ++i) {
      const Instr& ins = p.code[i];
      auto arg = [&](size_t k) -> const T* {
        if (k >= ins.args.size()) return nullptr;
        int a = ins.args[k];
        return a >= 0 ? src[a] : buf + s.buf[static_cast<size_t>(-1 - a)] * kTile;
      };
      T* d = i == last ? o + i0 : buf + s.buf[i] * kTile;
      if (ins.code == kGeneric) {
        // Whole tiles in the thread's buffers (lanes past len hold stale values, never read).
        T* t = buf + s.buf[i] * kTile;
        run_generic<T>(ins, t, arg(0), arg(1), arg(2));
        if (d != t) std::memcpy(d, t, static_cast<size_t>(len) * sizeof(T));
      } else {
        run_instr<T>(ins, d, arg(0), arg(1), arg(2), len);
      }
      if (int k = s.out_of[i]; k > 0)
        std::memcpy(static_cast<T*>(out[k]) + i0, d, static_cast<size_t>(len) * sizeof(T));
    }
  }
}

// ---- driver ---------------------------------------------------------------------------------

const Spec& spec_for(State& s, DType dtype, const DType* in_dt, uint64_t pattern) {
  const bool cg = g_codegen.load(std::memory_order_relaxed);
  int n = s.num_specs.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    const Spec& sp = s.specs[i];
    if (sp.dtype == dtype && sp.pattern == pattern && sp.codegen == cg &&
        std::equal(sp.in_dtypes.begin(), sp.in_dtypes.end(), in_dt))
      return sp;
  }
  std::lock_guard<std::mutex> lk(s.mu);
  n = s.num_specs.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {  // made by another thread meanwhile
    const Spec& sp = s.specs[i];
    if (sp.dtype == dtype && sp.pattern == pattern && sp.codegen == cg &&
        std::equal(sp.in_dtypes.begin(), sp.in_dtypes.end(), in_dt))
      return sp;
  }
  // Table full: keep the oldest, compile this one for the calling thread only (synchronously:
  // a background compile needs a slot that outlives the call).
  thread_local Spec overflow;
  Spec& sp = n == kMaxSpecs ? overflow : s.specs[n];
  sp.dtype = dtype;
  sp.pattern = pattern;
  sp.codegen = cg;
  sp.in_dtypes.assign(in_dt, in_dt + s.prog.num_inputs);
  sp.fn.store(nullptr, std::memory_order_relaxed);
  CompilerHook h = g_compiler.load();
  if (cg && h) {
    // Stored only when there: a background compile may already have stored its kernel.
    KernelPtr k = h(s.prog, dtype, sp.in_dtypes, pattern, n == kMaxSpecs ? nullptr : &sp.fn);
    if (k) sp.fn.store(k, std::memory_order_release);
  }
  g_specs.fetch_add(1);
  if (sp.fn.load(std::memory_order_relaxed)) g_compiled.fetch_add(1);
  if (n < kMaxSpecs) s.num_specs.store(n + 1, std::memory_order_release);
  return sp;
}

constexpr int kMaxRank = 12;

// How k_fused walks its output: in rows of `inner` elements, the row index running over the
// outer dims dims[0..cut) (the output's dims of size > 1 that are not folded into the row).
// Per input its strides over the output's dims (0 where it broadcasts); bit k of `pattern` is
// set when input k advances along the row, clear when it is one value per row.
struct RowPlan {
  int64_t rank = 0;
  int dims[kMaxRank];
  int cut = 0;
  int64_t inner = 1;
  uint64_t pattern = 0;
  SmallVec<int64_t, 8 * kMaxRank> st;
  int64_t stride(int k, int d) const { return st[static_cast<size_t>(k * rank + d)]; }
};

// The rows of output shape S; an input strided along the innermost dim is made contiguous
// first (one copy of it).
RowPlan plan_rows(SmallVec<Tensor, 8>& in, const Shape& S) {
  RowPlan pl;
  const int ni = static_cast<int>(in.size());
  const int64_t r = pl.rank = S.rank();
  pl.st.resize(static_cast<size_t>(ni * r), 0);
  auto fill_strides = [&](int k) {
    const Tensor& t = in[static_cast<size_t>(k)];
    int64_t tr = t.dim();
    for (int64_t d = 0; d < r; ++d) {
      int64_t td = d - (r - tr);
      pl.st[static_cast<size_t>(k * r + d)] = td < 0 || t.shape()[td] == 1 ? 0 : t.strides()[td];
    }
  };
  int nd = 0;
  for (int64_t d = 0; d < r; ++d)
    if (S[d] != 1) pl.dims[nd++] = static_cast<int>(d);
  for (int k = 0; k < ni; ++k) {
    fill_strides(k);
    if (nd == 0) continue;
    int64_t s0 = pl.stride(k, pl.dims[nd - 1]);
    if (s0 != 0 && s0 != 1) {  // strided innermost: one contiguous copy of this input
      in[static_cast<size_t>(k)] = in[static_cast<size_t>(k)].contiguous();
      fill_strides(k);
      s0 = pl.stride(k, pl.dims[nd - 1]);
    }
    if (s0 == 1) pl.pattern |= uint64_t(1) << k;
  }
  // Fold trailing dims into one inner run while every input keeps its mode across them.
  pl.cut = nd;
  if (nd > 0) {
    pl.inner = S[pl.dims[nd - 1]];
    pl.cut = nd - 1;
    while (pl.cut > 0) {
      int d = pl.dims[pl.cut - 1];
      bool ok = true;
      for (int k = 0; k < ni && ok; ++k) {
        int64_t sd = pl.stride(k, d);
        ok = ((pl.pattern >> k) & 1) ? sd == pl.inner : sd == 0;
      }
      if (!ok) break;
      pl.inner *= S[d];
      --pl.cut;
    }
  }
  return pl;
}

// One call's data and work units: whole rows, or pieces of `chunk` elements of a row when there
// are too few rows to share among the threads.
struct Walk {
  const RowPlan& plan;
  const Shape& S;
  int ni, no;
  SmallVec<const char*, 8> base;  // per input: its first element
  SmallVec<int64_t, 8> esz;       // per input: its element size
  char* obase[kMaxOutputs];
  int64_t oes = 0;  // the outputs' element size
  int64_t per_row = 1, chunk = 0, units = 0;
  bool stream = false;  // outputs large enough to write with streaming stores
};

void split_rows(Walk& w, int64_t numel) {
  const int64_t inner = w.plan.inner, rows = numel / inner;
  const int nt = get_num_threads();
  int64_t per_row = 1;
  if (rows < 4 * nt && numel >= kParallelGrain) {
    per_row = (4 * nt + rows - 1) / rows;
    per_row = std::min<int64_t>(per_row, std::max<int64_t>(1, inner / 1024));
  }
  int64_t chunk = (inner + per_row - 1) / per_row;
  w.chunk = (chunk + 63) / 64 * 64;
  w.per_row = (inner + w.chunk - 1) / w.chunk;
  w.units = rows * w.per_row;
}

// Unit u's input and output pointers; returns its length.
int64_t unit_pointers(const Walk& w, int64_t u, const void** p, void** op) {
  const RowPlan& pl = w.plan;
  const int64_t row = u / w.per_row, col = (u % w.per_row) * w.chunk;
  // Row index -> offsets along the outer dims.
  int64_t idx[kMaxRank];
  int64_t rem = row;
  for (int c = pl.cut - 1; c >= 0; --c) {
    const int64_t sz = w.S[pl.dims[c]];
    idx[c] = rem % sz;
    rem /= sz;
  }
  for (int k = 0; k < w.ni; ++k) {
    int64_t off = ((pl.pattern >> k) & 1) ? col : 0;
    for (int c = 0; c < pl.cut; ++c) off += idx[c] * pl.stride(k, pl.dims[c]);
    p[k] = w.base[static_cast<size_t>(k)] + off * w.esz[static_cast<size_t>(k)];
  }
  for (int k = 0; k < w.no; ++k) op[k] = w.obase[k] + (row * pl.inner + col) * w.oes;
  return std::min(w.chunk, pl.inner - col);
}

// Large outputs: each sub-chunk is computed into a cached buffer, then streamed out.
template <class Compute>
void compute_streamed(const Walk& w, int64_t len, const void* const* p, void* const* op,
                      const Compute& compute) {
  alignas(64) char tmp[kMaxOutputs][kStreamChunk * 8];
  void* tp[kMaxOutputs];
  for (int k = 0; k < w.no; ++k) tp[k] = tmp[k];
  const void* q[kMaxInputs];
  for (int64_t off = 0; off < len; off += kStreamChunk) {
    const int64_t m = std::min(kStreamChunk, len - off);
    for (int k = 0; k < w.ni; ++k)
      q[k] = static_cast<const char*>(p[k]) +
             (((w.plan.pattern >> k) & 1) ? off * w.esz[static_cast<size_t>(k)] : 0);
    compute(m, q, tp);
    for (int k = 0; k < w.no; ++k)
      cpu::stream_copy(static_cast<char*>(op[k]) + off * w.oes, tmp[k], m * w.oes);
  }
}

template <class Compute>
void run_units(const Walk& w, int64_t u0, int64_t u1, const Compute& compute) {
  const void* p[kMaxInputs];
  void* op[kMaxOutputs];
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t len = unit_pointers(w, u, p, op);
    if (w.stream)
      compute_streamed(w, len, p, op, compute);
    else
      compute(len, p, op);
  }
  if (w.stream) cpu::stream_fence();
}

void k_fused(std::span<const Tensor> in_raw, std::span<Tensor> out, const Attrs& a) {
  State& s = state_for(a);
  const int ni = s.prog.num_inputs;
  if (static_cast<int>(in_raw.size()) != ni)
    fail("fused", "program takes ", ni, " inputs, got ", in_raw.size());
  const int no = static_cast<int>(s.prog.outputs.size());
  if (static_cast<int>(out.size()) != no)
    fail("fused", "program has ", no, " outputs, got ", out.size());
  Tensor& o = out[0];
  const DType dt = o.dtype();
  const Shape& S = o.shape();
  if (S.rank() > kMaxRank) fail("fused", "rank ", S.rank(), " is above ", kMaxRank);
  if (o.numel() == 0) return;
  SmallVec<Tensor, 8> in(in_raw.begin(), in_raw.end());
  SmallVec<DType, 8> in_dt;
  for (const auto& t : in) in_dt.push_back(t.dtype());
  const RowPlan plan = plan_rows(in, S);
  const Spec& sp = spec_for(s, dt, in_dt.data(), plan.pattern);
  Walk w{plan, S, ni, no};
  for (int k = 0; k < ni; ++k) {
    w.base.push_back(static_cast<const char*>(in[static_cast<size_t>(k)].raw_data()));
    w.esz.push_back(static_cast<int64_t>(dtype_size(in_dt[static_cast<size_t>(k)])));
  }
  // An output of its own, smaller shape (own_shape) is written at the group's into scratch,
  // then computed apart by its own program.
  SmallVec<Tensor, 8> scratch(static_cast<size_t>(no));
  for (int k = 0; k < no; ++k) {
    Tensor& ok = out[static_cast<size_t>(k)];
    if (ok.shape() != S) scratch[static_cast<size_t>(k)] = empty(S, dt);
    w.obase[k] =
        static_cast<char*>((ok.shape() != S ? scratch[static_cast<size_t>(k)] : ok).raw_data());
  }
  w.oes = static_cast<int64_t>(dtype_size(dt));
  split_rows(w, o.numel());
  w.stream = o.numel() * w.oes >= cpu::kStreamBytes;
  // One load per call: a kernel compiled in the background meanwhile takes over on the next.
  const KernelPtr gen = sp.fn.load(std::memory_order_acquire);
  auto compute = [&](int64_t n, const void* const* p, void* const* op) {
    if (gen)
      gen(n, p, op);
    else if (dt == Float32)
      interpret<float>(s, sp, n, p, op);
    else
      interpret<double>(s, sp, n, p, op);
  };
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, w.chunk));
  parallel_for(w.units, grain, [&](int64_t u0, int64_t u1) { run_units(w, u0, u1, compute); });
  for (int k = 1; k < no; ++k) {
    if (!scratch[static_cast<size_t>(k)].defined()) continue;
    std::vector<int> used;
    const std::string text = output_program(s.prog, static_cast<size_t>(k), used);
    TensorList ins;
    for (int j : used) ins.push_back(in[static_cast<size_t>(j)]);
    const Attrs pa{AttrValue(text), AttrValue(register_program(text))};
    invoke_kernel(fused_op(), std::span<const Tensor>(ins.data(), ins.size()),
                  std::span<Tensor>(&out[static_cast<size_t>(k)], 1), pa);
  }
}

// Generic instructions compute in the group's dtype: their op must map it to itself and accept
// the attributes (the fusion pass only groups such ops; a hand-written program may not). Checked
// once per program and dtype with the op's own inference.
void check_generic(const State& s, DType dt) {
  const int bit = dt == Float32 ? 1 : 2;
  if (s.generic_checked.load(std::memory_order_acquire) & bit) return;
  for (const Instr& ins : s.prog.code) {
    if (ins.code != kGeneric) continue;
    const Tensor dummy = empty({1}, dt);
    const std::vector<Tensor> in(ins.args.size(), dummy);
    const MetaList m = ins.op->infer(in, ins.kernel_attrs);
    if (m.size() != 1 || m[0].dtype != dt)
      fail("fused", ins.op->name, " does not map ", dt, " to ", dt,
           ": a fused program computes every instruction in the group's dtype");
  }
  s.generic_checked.fetch_or(bit, std::memory_order_acq_rel);
}

// Output k's own shape: the broadcast of the inputs that reach it. The fusion pass groups
// members of the root's shape, so every output has the group's shape, except where dynamic dims
// equal while tracing differ at run time (a member that broadcasts into the root there): that
// output keeps its own shape, as eager gives it, and k_fused computes it apart.
Shape own_shape(const Program& p, size_t k, std::span<const Tensor> in, const Shape& group) {
  bool broadcasts = false;
  for (const auto& t : in) broadcasts = broadcasts || t.shape() != group;
  if (k == 0 || !broadcasts) return group;
  std::vector<uint64_t> reach(p.code.size(), 0);  // inputs each instruction depends on
  for (size_t i = 0; i < p.code.size(); ++i)
    for (int a : p.code[i].args)
      reach[i] |= a >= 0 ? uint64_t{1} << a : reach[static_cast<size_t>(-1 - a)];
  const uint64_t r = reach[static_cast<size_t>(p.outputs[k])];
  Shape own;
  bool first = true;
  for (size_t j = 0; j < in.size(); ++j)
    if (r >> j & 1) {
      own = first ? in[j].shape() : broadcast_shapes(own, in[j].shape(), "fused");
      first = false;
    }
  return own;
}

MetaList infer_fused(std::span<const Tensor> in, const Attrs& a) {
  const State& s = state_for(a);
  if (static_cast<int>(in.size()) != s.prog.num_inputs)
    fail("fused", "program takes ", s.prog.num_inputs, " inputs, got ", in.size());
  DType dt = Float32;
  bool found = false;
  Shape shape;
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].dtype() != Bool) {
      if (found && in[k].dtype() != dt)
        fail("fused", "inputs mix ", dt, " and ", in[k].dtype(), " (input ", k, ")");
      dt = in[k].dtype();
      found = true;
    }
    shape = k == 0 ? in[k].shape() : broadcast_shapes(shape, in[k].shape(), "fused");
  }
  if (!found || !is_floating(dt))
    fail("fused", "needs float32 or float64 inputs, got ", dt, " ", shape);
  check_generic(s, dt);
  MetaList m;
  for (size_t k = 0; k < s.prog.outputs.size(); ++k) {
    TensorMeta& t = m.emplace_back();
    t.dtype = dt;
    t.shape = own_shape(s.prog, k, in, shape);
  }
  return m;
}

}  // namespace

int64_t register_program(const std::string& text) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_ids.find(text);
  if (it != g_ids.end()) return it->second;
  int64_t id = g_count.load();
  if (id >= kMaxPrograms) fail("fused", "more than ", kMaxPrograms, " fused programs");
  auto s = std::make_unique<State>();  // a malformed program throws here and frees it
  s->prog = parse(text);
  assign_buffers(*s);
  for (const Instr& ins : s->prog.code) s->has_generic |= ins.code == kGeneric;
  // Lives for the process from here: kernels may run until exit.
  g_table[id].store(s.release(), std::memory_order_release);
  g_count.store(id + 1, std::memory_order_release);
  g_ids[text] = id;
  return id;
}

void set_compiler(CompilerHook hook) { g_compiler.store(hook); }
void set_codegen(bool on) { g_codegen.store(on); }
bool codegen_on() { return g_codegen.load(); }

Stats stats() { return Stats{g_count.load(), g_specs.load(), g_compiled.load()}; }

const OpDef& fused_op() {
  static const OpDef& op = def_op({.name = "fused",
                                   .num_inputs = -1,
                                   .num_outputs = -1,
                                   .attr_names = {"program", "kid"},
                                   .traits = kElementwise,
                                   .infer = infer_fused,
                                   .kernel = k_fused,
                                   .doc = "elementwise group made by the fusion pass"});
  return op;
}

std::vector<Tensor> call(const std::string& program, const std::vector<Tensor>& inputs) {
  Attrs a{AttrValue(program), AttrValue(register_program(program))};
  TensorList r =
      kiln::detail::call(fused_op(), std::span<const Tensor>(inputs.data(), inputs.size()), a);
  return std::vector<Tensor>(r.begin(), r.end());
}

namespace {
[[maybe_unused]] const OpDef& kFusedRegistered = fused_op();
}

}  // namespace kiln::detail::fused
