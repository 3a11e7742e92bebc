// Linear-algebra family: matmul (torch.matmul semantics) on GEMM, with an optional bias row that
// linear folds in (torch.addmm: added in the GEMM's epilogue or accumulated onto, no separate add
// pass), and addmm. Transposed operands reach the GEMM as a flag, never as a copy; batches
// broadcast by stride 0. einsum.cpp and linalg_products.cpp build on matmul; the decompositions
// are in linalg_lapack.cpp.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <type_traits>

#include "kiln/dispatch/autocast.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

using op_util::one;

// ---- argument checks (shared by the wrapper, on the user's shapes, and by inference) --------

void check_matmul(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("matmul", "both arguments must be defined tensors");
  if (a.dim() == 0 || b.dim() == 0)
    fail("matmul", "both arguments must be at least 1-D, got shapes ", a.shape(), " and ",
         b.shape());
  if (!is_floating(a.dtype()) || !is_floating(b.dtype()))
    fail("matmul", "only floating dtypes are supported, got ", a.dtype(), " and ", b.dtype(),
         " (shapes ", a.shape(), " and ", b.shape(), ")");
  // Under autocast, as the op will receive them (float32 and bfloat16 mix there).
  const DType da = autocast_input_dtype(AutocastPolicy::kLower, a.dtype());
  const DType db = autocast_input_dtype(AutocastPolicy::kLower, b.dtype());
  if (da != db)
    fail("matmul", "both arguments must have the same dtype, got ", da, " ", a.shape(), " and ", db,
         " ", b.shape());
  int64_t ka = a.shape()[a.dim() - 1];
  int64_t kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
  if (ka >= 0 && kb >= 0 && ka != kb)
    fail("matmul", "cannot multiply shapes ", a.shape(), " and ", b.shape(), ": inner dims ", ka,
         " and ", kb, " differ");
  // Batch dims (all but the last two) broadcast, right-aligned.
  int64_t ra = std::max<int64_t>(a.dim() - 2, 0), rb = std::max<int64_t>(b.dim() - 2, 0);
  for (int64_t i = 1; i <= std::min(ra, rb); ++i) {
    int64_t da = a.shape()[ra - i], db = b.shape()[rb - i];
    if (da >= 0 && db >= 0 && da != db && da != 1 && db != 1)
      fail("matmul", "batch dims of shapes ", a.shape(), " and ", b.shape(),
           " do not broadcast: ", da, " vs ", db);
  }
}

// Output shape of the rank >= 2 op: broadcast batch dims + [m, n].
Shape matmul_shape(const Shape& a, const Shape& b) {
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape out = broadcast_shapes(ba, bb, "matmul");
  out.push_back(a[a.rank() - 2]);
  out.push_back(b[b.rank() - 1]);
  return out;
}

// ---- kernel --------------------------------------------------------------------------------

/// How a rows x cols matrix with strides (sr, sc) is handed to a row-major GEMM.
struct MatArg {
  bool trans;
  int64_t ld;
};

// Row-major (sc == 1) passes as is; column-major (sr == 1, a transposed view) passes with the
// transpose flag. The stride of a size-1 dim never matters, so it is ignored (unsqueezed vectors
// and [1, k] rows qualify either way). Anything else (sliced with a step, expanded) is nullopt.
std::optional<MatArg> blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if ((cols <= 1 || sc == 1) && (rows <= 1 || sr >= std::max<int64_t>(cols, 1)))
    return MatArg{false, rows <= 1 ? std::max<int64_t>(cols, 1) : sr};
  if ((rows <= 1 || sr == 1) && (cols <= 1 || sc >= std::max<int64_t>(rows, 1)))
    return MatArg{true, cols <= 1 ? std::max<int64_t>(rows, 1) : sc};
  return std::nullopt;
}

// Strides of t's matrices along the output's batch dims: 0 where t broadcasts. Inline storage,
// so the batched path allocates nothing.
Strides batch_strides(const Tensor& t, const Shape& out) {
  int64_t R = out.rank() - 2, rt = t.dim() - 2;
  Strides st(static_cast<size_t>(R), 0);
  for (int64_t d = 0; d < R; ++d) {
    int64_t td = d - (R - rt);
    if (td >= 0 && t.shape()[td] != 1) st[d] = t.strides()[td];
  }
  return st;
}

