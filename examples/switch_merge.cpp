// The lecture's example f(x, y, z) = x < y ? x + z : y * y written with cond: the static graph
// it builds (Switch/Merge in Mermaid), then, for inputs taking each branch, the value and the
// gradients eagerly and from the graph, and how many nodes the Session executed. Then the same
// function written with Switch and Merge directly, run eagerly: the untaken side is a dead
// tensor, ops on it run nothing and stay dead, merge forwards the live side.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

Tensor f(const Tensor& x, const Tensor& y, const Tensor& z) {
  return cond(
      lt(x, y), [&] { return add(x, z); }, [&] { return mul(y, y); });
}

// The same with the primitives: every input a branch reads is switched on the predicate.
// Returns {f, value_index, x + z (dead unless x < y), y * y (dead when x < y)}.
std::vector<Tensor> f_switch_merge(const Tensor& x, const Tensor& y, const Tensor& z) {
  Tensor pred = lt(x, y);
  auto sx = switch_(x, pred), sy = switch_(y, pred), sz = switch_(z, pred);
  Tensor t = add(sx[1], sz[1]);
  Tensor f = mul(sy[0], sy[0]);
  auto m = merge({f, t});
  return {m[0], m[1], t, f};
}

}  // namespace

int main() {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {}), y = g.placeholder("y", Float32, {}),
         z = g.placeholder("z", Float32, {});
  Tensor out = f(x, y, z);
  std::vector<Tensor> grads = gradients({out}, {x, y, z});
  // The forward graph alone, as the lecture draws it.
  Graph fwd;
  {
    Tensor a = fwd.placeholder("x", Float32, {}), b = fwd.placeholder("y", Float32, {}),
           c = fwd.placeholder("z", Float32, {});
    f(a, b, c);
  }
  std::printf("f(x, y, z) = x < y ? x + z : y * y as a dataflow graph (Mermaid):\n%s\n",
              fwd.to_mermaid().c_str());

  Session sess(g);
  bool ok = true;
  for (auto [xv, yv, zv] : {std::array<double, 3>{1, 2, 3}, std::array<double, 3>{4, 2, 3}}) {
    // Eager: only the taken branch runs; autograd records it.
    Tensor ex = scalar_tensor(xv).requires_grad_(), ey = scalar_tensor(yv).requires_grad_(),
           ez = scalar_tensor(zv).requires_grad_();
    Tensor e = f(ex, ey, ez);
    e.backward();
    auto grad_of = [](const Tensor& t) {
      return t.grad().defined() ? t.grad().item<double>() : 0.0;
    };
    // Static graph.
    FeedDict feeds{{x, scalar_tensor(xv)}, {y, scalar_tensor(yv)}, {z, scalar_tensor(zv)}};
    Tensor v = sess.run(out, feeds);
    int64_t executed = sess.last_run().nodes_executed, steps = sess.last_run().plan_steps;
    auto gv = sess.run(grads, feeds);
    std::printf("x=%g y=%g z=%g  (%s branch)\n", xv, yv, zv, xv < yv ? "x + z" : "y * y");
    std::printf("  eager: f = %g   df/dx = %g  df/dy = %g  df/dz = %g\n", e.item<double>(),
                grad_of(ex), grad_of(ey), grad_of(ez));
    std::printf("  graph: f = %g   df/dx = %g  df/dy = %g  df/dz = %g   (%lld of %lld nodes ran)\n",
                v.item<double>(), gv[0].item<double>(), gv[1].item<double>(), gv[2].item<double>(),
                static_cast<long long>(executed), static_cast<long long>(steps));
    ok = ok && std::fabs(v.item<double>() - e.item<double>()) < 1e-6 &&
         std::fabs(gv[0].item<double>() - grad_of(ex)) < 1e-6 &&
         std::fabs(gv[1].item<double>() - grad_of(ey)) < 1e-6 &&
         std::fabs(gv[2].item<double>() - grad_of(ez)) < 1e-6 && executed < steps;

    // Eager Switch/Merge directly: dead tensors instead of a C++ branch.
    Tensor sx = scalar_tensor(xv).requires_grad_(), sy = scalar_tensor(yv).requires_grad_(),
           sz = scalar_tensor(zv).requires_grad_();
    auto r = f_switch_merge(sx, sy, sz);
    r[0].backward();
    const Tensor& dead = r[2].is_dead() ? r[2] : r[3];
    std::printf(
        "  eager switch/merge: f = %g (merge took input %lld)   df/dx = %g  df/dy = %g"
        "  df/dz = %g\n",
        r[0].item<double>(), static_cast<long long>(r[1].item<int64_t>()), grad_of(sx), grad_of(sy),
        grad_of(sz));
    std::cout << "    untaken branch's result: " << dead << "\n";
    ok = ok && r[2].is_dead() != r[3].is_dead() && !r[0].is_dead() &&
         std::fabs(r[0].item<double>() - e.item<double>()) < 1e-6 &&
         std::fabs(grad_of(sx) - grad_of(ex)) < 1e-6 &&
         std::fabs(grad_of(sy) - grad_of(ey)) < 1e-6 && std::fabs(grad_of(sz) - grad_of(ez)) < 1e-6;
  }
  std::printf("%s\n", ok ? "eager (cond and switch/merge) and graph agree"
                         : "MISMATCH between eager and graph");
  return ok ? 0 : 1;
}
