// Collective family: all_reduce as a graph op with side effects (kiln/ops/collective.h). The
// kernel copies its input and hands the copy to the transport kiln/dist installs; with no
// transport (one process) the copy is the result.
#include "kiln/ops/collective.h"

#include <atomic>
#include <cstring>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

std::atomic<CollectiveHook> g_hook{nullptr};

void check_reduce_op(const Tensor& x, const std::string& op) {
  if (op != "sum" && op != "mean")
    fail("all_reduce", "op must be \"sum\" or \"mean\", got \"", op, "\"");
  if (op == "mean" && !is_floating(x.dtype()))
    fail("all_reduce", "\"mean\" needs a float32 or float64 tensor, got ", x.dtype(), " (shape ",
         x.shape(), "); reduce with \"sum\" and divide");
  if (x.dtype() == Bool) fail("all_reduce", "cannot sum bool tensors (shape ", x.shape(), ")");
}

const OpDef& kAllReduce = def_op(
    {.name = "all_reduce",
     .attr_names = {"op"},
     // Never folded, merged or pruned: every process must issue the same collectives in the
     // same order, or the ones that did wait forever.
     .traits = kSideEffect,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           check_reduce_op(in[0], a.s(0));
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           Tensor& o = out[0];
           const size_t bytes = static_cast<size_t>(o.numel()) * dtype_size(o.dtype());
           if (bytes) std::memcpy(o.raw_data(), in[0].raw_data(), bytes);
           if (CollectiveHook h = g_hook.load(std::memory_order_acquire)) h(o, a.s(0));
         },
     .grad = [](const GradCtx& c) { return TensorList{all_reduce_value(c.g(), c.attrs.s(0))}; },
     .contiguous_inputs = true,
     .doc = "the sum or mean of x over every process (a collective: kiln/dist)"});

}  // namespace

CollectiveHook detail::set_collective_hook(CollectiveHook h) { return g_hook.exchange(h); }

Tensor detail::all_reduce_value(const Tensor& x, const std::string& op) {
  if (!x.defined()) fail("all_reduce", "tensor is undefined");
  return call1(kAllReduce, {x}, {op});
}

}  // namespace kiln
