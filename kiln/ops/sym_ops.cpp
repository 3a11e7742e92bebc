// Symbolic sizes (sym_int.h): SymInt's arithmetic, the ops a symbolic size needs in a graph
// (sym_size reads a dim at run time; arange and full make tensors of a size known only then),
// and the size-taking wrappers' symbolic forms, which hand the op its sizes as patched
// attributes (op_def.h SizePatch) when any is a symbol.
#include <cmath>
#include <ostream>

#include "kiln/core/host_read.h"
#include "kiln/ops/handles.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/sym_int.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

const OpDef& kSymSize =
    def_op({.name = "sym_size",
            .attr_names = {"dim"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  (void)wrap_dim(a.i(0), in[0].shape(), "sym_size");
                  return one(Int64, Shape{});
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  *out[0].data_ptr<int64_t>() =
                      in[0].shape()[wrap_dim(a.i(0), in[0].shape(), "sym_size")];
                },
            // A size carries no gradient.
            .grad = [](const GradCtx&) { return TensorList{Tensor()}; },
            .native_dtypes = kAllDTypes});

// The dtype attribute of a factory (a graph or a file may hold any number).
DType dtype_attr(const Attrs& a, size_t k, const char* op) {
  const int64_t d = a.i(k);
  if (!valid_dtype_code(d)) fail(op, "unknown dtype code ", d);
  return static_cast<DType>(d);
}

// ceil((end - start) / step), 0 when empty; refuses spans that overflow or ranges past 2^40.
int64_t arange_len(const Attrs& a) {
  const int64_t start = a.i(0), end = a.i(1), step = a.i(2);
  if (step == 0) fail("arange", "step must be nonzero");
  int64_t span = 0;
  if (__builtin_sub_overflow(end, start, &span))
    fail("arange", "[", start, ", ", end, ") spans more than int64 holds");
  if (span == 0 || (span > 0) != (step > 0)) return 0;
  // Same signs: |span| / |step| rounded up, without overflow (step may be INT64_MIN).
  const uint64_t us = span > 0 ? static_cast<uint64_t>(span) : 0 - static_cast<uint64_t>(span);
  const uint64_t ut = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const uint64_t n = us / ut + (us % ut != 0);
  if (n > (uint64_t(1) << 40))
    fail("arange", "[", start, ", ", end, ") in steps of ", step, " has too many elements");
  return static_cast<int64_t>(n);
}

// Integer ranges whose bounds may be symbolic (arange(T) with T a dynamic size); the eager
// arange in kiln/core stays the one factory for concrete bounds.
const OpDef& kArange = def_op(
    {.name = "arange",
     .num_inputs = 0,
     .attr_names = {"start", "end", "step", "dtype"},
     .infer = [](std::span<const Tensor>,
                 const Attrs& a) { return one(dtype_attr(a, 3, "arange"), Shape{arange_len(a)}); },
     .kernel =
         [](std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
           const int64_t n = arange_len(a), start = a.i(0), step = a.i(2);
           KILN_DISPATCH_ALL_TYPES(out[0].dtype(), "arange", [&] {
             scalar_t* p = static_cast<scalar_t*>(out[0].raw_data());
             for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(start + i * step);
           });
         },
     .native_dtypes = kAllDTypes});

// A tensor of one value whose shape may be symbolic (zeros(B, T), ones(T, T) for a mask).
const OpDef& kFull =
    def_op({.name = "full",
            .num_inputs = 0,
            .attr_names = {"shape", "value", "dtype"},
            .infer =
                [](std::span<const Tensor>, const Attrs& a) {
                  for (int64_t d : a.ints(0))
                    if (d < 0) fail("full", "sizes must be >= 0, got ", ints_str(a.ints(0)));
                  const DType dt = dtype_attr(a, 2, "full");
                  // A value an integer or bool tensor cannot hold (a graph or file may say so).
                  if (!is_floating(dt) && !std::isfinite(a.f(1)))
                    fail("full", "value ", a.f(1), " does not fit dtype ", dt);
                  return one(dt, Shape(a.ints(0)));
                },
            .kernel =
                [](std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
                  Tensor& o = out[0];
                  const double v = a.f(1);
                  const int64_t n = o.numel();
                  KILN_DISPATCH_ALL_TYPES(o.dtype(), "full", [&] {
                    std::fill_n(static_cast<scalar_t*>(o.raw_data()), n, static_cast<scalar_t>(v));
                  });
                },
            .native_dtypes = kAllDTypes});

// Python's floor division and modulo on hints.
int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) fail("floordiv", "division by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

bool hinted(const SymInt& a, const SymInt& b) {
  return a.hint() != SymInt::kNoHint && b.hint() != SymInt::kNoHint;
}

// A binary op on sizes: numbers stay numbers; with a symbol both sides become 0-d int64 values
// of the graph and the hint follows the same arithmetic.
template <typename H, typename T>
SymInt binary(const SymInt& a, const SymInt& b, H on_hints, T on_tensors) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(on_hints(a.hint(), b.hint()));
  const int64_t h = hinted(a, b) ? on_hints(a.hint(), b.hint()) : SymInt::kNoHint;
  return SymInt(on_tensors(a.as_tensor(), b.as_tensor()), h);
}

}  // namespace

