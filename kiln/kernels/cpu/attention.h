// Fused scaled-dot-product attention loops (forward and backward), one (batch, head) at a time:
// the per-head products are small (64 x 64 x 32 in W7), so they run as register-blocked loops
// while the head's Q, K, V, scores and gradients stay in L1/L2, instead of four batched GEMMs,
// a mask, a scale and a softmax over whole [B, H, T, T] tensors. No graph knowledge.
#pragma once
#include <cstdint>

namespace kiln::cpu {

/// A batch of strided [rows, cols] matrices: matrix b starts at data + off[b]; element (r, c) is
/// at r * rs + c * cs from there.
template <typename T>
struct AttnMat {
  T* data = nullptr;
  const int64_t* off = nullptr;
  int64_t rs = 0, cs = 1;
};

/// bh matrices per operand; q [tq, d], k [tk, d], v [tk, dv]; causal masks key j > query i
/// (top-left aligned, as torch's is_causal); scores are scale * q k^T.
struct AttnDims {
  int64_t bh = 0, tq = 0, tk = 0, d = 0, dv = 0;
  bool causal = false;
  double scale = 1.0;
};

/// o = softmax(scale q k^T [masked]) v; p [bh, tq, tk] (contiguous) receives the probabilities
/// (exact zeros where masked). o must have cs == 1.
template <typename T>
void attention_forward(const AttnDims& s, AttnMat<const T> q, AttnMat<const T> k,
                       AttnMat<const T> v, AttnMat<T> o, T* p);

/// The gradients dq, dk, dv (overwritten; cs == 1) from g = dL/do, the inputs and the saved
/// probabilities p of attention_forward.
template <typename T>
void attention_backward(const AttnDims& s, AttnMat<const T> g, AttnMat<const T> q,
                        AttnMat<const T> k, AttnMat<const T> v, const T* p, AttnMat<T> dq,
                        AttnMat<T> dk, AttnMat<T> dv);

extern template void attention_forward<float>(const AttnDims&, AttnMat<const float>,
                                              AttnMat<const float>, AttnMat<const float>,
                                              AttnMat<float>, float*);
extern template void attention_forward<double>(const AttnDims&, AttnMat<const double>,
                                               AttnMat<const double>, AttnMat<const double>,
                                               AttnMat<double>, double*);
extern template void attention_backward<float>(const AttnDims&, AttnMat<const float>,
                                               AttnMat<const float>, AttnMat<const float>,
                                               AttnMat<const float>, const float*, AttnMat<float>,
                                               AttnMat<float>, AttnMat<float>);
extern template void attention_backward<double>(const AttnDims&, AttnMat<const double>,
                                                AttnMat<const double>, AttnMat<const double>,
                                                AttnMat<const double>, const double*,
                                                AttnMat<double>, AttnMat<double>, AttnMat<double>);

}  // namespace kiln::cpu
