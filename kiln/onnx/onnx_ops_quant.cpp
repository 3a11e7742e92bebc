// ONNX converters for the quantized ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv. The integer products run in float64
// on the zero-point-shifted values, where every sum of uint8/int8 products a real layer makes is
// exact (below 2^53), then round half to even and saturate as ONNX does.
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// A scale or zero point (scalar, or 1-D along `axis` of x) shaped to broadcast over x.
Tensor along(const Tensor& p, const Tensor& x, int64_t axis) {
  if (p.dim() == 0 || (p.dim() == 1 && p.size(0) == 1)) return reshape(p, Shape{});
  axis = wrap_dim(axis, x.dim(), kOp);
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[static_cast<size_t>(axis)] = -1;
  return reshape(p, s);
}

// round half to even, then the integer type's range.
Tensor saturate(const Tensor& v, DType dt) {
  const double lo = dt == UInt8 ? 0 : dt == Int8 ? -128 : -2147483648.0;
  const double hi = dt == UInt8 ? 255 : dt == Int8 ? 127 : 2147483647.0;
  return cast(clamp(round(v), lo, hi), dt);
}

DType quant_type(const NodeIn& n, const Tensor& zp) {
  const DType dt = zp.defined() ? zp.dtype() : UInt8;
  if (dt != UInt8 && dt != Int8) n.fail("quantized type must be uint8 or int8, got ", dt);
  return dt;
}

Tensor shifted(const Tensor& q, const Tensor& zp) {
  Tensor v = cast(q, Float64);
  return zp.defined() ? sub(v, cast(zp, Float64)) : v;
}

KILN_ONNX_OP(QuantizeLinear) {
  const Tensor& x = n.req(0);
  const int64_t axis = n.i("axis", 1);
  const Tensor zp = n.input(2);
  const DType dt = quant_type(n, zp);
  // x / scale in x's type, as the reference divides; the sum with the zero point is exact.
  Tensor v = cast(round(div(x, cast(along(n.req(1), x, axis), x.dtype()))), Float64);
  if (zp.defined()) v = add(v, cast(along(zp, x, axis), Float64));
  return TL{saturate(v, dt)};
}

KILN_ONNX_OP(DequantizeLinear) {
  const Tensor& x = n.req(0);
  const int64_t axis = n.i("axis", 1);
  const Tensor zp = n.input(2).defined() ? along(n.in[2], x, axis) : Tensor();
  const Tensor s = along(n.req(1), x, axis);
  return TL{cast(mul(shifted(x, zp), cast(s, Float64)), s.dtype())};
}

// uint8 over [min(x, 0), max(x, 0)]: scale (max - min) / 255, zero point round(-min / scale);
// in x's own type, as the reference rounds.
KILN_ONNX_OP(DynamicQuantizeLinear) {
  const Tensor& x = n.req(0);
  const Tensor zero = zeros(Shape{}, x.dtype());
  Tensor lo = minimum(min(x), zero), hi = maximum(max(x), zero);
  Tensor scale = div(sub(hi, lo), 255.0);
  Tensor zp = clamp(round(div(neg(lo), scale)), 0, 255);
  Tensor y = saturate(add(round(div(x, scale)), zp), UInt8);
  return TL{y, scale, cast(zp, UInt8)};
}

// MatMulInteger's zero points: a's per row (1-D of M), b's per column (1-D of N).
Tensor int_matmul(const Tensor& a, const Tensor& azp, const Tensor& b, const Tensor& bzp) {
  Tensor za = azp;
  if (za.defined() && za.dim() == 1 && za.size(0) != 1) za = reshape(za, Shape{-1, 1});
  return matmul(shifted(a, za), shifted(b, bzp));
}

KILN_ONNX_OP(MatMulInteger) {
  return TL{cast(int_matmul(n.req(0), n.input(2), n.req(1), n.input(3)), Int32)};
}

KILN_ONNX_OP(QLinearMatMul) {
  Tensor acc = int_matmul(n.req(0), n.req(2), n.req(3), n.req(5));
  Tensor scale =
      div(mul(cast(n.req(1), Float64), cast(n.req(4), Float64)), cast(n.req(6), Float64));
  const Tensor& yzp = n.req(7);
  return TL{saturate(add(mul(acc, scale), cast(yzp, Float64)), quant_type(n, yzp))};
}

// The Conv converter on float64 values (attributes, pads and groups as Conv).
Tensor conv_f64(NodeIn& n, const Tensor& x, const Tensor& w) {
  NodeIn c{n.proto, {x, w}, n.opset, n.ctx};
  return converters().at("Conv")(c)[0];
}

KILN_ONNX_OP(ConvInteger) {
  const Tensor& x = n.req(0);
  Tensor xzp = n.input(2), wzp = n.input(3);
  if (wzp.defined()) wzp = along(wzp, n.req(1), 0);
  return TL{cast(conv_f64(n, shifted(x, xzp), shifted(n.req(1), wzp)), Int32)};
}

KILN_ONNX_OP(QLinearConv) {
  const Tensor &x = n.req(0), &w = n.req(3);
  Tensor acc = conv_f64(n, shifted(x, n.req(2)), shifted(w, along(n.req(5), w, 0)));
  Shape cs(static_cast<size_t>(acc.dim()), 1);
  cs[1] = -1;
  if (n.has_input(8)) acc = add(acc, reshape(cast(n.in[8], Float64), cs));
  // w's scale may be per output channel.
  Tensor ws = cast(n.req(4), Float64);
  if (ws.dim() == 1 && ws.size(0) != 1) ws = reshape(ws, cs);
  Tensor scale = div(mul(cast(n.req(1), Float64), ws), cast(n.req(6), Float64));
  const Tensor& yzp = n.req(7);
  return TL{saturate(add(mul(acc, scale), cast(yzp, Float64)), quant_type(n, yzp))};
}

}  // namespace
}  // namespace kiln::onnx::detail
