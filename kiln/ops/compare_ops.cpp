// Comparisons (lt, le, gt, ge, eq, ne: bool results), where and masked_fill. Operands promote
// as arithmetic does (kiln/core/promotion.h): int32 < 2.5 compares as float, a bool tensor next
// to an integer as int64.
#include <bit>

#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

using op_util::one;
using op_util::scalar_like;

struct LtF {
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LeF {
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GtF {
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GeF {
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct EqF {
  template <class T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct NeF {
  template <class T>
  bool operator()(T a, T b) const {
    return a != b;
  }
};

constexpr char kLtN[] = "lt", kLeN[] = "le", kGtN[] = "gt", kGeN[] = "ge", kEqN[] = "eq",
               kNeN[] = "ne";

const OpDef& kLt = def_op({.name = kLtN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kLtN>,
                           .kernel = k_compare<LtF>,
                           .expr = "($0 < $1)"});
const OpDef& kLe = def_op({.name = kLeN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kLeN>,
                           .kernel = k_compare<LeF>,
                           .expr = "($0 <= $1)"});
const OpDef& kGt = def_op({.name = kGtN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kGtN>,
                           .kernel = k_compare<GtF>,
                           .expr = "($0 > $1)"});
const OpDef& kGe = def_op({.name = kGeN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kGeN>,
                           .kernel = k_compare<GeF>,
                           .expr = "($0 >= $1)"});
const OpDef& kEq = def_op({.name = kEqN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kEqN>,
                           .kernel = k_compare<EqF>,
                           .expr = "($0 == $1)"});
const OpDef& kNe = def_op({.name = kNeN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kNeN>,
                           .kernel = k_compare<NeF>,
                           .expr = "($0 != $1)"});

const OpDef& kWhere = def_op(
    {.name = "where",
     .num_inputs = 3,
     .traits = kEw,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           if (in[0].dtype() != Bool)
             fail("where", "condition must be bool, got ", in[0].dtype(), " ", in[0].shape());
           op_util::require_same_dtype("where", in[1], in[2]);
           Shape s = broadcast_shapes(in[1].shape(), in[2].shape(), "where");
           return one(in[1].dtype(), broadcast_shapes(in[0].shape(), s, "where"));
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           KILN_DISPATCH_ALL_TYPES(in[1].dtype(), "where", [&] {
             // A select on the bits: "c ? a : b" on a bool loaded from memory stayed a branch
             // per element (unvectorized; ~3.6 ns per element on a random mask, which relu's
             // gradient is).
             using U = std::conditional_t<
                 sizeof(scalar_t) == 8, uint64_t,
                 std::conditional_t<sizeof(scalar_t) == 4, uint32_t,
                                    std::conditional_t<sizeof(scalar_t) == 2, uint16_t, uint8_t>>>;
             cpu::ternary_loop<bool, scalar_t, scalar_t, scalar_t>(
                 in[0], in[1], in[2], out[0], [](bool c, scalar_t a, scalar_t b) {
                   const U m = U(0) - static_cast<U>(c);
                   return std::bit_cast<scalar_t>(
                       static_cast<U>((std::bit_cast<U>(a) & m) | (std::bit_cast<U>(b) & ~m)));
                 });
           });
         },
     .grad =
         [](const GradCtx& c) {
           Tensor z = scalar_like(c.g(), 0);
           return TensorList{Tensor(), c.need(1) ? where(c.in(0), c.g(), z) : Tensor(),
                             c.need(2) ? where(c.in(0), z, c.g()) : Tensor()};
         },
     .expr = "($0 ? $1 : $2)",
     .doc = "cond ? a : b",
     .native_dtypes = kAllDTypes,
     .grad_reads_inputs = 0b001});

Tensor cmp(const OpDef& op, const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined())
    fail(op.name.c_str(), "input ", a.defined() ? 1 : 0, " is an undefined tensor");
  auto [x, y] = promoted(a, b);
  return call1(op, {x, y});
}
// Comparisons with a host scalar promote like arithmetic: an integer tensor next to a
// fractional scalar compares as float (torch.tensor([2]) < 2.5 is True).
Tensor cmp(const OpDef& op, const Tensor& a, const Scalar& b) {
  if (!a.defined()) fail(op.name.c_str(), "undefined operand");
  auto [x, y] = with_scalar(a, b);
  return call1(op, {x, y});
}

}  // namespace

Tensor lt(const Tensor& a, const Tensor& b) { return cmp(kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return cmp(kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return cmp(kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return cmp(kGe, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return cmp(kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return cmp(kNe, a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return cmp(kLt, a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return cmp(kLe, a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return cmp(kGt, a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return cmp(kGe, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return cmp(kEq, a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return cmp(kNe, a, b); }
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b);
  return call1(kWhere, {c, x, y});
}
Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value) {
  if (!a.defined() || !mask.defined()) fail("masked_fill", "undefined input");
  if (mask.dtype() != Bool)
    fail("masked_fill", "mask must be bool, got ", mask.dtype(), mask.shape(), " (input ",
         a.dtype(), a.shape(), ")");
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  bool fits = s.rank() == a.dim();
  for (int64_t d = 0; fits && d < s.rank(); ++d)
    fits = s[d] < 0 || a.shape()[d] < 0 || s[d] == a.shape()[d];  // (dynamic dims: at run time)
  if (!fits)
    fail("masked_fill", "mask ", mask.shape(), " must broadcast to the input's shape ", a.shape());
  // The value takes the input's dtype (torch: masked_fill never changes the dtype).
  return where(mask, scalar_tensor(value.to_double(), a.dtype()), a);
}
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }

}  // namespace kiln
