// The lecture's example f(x, y, z) = x < y ? x + z : y * y written with cond: the static graph
// it builds (Switch/Merge in Mermaid), then, for inputs taking each branch, the value and the
// gradients eagerly and from the graph, and how many nodes the Session executed.
#include <cmath>
#include <cstdio>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

Tensor f(const Tensor& x, const Tensor& y, const Tensor& z) {
  return cond(
      lt(x, y), [&] { return add(x, z); }, [&] { return mul(y, y); });
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
  }
  std::printf("%s\n", ok ? "eager and graph agree" : "MISMATCH between eager and graph");
  return ok ? 0 : 1;
}