// Element offset of output batch i's matrix within an operand with batch strides st.
int64_t batch_offset(int64_t i, const Shape& out, const Strides& st) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(st.size()) - 1; d >= 0; --d) {
    off += (i % out[d]) * st[d];
    i /= out[d];
  }
  return off;
}

// Below this many multiply-adds per matrix, one GEMM call is too small for oneDNN to thread
// well, so batches are spread over threads instead (each GEMM then runs single-threaded: oneDNN
// sees omp_in_parallel and does not nest).
constexpr double kSmallGemm = 1 << 21;
// Work per thread chunk that amortizes a parallel region (~1-2 us).
constexpr double kBatchChunkWork = 1 << 17;

// out = a @ b (+ bias, a [n] row added to every output row): the rows start as copies of bias
// and every GEMM accumulates onto them (beta = 1).
template <typename T>
void matmul_impl(const Tensor& a0, const Tensor& b0, const Tensor* bias, Tensor& out) {
  Tensor a = a0, b = b0;
  const int64_t ra = a.dim(), rb = b.dim();
  const int64_t m = a.shape()[ra - 2], k = a.shape()[ra - 1], n = b.shape()[rb - 1];
  auto la = blas_layout(m, k, a.strides()[ra - 2], a.strides()[ra - 1]);
  if (!la) {  // neither row- nor column-major: one copy, then row-major
    a = raw_contiguous_copy(a);
    la = blas_layout(m, k, a.strides()[ra - 2], a.strides()[ra - 1]);
  }
  auto lb = blas_layout(k, n, b.strides()[rb - 2], b.strides()[rb - 1]);
  if (!lb) {
    b = raw_contiguous_copy(b);
    lb = blas_layout(k, n, b.strides()[rb - 2], b.strides()[rb - 1]);
  }
  const Shape& os = out.shape();
  int64_t nbatch = 1;
  for (int64_t d = 0; d < os.rank() - 2; ++d) nbatch *= os[d];
  if (nbatch == 0 || m == 0 || n == 0) return;
  Strides sa = batch_strides(a, os);
  const Strides sb = batch_strides(b, os);
  // [batch..., m, k] @ [k, n] with a's rows evenly spaced across batches (x @ W^T in a linear
  // layer), or no batch at all: one GEMM of (batch*m) rows instead of a loop.
  bool one_gemm = nbatch == 1;
  if (!one_gemm && !la->trans) {
    one_gemm = true;
    for (int64_t i = 1; i < nbatch && one_gemm; ++i)
      one_gemm = batch_offset(i, os, sb) == 0 && batch_offset(i, os, sa) == i * m * la->ld;
  }
  // The same with a's matrices elsewhere (a batch_first sequence read time-major, [B, T, k]
  // transposed) and each too large for the batch-parallel loop below: one copy of a (k
  // elements a row against n k multiply-adds) buys the one GEMM. The loop of [B, k] @ [k, n]
  // GEMMs ran an LSTM's input projection ([128, 32, 256] @ [256, 1024]) at 12.0 / 9.0 ms at 1 /
  // 2 threads against 8.8 / 4.5 with the copy. Small matrices keep their strided batches.
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (!one_gemm && work >= kSmallGemm &&
      std::all_of(sb.begin(), sb.end(), [](int64_t v) { return v == 0; })) {
    a = raw_contiguous_copy(a);
    la = blas_layout(m, k, a.strides()[ra - 2], a.strides()[ra - 1]);
    sa = batch_strides(a, os);
    one_gemm = true;
  }
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  T beta = T(0);
  if (bias) {
    Tensor bc = bias->is_contiguous() ? *bias : raw_contiguous_copy(*bias);
    const T* pbias = bc.data_ptr<T>();
    // float32 in one GEMM: oneDNN's matmul primitive adds the bias in its epilogue (W7's
    // forward GEMMs 5-15% faster in the step than filling the rows and accumulating onto them).
    if constexpr (std::is_same_v<T, float>)
      if (one_gemm &&
          sgemm_bias(la->trans, lb->trans, nbatch * m, n, k, pa, la->ld, pb, lb->ld, pbias, pc, n))
        return;
    parallel_for(nbatch * m, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) std::copy(pbias, pbias + n, pc + r * n);
    });
    beta = T(1);
  }
  if (one_gemm) {
    gemm<T>(la->trans, lb->trans, nbatch * m, n, k, pa, la->ld, pb, lb->ld, beta, pc, n);
    return;
  }
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      gemm<T>(la->trans, lb->trans, m, n, k, pa + batch_offset(i, os, sa), la->ld,
              pb + batch_offset(i, os, sb), lb->ld, beta, pc + i * m * n, n);
  };
  // float64 goes to OpenBLAS, whose own threads must not be called from several OpenMP
  // threads at once; it only serves references and gradcheck, so it stays serial.
  if (std::is_same_v<T, float> && work < kSmallGemm) {
    int64_t grain =
        std::max<int64_t>(1, static_cast<int64_t>(kBatchChunkWork / std::max(work, 1.0)));
    parallel_for(nbatch, grain, run);
  } else {
    run(0, nbatch);
  }
}

