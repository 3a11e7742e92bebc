// The Fashion-MNIST CNN of `make demo` (LeNet-5 + BatchNorm) trained data-parallel: launch with
//   mpirun -np 2 ./build/release/examples/ddp_cnn [--mode eager|jit] [--epochs N] [--limit N]
//          [--batch N] [--lr X] [--seed N] [--min-accuracy X] [--save FILE] [--data DIR]
// Each rank trains on its DistributedSampler shard of every epoch, with a per-rank batch of
// batch / ranks (the global batch stays --batch); DistributedDataParallel averages the gradients
// (eager), or the jitted training step holds one all_reduce node per bucket (jit). Only rank 0
// logs, shows progress, evaluates and saves the checkpoint. BatchNorm's running statistics are
// averaged across ranks before evaluation and saving. Without mpirun it runs as one process.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/dist/ddp.h"
#include "kiln/dist/sampler.h"
#include "kiln/io/idx.h"
#include "kiln/io/progress.h"
#include "kiln/io/safetensors.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

using namespace kiln;

namespace {

struct Args {
  std::string mode = "eager";
  int epochs = 1;
  int64_t limit = 0, batch = 64;
  double lr = 0.05, momentum = 0.9, min_accuracy = 0;
  uint64_t seed = 0;
  std::string save, data = "/usr/share/datasets/fashion-mnist";
};

[[noreturn]] void usage(const char* msg) {
  if (dist::is_main())
    std::fprintf(stderr,
                 "ddp_cnn: %s\nusage: mpirun -np N ddp_cnn [--mode eager|jit] [--epochs N] "
                 "[--limit N] [--batch N] [--lr X] [--seed N] [--min-accuracy X] [--save FILE] "
                 "[--data DIR]\n",
                 msg);
  std::exit(2);  // every rank parses the same arguments, so every rank exits here
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
    else if (k == "--seed")
      a.seed = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--min-accuracy")
      a.min_accuracy = std::atof(val().c_str());
    else if (k == "--save")
      a.save = val();
    else if (k == "--data")
      a.data = val();
    else
      usage(("unknown option " + k).c_str());
  }
  if (a.mode != "eager" && a.mode != "jit") usage("--mode must be eager or jit");
  if (a.epochs < 1 || a.batch % dist::world_size() != 0)
    usage("--epochs must be >= 1 and --batch a multiple of the number of ranks");
  return a;
}

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

Tensor images(const Tensor& flat) { return flat.reshape({flat.size(0), 1, 28, 28}); }

// Each rank's BatchNorm statistics saw only its shard: their mean is what one process on the
// whole data would have estimated (exactly for the means, closely for the variances).
void average_buffers(nn::Module& m) {
  for (Tensor b : m.buffers())
    if (b.defined() && is_floating(b.dtype())) dist::all_reduce(b, dist::ReduceOp::Mean);
}

}  // namespace

