// PyTorch-like printing: tensor([[1.0000, 2.0000], ...], dtype=..., requires_grad=True).
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/core/tensor.h"

namespace kiln {
namespace {

std::string fmt_elem(double v, DType dt, bool all_int, int prec) {
  char buf[64];
  if (dt == Bool) return v != 0 ? "True" : "False";
  if (is_integral(dt)) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else if (all_int) {
    std::snprintf(buf, sizeof buf, "%.0f.", v);
  } else {
    double a = std::fabs(v);
    if (a != 0 && (a >= 1e8 || a < 1e-4))
      std::snprintf(buf, sizeof buf, "%.*e", prec, v);
    else
      std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  }
  return buf;
}

void print_rec(std::ostream& os, const Tensor& t, const std::vector<double>& vals, int64_t dim,
               int64_t& pos, size_t width, bool all_int, int indent) {
  const Shape& s = t.shape();
  int64_t n = s[dim];
  os << "[";
  bool summarize = t.numel() > 1000 && n > 6;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == 3) {
      // skip the middle elements
      int64_t inner = 1;
      for (int64_t d = dim + 1; d < s.rank(); ++d) inner *= s[d];
      pos += (n - 6) * inner;
      i = n - 3;
      os << (dim == s.rank() - 1 ? "..., " : "...,\n" + std::string(indent + 1, ' '));
    }
    if (dim == s.rank() - 1) {
      std::string e = fmt_elem(vals[pos++], t.dtype(), all_int, 4);
      os << std::string(width > e.size() ? width - e.size() : 0, ' ') << e;
      if (i + 1 < n) os << ", ";
    } else {
      print_rec(os, t, vals, dim + 1, pos, width, all_int, indent + 1);
      if (i + 1 < n) {
        os << ",";
        for (int64_t d = dim + 1; d < s.rank(); ++d) os << "\n";
        os << std::string(indent + 1, ' ');
      }
    }
  }
  os << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (!t.is_concrete())
    return os << "tensor(<symbolic>, shape=" << t.shape() << ", dtype=" << t.dtype() << ")";
  std::vector<double> vals = t.to_vector<double>();
  bool all_int = true;
  for (double v : vals)
    if (std::isfinite(v) && v != std::floor(v)) all_int = false;
  size_t width = 0;
  for (double v : vals) width = std::max(width, fmt_elem(v, t.dtype(), all_int, 4).size());
  os << "tensor(";
  if (t.dim() == 0) {
    os << fmt_elem(vals[0], t.dtype(), all_int, 4);
  } else if (t.numel() == 0) {
    os << "[]";
  } else {
    int64_t pos = 0;
    print_rec(os, t, vals, 0, pos, width, all_int, 7);
  }
  if (t.dtype() != Float32 && t.dtype() != Int64 && t.dtype() != Bool) os << ", dtype=" << t.dtype();
  if (t.numel() == 0 && t.dim() > 0) os << ", size=" << t.shape();
  if (t.requires_grad()) os << ", requires_grad=True";
  return os << ")";
}

}  // namespace kiln
