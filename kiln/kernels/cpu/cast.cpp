// Strided conversion between any two dtypes, one loop per pair of element types.
#include "kiln/kernels/cpu/cast.h"

#include "kiln/core/convert.h"
#include "kiln/kernels/cpu/elementwise.h"

namespace kiln::cpu {

void cast_copy(const Tensor& src, Tensor& dst) {
  KILN_DISPATCH_ALL_TYPES(src.dtype(), "cast", [&] {
    using S = scalar_t;
    KILN_DISPATCH_ALL_TYPES(dst.dtype(), "cast", [&] {
      using D = scalar_t;
      unary_loop<S, D>(src, dst, [](S v) { return convert_element<D>(v); });
    });
  });
}

}  // namespace kiln::cpu
