// Broadcast strides for the elementwise loops.
#include "kiln/kernels/cpu/elementwise.h"

namespace kiln::cpu {

Strides broadcast_strides(const Tensor& t, const Shape& out_shape) {
  const Shape& s = t.shape();
  Strides r(out_shape.size(), 0);
  size_t off = out_shape.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d)
    r[d + off] = (s[d] == 1 && out_shape[d + off] != 1) ? 0 : t.strides()[d];
  return r;
}

}  // namespace kiln::cpu
