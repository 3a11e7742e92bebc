// An RNN over variable-length sequences as one static graph: the time loop is a while_loop whose
// trip count is the fed sequence length, so batches of different lengths run through the same
// graph and Session (no rebuild). Task: predict the sum of a sequence of numbers in [-1, 1].
// Exits non-zero unless the loss fell.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln::detail;

using namespace kiln;

int main() {
  manual_seed(7);
  const int64_t hidden = 24, batch = 32, steps = 300;
  Graph g;
  // x: [time, batch, 1]; both time and batch are dynamic.
  Tensor x = g.placeholder("x", Float32, {Dim::any(), Dim::any(), 1});
  Tensor len = g.placeholder("len", Int64, {});
  Tensor y = g.placeholder("y", Float32, {Dim::any(), 1});
  Tensor wx = g.variable("wx", mul(randn({1, hidden}), 0.5));
  Tensor wh = g.variable("wh", mul(randn({hidden, hidden}), 0.5 / std::sqrt(double(hidden))));
  Tensor b = g.variable("b", zeros({hidden}));
  Tensor wo = g.variable("wo", mul(randn({hidden, 1}), 0.3));
  Tensor bo = g.variable("bo", zeros({1}));

  auto x_at = [&](const Tensor& t) {  // x[t] as [batch, 1]
    return squeeze(index_select(x, 0, reshape(t, {1})), 0);
  };
  Tensor h0 = zeros_like(matmul(x_at(scalar_tensor(0, Int64)), wx));  // [batch, hidden]
  auto final = while_loop([&](const std::vector<Tensor>& v) { return lt(v[0], len); },
                          [&](const std::vector<Tensor>& v) {
                            Tensor h = tanh(add(add(matmul(x_at(v[0]), wx), matmul(v[1], wh)), b));
                            return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), h};
                          },
                          {scalar_tensor(0, Int64), h0});
  Tensor pred = add(matmul(final[1], wo), bo);
  Tensor loss = mse_loss(pred, y);
  Tensor train = optim::Adam(0.01).minimize(loss);
  std::printf("graph: %zu nodes; the loop is one node:\n", g.nodes().size());
  for (const auto& n : g.nodes())
    if (n->kind == NodeKind::Op && n->op->name == "while")
      std::printf("  %%%d = while(...)\n", n->id);

  Session sess(g);
  auto batch_of = [&](int64_t length) {
    Tensor xb = sub(mul(rand({length, batch, 1}), 2.0), 1.0);
    Tensor yb = sum(xb, {0});  // [batch, 1]
    return FeedDict{{x, xb}, {len, scalar_tensor(double(length), Int64)}, {y, yb}};
  };
  auto t0 = std::chrono::steady_clock::now();
  double first = 0, last = 0;
  const int window = 30;
  for (int64_t step = 0; step < steps; ++step) {
    int64_t length = 3 + randint(0, 10, {}).item<int64_t>();  // 3..12, varies per batch
    FeedDict feeds = batch_of(length);
    double l = sess.run({loss, train}, feeds)[0].item<double>();
    if (step < window) first += l / window;
    if (step >= steps - window) last += l / window;
    if (step % 50 == 0 || step == steps - 1)
      std::printf("step %3lld  len %2lld  loss %.4f\n", static_cast<long long>(step),
                  static_cast<long long>(length), l);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Longer sequences than seen in training, same graph.
  double test = sess.run(loss, batch_of(16)).item<double>();
  std::printf("mean loss: first %d steps %.4f, last %d steps %.4f; length-16 test loss %.4f\n",
              window, first, window, last, test);
  std::printf("%lld steps in %.2f s, %zu plan(s) for every length\n", static_cast<long long>(steps),
              secs, sess.plans_built());
  bool ok = last < 0.5 * first;
  std::printf("%s\n", ok ? "loss fell" : "LOSS DID NOT FALL");
  return ok ? 0 : 1;
}
