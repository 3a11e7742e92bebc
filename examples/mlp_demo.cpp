// `make demo`: trains a small MLP eagerly (define-by-run, autograd, SGD) on a synthetic
// three-class spiral and prints the falling loss and the final accuracy.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln;

// Three interleaved spirals in 2-D, N points per class, with a little noise.
static std::pair<Tensor, Tensor> spirals(int64_t n) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  Tensor noise = randn({3 * n, 2});
  auto nz = noise.to_vector<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < n; ++i) {
      double r = static_cast<double>(i) / static_cast<double>(n);
      double t = 4.0 * static_cast<double>(c) + 4.0 * r;
      int64_t k = c * n + i;
      xs.push_back(static_cast<float>(r * std::sin(t) + 0.05 * nz[2 * k]));
      xs.push_back(static_cast<float>(r * std::cos(t) + 0.05 * nz[2 * k + 1]));
      ys.push_back(c);
    }
  return {tensor(xs, {3 * n, 2}), tensor(ys)};
}

static Tensor init_weight(int64_t out, int64_t in) {
  // Kaiming-uniform-like scale for ReLU layers.
  return mul(randn({out, in}), std::sqrt(2.0 / static_cast<double>(in))).requires_grad_();
}

int main() {
  manual_seed(0);
  auto [x, y] = spirals(200);
  Tensor w1 = init_weight(64, 2), b1 = zeros({64}).requires_grad_();
  Tensor w2 = init_weight(64, 64), b2 = zeros({64}).requires_grad_();
  Tensor w3 = init_weight(3, 64), b3 = zeros({3}).requires_grad_();
  optim::SGD opt({w1, b1, w2, b2, w3, b3}, {.lr = 0.2, .momentum = 0.9});

  auto forward = [&](const Tensor& in) {
    Tensor h = relu(linear(in, w1, b1));
    h = relu(linear(h, w2, b2));
    return linear(h, w3, b3);
  };

  std::printf("Kiln eager MLP 2-64-64-3 on a 3-class spiral (%lld points)\n",
              static_cast<long long>(x.size(0)));
  auto t0 = std::chrono::steady_clock::now();
  const int steps = 600;
  double first = 0, last = 0;
  for (int step = 1; step <= steps; ++step) {
    Tensor loss = cross_entropy(forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    double l = loss.item<double>();
    if (step == 1) first = l;
    last = l;
    if (step == 1 || step % 100 == 0) std::printf("step %4d  loss %.4f\n", step, l);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Tensor pred;
  {
    NoGradGuard ng;
    pred = argmax(forward(x), 1);
  }
  double acc = eq(pred, y).to(Float32).mean().item<double>();
  std::printf("loss %.4f -> %.4f, train accuracy %.1f%%, %d steps in %.2f s (%.0f steps/s)\n",
              first, last, 100 * acc, steps, secs, steps / secs);
  return last < first ? 0 : 1;
}
