// Samples for the control-flow ops (kiln/ops/control_flow.cpp, kiln/exec/control_flow.cpp).
// Eagerly switch_ and merge are identities on the live value (the other side is a dead tensor),
// so their eager samples compare with the input and gradcheck through them. The graph samples
// run the ops in a Session, where deadness is real; their gradients are checked against eager
// in tests/test_control_flow.cpp, so they are marked not differentiable here.
#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

Tensor bool_scalar(bool v) { return scalar_tensor(v ? 1.0 : 0.0, Bool); }

// merge(neg(switch false side), 2 * switch true side), run in a Session with pred fed.
Tensor switch_merge_graph(const Tensor& x, bool pred) {
  Graph g;
  Tensor px = g.placeholder("x", x.dtype(), x.shape());
  Tensor pp = g.placeholder("p", Bool, {});
  auto s = switch_(px, pp);
  Tensor m = merge({neg(s[0]), mul(s[1], 2.0)})[0];
  Session sess(g);
  return sess.run(m, {{px, x}, {pp, bool_scalar(pred)}});
}

// v <- 0.5 v + x, three times, from v = x: v = 1.875 x.
std::vector<Tensor> halving_loop(const Tensor& x) {
  return while_loop([](const std::vector<Tensor>& v) { return lt(v[0], 3.0); },
                    [&](const std::vector<Tensor>& v) {
                      return std::vector<Tensor>{add(v[0], 1.0), add(mul(v[1], 0.5), x)};
                    },
                    {zeros({}, x.dtype()), x});
}

Tensor while_graph(const Tensor& x, bool grad) {
  Graph g;
  Tensor px = g.placeholder("x", x.dtype(), x.shape());
  Tensor v = halving_loop(px)[1];
  Tensor out = grad ? gradients({sum(mul(v, v))}, {px})[0] : v;
  Session sess(g);
  return sess.run(out, {{px, x}});
}

Tensor scaled(const Tensor& x, double k) {
  auto v = vals(x);
  for (auto& e : v) e *= k;
  return from_vals(v, x.shape());
}

SampleRegistrar reg({
    {.ops = {"switch"},
     .name = "eager_true_side",
     .inputs =
         [] {
           return In{rnd({2, 3}, 1)};
         },
     .run = [](const In& a) { return switch_(a[0], bool_scalar(true))[1]; },
     .reference = [](const In& a) { return scaled(a[0], 1.0); }},
    {.ops = {"switch"},
     .name = "eager_false_side",
     .inputs = [] { return In{rnd({4}, 2)}; },
     .run = [](const In& a) { return switch_(a[0], bool_scalar(false))[0]; },
     .reference = [](const In& a) { return scaled(a[0], 1.0); }},
    {.ops = {"merge"},
     .name = "eager_second_live",
     .inputs =
         [] {
           return In{rnd({3, 2}, 3)};
         },
     .run =
         [](const In& a) {
           // Input 0 is dead: the untaken side of a switch (an undefined input is an error).
           return merge({switch_(a[0], bool_scalar(true))[0], a[0]})[0];
         },
     .reference = [](const In& a) { return scaled(a[0], 1.0); }},
    {.ops = {"switch", "merge"},
     .name = "graph_true",
     .inputs =
         [] {
           return In{rnd({2, 3}, 4)};
         },
     .run = [](const In& a) { return switch_merge_graph(a[0], true); },
     .reference = [](const In& a) { return scaled(a[0], 2.0); },
     .differentiable = false,
     .eager_only = true},
    {.ops = {"switch", "merge"},
     .name = "graph_false",
     .inputs = [] { return In{rnd({3}, 5)}; },
     .run = [](const In& a) { return switch_merge_graph(a[0], false); },
     .reference = [](const In& a) { return scaled(a[0], -1.0); },
     .differentiable = false,
     .eager_only = true},
    {.ops = {"while"},
     .name = "graph_three_trips",
     .inputs =
         [] {
           return In{rnd({2, 3}, 6)};
         },
     .run = [](const In& a) { return while_graph(a[0], false); },
     .reference = [](const In& a) { return scaled(a[0], 1.875); },
     .differentiable = false,
     .eager_only = true},
    // d/dx sum(v^2) with v = 1.875 x is 2 * 1.875^2 x.
    {.ops = {"while_grad"},
     .name = "graph_gradient",
     .inputs =
         [] {
           return In{rnd({3, 2}, 7)};
         },
     .run = [](const In& a) { return while_graph(a[0], true); },
     .reference = [](const In& a) { return scaled(a[0], 2 * 1.875 * 1.875); },
     .differentiable = false,
     .eager_only = true},
    {.ops = {"while"},
     .name = "eager_loop",
     .inputs = [] { return In{rnd({3}, 8)}; },
     .run = [](const In& a) { return halving_loop(a[0])[1]; },
     .reference = [](const In& a) { return scaled(a[0], 1.875); }},
});

}  // namespace
}  // namespace kiln::testing