// float32 copy of a bfloat16 (or float16) tensor, for the paths oneDNN declines.
Tensor widened(const Tensor& t) {
  Tensor w = empty(t.shape(), Float32);
  op_util::copy_cast_kernel(t, w);
  return w;
}

// Whether operand offsets batch_offset(i) are i * step for one step (stride 0 included), so one
// batched primitive covers every matrix.
bool uniform_batches(int64_t nbatch, const Shape& os, const Strides& st, int64_t* step) {
  *step = nbatch > 1 ? batch_offset(1, os, st) : 0;
  for (int64_t i = 2; i < nbatch; ++i)
    if (batch_offset(i, os, st) != i * *step) return false;
  return true;
}

const uint16_t* bf16_bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw_data()); }

// The native bfloat16 kernel of matmul: oneDNN's bfloat16 matmul (AVX512-BF16 or AMX, float32
// accumulation, the bias added in its epilogue), as matmul_impl lays the operands out. Where
// oneDNN declines (a CBLAS build), the product is computed in float32 and rounded once.
void matmul_bf16(const Tensor& a0, const Tensor& b0, const Tensor* bias, Tensor& out) {
  Tensor a = a0, b = b0;
  const int64_t ra = a.dim(), rb = b.dim();
  const int64_t m = a.shape()[ra - 2], k = a.shape()[ra - 1], n = b.shape()[rb - 1];
  auto la = blas_layout(m, k, a.strides()[ra - 2], a.strides()[ra - 1]);
  if (!la) {
    a = raw_contiguous_copy(a);
    la = blas_layout(m, k, a.strides()[ra - 2], a.strides()[ra - 1]);
  }
  auto lb = blas_layout(k, n, b.strides()[rb - 2], b.strides()[rb - 1]);
  if (!lb) {
    b = raw_contiguous_copy(b);
    lb = blas_layout(k, n, b.strides()[rb - 2], b.strides()[rb - 1]);
  }
  const Shape& os = out.shape();
  int64_t nbatch = 1;
  for (int64_t d = 0; d < os.rank() - 2; ++d) nbatch *= os[d];
  if (nbatch == 0 || m == 0 || n == 0) return;
  const Strides sa = batch_strides(a, os), sb = batch_strides(b, os);
  Tensor bc;
  if (bias) bc = bias->is_contiguous() ? *bias : raw_contiguous_copy(*bias);
  const uint16_t* pbias = bias ? bf16_bits(bc) : nullptr;
  bool one_gemm = nbatch == 1;
  if (!one_gemm && !la->trans) {
    one_gemm = true;
    for (int64_t i = 1; i < nbatch && one_gemm; ++i)
      one_gemm = batch_offset(i, os, sb) == 0 && batch_offset(i, os, sa) == i * m * la->ld;
  }
  bool done = false;
  int64_t stepa = 0, stepb = 0;
  if (one_gemm)
    done = gemm_bf16(la->trans, lb->trans, 1, nbatch * m, n, k, 1.f, bf16_bits(a), la->ld, 0,
                     bf16_bits(b), lb->ld, 0, pbias, 0.f, out.raw_data(), n, 0, true);
  else if (uniform_batches(nbatch, os, sa, &stepa) && uniform_batches(nbatch, os, sb, &stepb))
    done = gemm_bf16(la->trans, lb->trans, nbatch, m, n, k, 1.f, bf16_bits(a), la->ld, stepa,
                     bf16_bits(b), lb->ld, stepb, pbias, 0.f, out.raw_data(), n, m * n, true);
  if (!done && !one_gemm) {
    done = true;
    uint16_t* pc = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < nbatch && done; ++i)
      done =
          gemm_bf16(la->trans, lb->trans, 1, m, n, k, 1.f, bf16_bits(a) + batch_offset(i, os, sa),
                    la->ld, 0, bf16_bits(b) + batch_offset(i, os, sb), lb->ld, 0, pbias, 0.f,
                    pc + i * m * n, n, 0, true);
  }
  if (done) return;
  Tensor wout = empty(out.shape(), Float32), wbias;
  if (bias) wbias = widened(bc);
  matmul_impl<float>(widened(a0), widened(b0), bias ? &wbias : nullptr, wout);
  op_util::copy_cast_kernel(wout, out);
}

