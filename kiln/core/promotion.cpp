// PyTorch's result_type, from the pairwise promote() of dtype.cpp and three priorities.
#include "kiln/core/promotion.h"

#include "kiln/core/tensor.h"

namespace kiln {
namespace {

std::optional<DType> join(std::optional<DType> a, DType b) { return a ? promote(*a, b) : b; }

// torch's combine_categories: the higher-priority result wins unless the lower one is of a
// higher category (a float 0-d tensor or scalar next to integer tensors), then they promote.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote(*higher, *lower);
  return higher;
}

}  // namespace

ResultType& ResultType::add(DType t, int64_t rank) {
  if (rank > 0)
    dim_ = join(dim_, t);
  else
    zero_ = join(zero_, t);
  return *this;
}
ResultType& ResultType::add(const Tensor& t) { return add(t.dtype(), t.dim()); }
ResultType& ResultType::add(const Scalar& s) {
  wrapped_ = join(wrapped_, scalar_dtype(s.kind()));
  return *this;
}
DType ResultType::dtype(DType fallback) const {
  return combine(dim_, combine(zero_, wrapped_)).value_or(fallback);
}

DType result_type(const Tensor& a, const Tensor& b) { return ResultType().add(a).add(b).dtype(); }
DType result_type(const Tensor& a, const Scalar& b) { return ResultType().add(a).add(b).dtype(); }

}  // namespace kiln
