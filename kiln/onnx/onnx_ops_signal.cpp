// ONNX converters for the signal ops of opset 17: DFT and STFT as products with host-computed
// cosine and sine matrices (the transform length is static), and MelWeightMatrix folded at
// import. The products run in float64 and are cast back.
#include <cmath>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// One integer known at import (a scalar or a 1-element input).
int64_t const_int(const NodeIn& n, size_t i, const char* what) {
  auto v = const_ints(n, i, what);
  if (v.size() != 1) n.fail(what, " must be one value, got ", v.size());
  return v[0];
}

// The DFT along the last dim of re (and im, undefined for a real signal), both float64, zero
// padded or cut to `len`: {real, imaginary} of the first `bins` frequencies. inverse: e^{+i}
// and a 1/len scale.
std::pair<Tensor, Tensor> dft_last(const NodeIn& n, Tensor re, Tensor im, int64_t len, int64_t bins,
                                   bool inverse) {
  const int64_t have = re.size(-1);
  auto fit = [&](const Tensor& t) {
    if (have > len) return slice(t, t.dim() - 1, 0, len);
    if (have < len) return pad(t, {0, len - have}, 0.0);
    return t;
  };
  re = fit(re);
  if (im.defined()) im = fit(im);
  charge_fold(n, 2 * len * bins);
  Tensor c = empty(Shape{len, bins}, Float64), s = empty(Shape{len, bins}, Float64);
  double *cp = c.data_ptr<double>(), *sp = s.data_ptr<double>();
  for (int64_t j = 0; j < len; ++j)
    for (int64_t k = 0; k < bins; ++k) {
      // j k mod len keeps the angle small, so the cosines are exact where they should be.
      const double a = 2 * M_PI * static_cast<double>((j * k) % len) / static_cast<double>(len);
      cp[j * bins + k] = std::cos(a);
      sp[j * bins + k] = std::sin(a);
    }
  const double sign = inverse ? 1 : -1;
  Tensor yr = matmul(re, c), yi = mul(matmul(re, s), sign);
  if (im.defined()) {
    yr = sub(yr, mul(matmul(im, s), sign));
    yi = add(yi, matmul(im, c));
  }
  if (inverse) {
    yr = div(yr, static_cast<double>(len));
    yi = div(yi, static_cast<double>(len));
  }
  return {yr, yi};
}

// x [..., 1 or 2] -> real (and imaginary) parts in float64.
std::pair<Tensor, Tensor> complex_parts(const NodeIn& n, const Tensor& x) {
  if (x.dim() < 2 || (x.size(-1) != 1 && x.size(-1) != 2))
    n.fail("input must end in a dim of 1 (real) or 2 (complex), got ", x.shape());
  const int64_t last = x.dim() - 1;
  Tensor xd = cast(x, Float64);
  Tensor re = squeeze(slice(xd, last, 0, 1), last);
  Tensor im = x.size(-1) == 2 ? squeeze(slice(xd, last, 1, 2), last) : Tensor();
  return {re, im};
}

KILN_ONNX_OP(DFT) {
  const Tensor& x = n.req(0);
  auto [re, im] = complex_parts(n, x);
  const int64_t axis = wrap_dim(n.i("axis", 1), x.dim() - 1, kOp);
  if (x.size(axis) < 0) n.fail("needs a static size along axis ", axis, ", got ", x.shape());
  const int64_t len = n.has_input(1) ? const_int(n, 1, "dft_length") : x.size(axis);
  const bool inverse = n.i("inverse", 0) != 0, onesided = n.i("onesided", 0) != 0;
  if (len < 1 || len > (int64_t(1) << 16)) n.fail("dft_length ", len);
  if (onesided && inverse) n.fail("onesided inverse transforms are not supported");
  const int64_t bins = onesided ? len / 2 + 1 : len;
  const int64_t last = re.dim() - 1;
  re = movedim(re, axis, last);
  if (im.defined()) im = movedim(im, axis, last);
  auto [yr, yi] = dft_last(n, re, im, len, bins, inverse);
  Tensor y = stack({movedim(yr, last, axis), movedim(yi, last, axis)}, -1);
  return TL{cast(y, x.dtype())};
}