MetaList infer_matmul(std::span<const Tensor> in, const Attrs&) {
  if (in.size() != 2 && in.size() != 3)
    fail("matmul", "takes a, b and an optional bias, got ", in.size(), " inputs");
  check_matmul(in[0], in[1]);
  if (in[0].dim() < 2 || in[1].dim() < 2)
    fail("matmul",
         "the op takes matrices (rank >= 2; the matmul() wrapper promotes vectors), "
         "got shapes ",
         in[0].shape(), " and ", in[1].shape());
  Shape os = matmul_shape(in[0].shape(), in[1].shape());
  if (in.size() == 3) {
    const Tensor& bias = in[2];
    const int64_t n = os[os.rank() - 1];
    if (bias.dtype() != in[0].dtype() || bias.dim() != 1 ||
        (bias.shape()[0] >= 0 && n >= 0 && bias.shape()[0] != n))
      fail("matmul", "bias must be ", in[0].dtype(), " [", n,
           "] (one value per output column), got ", bias.dtype(), " ", bias.shape(), " (shapes ",
           in[0].shape(), " and ", in[1].shape(), ")");
  }
  return one(in[0].dtype(), os);
}

const OpDef& kMatmul = def_op(
    {.name = "matmul",
     .num_inputs = -1,
     .infer = infer_matmul,
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const Tensor* bias = in.size() == 3 ? &in[2] : nullptr;
           if (out[0].dtype() == BF16) return matmul_bf16(in[0], in[1], bias, out[0]);
           KILN_DISPATCH_FLOAT(out[0].dtype(), "matmul",
                               [&] { matmul_impl<scalar_t>(in[0], in[1], bias, out[0]); });
         },
     // C = A B, so dL/dA = G B^T and dL/dB = A^T G (per batch). Broadcast batch dims come out
     // at the output's batch shape and the engine's sum_to folds them back to each input.
     // When B is a plain matrix shared by all batches of A, dB = sum_b A_b^T G_b is one GEMM on
     // the batch-flattened operands: A^T [k, batch*m] @ G [batch*m, n], with no [batch, k, n]
     // temporary to reduce. Written with matmul/transpose so it differentiates again.
     .grad =
         [](const GradCtx& c) {
           const Tensor& a = c.in(0);
           const Tensor& b = c.in(1);
           Tensor da, db;
           if (c.need(0)) da = matmul(c.g(), transpose(b, -1, -2));
           if (c.need(1)) {
             // b stored transposed (linear's weight, w^T): compute db^T = g^T a, contiguous, and
             // hand back its transpose, which has b's layout, so that transpose's rule gives w
             // a contiguous gradient (torch's mm_mat2_backward does the same). The plain form
             // made every weight gradient a transposed view that the optimizer then had to copy.
             // In a graph, b made by a transpose: the two transposes then cancel (simplify)
             // and the inner one folds into the GEMM (fold_transposes).
             const OpDef* bp = producer_op(b);
             const bool b_transposed =
                 b.dim() == 2 &&
                 (b.is_concrete()
                      ? !b.is_contiguous() && b.strides()[0] == 1 && b.strides()[1] == b.shape()[0]
                      : bp && (bp->name == "transpose" || bp->name == "permute"));
             // Batch flattening needs a static batch or a static last dim (a graph may have
             // neither): then per-batch products summed over the batch dims.
             auto flattens = [](const Tensor& t) {
               bool batch_static = true;
               for (int64_t d = 0; d + 1 < t.dim(); ++d)
                 batch_static = batch_static && t.size(d) >= 0;
               return batch_static || t.size(-1) >= 0;
             };
             std::vector<int64_t> batch_dims;
             for (int64_t d = 0; d + 2 < a.dim(); ++d) batch_dims.push_back(d);
             if (b.dim() == 2 && a.dim() > 2 && !(flattens(a) && flattens(c.g())))
               db = sum(matmul(transpose(a, -1, -2), c.g()), batch_dims);
             else if (b_transposed)
               db = transpose(matmul(transpose(flatten(c.g(), 0, -2), 0, 1), flatten(a, 0, -2)), 0,
                              1);
             else if (b.dim() == 2 && a.dim() > 2)
               db = matmul(transpose(flatten(a, 0, -2), 0, 1), flatten(c.g(), 0, -2));
             else
               db = matmul(transpose(a, -1, -2), c.g());
           }
           if (c.inputs.size() == 3)  // the bias row was added to every output row
             return TensorList{da, db, c.need(2) ? sum_to(c.g(), c.in(2).shape()) : Tensor()};
           return TensorList{da, db};
         },
     .autocast = AutocastPolicy::kLower,
     .doc = "batched matrix product of rank >= 2 operands with broadcast batch dims (+ an "
            "optional bias row)",
     .native_dtypes = dtype_bit(BF16)});

