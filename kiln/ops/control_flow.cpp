// Control-flow primitives of the dataflow IR: switch (route a value to one of two outputs, the
// other is dead) and merge (forward whichever input is live). Eagerly a dead value is a dead
// tensor (Tensor::is_dead(): dtype and shape, no storage): switch_ returns one on the untaken
// side, and the dispatcher gives every op with a dead input dead outputs without running its
// kernel (kiln/dispatch/dispatch.cpp). The executors (Session, the jit's interpreter) keep
// unset slots for dead values instead, so the view functions below, which they call, return
// undefined tensors. cond and while_loop, which need the graph builder and the executor, live
// in kiln/exec/control_flow.cpp.
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

// pred must be a one-element bool tensor; its shape is checked statically when it is known.
void check_pred(const char* op, const Tensor& pred) {
  if (pred.dtype() != Bool)
    fail(op, "predicate must be bool, got ", pred.dtype(), " (shape ", pred.shape(), ")");
  if (pred.shape().is_static() && pred.numel() != 1)
    fail(op, "predicate must have one element, got shape ", pred.shape());
}

MetaList switch_infer(std::span<const Tensor> in, const Attrs&) {
  check_pred("switch", in[1]);
  MetaList m;
  m.push_back(TensorMeta{in[0].dtype(), in[0].shape()});
  m.push_back(TensorMeta{in[0].dtype(), in[0].shape()});
  return m;
}

MetaList merge_infer(std::span<const Tensor> in, const Attrs&) {
  if (in.empty()) fail("merge", "needs at least one input");
  Shape s = in[0].shape();
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k].dtype() != in[0].dtype())
      fail("merge", "inputs differ in dtype: input 0 is ", in[0].dtype(), in[0].shape(), ", input ",
           k, " is ", in[k].dtype(), in[k].shape());
    if (in[k].shape().rank() != s.rank())
      fail("merge", "inputs differ in rank: input 0 has shape ", in[0].shape(), ", input ", k,
           " has shape ", in[k].shape());
    // Where the live input is only known at run time, differing dims become dynamic.
    for (int64_t d = 0; d < s.rank(); ++d)
      if (s[d] != in[k].shape()[d]) s[d] = Dim::any();
  }
  MetaList m;
  m.push_back(TensorMeta{in[0].dtype(), s});
  m.push_back(TensorMeta{Int64, Shape{}});
  return m;
}

// The executor calls this only with both inputs live; the untaken output stays undefined (dead).
TensorList switch_view(std::span<const Tensor> in, const Attrs&) {
  check_pred("switch", in[1]);
  if (in[1].numel() != 1)
    fail("switch", "predicate must have one element, got shape ", in[1].shape());
  bool p = in[1].item<bool>();
  TensorList out;
  out.push_back(p ? Tensor() : in[0]);
  out.push_back(p ? in[0] : Tensor());
  return out;
}

// Inputs may be dead: undefined (the executors' slots) or dead tensors (eager values, which the
// dispatcher hands over). With every input dead the outputs are dead in the same form.
TensorList merge_view(std::span<const Tensor> in, const Attrs&) {
  TensorList out;
  bool eager_dead = false;
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].defined() && !in[k].is_dead()) {
      out.push_back(in[k]);
      out.push_back(scalar_tensor(static_cast<double>(k), Int64));
      return out;
    }
    eager_dead = eager_dead || in[k].is_dead();
  }
  if (eager_dead) {
    MetaList m = merge_infer(in, {});
    out.push_back(dead_tensor(m[0].shape, m[0].dtype));
    out.push_back(dead_tensor(m[1].shape, m[1].dtype));
    return out;
  }
  out.push_back(Tensor());
  out.push_back(Tensor());
  return out;
}

// Gradient of Switch: the two output gradients (one of them dead at run time) merge back.
TensorList switch_grad(const GradCtx& c) {
  if (!c.need(0) || !c.g(0).defined() || !c.g(1).defined()) return {Tensor(), Tensor()};
  return {merge({c.g(0), c.g(1)})[0], Tensor()};
}