KILN_ONNX_OP(STFT) {
  const Tensor& sig = n.req(0);
  if (sig.dim() != 3 || !sig.shape().is_static())
    n.fail("signal must be static [batch, length, 1 or 2], got ", sig.shape());
  auto [re, im] = complex_parts(n, sig);
  const int64_t step = const_int(n, 1, "frame_step");
  const Tensor window = n.input(2);
  int64_t flen = n.has_input(3) ? const_int(n, 3, "frame_length") : -1;
  if (flen < 0) {
    if (!window.defined()) n.fail("needs a window or a frame_length");
    flen = window.size(0);
  }
  const int64_t L = sig.size(1);
  if (step < 1 || flen < 1 || flen > L) n.fail("frame_step ", step, ", frame_length ", flen);
  const int64_t frames = (L - flen) / step + 1;
  charge_fold(n, frames * flen);
  Tensor at = empty(Shape{frames * flen}, Int64);
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < flen; ++j) at.data_ptr<int64_t>()[f * flen + j] = f * step + j;
  auto framed = [&](const Tensor& t) {
    Tensor fr = reshape(index_select(t, 1, at), Shape{sig.size(0), frames, flen});
    return window.defined() ? mul(fr, cast(window, Float64)) : fr;
  };
  re = framed(re);
  if (im.defined()) im = framed(im);
  const bool onesided = n.i("onesided", 1) != 0 && !im.defined();
  auto [yr, yi] = dft_last(n, re, im, flen, onesided ? flen / 2 + 1 : flen, false);
  return TL{cast(stack({yr, yi}, -1), sig.dtype())};
}

// Triangular filters between mel-spaced edges, as the ONNX reference computes them.
KILN_ONNX_OP(MelWeightMatrix) {
  const int64_t mels = const_int(n, 0, "num_mel_bins"), dft = const_int(n, 1, "dft_length"),
                rate = const_int(n, 2, "sample_rate");
  auto scalar = [&](size_t i) {
    const Tensor& t = n.req(i);
    if (!t.is_concrete() || t.numel() != 1)
      n.fail("input ", i, " must be one value known at import");
    return t.to_vector<double>()[0];
  };
  const double lo = scalar(3), hi = scalar(4);
  if (mels < 1 || dft < 1 || rate < 1 || mels > (1 << 14) || dft > (1 << 20))
    n.fail("num_mel_bins ", mels, ", dft_length ", dft, ", sample_rate ", rate);
  const int64_t spec = dft / 2 + 1;
  charge_fold(n, spec * mels);
  auto mel = [](double hz) { return 2595 * std::log10(1 + hz / 700); };
  const double lo_mel = mel(lo), step = (mel(hi) - lo_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t k = 0; k < mels + 2; ++k) {
    const double hz = 700 * (std::pow(10.0, (k * step + lo_mel) / 2595) - 1);
    edge[k] = static_cast<int64_t>(std::floor((dft + 1) * hz / static_cast<double>(rate)));
  }
  Tensor w = zeros(Shape{spec, mels}, Float64);
  double* p = w.data_ptr<double>();
  auto put = [&](int64_t j, int64_t i, double v) {
    if (j >= 0 && j < spec) p[j * mels + i] = v;
  };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t l = edge[i], c = edge[i + 1], h = edge[i + 2];
    if (c == l)
      put(c, i, 1);
    else
      for (int64_t j = l; j <= c; ++j) put(j, i, static_cast<double>(j - l) / (c - l));
    if (h > c)
      for (int64_t j = c; j < h; ++j) put(j, i, static_cast<double>(h - j) / (h - c));
  }
  const DType dt =
      dtype_from_onnx(static_cast<int32_t>(n.i("output_datatype", 1)), "output_datatype");
  return TL{cast(w, dt)};
}

}  // namespace
}  // namespace kiln::onnx::detail