SymInt::SymInt(Tensor value, int64_t hint) : hint_(hint), value_(std::move(value)) {
  if (!value_.defined() || value_.dim() != 0 || value_.dtype() != Int64)
    fail("SymInt", "a symbolic size is a 0-d int64 tensor, got ",
         value_.defined() ? str_cat(value_.dtype(), value_.shape()) : std::string("undefined"));
  if (!value_.is_symbolic()) {  // a concrete value is a number
    hint_ = value_.item<int64_t>();
    value_ = Tensor();
  }
}

Tensor SymInt::as_tensor() const {
  return is_symbolic() ? value_ : scalar_tensor(static_cast<double>(hint_), Int64);
}

int64_t SymInt::guard_int(std::source_location loc) const {
  if (!is_symbolic()) return hint_;
  return value_.item<int64_t>(loc);
}

bool SymInt::compare(const SymInt& a, const char* op, const SymInt& b, std::source_location loc) {
  return compare(a, op, b, str_cat(loc.file_name(), ":", loc.line()));
}

bool SymInt::compare(const SymInt& a, const char* op, const SymInt& b, const std::string& where) {
  const std::string o = op;
  auto on = [&](int64_t x, int64_t y) {
    if (o == "<") return x < y;
    if (o == "<=") return x <= y;
    if (o == ">") return x > y;
    if (o == ">=") return x >= y;
    if (o == "==") return x == y;
    if (o == "!=") return x != y;
    fail("SymInt", "unknown comparison '", op, "'");
  };
  if (!a.is_symbolic() && !b.is_symbolic()) return on(a.hint(), b.hint());
  const Tensor x = a.as_tensor(), y = b.as_tensor();
  const Tensor r = o == "<"    ? lt(x, y)
                   : o == "<=" ? le(x, y)
                   : o == ">"  ? gt(x, y)
                   : o == ">=" ? ge(x, y)
                   : o == "==" ? eq(x, y)
                               : (on(0, 0), ne(x, y));
  const Tensor v = r.host_value("compare", where);
  return v.item<bool>();
}

