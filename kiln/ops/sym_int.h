// SymInt: a size that may be symbolic. Eagerly every size is a number; while a JIT traces with a
// dynamic dim (or a graph is built on a Dim::any() placeholder), the size of that dim is a
// symbol, and arithmetic on it, and the ops that take it (slice, narrow, reshape, expand,
// arange, full), record into the graph, so one compiled version serves every size. Using a
// symbol as a plain number (a comparison in host code, guard_int) reads it on the host: the JIT
// turns that into a guard on the input shapes (docs/design.md section 7).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <source_location>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

class SymInt {
 public:
  /// A plain number (implicit, so every size argument also takes an int).
  SymInt(int64_t v = 0) : hint_(v) {}  // NOLINT(google-explicit-constructor)
  /// A symbolic size: `value` is a 0-d int64 symbolic tensor, `hint` its value in the trace
  /// (kNoHint when not known, as for a graph built by hand).
  SymInt(Tensor value, int64_t hint);
  static constexpr int64_t kNoHint = INT64_MIN;

  bool is_symbolic() const { return value_.defined(); }
  /// The number (concrete) or its value in the trace (symbolic; kNoHint when unknown).
  int64_t hint() const { return hint_; }
  /// The symbolic value (undefined for a number).
  const Tensor& value() const { return value_; }
  /// A 0-d int64 tensor: the symbolic value, or a number made into one.
  Tensor as_tensor() const;
  /// The number. A symbolic size is read on the host: under a JIT trace that becomes a guard on
  /// its value (one version per value); while building a graph by hand it is an error.
  int64_t guard_int(std::source_location loc = std::source_location::current()) const;
  /// Whether `a` relates to `b` as `op` says ("<", "<=", ">", ">=", "==", "!="); with a symbol
  /// the JIT guards on the relation (not the value).
  static bool compare(const SymInt& a, const char* op, const SymInt& b,
                      std::source_location loc = std::source_location::current());
  /// The same with the call site given (`file:line`), as the operators and Python do.
  static bool compare(const SymInt& a, const char* op, const SymInt& b, const std::string& where);

 private:
  int64_t hint_ = 0;
  Tensor value_;
};

SymInt operator+(const SymInt& a, const SymInt& b);
SymInt operator-(const SymInt& a, const SymInt& b);
SymInt operator*(const SymInt& a, const SymInt& b);
SymInt operator-(const SymInt& a);
/// Python's // (rounds down) and % (the sign of b).
SymInt floordiv(const SymInt& a, const SymInt& b);
SymInt mod(const SymInt& a, const SymInt& b);
SymInt sym_min(const SymInt& a, const SymInt& b);
SymInt sym_max(const SymInt& a, const SymInt& b);
/// Comparisons; with a symbol the JIT guards on the relation and explain() names the calling
/// function (SymInt::compare with a source_location names the line).
bool operator<(const SymInt& a, const SymInt& b);
bool operator<=(const SymInt& a, const SymInt& b);
bool operator>(const SymInt& a, const SymInt& b);
bool operator>=(const SymInt& a, const SymInt& b);
bool operator==(const SymInt& a, const SymInt& b);
bool operator!=(const SymInt& a, const SymInt& b);
/// Prints the number, or `s(hint)` for a symbol (printing reads no value).
std::ostream& operator<<(std::ostream& os, const SymInt& s);

/// The size of one dim (torch's sym_size): a symbol when the dim is dynamic in a graph or trace.
SymInt sym_size(const Tensor& t, int64_t dim);
/// Every dim's size.
std::vector<SymInt> sym_sizes(const Tensor& t);
/// Whether any is a symbol.
bool any_symbolic(const std::vector<SymInt>& s);
/// The numbers (each symbol read on the host: a guard on its value).
std::vector<int64_t> guard_ints(const std::vector<SymInt>& s);

}  // namespace kiln
