// Taps that only ever read padding (kernels/cpu/conv_taps.h): the conv ops drop them (slice
// the weight, take their span off the padding) before any kernel runs. The output size stays
// that of the full convolution: the kernels take it from the output tensor, and a right padding
// that differs from the left is implied by it.
#include <algorithm>
#include <cstring>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/conv_common.h"

using namespace kiln::detail;

namespace kiln::conv_detail {

using cpu::kept_taps;
using cpu::TapRange;

std::optional<TapCrop> find_crop(const ConvP& p, int64_t H, int64_t W, int64_t kH, int64_t kW,
                                 int64_t OH, int64_t OW) {
  TapCrop c{kept_taps(H, kH, p.pH, p.sH, p.dH, OH), kept_taps(W, kW, p.pW, p.sW, p.dW, OW)};
  if (c.h.n == kH && c.w.n == kW) return std::nullopt;
  return c;
}

ConvP cropped_params(ConvP p, const TapCrop& c) {
  p.pH -= c.h.lo * p.dH;
  p.pW -= c.w.lo * p.dW;
  return p;
}

// Copies the kept taps of a weight whose kernel dims are `kdim` and `kdim + 1` (OIHW, or the
// blocked [O/b, C/b, kH, kW, b, b]): any dtype, as words of its size. back: the other way, the
// cropped weight `from` into the zeroed full-size `to` (a weight gradient: the dropped taps get
// 0). Rows are a tap or a few long in OIHW, so the loops copy elements, not memcpy calls.
template <typename U>
void copy_taps_as(const U* src, U* dst, int64_t A, int64_t kH, int64_t kW, int64_t B,
                  const TapCrop& c, bool back) {
  const int64_t row = c.w.n * B;
  // Split across the threads: an eager call crops its weight every time, and the full weight
  // is read whichever taps are kept (ASPP's 256 -> 256 3x3 cropped to 1x1: 2.4 MB, 127 us on
  // one thread).
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, kH * kW * B));
  if (row == 1 && c.h.n == 1) {  // one tap per (o, c), as a 1x1 crop: a strided gather
    const int64_t step = kH * kW, at = c.h.lo * kW + c.w.lo;
    parallel_for(A, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t a = lo; a < hi; ++a)
        (back ? dst[a * step + at] : dst[a]) = src[back ? a : a * step + at];
    });
    return;
  }
  parallel_for(A, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t a = lo; a < hi; ++a)
      for (int64_t i = 0; i < c.h.n; ++i) {
        const int64_t full_at = ((a * kH + c.h.lo + i) * kW + c.w.lo) * B;
        const int64_t crop_at = (a * c.h.n + i) * row;
        U* d = dst + (back ? full_at : crop_at);
        const U* f = src + (back ? crop_at : full_at);
        for (int64_t j = 0; j < row; ++j) d[j] = f[j];
      }
  });
}

void copy_taps(const Tensor& from, Tensor& to, int64_t kdim, const TapCrop& c, bool back) {
  const Tensor& full = back ? to : from;
  const int64_t kH = full.size(kdim), kW = full.size(kdim + 1);
  int64_t A = 1, B = 1;
  for (int64_t d = 0; d < kdim; ++d) A *= full.size(d);
  for (int64_t d = kdim + 2; d < full.dim(); ++d) B *= full.size(d);
  const size_t e = static_cast<size_t>(full.element_size());
  if (back) std::memset(to.raw_data(), 0, static_cast<size_t>(to.numel()) * e);
  auto run = [&](auto word) {
    using U = decltype(word);
    copy_taps_as(static_cast<const U*>(from.raw_data()), static_cast<U*>(to.raw_data()), A, kH, kW,
                 B, c, back);
  };
  if (e == 8)
    run(uint64_t{});
  else if (e == 4)
    run(uint32_t{});
  else if (e == 2)
    run(uint16_t{});
  else
    run(uint8_t{});
}

Shape cropped_shape(const Shape& s, int64_t kdim, const TapCrop& c) {
  std::vector<int64_t> v = s.vec();
  v[static_cast<size_t>(kdim)] = c.h.n;
  v[static_cast<size_t>(kdim + 1)] = c.w.n;
  return Shape(v);
}

Tensor crop_weight(const Tensor& w, int64_t kdim, const TapCrop& c) {
  Tensor out = empty(cropped_shape(w.shape(), kdim, c), w.dtype());
  copy_taps(w, out, kdim, c, false);
  return out;
}

}  // namespace kiln::conv_detail
