// The kernel taps of a convolution that ever touch its input, per spatial dim: a dilated kernel
// on a map smaller than its reach (ASPP's dilation 36 with padding 36 on a 33x33 map) has edge
// taps that read padding at every output position, so they add zeros and can be dropped, giving
// the smaller equivalent convolution (there a 1x1), which oneDNN's jit kernels take where the
// full one goes to its reference loops. Used by the conv ops (kiln/ops/conv.cpp) on every call
// and by the block_layout pass on constant weights, once.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::cpu {

struct TapRange {
  int64_t lo = 0, n = 0;  ///< first kept tap, number kept
};

/// The kept taps of one spatial dim (input size `in`, kernel k, left padding `pad`, stride s,
/// dilation d, output size `out`): leading taps whose every position is left of the input and
/// trailing ones whose every position is right of it are dropped, while the left padding and
/// the implied right one ((out - 1) s + (k - 1) d + 1 - in - pad) stay >= 0. At least one tap
/// is kept. Taking lo * d off the left padding gives the same output size and values.
inline TapRange kept_taps(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, int64_t out) {
  int64_t lo = 0, hi = k;
  if (out <= 0 || in <= 0) return {0, k};
  const int64_t last = (out - 1) * s - pad;  // tap 0's position at the last output
  while (hi - lo > 1 && last + lo * d < 0 && (lo + 1) * d <= pad) ++lo;
  const int64_t pr = (out - 1) * s + (k - 1) * d + 1 - in - pad;
  while (hi - lo > 1 && (hi - 1) * d - pad >= in && pr - (k - hi + 1) * d >= 0) --hi;
  return {lo, hi - lo};
}

struct TapSpan {
  int64_t o0, o1, t0, n;  ///< outputs [o0, o1) meet the input with taps [t0, t0 + n)
};

/// The output positions of one dim in runs over which the taps that meet the input are fixed.
inline std::vector<TapSpan> tap_spans(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d,
                                      int64_t out) {
  std::vector<TapSpan> v;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t base = o * s - pad;
    int64_t lo = 0, hi = k;
    while (lo < k && base + lo * d < 0) ++lo;
    while (hi > lo && base + (hi - 1) * d >= in) --hi;
    const int64_t n = hi - lo, t0 = n ? lo : 0;
    if (!v.empty() && v.back().t0 == t0 && v.back().n == n && v.back().o1 == o)
      ++v.back().o1;
    else
      v.push_back({o, o + 1, t0, n});
  }
  return v;
}

/// The spans of the width dim when a convolution can run as one unpadded convolution per span
/// (2 to 5 spans, each meeting the input, padding >= 4, the whole kernel >= 1.25x the taps that
/// meet the input), else none. oneDNN's direct kernels take a width
/// padding only up to their unroll over output columns (about 28); past it (dilation 12 and 24
/// on a 33x33 map) it runs im2col + GEMM over the whole kernel, padding included (3.8x the
/// useful work at dilation 24), where the spans run on its direct kernels. KILN_CONV_SPANS=0
/// turns this off (for comparison).
inline std::vector<TapSpan> column_spans(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d,
                                         int64_t out) {
  static const bool on = [] {
    const char* e = std::getenv("KILN_CONV_SPANS");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  if (!on || pad < 4 || k == 1 || out <= 0) return {};
  std::vector<TapSpan> v = tap_spans(in, k, pad, s, d, out);
  if (v.size() < 2 || v.size() > 5) return {};
  int64_t useful = 0;
  for (const TapSpan& t : v) {
    if (t.n == 0) return {};
    useful += (t.o1 - t.o0) * t.n;
  }
  // Only where the padding is a real share of the work (ASPP's dilation 12 on 33 columns: 1.32x;
  // a 3x3 with padding 1 on 28 columns: 1.02x): each span is a call with copies of its window.
  if (4 * out * k < 5 * useful) return {};
  return v;
}

/// The share of (output, tap) pairs of one dim whose tap reads the input (not its padding).
inline double tap_coverage(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, int64_t out) {
  if (out <= 0 || k <= 0) return 1.0;
  int64_t useful = 0;
  for (const TapSpan& t : tap_spans(in, k, pad, s, d, out)) useful += (t.o1 - t.o0) * t.n;
  return static_cast<double>(useful) / static_cast<double>(out * k);
}

/// Whether a 2-D convolution's taps mostly read padding (under 35% of output-tap pairs read the
/// input: dilation 12 with padding 12 on a 14x14 map, 18%): then one GEMM per tap over the
/// outputs it reaches (conv_tap_gemm.h) does only the useful work at GEMM speed and, for a
/// weight that changes between calls, packs it in 92 us where oneDNN's direct kernel needs it
/// reordered (159 us of an eager call's ~400 at 256 -> 256 channels). A 3x3 with padding 1 on
/// a 7x7 map covers 82%, on 2x2 44%.
inline bool sparse_taps(int64_t H, int64_t W, int64_t kH, int64_t kW, int64_t pH, int64_t pW,
                        int64_t sH, int64_t sW, int64_t dH, int64_t dW, int64_t OH, int64_t OW) {
  return tap_coverage(H, kH, pH, sH, dH, OH) * tap_coverage(W, kW, pW, sW, dW, OW) < 0.35;
}

}  // namespace kiln::cpu