// ---- addmm: beta * input + alpha * (a @ b) in one GEMM -----------------------------------------

// Dynamic dims (-1, symbolic tensors) are checked when the run gives them a size.
void check_addmm(const Tensor& input, const Tensor& a, const Tensor& b) {
  if (!input.defined() || !a.defined() || !b.defined())
    fail("addmm", "input, a and b must be defined tensors");
  if (a.dim() != 2 || b.dim() != 2)
    fail("addmm", "a and b must be 2-D, got shapes ", a.shape(), " and ", b.shape());
  auto dt = [](const Tensor& t) { return autocast_input_dtype(AutocastPolicy::kLower, t.dtype()); };
  if (!is_floating(a.dtype()) || dt(a) != dt(b) || dt(input) != dt(a))
    fail("addmm", "input, a and b must share one floating dtype, got ", input.dtype(), " ",
         input.shape(), ", ", a.dtype(), " ", a.shape(), " and ", b.dtype(), " ", b.shape());
  const int64_t m = a.shape()[0], ka = a.shape()[1], kb = b.shape()[0], n = b.shape()[1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    fail("addmm", "cannot multiply shapes ", a.shape(), " and ", b.shape(), ": inner dims ", ka,
         " and ", kb, " differ");
  const Shape& is = input.shape();
  bool fits = is.rank() <= 2;
  for (int64_t d = 0; fits && d < is.rank(); ++d) {
    const int64_t want = d == is.rank() - 1 ? n : m;
    fits = is[d] == 1 || is[d] < 0 || want < 0 || is[d] == want;
  }
  if (!fits)
    fail("addmm", "input of shape ", is, " does not broadcast to the product's shape [", m, ", ", n,
         "] (a ", a.shape(), " @ b ", b.shape(), ")");
}

// out = input (broadcast to [m, n]) first, then the GEMM computes alpha * a @ b + beta * out in
// place, so the product is never written on its own. beta = 0 skips the copy and ignores the
// input, NaN included (torch.addmm).
template <typename T>
void addmm_impl(const Tensor& input, const Tensor& a0, const Tensor& b0, double beta, double alpha,
                Tensor& out) {
  Tensor a = a0, b = b0;
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (m == 0 || n == 0) return;
  auto la = blas_layout(m, k, a.strides()[0], a.strides()[1]);
  if (!la) {
    a = raw_contiguous_copy(a);
    la = blas_layout(m, k, a.strides()[0], a.strides()[1]);
  }
  auto lb = blas_layout(k, n, b.strides()[0], b.strides()[1]);
  if (!lb) {
    b = raw_contiguous_copy(b);
    lb = blas_layout(k, n, b.strides()[0], b.strides()[1]);
  }
  T* pc = out.data_ptr<T>();
  // out already holds the input when it is the input's own buffer (a donated feed, see
  // Session::set_donated): the GEMM accumulates onto it in place.
  const bool in_place =
      input.data_ptr<T>() == pc && input.shape() == out.shape() && input.is_contiguous();
  if (beta != 0 && !in_place) {
    // Element (i, j) of the broadcast input: stride 0 along a dim of size 1 (or a missing dim).
    const Shape& is = input.shape();
    const int64_t r = is.rank();
    const int64_t si = r == 2 && is[0] != 1 ? input.strides()[0] : 0;
    const int64_t sj = r >= 1 && is[r - 1] != 1 ? input.strides()[r - 1] : 0;
    const T* pi = input.data_ptr<T>();
    parallel_for(m, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* src = pi + i * si;
        T* dst = pc + i * n;
        if (sj == 1)
          std::copy(src, src + n, dst);
        else
          for (int64_t j = 0; j < n; ++j) dst[j] = src[j * sj];
      }
    });
  }
  const T gbeta = beta != 0 ? static_cast<T>(beta) : T(0);
  if constexpr (std::is_same_v<T, float>)
    sgemm(la->trans, lb->trans, m, n, k, static_cast<float>(alpha), a.data_ptr<float>(), la->ld,
          b.data_ptr<float>(), lb->ld, gbeta, pc, n);
  else
    dgemm(la->trans, lb->trans, m, n, k, alpha, a.data_ptr<double>(), la->ld, b.data_ptr<double>(),
          lb->ld, gbeta, pc, n);
}

