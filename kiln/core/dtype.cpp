// DType names and promotion.
#include "kiln/core/dtype.h"

namespace kiln {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Int16:
      return "int16";
  }
  return "?";
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    // float16 with bfloat16: neither holds the other, float32 holds both.
    if (dtype_size(a) == 2 && dtype_size(b) == 2) return DType::Float32;
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  // Integers: the wider wins; uint8 with int8 (the only unsigned one) needs int16.
  if (dtype_size(a) == dtype_size(b)) return DType::Int16;
  return dtype_size(a) > dtype_size(b) ? a : b;
}

}  // namespace kiln
