// README example: static graph (define-then-run, TensorFlow 1 style).
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln;

int main() {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 2});
  Tensor y = g.placeholder("y", Float32, {Dim::any()});
  Tensor w = g.variable("w", zeros({2}));
  Tensor b = g.variable("b", zeros({1}));
  Tensor pred = sum(x * w, {1}) + b;  // adds nodes, computes nothing
  Tensor loss = mean((pred - y) * (pred - y));
  Tensor step = optim::SGD(0.1).minimize(loss);  // gradients() + assign nodes
  Session sess(g);                               // verify, optimize, plan once
  manual_seed(1);
  Tensor xs = randn({64, 2});
  Tensor ys = sum(xs * tensor({2.f, -3.f}), {1}) + 0.5;
  for (int i = 0; i < 100; ++i) sess.run(step, {{x, xs}, {y, ys}});
  std::cout << "loss " << sess.run(loss, {{x, xs}, {y, ys}}).item<float>() << "\n";
  std::cout << "w " << sess.variable("w") << "  b " << sess.variable("b") << "\n";
  std::string text = g.to_text();  // the forward part of the graph:
  std::cout << text.substr(0, text.find("%9 ")) << "... (" << g.nodes().size() << " nodes)\n";
}