// The native bfloat16 kernel of addmm: out = input (broadcast), then oneDNN's bfloat16 matmul
// adds alpha * a @ b onto it (sum post-op, float32 accumulation); float32 where it declines.
void addmm_bf16(const Tensor& input, const Tensor& a0, const Tensor& b0, double beta, double alpha,
                Tensor& out) {
  Tensor a = a0, b = b0;
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (m == 0 || n == 0) return;
  auto la = blas_layout(m, k, a.strides()[0], a.strides()[1]);
  if (!la) {
    a = raw_contiguous_copy(a);
    la = blas_layout(m, k, a.strides()[0], a.strides()[1]);
  }
  auto lb = blas_layout(k, n, b.strides()[0], b.strides()[1]);
  if (!lb) {
    b = raw_contiguous_copy(b);
    lb = blas_layout(k, n, b.strides()[0], b.strides()[1]);
  }
  uint16_t* pc = static_cast<uint16_t*>(out.raw_data());
  const bool in_place =
      input.raw_data() == out.raw_data() && input.shape() == out.shape() && input.is_contiguous();
  if (beta != 0 && !in_place) {
    const Shape& is = input.shape();
    const int64_t r = is.rank();
    const int64_t si = r == 2 && is[0] != 1 ? input.strides()[0] : 0;
    const int64_t sj = r >= 1 && is[r - 1] != 1 ? input.strides()[r - 1] : 0;
    const uint16_t* pi = bf16_bits(input);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) pc[i * n + j] = pi[i * si + j * sj];
  }
  if (k > 0 && gemm_bf16(la->trans, lb->trans, 1, m, n, k, static_cast<float>(alpha), bf16_bits(a),
                         la->ld, 0, bf16_bits(b), lb->ld, 0, nullptr,
                         beta != 0 ? static_cast<float>(beta) : 0.f, pc, n, 0, true))
    return;
  Tensor wout = beta != 0 ? widened(out) : empty(out.shape(), Float32);
  addmm_impl<float>(wout, widened(a0), widened(b0), beta, alpha, wout);
  op_util::copy_cast_kernel(wout, out);
}

MetaList infer_addmm(std::span<const Tensor> in, const Attrs&) {
  check_addmm(in[0], in[1], in[2]);
  return one(in[1].dtype(), Shape{in[1].shape()[0], in[2].shape()[1]});
}

