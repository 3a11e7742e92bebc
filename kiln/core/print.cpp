// PyTorch-style printing, following torch/_tensor_str.py (precision 4, threshold 1000,
// edgeitems 3, linewidth 80): one formatter for the whole tensor (int mode, fixed or scientific
// notation, one common width, computed over the elements shown), rows wrapped at 80 columns,
// " ..." for summarized dims, and suffixes (size=, dtype=, requires_grad=) as PyTorch adds them.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/core/tensor.h"

namespace kiln {
namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr size_t kLineWidth = 80;

std::string printf_str(const char* fmt, double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, prec, v);
  return buf;
}

// Element values of a concrete tensor, read once: doubles for floats, int64 for the others
// (exact beyond 2^53).
struct Values {
  DType dtype;
  std::vector<double> f;
  std::vector<int64_t> i;
};

class Formatter {
 public:
  Formatter(const Values& v, const std::vector<int64_t>& shown) : dt_(v.dtype) {
    floating_ = is_floating(dt_);
    if (!floating_) {
      for (int64_t k : shown) width_ = std::max(width_, plain(v, k).size());
      return;
    }
    std::vector<double> nz;  // nonzero finite values
    for (int64_t k : shown) {
      double x = v.f[static_cast<size_t>(k)];
      if (std::isfinite(x) && x != 0) nz.push_back(x);
    }
    if (nz.empty()) return;
    double mn = INFINITY, mx = 0;
    for (double x : nz) {
      mn = std::min(mn, std::fabs(x));
      mx = std::max(mx, std::fabs(x));
      if (x != std::ceil(x)) int_mode_ = false;
    }
    if (int_mode_) {
      sci_ = mx / mn > 1000.0 || mx > 1.0e8;
    } else {
      sci_ = mx / mn > 1000.0 || mx > 1.0e8 || mn < 1.0e-4;
    }
    for (double x : nz) {
      size_t w = sci_        ? printf_str("%.*e", x, kPrecision).size()
                 : int_mode_ ? printf_str("%.*f", x, 0).size() + 1
                             : printf_str("%.*f", x, kPrecision).size();
      width_ = std::max(width_, w);
    }
  }

  size_t width() const { return width_; }

  std::string format(const Values& v, int64_t k) const {
    std::string r;
    if (floating_) {
      double x = v.f[static_cast<size_t>(k)];
      if (sci_ && std::isfinite(x)) {
        r = printf_str("%.*e", x, kPrecision);
      } else if (std::isnan(x)) {
        r = "nan";
      } else if (std::isinf(x)) {
        r = x > 0 ? "inf" : "-inf";
      } else if (int_mode_) {
        r = printf_str("%.*f", x, 0) + ".";
      } else {
        r = printf_str("%.*f", x, kPrecision);
      }
    } else {
      r = plain(v, k);
    }
    return std::string(width_ > r.size() ? width_ - r.size() : 0, ' ') + r;
  }

 private:
  static std::string plain(const Values& v, int64_t k) {
    int64_t x = v.i[static_cast<size_t>(k)];
    if (v.dtype == Bool) return x ? "True" : "False";
    return std::to_string(x);
  }
  DType dt_;
  bool floating_ = false;
  bool int_mode_ = true;
  bool sci_ = false;
  size_t width_ = 1;
};

int64_t inner_numel(const Shape& s, int64_t dim) {
  int64_t n = 1;
  for (int64_t d = dim + 1; d < s.rank(); ++d) n *= s[d];
  return n;
}

// Row-major flat indices of the elements that are printed.
void shown_indices(const Shape& s, int64_t dim, int64_t base, bool summarize,
                   std::vector<int64_t>& out) {
  int64_t n = s[dim], inner = inner_numel(s, dim);
  auto visit = [&](int64_t i) {
    if (dim == s.rank() - 1)
      out.push_back(base + i);
    else
      shown_indices(s, dim + 1, base + i * inner, summarize, out);
  };
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) visit(i);
    for (int64_t i = n - kEdgeItems; i < n; ++i) visit(i);
  } else {
    for (int64_t i = 0; i < n; ++i) visit(i);
  }
}