int main(int argc, char** argv) {
  dist::init();
  Args a = parse(argc, argv);
  const int ranks = dist::world_size();
  const int64_t local_batch = a.batch / ranks;
  io::FashionMnist fm = io::load_fashion_mnist(a.data);
  const int64_t n_train =
      a.limit > 0 ? std::min(a.limit, fm.train_images.size(0)) : fm.train_images.size(0);
  manual_seed(a.seed);  // the same initialization everywhere (DDP broadcasts rank 0's anyway)
  auto net = lenet();
  dist::DDP ddp(*net);
  dist::DistributedSampler sampler(n_train, {.seed = a.seed});
  const int64_t steps = sampler.num_samples() / local_batch;
  if (steps < 1) usage("--limit leaves less than one batch per rank");
  if (dist::is_main())
    std::printf(
        "ddp_cnn: LeNet-5 + BatchNorm, %lld parameters, %s; %d rank(s) x %d thread(s); %lld "
        "training images x %d epoch(s), global batch %lld (%lld per rank), %lld steps per "
        "epoch, %zu gradient bucket(s)\n",
        static_cast<long long>(net->num_parameters()), a.mode.c_str(), ranks, get_num_threads(),
        static_cast<long long>(n_train), a.epochs, static_cast<long long>(a.batch),
        static_cast<long long>(local_batch), static_cast<long long>(steps), ddp.buckets().size());

  optim::SGD opt(net->parameters(), {.lr = a.lr, .momentum = a.momentum});
  // The jitted step: parameters, BatchNorm buffers and momentum in, their new values out; the
  // gradients are averaged inside the compiled step (one all_reduce node per bucket).
  const size_t np = net->parameters().size(), nb = net->buffers().size();
  auto jstep = jit(
      [&](const std::vector<Tensor>& st, const Tensor& x, const Tensor& y, const Tensor& lr) {
        std::vector<Tensor> ps,
            bs(st.begin() + static_cast<long>(np), st.begin() + static_cast<long>(np + nb));
        for (size_t i = 0; i < np; ++i) ps.push_back(st[i].detach().requires_grad_());
        nn::ParameterSwap swap(*net, ps, bs);
        Tensor loss = cross_entropy(net->forward(x), y);
        std::vector<Tensor> g = grad({loss}, ps);
        ddp.average_gradients(g);
        std::vector<Tensor> out(np), vel(np);
        for (size_t i = 0; i < np; ++i) {  // what optim::SGD with momentum does
          vel[i] = add(mul(st[np + nb + i], a.momentum), g[i]);
          out[i] = sub(st[i], mul(vel[i], lr));
        }
        for (auto& b : net->buffers()) out.push_back(b);
        out.insert(out.end(), vel.begin(), vel.end());
        out.push_back(loss.detach());
        return out;
      },
      JitOptions{.runtime_scalars = {3}, .name = "ddp_cnn_step"});
  std::vector<Tensor> state;
  if (a.mode == "jit") {
    for (const Tensor& p : net->parameters()) state.push_back(p.detach());
    for (const Tensor& b : net->buffers()) state.push_back(b);
    for (const Tensor& p : net->parameters()) state.push_back(zeros_like(p.detach()));
  }

  double accuracy = 0;
  for (int ep = 0; ep < a.epochs; ++ep) {
    sampler.set_epoch(ep);
    Tensor order = sampler.indices_tensor();
    net->train();
    std::unique_ptr<io::Progress> prog;
    if (dist::is_main())
      prog = std::make_unique<io::Progress>(steps, "epoch " + std::to_string(ep + 1));
    for (int64_t s = 0; s < steps; ++s) {
      const double lr = a.lr * 0.5 *
                        (1 + std::cos(M_PI * static_cast<double>(ep * steps + s) /
                                      static_cast<double>(a.epochs * steps)));
      Tensor idx = order.slice(0, s * local_batch, (s + 1) * local_batch);
      Tensor x = images(index_select(fm.train_images, 0, idx));
      Tensor y = index_select(fm.train_labels, 0, idx);
      Tensor loss;
      if (a.mode == "eager") {
        opt.set_lr(lr);
        loss = cross_entropy(net->forward(x), y);
        opt.zero_grad();
        loss.backward();  // averaged gradients in .grad() when it returns
        opt.step();
      } else {
        std::vector<Tensor> r = jstep(state, x, y, lr);
        loss = r.back();
        r.pop_back();
        state = std::move(r);
      }
      if (prog) prog->update(s + 1, {{"loss", loss.item<double>()}, {"lr", lr}});
    }
    if (prog) prog->finish();
    if (a.mode == "jit") {  // the trained state back into the module
      NoGradGuard ng;
      auto params = net->parameters();
      auto bufs = net->buffers();
      for (size_t i = 0; i < np; ++i) params[i].copy_(state[i]);
      for (size_t i = 0; i < nb; ++i) bufs[i].copy_(state[np + i]);
    }
    average_buffers(*net);
    if (dist::is_main()) {
      NoGradGuard ng;
      net->eval();
      int64_t hits = 0, n = fm.test_images.size(0);
      for (int64_t i = 0; i < n; i += 1000) {
        int64_t e = std::min(n, i + 1000);
        hits += nn::num_correct(net->forward(images(fm.test_images.slice(0, i, e))),
                                fm.test_labels.slice(0, i, e))
                    .item<int64_t>();
      }
      accuracy = static_cast<double>(hits) / static_cast<double>(n);
      std::printf("epoch %d: test accuracy %.2f%%\n", ep + 1, 100 * accuracy);
      std::fflush(stdout);
    }
  }
  if (a.mode == "jit" && dist::is_main())
    std::printf("jit: %lld compile(s), %lld graph break(s)\n",
                static_cast<long long>(jstep.stats().compiles),
                static_cast<long long>(jstep.stats().graph_breaks));
  if (dist::is_main() && !a.save.empty()) {
    io::save_safetensors(a.save, net->state_dict());
    std::printf("saved the model to %s\n", a.save.c_str());
  }
  // Every rank returns rank 0's verdict, so mpirun's exit status is the run's.
  Tensor ok = scalar_tensor(accuracy >= a.min_accuracy ? 1.0 : 0.0, Float64);
  dist::broadcast(ok, 0);
  if (ok.item<double>() < 1) {
    if (dist::is_main())
      std::printf("FAILED: test accuracy below --min-accuracy %.2f\n", a.min_accuracy);
    return 1;
  }
  return 0;
}
