// Shape and strides: small inline vectors, broadcasting rules, contiguity, dim wrapping.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/core/small_vec.h"

namespace kiln {

/// A dimension size; Dim::any() (-1) marks a size unknown until run time (graph placeholders).
struct Dim {
  static constexpr int64_t any() { return -1; }
};

/// Sizes of each dimension, outermost first. Inline up to 6 dims (no heap).
class Shape : public SmallVec<int64_t, 6> {
 public:
  using SmallVec::SmallVec;
  Shape() = default;
  Shape(std::initializer_list<int64_t> il) : SmallVec(il) {}
  Shape(const std::vector<int64_t>& v) : SmallVec(v.begin(), v.end()) {}
  int64_t rank() const { return static_cast<int64_t>(size()); }
  /// Product of the sizes (1 for a scalar); -1 if any dim is dynamic. Raises kiln::Error past
  /// 2^63 - 1 elements.
  int64_t numel() const;
  bool is_static() const;
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  std::string str() const;
  bool operator==(const Shape& o) const {
    if (size() != o.size()) return false;
    const int64_t* a = data();
    const int64_t* b = o.data();
    for (size_t i = 0; i < size(); ++i)  // early exit keeps GCC from making this a memcmp call
      if (a[i] != b[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  [[noreturn]] void too_large() const;
};
using Strides = SmallVec<int64_t, 6>;

std::ostream& operator<<(std::ostream& os, const Shape& s);
/// "[-1, 3]": integers as written, for messages about requested sizes (a Shape prints a
/// negative dim as "?", a dynamic dim).
std::string ints_str(const std::vector<int64_t>& v);

/// Row-major strides (in elements) for a shape.
Strides contiguous_strides(const Shape& s);
/// NumPy broadcasting of two shapes; throws kiln::Error naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Whether `from` broadcasts to `to`.
bool broadcastable_to(const Shape& from, const Shape& to);
/// Normalizes a possibly-negative dim for a tensor of rank `rank`; throws naming `op`.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);
/// Same, naming the tensor's shape in the error; `extra` widens the range (unsqueeze, stack
/// insert a dim: rank + 1 positions).
int64_t wrap_dim(int64_t dim, const Shape& shape, const char* op, int64_t extra = 0);

}  // namespace kiln
