// `make demo`: a LeNet-5-like CNN with BatchNorm trained on Fashion-MNIST, eagerly (autograd +
// optim::SGD) and under kiln::jit (the whole step — forward, backward, momentum update — traced
// once and replayed, parameters and BatchNorm buffers passed in and out), then a table of test
// accuracy, images/s and peak memory per mode. Optionally writes the model graph (Mermaid, DOT).
//
//   cnn_fashion_mnist [--mode eager|jit|both] [--epochs N] [--limit N] [--batch N] [--lr X]
//                     [--constant-lr]
//                     [--seed N] [--log-every N] [--min-accuracy X]
//                     [--dot FILE] [--mermaid FILE] [--data DIR]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/io/idx.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string mode = "both";
  int epochs = 1;
  int64_t limit = 0;  // training images used (0: all)
  int64_t batch = 64;
  double lr = 0.05;
  bool cosine = true;  // cosine decay of the rate to zero over the run (--constant-lr: off)
  double momentum = 0.9;
  uint64_t seed = 0;
  int64_t log_every = 200;
  double min_accuracy = 0.0;
  std::string dot, mermaid;
  std::string data = "/usr/share/datasets/fashion-mnist";
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(
      stderr,
      "cnn_fashion_mnist: %s\nusage: cnn_fashion_mnist [--mode eager|jit|both] "
      "[--epochs N] [--limit N] [--batch N] [--lr X] [--constant-lr] [--seed N] [--log-every N] "
      "[--min-accuracy X] [--dot FILE] [--mermaid FILE] [--data DIR]\n",
      msg);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--mode")
      a.mode = val();
    else if (k == "--epochs")
      a.epochs = std::atoi(val().c_str());
    else if (k == "--limit")
      a.limit = std::atoll(val().c_str());
    else if (k == "--batch")
      a.batch = std::atoll(val().c_str());
    else if (k == "--lr")
      a.lr = std::atof(val().c_str());
    else if (k == "--constant-lr")
      a.cosine = false;
    else if (k == "--seed")
      a.seed = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--log-every")
      a.log_every = std::atoll(val().c_str());
    else if (k == "--min-accuracy")
      a.min_accuracy = std::atof(val().c_str());
    else if (k == "--dot")
      a.dot = val();
    else if (k == "--mermaid")
      a.mermaid = val();
    else if (k == "--data")
      a.data = val();
    else
      usage(("unknown option " + k).c_str());
  }
  if (a.mode != "eager" && a.mode != "jit" && a.mode != "both")
    usage("--mode must be eager, jit or both");
  if (a.epochs < 1 || a.batch < 2 || a.log_every < 1)
    usage("--epochs, --batch, --log-every too small");
  return a;
}

// conv 1->6 5x5 pad 2, BN, ReLU, pool 2; conv 6->16 5x5, BN, ReLU, pool 2; 400->120->84->10.
std::shared_ptr<nn::Sequential> lenet() {
  auto net = std::make_shared<nn::Sequential>();
  net->emplace_back<nn::Conv2d>(1, 6, std::vector<int64_t>{5}, nn::Conv2dOptions{.padding = {2}});
  net->emplace_back<nn::BatchNorm2d>(6);
  net->emplace_back<nn::ReLU>();
  net->emplace_back<nn::MaxPool2d>(std::vector<int64_t>{2});
  net->emplace_back<nn::Conv2d>(6, 16, std::vector<int64_t>{5});
  net->emplace_back<nn::BatchNorm2d>(16);
  net->emplace_back<nn::ReLU>();
  net->emplace_back<nn::MaxPool2d>(std::vector<int64_t>{2});
  net->emplace_back<nn::Flatten>();
  net->emplace_back<nn::Linear>(400, 120);
  net->emplace_back<nn::ReLU>();
  net->emplace_back<nn::Linear>(120, 84);
  net->emplace_back<nn::ReLU>();
  net->emplace_back<nn::Linear>(84, 10);
  return net;
}

// A seeded shuffle (Fisher-Yates on Kiln's generator) so both modes see the same batches.
std::vector<int64_t> permutation(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[static_cast<size_t>(i)], p[random_u64() % static_cast<uint64_t>(i + 1)]);
  return p;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The learning rate of global step t of `total`: cosine decay from a.lr to 0, or constant.
double lr_at(const Args& a, int64_t t, int64_t total) {
  if (!a.cosine) return a.lr;
  return a.lr * 0.5 * (1 + std::cos(M_PI * static_cast<double>(t) / static_cast<double>(total)));
}