#define KILN_SYM_COMPARE(OP)                                                           \
  [[gnu::noinline]] bool operator OP(const SymInt& a, const SymInt& b) {               \
    if (!a.is_symbolic() && !b.is_symbolic()) return a.hint() OP b.hint();             \
    return SymInt::compare(a, #OP, b, detail::call_site(__builtin_return_address(0))); \
  }
KILN_SYM_COMPARE(<)
KILN_SYM_COMPARE(<=)
KILN_SYM_COMPARE(>)
KILN_SYM_COMPARE(>=)
KILN_SYM_COMPARE(==)
KILN_SYM_COMPARE(!=)
#undef KILN_SYM_COMPARE

SymInt operator+(const SymInt& a, const SymInt& b) {
  return binary(
      a, b, [](int64_t x, int64_t y) { return x + y; },
      [](const Tensor& x, const Tensor& y) { return add(x, y); });
}
SymInt operator-(const SymInt& a, const SymInt& b) {
  return binary(
      a, b, [](int64_t x, int64_t y) { return x - y; },
      [](const Tensor& x, const Tensor& y) { return sub(x, y); });
}
SymInt operator*(const SymInt& a, const SymInt& b) {
  return binary(
      a, b, [](int64_t x, int64_t y) { return x * y; },
      [](const Tensor& x, const Tensor& y) { return mul(x, y); });
}
SymInt operator-(const SymInt& a) { return SymInt(0) - a; }
SymInt floordiv(const SymInt& a, const SymInt& b) {
  return binary(a, b, floor_div,
                [](const Tensor& x, const Tensor& y) { return div(x, y, "floor"); });
}
SymInt mod(const SymInt& a, const SymInt& b) {
  return binary(a, b, py_mod, [](const Tensor& x, const Tensor& y) { return remainder(x, y); });
}
SymInt sym_min(const SymInt& a, const SymInt& b) {
  return binary(
      a, b, [](int64_t x, int64_t y) { return std::min(x, y); },
      [](const Tensor& x, const Tensor& y) { return minimum(x, y); });
}
SymInt sym_max(const SymInt& a, const SymInt& b) {
  return binary(
      a, b, [](int64_t x, int64_t y) { return std::max(x, y); },
      [](const Tensor& x, const Tensor& y) { return maximum(x, y); });
}

std::ostream& operator<<(std::ostream& os, const SymInt& s) {
  if (!s.is_symbolic()) return os << s.hint();
  if (s.hint() == SymInt::kNoHint) return os << "s(?)";
  return os << "s(" << s.hint() << ")";
}

SymInt sym_size(const Tensor& t, int64_t dim) {
  if (!t.defined()) fail("sym_size", "tensor is undefined");
  const int64_t d = wrap_dim(dim, t.shape(), "sym_size");
  if (!t.is_symbolic() || t.shape()[d] >= 0) return SymInt(t.shape()[d]);
  const Shape h = hint_shape(t);
  const int64_t hint = h.rank() == t.shape().rank() ? h[d] : SymInt::kNoHint;
  return SymInt(call1(kSymSize, {t}, {d}), hint);
}

std::vector<SymInt> sym_sizes(const Tensor& t) {
  if (!t.defined()) fail("sym_size", "tensor is undefined");
  std::vector<SymInt> r;
  for (int64_t d = 0; d < t.dim(); ++d) r.push_back(sym_size(t, d));
  return r;
}

bool any_symbolic(const std::vector<SymInt>& s) {
  for (const auto& x : s)
    if (x.is_symbolic()) return true;
  return false;
}

std::vector<int64_t> guard_ints(const std::vector<SymInt>& s) {
  std::vector<int64_t> r;
  for (const auto& x : s) r.push_back(x.guard_int());
  return r;
}

namespace detail::op_util {

TensorList call_sized(const OpDef& op, std::span<const Tensor> ins, Attrs attrs,
                      const std::vector<SizeArg>& sizes) {
  TensorList all(ins.begin(), ins.end());
  std::vector<SizePatch> patches;
  for (const auto& s : sizes) {
    attrs.set_int(static_cast<size_t>(s.attr), s.elem, s.size.hint());
    if (!s.size.is_symbolic()) continue;
    // Without a traced value (a graph built by hand) the attribute holds -1, the "dynamic" size
    // inference already knows (reshape keeps a leading run of -1s dynamic).
    if (s.size.hint() == SymInt::kNoHint) attrs.set_int(static_cast<size_t>(s.attr), s.elem, -1);
    patches.push_back(SizePatch{static_cast<int16_t>(s.attr), static_cast<int16_t>(s.elem)});
    all.push_back(s.size.value());
  }
  if (patches.empty()) return call(op, ins, attrs);
  return call_patched(op, std::span<const Tensor>(all.data(), all.size()), attrs, patches);
}

std::vector<SizeArg> list_sizes(int attr, const std::vector<SymInt>& s) {
  std::vector<SizeArg> r;
  for (size_t i = 0; i < s.size(); ++i) r.push_back({attr, static_cast<int>(i), s[i]});
  return r;
}

TensorList patched_again(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                         const GradCtx& c, int shift) {
  TensorList all(ins.begin(), ins.end());
  std::vector<SizePatch> patches;
  for (size_t k = 0; k < c.patches.size(); ++k) {
    patches.push_back(
        SizePatch{static_cast<int16_t>(c.patches[k].attr + shift), c.patches[k].elem});
    all.push_back(c.sizes[k]);
  }
  if (patches.empty()) return call(op, ins, attrs);
  return call_patched(op, std::span<const Tensor>(all.data(), all.size()), attrs, patches);
}

}  // namespace detail::op_util

// ---- the size-taking wrappers' symbolic forms ----------------------------------------------

Tensor reshape_symint(const Tensor& a, const std::vector<SymInt>& shape) {
  if (!any_symbolic(shape)) return reshape(a, Shape(guard_ints(shape)));
  std::vector<int64_t> base(shape.size(), 0);
  return op_util::call_sized(*ops::reshape, {a}, Attrs{base}, op_util::list_sizes(0, shape))[0];
}

Tensor expand_symint(const Tensor& a, const std::vector<SymInt>& shape) {
  if (!any_symbolic(shape)) return expand(a, Shape(guard_ints(shape)));
  std::vector<int64_t> base(shape.size(), 0);
  return op_util::call_sized(*ops::expand, {a}, Attrs{base}, op_util::list_sizes(0, shape))[0];
}

Tensor arange_symint(const SymInt& start, const SymInt& end, const SymInt& step, DType dtype) {
  // Under a trace the range is a node even with numbers (not a fresh constant each trace).
  if (!start.is_symbolic() && !end.is_symbolic() && !step.is_symbolic() && !capturing())
    return arange(static_cast<double>(start.hint()), static_cast<double>(end.hint()),
                  static_cast<double>(step.hint()), dtype);
  return op_util::call_sized(kArange, {},
                             Attrs{int64_t{0}, int64_t{0}, int64_t{1}, static_cast<int64_t>(dtype)},
                             {{0, -1, start}, {1, -1, end}, {2, -1, step}})[0];
}

Tensor full_symint(const std::vector<SymInt>& shape, double value, DType dtype) {
  if (!any_symbolic(shape) && !capturing()) return full(Shape(guard_ints(shape)), value, dtype);
  std::vector<int64_t> base(shape.size(), 0);
  return op_util::call_sized(kFull, {}, Attrs{base, value, static_cast<int64_t>(dtype)},
                             op_util::list_sizes(0, shape))[0];
}

}  // namespace kiln
