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
  }
  return "?";
}

DType promote(DType a, DType b) {
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool:
        return 0;
      case DType::Int32:
        return 1;
      case DType::Int64:
        return 2;
      case DType::Float32:
        return 3;
      case DType::Float64:
        return 4;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace kiln
