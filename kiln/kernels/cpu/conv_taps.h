// The kernel taps of a convolution that ever touch its input, per spatial dim: a dilated kernel
// on a map smaller than its reach (ASPP's dilation 36 with padding 36 on a 33x33 map) has edge
// taps that read padding at every output position, so they add zeros and can be dropped, giving
// the smaller equivalent convolution (there a 1x1), which oneDNN's jit kernels take where the
// full one goes to its reference loops. Used by the conv ops (kiln/ops/conv.cpp) on every call
// and by the block_layout pass on constant weights, once.
#pragma once
#include <cstdint>

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

}  // namespace kiln::cpu