// Progress: a log line every `log_every` steps; on a terminal also a \r bar with ETA.
class Progress {
 public:
  Progress(const std::string& label, int64_t total, int64_t batch, int64_t log_every)
      : label_(label),
        total_(total),
        batch_(batch),
        every_(log_every),
        tty_(isatty(1) != 0),
        t0_(Clock::now()) {}
  void step(int64_t done, double loss) {
    loss_sum_ += loss;
    ++n_;
    double el = secs_since(t0_);
    double ips = static_cast<double>(done * batch_) / std::max(el, 1e-9);
    if (done % every_ == 0 || done == total_) {
      if (tty_) std::printf("\r\033[K");
      std::printf("[%s] step %5lld/%lld  loss %.4f  %7.0f images/s\n", label_.c_str(),
                  static_cast<long long>(done), static_cast<long long>(total_), loss_sum_ / n_,
                  ips);
      loss_sum_ = 0;
      n_ = 0;
    }
    if (tty_ && (done % 10 == 0 || done == total_)) {
      const int width = 30;
      int fill = static_cast<int>(width * done / std::max<int64_t>(total_, 1));
      double eta = el / static_cast<double>(done) * static_cast<double>(total_ - done);
      std::printf("\r[%s] [%.*s%*s] %3lld%%  ETA %5.1f s", label_.c_str(), fill,
                  "##############################", width - fill, "",
                  static_cast<long long>(100 * done / std::max<int64_t>(total_, 1)), eta);
    }
    std::fflush(stdout);
  }
  void done() {
    if (tty_) std::printf("\r\033[K");
    std::fflush(stdout);
  }

 private:
  std::string label_;
  int64_t total_, batch_, every_;
  bool tty_;
  Clock::time_point t0_;
  double loss_sum_ = 0;
  int n_ = 0;
};

struct Result {
  std::string mode;
  double accuracy = 0, images_per_s = 0, train_s = 0, first_step_s = 0, peak_rss_mib = 0,
         kiln_peak_mib = 0;
  std::vector<double> losses;
};

struct Data {
  Tensor train_x, train_y, test_x, test_y;
  int64_t n_train = 0;
};

Tensor images(const Tensor& flat) { return flat.reshape({flat.size(0), 1, 28, 28}); }

// Batch b of the epoch's order, as [B, 1, 28, 28] images and [B] labels.
std::pair<Tensor, Tensor> batch_of(const Data& d, const std::vector<int64_t>& order, int64_t b,
                                   int64_t bs) {
  std::vector<int64_t> idx(order.begin() + b * bs, order.begin() + (b + 1) * bs);
  Tensor it = tensor(idx);
  return {images(index_select(d.train_x, 0, it)), index_select(d.train_y, 0, it)};
}

// Fraction of the test set `correct(images, labels)` gets right, in batches of 1000.
template <typename F>
double test_accuracy(const Data& d, F&& correct) {
  constexpr int64_t kEvalBatch = 1000;
  int64_t hits = 0, n = d.test_x.size(0);
  for (int64_t i = 0; i < n; i += kEvalBatch) {
    int64_t e = std::min(n, i + kEvalBatch);
    hits += correct(images(d.test_x.slice(0, i, e)), d.test_y.slice(0, i, e));
  }
  return static_cast<double>(hits) / static_cast<double>(n);
}

Result train_eager(const Args& a, const Data& d) {
  Result r{.mode = "eager"};
  manual_seed(a.seed);
  auto net = lenet();
  optim::SGD opt(net->parameters(), {.lr = a.lr, .momentum = a.momentum});
  reset_peak_memory();
  const int64_t steps = d.n_train / a.batch;
  for (int ep = 0; ep < a.epochs; ++ep) {
    auto t_epoch = Clock::now();
    auto order = permutation(d.n_train);
    net->train();
    Progress prog("eager epoch " + std::to_string(ep + 1), steps, a.batch, a.log_every);
    for (int64_t s = 0; s < steps; ++s) {
      auto t1 = Clock::now();
      auto [xb, yb] = batch_of(d, order, s, a.batch);
      opt.set_lr(lr_at(a, ep * steps + s, a.epochs * steps));
      Tensor loss = cross_entropy(net->forward(xb), yb);
      opt.zero_grad();
      loss.backward();
      opt.step();
      double l = loss.item<double>();
      if (ep == 0 && s == 0) r.first_step_s = secs_since(t1);
      r.losses.push_back(l);
      prog.step(s + 1, l);
    }
    prog.done();
    r.train_s += secs_since(t_epoch);
    // Test accuracy with the running statistics.
    NoGradGuard ng;
    net->eval();
    r.accuracy = test_accuracy(d, [&](const Tensor& x, const Tensor& y) {
      return nn::num_correct(net->forward(x), y).item<int64_t>();
    });
    std::printf("[eager] epoch %d: test accuracy %.2f%%\n", ep + 1, 100 * r.accuracy);
  }
  r.images_per_s = static_cast<double>(steps * a.epochs * a.batch) / r.train_s;
  r.kiln_peak_mib = static_cast<double>(allocator_stats().peak_in_use_bytes) / (1 << 20);
  r.peak_rss_mib = peak_rss_mib();
  return r;
}

