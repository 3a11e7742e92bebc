// State and side-effect family: print (tf.Print), assign (variable updates), group (run several
// side effects), fill_like (constant of another tensor's run-time shape).
#include <iostream>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

MetaList same_as_input(std::span<const Tensor> in, const Attrs&) {
  return one(in[0].dtype(), in[0].shape());
}

const OpDef& kPrint =
    def_op({.name = "print",
            .attr_names = {"message"},
            .traits = kSideEffect | kView,
            .infer = same_as_input,
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  std::cout << a.s(0) << (a.s(0).empty() ? "" : " ") << in[0] << std::endl;
                  const Tensor& x = in[0];
                  return TensorList{make_view(x, x.shape(), x.strides(), x.offset())};
                },
            .grad = [](const GradCtx& c) { return TensorList{c.g()}; }});

// Product of x's sizes over dims; -1 when one of them is dynamic.
int64_t numel_over(const Shape& s, const std::vector<int64_t>& dims, const char* op) {
  int64_t n = 1;
  for (int64_t d : dims) {
    int64_t z = s[wrap_dim(d, s, op)];
    if (z < 0) return -1;
    if (__builtin_mul_overflow(n, z, &n)) return INT64_MAX;
  }
  return n;
}

void check_numel_now(const Shape& s, const Attrs& a) {
  int64_t n = numel_over(s, a.ints(0), "check_numel");
  // Names itself first (the registry's rule for errors) and then the op whose check it runs.
  if (n >= 0 && n < a.i(1)) fail("check_numel", "[", a.s(2), "] ", a.s(3), s);
}

const OpDef& kCheckNumel =
    def_op({.name = "check_numel",
            .attr_names = {"dims", "min", "op", "message"},
            .traits = kSideEffect | kView,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  check_numel_now(in[0].shape(), a);
                  return one(in[0].dtype(), in[0].shape());
                },
            .view =
                [](std::span<const Tensor> in, const Attrs& a) {
                  const Tensor& x = in[0];
                  check_numel_now(x.shape(), a);
                  return TensorList{make_view(x, x.shape(), x.strides(), x.offset())};
                },
            .grad = [](const GradCtx& c) { return TensorList{c.g()}; },
            .doc = "x, after a run-time check that the sizes of dims multiply to at least min"});

MetaList infer_assign(std::span<const Tensor> in, const Attrs&) {
  if (!broadcastable_to(in[1].shape(), in[0].shape()))
    fail("assign", "value of shape ", in[1].shape(), " does not fit variable of shape ",
         in[0].shape());
  return one(in[0].dtype(), in[0].shape());
}

const OpDef& kAssign =
    def_op({.name = "assign",
            .num_inputs = 2,
            .traits = kSideEffect | kView | kWritesVariable,
            .infer = infer_assign,
            .view = [](std::span<const Tensor> in, const Attrs& a) {
              // The dispatcher runs a view op's view without its infer: check here too, so
              // the error names assign rather than the copy_ below.
              (void)infer_assign(in, a);
              Tensor var = in[0];
              if (var.requires_grad() && grad_mode_enabled())
                fail("assign", "in-place write into a tensor that requires grad (shape ",
                     var.shape(), "); wrap it in NoGradGuard");
              NoGradGuard ng;
              var.copy_(in[1]);
              return TensorList{make_view(var, var.shape(), var.strides(), var.offset())};
            }});

const OpDef& kGroup =
    def_op({.name = "group",
            .num_inputs = -1,
            .traits = kSideEffect,
            .infer = [](std::span<const Tensor>, const Attrs&) { return one(Float32, Shape{}); },
            .kernel = [](std::span<const Tensor>, std::span<Tensor> out,
                         const Attrs&) { *out[0].data_ptr<float>() = 0.f; }});

const OpDef& kFillLike =
    def_op({.name = "fill_like",
            .attr_names = {"value"},
            .infer = same_as_input,
            .kernel =
                [](std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
                  Tensor& o = out[0];
                  double v = a.f(0);
                  // n hoisted: with numel() (an out-of-line call) in the loop condition the
                  // fill ran one call per element, 188 us for W8's [1024, 256] zeros.
                  const int64_t n = o.numel();
                  KILN_DISPATCH_ALL_TYPES(o.dtype(), "fill_like", [&] {
                    scalar_t* p = static_cast<scalar_t*>(o.raw_data());
                    const scalar_t x = static_cast<scalar_t>(v);
                    parallel_for(n, kParallelGrain * 4,
                                 [&](int64_t b, int64_t e) { std::fill(p + b, p + e, x); });
                  });
                },
            // The value does not depend on the input's values.
            .grad = [](const GradCtx&) { return TensorList{Tensor()}; },
            .native_dtypes = kAllDTypes});

}  // namespace

Tensor print(const Tensor& t, const std::string& message) { return call1(kPrint, {t}, {message}); }
Tensor assign(const Tensor& var, const Tensor& value) {
  if (!var.defined() || !value.defined()) fail("assign", "undefined operand");
  Tensor v = value.dtype() == var.dtype() ? value : cast(value, var.dtype());
  return call1(kAssign, {var, v});
}
Tensor group(const std::vector<Tensor>& deps) {
  return call1(kGroup, std::span<const Tensor>(deps.data(), deps.size()));
}
namespace detail::op_util {
Tensor check_numel(const Tensor& x, const std::vector<int64_t>& dims, int64_t min,
                   const std::string& op, const std::string& message) {
  return call1(kCheckNumel, {x}, {dims, min, op, message});
}
}  // namespace detail::op_util

Tensor full_like(const Tensor& t, double v) {
  if (!t.defined()) fail("full_like", "tensor is undefined");
  if (t.is_concrete()) return full(t.shape(), v, t.dtype());
  return call1(kFillLike, {t}, {v});
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }

}  // namespace kiln
