// Shape arithmetic shared by every op's inference.
#include "kiln/core/shape.h"

#include <sstream>

#include "kiln/core/error.h"

namespace kiln {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : *this) {
    if (d < 0) return -1;
    // A wrapped count could match a small tensor's (reshape to a huge shape over 64 elements).
    if (__builtin_mul_overflow(n, d, &n)) [[unlikely]]
      too_large();
  }
  return n;
}

std::string ints_str(const std::vector<int64_t>& v) {
  std::string r = "[";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "]";
}

void Shape::too_large() const { fail("shape", "shape ", *this, " has more than 2^63 elements"); }

bool Shape::is_static() const {
  for (int64_t d : *this)
    if (d < 0) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) os << ", ";
    if (s[i] < 0)
      os << "?";
    else
      os << s[i];
  }
  return os << "]";
}

Strides contiguous_strides(const Shape& s) {
  const size_t n = s.size();
  Strides st(n, 0);
  int64_t* o = st.data();
  const int64_t* d = s.data();
  int64_t acc = 1;
  for (size_t i = n; i-- > 0;) {
    o[i] = acc;
    acc *= d[i] > 1 ? d[i] : 1;
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db)
      out[i] = da;
    else if (da == 1)
      out[i] = db;
    else if (db == 1)
      out[i] = da;
    else if (da < 0 || db < 0)
      out[i] = da < 0 ? db : da;  // a dynamic dim must match the static one at run time
    else
      fail(op, "shapes ", a, " and ", b, " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
  }
  return out;
}

bool broadcastable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[i + off]) return false;
  return true;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    fail(op, "dim ", dim, " is out of range for a tensor of rank ", rank, " (expected in [", -r,
         ", ", r - 1, "])");
  return dim < 0 ? dim + r : dim;
}

int64_t wrap_dim(int64_t dim, const Shape& shape, const char* op, int64_t extra) {
  int64_t r = std::max<int64_t>(shape.rank() + extra, 1);
  if (dim < -r || dim >= r)
    fail(op, "dim ", dim, " is out of range for a tensor of shape ", shape, " (expected in [", -r,
         ", ", r - 1, "])");
  return dim < 0 ? dim + r : dim;
}

}  // namespace kiln