Result train_jit(const Args& a, const Data& d) {
  Result r{.mode = "jit"};
  manual_seed(a.seed);
  auto net = lenet();
  const size_t np = net->parameters().size(), nb = net->buffers().size();
  const double mom = a.momentum;
  // state = [params..., buffers..., momentum buffers...]; returns the new state and the loss.
  // The learning rate is a run-time input (a 0-d tensor), so the schedule does not recompile.
  auto step = jit(
      [net, np, nb, mom](const std::vector<Tensor>& st, const Tensor& x, const Tensor& y,
                         const Tensor& lr) {
        std::vector<Tensor> ps,
            bs(st.begin() + static_cast<long>(np), st.begin() + static_cast<long>(np + nb));
        for (size_t i = 0; i < np; ++i) ps.push_back(st[i].detach().requires_grad_());
        nn::ParameterSwap swap(*net, ps, bs);
        net->train();
        Tensor loss = cross_entropy(net->forward(x), y);
        std::vector<Tensor> g = grad({loss}, ps);
        std::vector<Tensor> out(np), vel(np);
        for (size_t i = 0; i < np; ++i) {  // the update optim::SGD applies
          vel[i] = add(mul(st[np + nb + i], mom), g[i]);
          out[i] = sub(st[i], mul(vel[i], lr));
        }
        for (auto& b : net->buffers()) out.push_back(b);  // BatchNorm's new running statistics
        out.insert(out.end(), vel.begin(), vel.end());
        out.push_back(loss.detach());
        return out;
      },
      JitOptions{.runtime_scalars = {3}, .name = "cnn_train_step"});
  auto eval = jit(
      [net](const std::vector<Tensor>& ps, const std::vector<Tensor>& bs, const Tensor& x,
            const Tensor& y) {
        nn::ParameterSwap swap(*net, ps, bs);
        net->eval();
        return nn::num_correct(net->forward(x), y);
      },
      JitOptions{.name = "cnn_eval"});

  std::vector<Tensor> state;
  for (auto& p : net->parameters()) state.push_back(p.detach());
  for (auto& b : net->buffers()) state.push_back(b);
  for (auto& p : net->parameters()) state.push_back(zeros_like(p));
  reset_peak_memory();
  const int64_t steps = d.n_train / a.batch;
  for (int ep = 0; ep < a.epochs; ++ep) {
    auto t_epoch = Clock::now();
    auto order = permutation(d.n_train);
    Progress prog("jit epoch " + std::to_string(ep + 1), steps, a.batch, a.log_every);
    for (int64_t s = 0; s < steps; ++s) {
      auto t1 = Clock::now();
      auto [xb, yb] = batch_of(d, order, s, a.batch);
      std::vector<Tensor> out = step(state, xb, yb, lr_at(a, ep * steps + s, a.epochs * steps));
      double l = out.back().item<double>();
      out.pop_back();
      state = std::move(out);
      if (ep == 0 && s == 0) r.first_step_s = secs_since(t1);
      r.losses.push_back(l);
      prog.step(s + 1, l);
    }
    prog.done();
    r.train_s += secs_since(t_epoch);
    std::vector<Tensor> ps(state.begin(), state.begin() + static_cast<long>(np));
    std::vector<Tensor> bs(state.begin() + static_cast<long>(np),
                           state.begin() + static_cast<long>(np + nb));
    r.accuracy = test_accuracy(
        d, [&](const Tensor& x, const Tensor& y) { return eval(ps, bs, x, y).item<int64_t>(); });
    std::printf("[jit] epoch %d: test accuracy %.2f%%\n", ep + 1, 100 * r.accuracy);
  }
  r.images_per_s = static_cast<double>(steps * a.epochs * a.batch) / r.train_s;
  r.kiln_peak_mib = static_cast<double>(allocator_stats().peak_in_use_bytes) / (1 << 20);
  r.peak_rss_mib = peak_rss_mib();
  auto st = step.stats();
  std::printf(
      "[jit] train step: %lld compile(s), %lld hits, %lld graph breaks; eval: %lld "
      "compile(s)\n",
      static_cast<long long>(st.compiles), static_cast<long long>(st.hits),
      static_cast<long long>(st.graph_breaks), static_cast<long long>(eval.stats().compiles));
  return r;
}