const OpDef& kAddmm = def_op(
    {.name = "addmm",
     .num_inputs = 3,
     .attr_names = {"beta", "alpha"},
     .traits = kAccumulates,
     .infer = infer_addmm,
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& at) {
           if (out[0].dtype() == BF16)
             return addmm_bf16(in[0], in[1], in[2], at.f(0), at.f(1), out[0]);
           KILN_DISPATCH_FLOAT(out[0].dtype(), "addmm", [&] {
             addmm_impl<scalar_t>(in[0], in[1], in[2], at.f(0), at.f(1), out[0]);
           });
         },
     // out = beta I + alpha A B: dI = beta G (summed over the dims I was broadcast along),
     // dA = alpha G B^T, dB = alpha A^T G. Written with Kiln ops, so it differentiates again.
     .grad =
         [](const GradCtx& c) {
           const double beta = c.attrs.f(0), alpha = c.attrs.f(1);
           auto scaled = [](const Tensor& t, double s) { return s == 1 ? t : mul(t, s); };
           Tensor di, da, db;
           // With dynamic dims the reduction is decided by the run-time shapes.
           if (c.need(0))
             di = c.in(0).shape().is_static() && c.g().shape().is_static()
                      ? sum_to(scaled(c.g(), beta), c.in(0).shape())
                      : sum_to_like(scaled(c.g(), beta), c.in(0));
           if (c.need(1)) da = scaled(matmul(c.g(), transpose(c.in(2), 0, 1)), alpha);
           if (c.need(2)) db = scaled(matmul(transpose(c.in(1), 0, 1), c.g()), alpha);
           return TensorList{di, da, db};
         },
     .autocast = AutocastPolicy::kLower,
     .doc = "beta * input + alpha * (a @ b) for 2-D a and b, input broadcast to the product "
            "(torch.addmm), the product accumulated onto the input by the GEMM",
     .native_dtypes = dtype_bit(BF16)});

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  // Integer matmul (torch computes it exactly in the integer type): through float64, exact while
  // every partial sum stays below 2^53; same dtypes only, as torch (matmul never promotes).
  if (a.defined() && b.defined() && is_integral(a.dtype()) && a.dtype() == b.dtype())
    return cast(matmul(cast(a, Float64), cast(b, Float64)), a.dtype());
  check_matmul(a, b);
  // Vectors are promoted to matrices and the added dim removed again (torch.matmul), so the
  // op only ever sees rank >= 2; the views carry the gradient back to the 1-D shapes.
  if (a.dim() == 1 && b.dim() == 1)
    return reshape(call1(kMatmul, {unsqueeze(a, 0), unsqueeze(b, 1)}), Shape{});
  if (a.dim() == 1) return squeeze(call1(kMatmul, {unsqueeze(a, 0), b}), -2);
  if (b.dim() == 1) return squeeze(call1(kMatmul, {a, unsqueeze(b, 1)}), -1);
  return call1(kMatmul, {a, b});
}

Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta, double alpha) {
  // Integers (one dtype, as torch): through float64 as matmul, exact below 2^53.
  // (torch takes integer beta and alpha for integer tensors: a fractional one truncates)
  if (input.defined() && a.defined() && b.defined() && is_integral(a.dtype()) &&
      a.dtype() == b.dtype() && input.dtype() == a.dtype())
    return cast(addmm(cast(input, Float64), cast(a, Float64), cast(b, Float64), std::trunc(beta),
                      std::trunc(alpha)),
                a.dtype());
  check_addmm(input, a, b);
  return call1(kAddmm, {input, a, b}, {beta, alpha});
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (!x.defined() || !w.defined()) fail("linear", "input and weight must be defined tensors");
  if (w.dim() != 2)
    fail("linear", "weight must be 2-D [out, in], got shape ", w.shape(), " (input shape ",
         x.shape(), ")");
  if (x.dim() < 1) fail("linear", "input must be at least 1-D, got shape ", x.shape());
  int64_t in_x = x.shape()[x.dim() - 1], in_w = w.shape()[1], out_w = w.shape()[0];
  if (in_x >= 0 && in_w >= 0 && in_x != in_w)
    fail("linear", "input shape ", x.shape(), " has ", in_x, " features but weight shape ",
         w.shape(), " expects ", in_w);
  if (b.defined() && (b.dim() != 1 || (b.shape()[0] >= 0 && out_w >= 0 && b.shape()[0] != out_w)))
    fail("linear", "bias must be 1-D [", out_w, "], got shape ", b.shape(), " (weight shape ",
         w.shape(), ")");
  // w^T is a transposed view, which matmul passes to the GEMM as a flag; a [batch..., in] input
  // becomes one tall GEMM that adds the bias itself instead of a separate add pass over its
  // output (standalone, [1024, 128] x [128, 512]: GEMM + add 1329 us, bias fill + GEMM 1162 us;
  // the add pass alone was ~170 us in W7's step; the epilogue saves more, see matmul_impl).
  if (is_integral(x.dtype()) && x.dtype() == w.dtype()) {  // integers: matmul's float64 path
    const Tensor y = matmul(x, transpose(w, 0, 1));
    return b.defined() ? add(y, b) : y;
  }
  if (b.defined() && x.dim() >= 2) return call1(kMatmul, {x, transpose(w, 0, 1), b});
  Tensor y = matmul(x, transpose(w, 0, 1));
  // (under autocast the bias is cast as matmul's inputs were, as torch's linear casts it)
  return b.defined() ? add(y, autocast_arg(AutocastPolicy::kLower, b)) : y;
}

}  // namespace kiln
