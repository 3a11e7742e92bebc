// ONNX's uint16, uint32 and uint64 at the import boundary. Kiln (as torch 1.13) has no such
// dtypes: uint16 values are held as int32 and uint32 as int64 (every value exactly), uint64 as
// int64 with the same bits (values >= 2^63 refused where they are read). Each value of those
// types carries a tag, and an op on tagged inputs is converted only where Kiln's result is the
// exact unsigned one: order-preserving ops as they are, wrapping arithmetic masked back to 16 or
// 32 bits (uint64 wraps as int64 does, bit for bit). Any other op on them is refused by name.
#include <cstring>
#include <set>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

using P = ::onnx::TensorProto;

const char* unsigned_name(Unsigned u) {
  switch (u) {
    case Unsigned::U16:
      return "uint16";
    case Unsigned::U32:
      return "uint32";
    case Unsigned::U64:
    case Unsigned::U64Wrapped:
      return "uint64";
    case Unsigned::None:
      break;
  }
  return "a signed type";
}

// Ops whose result, on values held widened, is the unsigned op's result: the data is only moved,
// selected or compared, or the arithmetic stays in range (max, min, mod, div, right shift on
// values below 2^63). Their outputs keep the inputs' tag.
const std::set<std::string>& moving_ops() {
  static const std::set<std::string> s = {
      "Identity", "Reshape", "Squeeze", "Unsqueeze",      "Flatten",     "Transpose",
      "Concat",   "Slice",   "Gather",  "GatherElements", "GatherND",    "Expand",
      "Tile",     "Split",   "Where",   "ReduceMax",      "ReduceMin",   "Max",
      "Min",      "Mod",     "Div",     "DepthToSpace",   "SpaceToDepth"};
  return s;
}
// Of those, the ones that only move bits (no order or arithmetic): fine on uint64 values that
// may have wrapped past 2^63.
const std::set<std::string>& bit_moving_ops() {
  static const std::set<std::string> s = {
      "Identity",     "Reshape",      "Squeeze", "Unsqueeze", "Flatten",        "Transpose",
      "Concat",       "Slice",        "Gather",  "Expand",    "GatherElements", "GatherND",
      "DepthToSpace", "SpaceToDepth", "Tile",    "Split",     "Where"};
  return s;
}
// Ops whose result is not of the unsigned type and is exact on the widened values.
const std::set<std::string>& untagged_result_ops() {
  static const std::set<std::string> s = {"Shape",          "Size",        "Equal", "Less",
                                          "Greater",        "LessOrEqual", "Cast",  "ArgMax",
                                          "GreaterOrEqual", "ArgMin"};
  return s;
}
// Arithmetic that wraps modulo 2^bits in the unsigned type.
const std::set<std::string>& wrapping_ops() {
  static const std::set<std::string> s = {"Add", "Sub", "Mul", "Sum"};
  return s;
}

Unsigned base(Unsigned u) { return u == Unsigned::U64Wrapped ? Unsigned::U64 : u; }

Tensor mask_to(const Tensor& t, Unsigned u) {
  if (u == Unsigned::U16) return bitwise_and(t, full({}, 0xFFFF, t.dtype()));
  if (u == Unsigned::U32) return bitwise_and(t, full({}, 0xFFFFFFFFLL, t.dtype()));
  return t;  // uint64 as int64 wraps bit for bit
}

}  // namespace

Unsigned unsigned_of_onnx(int32_t elem_type) {
  switch (elem_type) {
    case P::UINT16:
      return Unsigned::U16;
    case P::UINT32:
      return Unsigned::U32;
    case P::UINT64:
      return Unsigned::U64;
    default:
      return Unsigned::None;
  }
}

DType boundary_dtype(int32_t elem_type, const std::string& what) {
  switch (unsigned_of_onnx(elem_type)) {
    case Unsigned::U16:
      return Int32;
    case Unsigned::U32:
    case Unsigned::U64:
    case Unsigned::U64Wrapped:
      return Int64;
    case Unsigned::None:
      break;
  }
  return dtype_from_onnx(elem_type, what);
}