// Traces one eval-mode forward into a Graph (parameters as named variables) and writes it.
void write_graph(const Args& a) {
  manual_seed(a.seed);
  auto net = lenet();
  Graph g;
  Tensor x = g.placeholder("images", Float32, {Dim::any(), 1, 28, 28});
  std::vector<Tensor> ps, bs;
  for (auto& [n, p] : net->named_parameters()) ps.push_back(g.variable(n, p.detach()));
  // The step counters (num_batches_tracked) are unused in eval mode: no dangling variables.
  for (auto& [n, b] : net->named_buffers())
    bs.push_back(is_floating(b.dtype()) ? g.variable(n, b) : b);
  nn::ParameterSwap swap(*net, ps, bs);
  net->eval();
  net->forward(x);
  const size_t nodes = g.nodes().size();
  auto write = [nodes](const std::string& path, const std::string& text, const char* what) {
    std::ofstream f(path);
    f << text;
    if (!f) {
      std::fprintf(stderr, "cnn_fashion_mnist: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    std::printf("wrote the model graph (%s, %zu nodes) to %s\n", what, nodes, path.c_str());
  };
  if (!a.mermaid.empty()) write(a.mermaid, g.to_mermaid(), "Mermaid");
  if (!a.dot.empty()) write(a.dot, g.to_dot(), "DOT");
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  Data d;
  {
    io::FashionMnist fm = io::load_fashion_mnist(a.data);
    d.train_x = fm.train_images;
    d.train_y = fm.train_labels;
    d.test_x = fm.test_images;
    d.test_y = fm.test_labels;
  }
  d.n_train = a.limit > 0 ? std::min(a.limit, d.train_x.size(0)) : d.train_x.size(0);
  if (d.n_train < a.batch) usage("--limit is smaller than one batch");
  {
    auto net = lenet();
    std::printf(
        "Kiln CNN on Fashion-MNIST: LeNet-5 + BatchNorm, %lld parameters; %lld training "
        "images x %d epoch(s), batch %lld, SGD lr %.3g (%s) momentum %.2g; %d threads\n",
        static_cast<long long>(net->num_parameters()), static_cast<long long>(d.n_train), a.epochs,
        static_cast<long long>(a.batch), a.lr, a.cosine ? "cosine decay" : "constant", a.momentum,
        get_num_threads());
  }
  if (!a.mermaid.empty() || !a.dot.empty()) write_graph(a);

  std::vector<Result> results;
  if (a.mode == "eager" || a.mode == "both") results.push_back(train_eager(a, d));
  if (a.mode == "jit" || a.mode == "both") results.push_back(train_jit(a, d));

  std::printf(
      "\n| mode  | test accuracy | images/s | train s | first step s | peak RSS MiB | "
      "Kiln peak MiB |\n|---|---|---|---|---|---|---|\n");
  bool ok = true;
  for (const auto& r : results) {
    std::printf("| %-5s | %12.2f%% | %8.0f | %7.1f | %12.3f | %12.0f | %13.1f |\n", r.mode.c_str(),
                100 * r.accuracy, r.images_per_s, r.train_s, r.first_step_s, r.peak_rss_mib,
                r.kiln_peak_mib);
    ok = ok && r.accuracy >= a.min_accuracy;
  }
  std::printf(
      "(peak RSS is the process's high-water mark so far, data set included; Kiln peak is "
      "the allocator's in-use peak during that mode)\n");
  if (results.size() == 2) {
    // Same seed, same batches: the two modes should take the same steps up to rounding.
    const auto &le = results[0].losses, &lj = results[1].losses;
    double worst = 0;
    size_t n = std::min<size_t>(std::min(le.size(), lj.size()), 20);
    for (size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::fabs(le[i] - lj[i]) / (1 + std::fabs(le[i])));
    std::printf(
        "eager vs jit: largest relative loss difference over the first %zu steps %.2e; "
        "final losses %.4f / %.4f\n",
        n, worst, le.back(), lj.back());
  }
  if (!ok) {
    std::printf("FAILED: test accuracy below --min-accuracy %.2f\n", a.min_accuracy);
    return 1;
  }
  return 0;
}