// Gradient of Merge: a Switch of the output gradient on the same predicate. For the two-input
// merge cond builds ({false, true}), value_index == pred.
TensorList merge_grad(const GradCtx& c) {
  size_t n = c.inputs.size();
  TensorList out;
  if (!c.g(0).defined()) {
    for (size_t k = 0; k < n; ++k) out.push_back(Tensor());
    return out;
  }
  if (n == 1) return {c.g(0)};
  if (n == 2) {
    auto s = switch_(c.g(0), cast(c.out(1), Bool));
    return {s[0], s[1]};
  }
  for (size_t k = 0; k < n; ++k)
    out.push_back(c.need(k) ? switch_(c.g(0), eq(c.out(1), static_cast<double>(k)))[1] : Tensor());
  return out;
}

const OpDef& kSwitchOp = def_op(
    {.name = "switch",
     .num_inputs = 2,
     .num_outputs = 2,
     .traits = kControlFlow | kSwitch,
     .infer = switch_infer,
     .view = switch_view,
     .grad = switch_grad,
     .doc = "switch(data, pred) -> {false_out, true_out}: data goes to the taken side, the other "
            "output is dead"});

const OpDef& kMergeOp = def_op(
    {.name = "merge",
     .num_inputs = -1,
     .num_outputs = 2,
     .traits = kControlFlow | kMerge,
     .infer = merge_infer,
     .view = merge_view,
     .grad = merge_grad,
     .doc = "merge(inputs) -> {out, value_index}: forwards the live input; dead when all are"});

bool any_symbolic(std::span<const Tensor> ts) {
  for (const auto& t : ts)
    if (t.defined() && t.is_symbolic()) return true;
  return false;
}

}  // namespace

std::vector<Tensor> switch_(const Tensor& data, const Tensor& pred) {
  if (!data.defined() || !pred.defined()) fail("switch", "data and predicate must be defined");
  Tensor in[2] = {data, pred};
  if (any_symbolic(in)) {
    TensorList o = call(kSwitchOp, {data, pred});
    return {o[0], o[1]};
  }
  // Eagerly the taken output is the data tensor itself: no copy, and autograd flows through it
  // unchanged (switch is the identity on the live side). The untaken one is a dead tensor, so
  // that the ops of the untaken branch run no kernel and an undefined tensor stays an error.
  check_pred("switch", pred);
  if (pred.numel() != 1)
    fail("switch", "predicate must have one element, got shape ", pred.shape());
  auto dead = [&] { return dead_tensor(data.shape(), data.dtype()); };
  // Inside an untaken branch everything is dead, this switch's outputs too (as in TF).
  if (data.is_dead() || pred.is_dead()) return {dead(), dead()};
  if (pred.item<bool>()) return {dead(), data};
  return {data, dead()};
}

std::vector<Tensor> merge(const std::vector<Tensor>& inputs) {
  if (inputs.empty()) fail("merge", "needs at least one input");
  std::span<const Tensor> in(inputs.data(), inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!inputs[k].defined())
      fail("merge", "input ", k,
           " is an undefined tensor (a value on the untaken side of a switch is a dead tensor, "
           "not an undefined one)");
  if (any_symbolic(in)) {
    TensorList o = call(kMergeOp, in);
    return {o[0], o[1]};
  }
  // Eager: the inputs must agree as in a graph (dtype, rank), dead ones included; the first
  // live one is forwarded as it is (its autograd history is the merge's), with its index.
  MetaList m = merge_infer(in, {});
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!inputs[k].is_dead()) return {inputs[k], scalar_tensor(static_cast<double>(k), Int64)};
  return {dead_tensor(m[0].shape, m[0].dtype), dead_tensor(m[1].shape, m[1].dtype)};
}

}  // namespace kiln