Tensor unsigned_from_proto(const ::onnx::TensorProto& p, const Shape& shape, int64_t n,
                           const std::string& what) {
  const Unsigned u = unsigned_of_onnx(p.data_type());
  const size_t esz = u == Unsigned::U16 ? 2 : u == Unsigned::U32 ? 4 : 8;
  const std::string who = str_cat(what, " '", p.name(), "'");
  Tensor t = empty(shape, u == Unsigned::U16 ? Int32 : Int64);
  auto put = [&](int64_t k, uint64_t v) {
    if (u == Unsigned::U64 && v >> 63)
      fail(kOp, who, ": uint64 value ", v,
           " is 2^63 or more; Kiln holds uint64 as int64 and reads only values below 2^63");
    if (u == Unsigned::U16)
      t.data_ptr<int32_t>()[k] = static_cast<int32_t>(v & 0xFFFF);
    else
      t.data_ptr<int64_t>()[k] = static_cast<int64_t>(u == Unsigned::U32 ? v & 0xFFFFFFFF : v);
  };
  if (p.has_raw_data()) {
    const std::string& raw = p.raw_data();
    if (static_cast<uint64_t>(n) > raw.size() / esz || raw.size() != static_cast<size_t>(n) * esz)
      fail(kOp, who, ": raw data holds ", raw.size(), " bytes, ", shape, " of ", unsigned_name(u),
           " needs ", static_cast<double>(n) * esz);
    for (int64_t k = 0; k < n; ++k) {
      uint64_t v = 0;  // little-endian, as ONNX stores raw data
      std::memcpy(&v, raw.data() + k * esz, esz);
      put(k, v);
    }
    return t;
  }
  // uint16 lives in int32_data, uint32 and uint64 in uint64_data.
  const int64_t have = u == Unsigned::U16 ? p.int32_data_size() : p.uint64_data_size();
  if (have != n) fail(kOp, who, ": holds ", have, " values, its shape ", shape, " needs ", n);
  for (int64_t k = 0; k < n; ++k)
    put(k, u == Unsigned::U16 ? static_cast<uint32_t>(p.int32_data(static_cast<int>(k)))
                              : p.uint64_data(static_cast<int>(k)));
  return t;
}

Unsigned produced_unsigned(const ::onnx::NodeProto& node) {
  if (node.op_type() != "Constant" && node.op_type() != "ConstantOfShape") return Unsigned::None;
  for (const auto& a : node.attribute())
    if ((a.name() == "value" || a.name() == "sparse_value") && a.has_t())
      return unsigned_of_onnx(a.t().data_type());
  return Unsigned::None;
}

std::vector<Tensor> convert_unsigned(NodeIn& n, const Converter& conv,
                                     const std::vector<Unsigned>& tags, Unsigned* out_tag) {
  const std::string& op = n.type();
  Unsigned u = Unsigned::None;
  size_t first = 0;
  for (size_t k = 0; k < tags.size(); ++k)
    if (tags[k] != Unsigned::None && u == Unsigned::None) u = tags[k], first = k;
  bool wrapped = false;
  for (size_t k = 0; k < tags.size(); ++k) {
    if (tags[k] == Unsigned::None) continue;
    wrapped |= tags[k] == Unsigned::U64Wrapped;
    if (base(tags[k]) != base(u))
      n.fail("inputs ", first, " and ", k, " are ", unsigned_name(u), " and ",
             unsigned_name(tags[k]), ": ONNX requires one type");
  }
  const auto why_not = [&](const std::string& why) {
    return str_cat("input ", first, " is ", unsigned_name(u), ", which Kiln holds as ",
                   dtype_name(n.in[first].dtype()), ": ", why,
                   " (Kiln reads ONNX uint16/32/64 only where its results are exact; see "
                   "docs/onnx.md)");
  };
  *out_tag = Unsigned::None;
  if (op == "BitShift") {
    const bool left = n.s("direction", "") == "LEFT";
    if (!left && wrapped)
      n.fail(why_not("a right shift of a uint64 value that may be 2^63 or more"));
    std::vector<Tensor> r = conv(n);
    if (left) {
      r[0] = mask_to(r[0], u);
      *out_tag = u == Unsigned::U64 || u == Unsigned::U64Wrapped ? Unsigned::U64Wrapped : u;
    } else {
      *out_tag = u;
    }
    return r;
  }
  if (wrapping_ops().count(op)) {
    std::vector<Tensor> r = conv(n);
    r[0] = mask_to(r[0], u);
    *out_tag = u == Unsigned::U64 || u == Unsigned::U64Wrapped ? Unsigned::U64Wrapped : u;
    return r;
  }
  if (moving_ops().count(op)) {
    if (wrapped && !bit_moving_ops().count(op))
      n.fail(why_not(
          "its order or value may be 2^63 or more after wrapping arithmetic, where int64 differs"));
    // Where's condition and Gather's indices are not the data: the tag follows the data inputs.
    *out_tag = u;
    return conv(n);
  }
  if (untagged_result_ops().count(op) || (op == "Pow" && first == 1)) {
    if (wrapped && op != "Shape" && op != "Size")
      n.fail(why_not("it may be 2^63 or more after wrapping arithmetic, where int64 differs"));
    if (op == "Pow" && tags[0] != Unsigned::None)
      n.fail(why_not("Pow of an unsigned base is not exact"));
    return conv(n);
  }
  n.fail(why_not(op + " is not among the ops whose result Kiln keeps exact on them"));
}

}  // namespace kiln::onnx::detail