std::string vector_str(const Values& v, const Formatter& f, int64_t n, int64_t base, size_t indent,
                       bool summarize) {
  size_t element_length = f.width() + 2;
  size_t per_line =
      std::max<size_t>(1, kLineWidth > indent ? (kLineWidth - indent) / element_length : 0);
  std::vector<std::string> data;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) data.push_back(f.format(v, base + i));
    data.push_back(" ...");
    for (int64_t i = n - kEdgeItems; i < n; ++i) data.push_back(f.format(v, base + i));
  } else {
    for (int64_t i = 0; i < n; ++i) data.push_back(f.format(v, base + i));
  }
  std::string line_sep = ",\n";
  line_sep.append(indent + 1, ' ');
  std::string out = "[";
  for (size_t k = 0; k < data.size(); ++k) {
    if (k > 0) out += (k % per_line == 0) ? line_sep : std::string(", ");
    out += data[k];
  }
  return out + "]";
}

std::string tensor_str(const Values& v, const Formatter& f, const Shape& s, int64_t dim,
                       int64_t base, size_t indent, bool summarize) {
  int64_t n = s[dim];
  if (dim == s.rank() - 1) return vector_str(v, f, n, base, indent, summarize);
  int64_t inner = inner_numel(s, dim);
  std::vector<std::string> slices;
  auto visit = [&](int64_t i) {
    slices.push_back(tensor_str(v, f, s, dim + 1, base + i * inner, indent + 1, summarize));
  };
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) visit(i);
    slices.push_back("...");
    for (int64_t i = n - kEdgeItems; i < n; ++i) visit(i);
  } else {
    for (int64_t i = 0; i < n; ++i) visit(i);
  }
  std::string sep = ",";
  sep.append(static_cast<size_t>(s.rank() - dim - 1), '\n');
  sep.append(indent + 1, ' ');
  std::string out = "[";
  for (size_t k = 0; k < slices.size(); ++k) {
    if (k > 0) out += sep;
    out += slices[k];
  }
  return out + "]";
}

std::string shape_tuple(const Shape& s) {
  std::string r = "(";
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (d) r += ", ";
    r += std::to_string(s[d]);
  }
  if (s.rank() == 1) r += ",";
  return r + ")";
}

// Appends suffixes with ", ", moving one to its own line when it would pass the line width.
std::string add_suffixes(std::string s, const std::vector<std::string>& suffixes, size_t indent) {
  size_t nl = s.rfind('\n');
  size_t last_line_len = nl == std::string::npos ? s.size() + 2 : s.size() - nl + 1;
  for (const auto& suf : suffixes) {
    if (last_line_len + suf.size() + 2 > kLineWidth) {
      s += ",\n";
      s.append(indent, ' ');
      s += suf;
      last_line_len = indent + suf.size();
    } else {
      s += ", " + suf;
      last_line_len += suf.size() + 2;
    }
  }
  return s + ")";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (t.is_dead())
    return os << "tensor(<dead: untaken side of a switch>, shape=" << t.shape()
              << ", dtype=" << t.dtype() << ")";
  // A host read like item(): in a graph being built it raises (fetch it with Session::run);
  // under jit it is a graph break, and the value printed is the one this call computes.
  if (!t.is_concrete()) return os << t.host_value_from("print", __builtin_return_address(0));
  const std::string prefix = "tensor(";
  const size_t indent = prefix.size();
  Values v{t.dtype(), {}, {}};
  if (is_floating(t.dtype()))
    v.f = t.to_vector<double>();
  else
    v.i = t.to_vector<int64_t>();
  std::vector<std::string> suffixes;
  std::string body;
  if (t.numel() == 0) {
    body = "[]";
    if (t.dim() != 1) suffixes.push_back("size=" + shape_tuple(t.shape()));
    if (t.dtype() != Float32) suffixes.push_back(str_cat("dtype=", t.dtype()));
  } else {
    bool summarize = t.numel() > kThreshold;
    std::vector<int64_t> shown;
    if (t.dim() == 0)
      shown.push_back(0);
    else
      shown_indices(t.shape(), 0, 0, summarize, shown);
    Formatter f(v, shown);
    if (t.dim() == 0) {
      body = f.format(v, 0);
    } else {
      body = tensor_str(v, f, t.shape(), 0, 0, indent, summarize);
    }
    if (t.dtype() != Float32 && t.dtype() != Int64 && t.dtype() != Bool)
      suffixes.push_back(str_cat("dtype=", t.dtype()));
  }
  if (t.requires_grad()) suffixes.push_back("requires_grad=True");
  return os << add_suffixes(prefix + body, suffixes, indent);
}

}  // namespace kiln
