// Samples for the state family (kiln/ops/state_ops.cpp): print (identity that prints), assign
// (in-place write, returns the written tensor), group (0-d token after its deps) and fill_like
// (a constant of another tensor's shape; public callers reach it through full_like on symbolic
// tensors, so the eager sample calls the registered op directly).
#include "kiln/dispatch/dispatch.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

const OpDef& op_named(const char* name) {
  const OpDef* d = OpRegistry::get().find(name);
  if (!d) fail("samples_state", "op '", name, "' is not registered");
  return *d;
}

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;

  // ---- print: identity (the printed text is not captured here) ---------------------------------
  {
    OpSample s;
    s.ops = {"print"};
    s.name = "identity_2d";
    s.inputs = [] { return In{rnd({2, 3}, 401)}; };
    s.run = [](const In& in) { return print(in[0], "samples_state print:"); };
    s.reference = [](const In& in) { return from_vals(vals(in[0]), in[0].shape()); };
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"print"};
    s.name = "identity_scalar_no_message";
    s.inputs = [] { return In{rnd({}, 402)}; };
    s.run = [](const In& in) { return mul(print(in[0]), 3.0); };
    s.reference = [](const In& in) { return from_vals({3.0 * vals(in[0])[0]}, {}); };
    v.push_back(std::move(s));
  }

  // ---- assign: writes the value into a fresh non-grad tensor and returns it ---------------------
  {
    OpSample s;
    s.ops = {"assign"};
    s.name = "into_fresh_tensor";
    s.inputs = [] { return In{rnd({3, 4}, 403)}; };
    s.run = [](const In& in) {
      Tensor var = zeros(in[0].shape(), in[0].dtype());
      Tensor out = assign(var, in[0]);
      // The result is the variable itself (same storage), now holding the value.
      if (!out.shares_storage(var) || out.raw_data() != var.raw_data())
        fail("assign sample", "result does not alias the assigned tensor");
      return var;
    };
    s.reference = [](const In& in) { return from_vals(vals(in[0]), in[0].shape()); };
    s.differentiable = false;
    s.eager_only = true;
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"assign"};
    s.name = "broadcast_row_into_matrix";
    s.inputs = [] { return In{rnd({4}, 404)}; };
    s.run = [](const In& in) {
      Tensor var = full({3, 4}, 7.0, in[0].dtype());
      return assign(var, in[0]);
    };
    s.reference = [](const In& in) {
      auto x = vals(in[0]);
      std::vector<double> out;
      for (int r = 0; r < 3; ++r) out.insert(out.end(), x.begin(), x.end());
      return from_vals(out, {3, 4});
    };
    s.differentiable = false;
    v.push_back(std::move(s));
  }

  // ---- group: a 0-d float32 zero that depends on all its inputs ---------------------------------
  {
    OpSample s;
    s.ops = {"group"};
    s.name = "two_deps";
    s.inputs = [] { return In{rnd({2, 2}, 405), rnd({3}, 406)}; };
    s.run = [](const In& in) { return group({in[0], in[1]}); };
    s.reference = [](const In&) { return from_vals({0.0}, {}); };
    s.differentiable = false;
    s.check = [](const In&, const Tensor& out) -> std::string {
      if (out.dtype() != Float32) return "group result should be float32";
      if (out.dim() != 0) return "group result should be 0-d";
      return "";
    };
    v.push_back(std::move(s));
  }

  // ---- fill_like: full of the value, with the input's shape and dtype ---------------------------
  for (double value : {2.5, -1.0}) {
    OpSample s;
    s.ops = {"fill_like"};
    s.name = value > 0 ? "positive_3d" : "negative_2d";
    Shape shape = value > 0 ? Shape{2, 3, 4} : Shape{5, 2};
    s.inputs = [shape] { return In{rnd(shape, 407)}; };
    s.run = [value](const In& in) { return call1(op_named("fill_like"), {in[0]}, Attrs{value}); };
    s.reference = [value](const In& in) {
      return from_vals(std::vector<double>(static_cast<size_t>(in[0].numel()), value),
                       in[0].shape());
    };
    // Gradient is zero (the value does not depend on the input's values).
    s.differentiable = true;
    v.push_back(std::move(s));
  }
  // check_numel: passes x through after checking that dim 0 holds at least 2 values (the
  // run-time form of batch_norm's "more than 1 value per channel").
  {
    OpSample s;
    s.ops = {"check_numel"};
    s.name = "enough_rows";
    s.inputs = [] { return In{rnd({3, 4}, 404)}; };
    s.run = [](const In& in) {
      Attrs a;
      a.push(std::vector<int64_t>{0});
      a.push(int64_t(2));
      a.push(std::string("batch_norm"));
      a.push(std::string("expected more than 1 value per channel, got input shape "));
      return call(OpRegistry::get().at("check_numel"), {in[0]}, a)[0];
    };
    s.reference = [](const In& in) { return from_vals(vals(in[0]), in[0].shape()); };
    v.push_back(std::move(s));
  }

  return v;
}

SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
