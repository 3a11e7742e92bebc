// A data-parallel training loop that fails on purpose, run by test_dist_failure under
// `mpirun -np 2`: rank 1 is killed (SIGKILL), raises an uncaught kiln::Error, or stops calling
// collectives, at step 3 of DDP training. The test checks that the job ends, non-zero, with a
// message, in bounded time, instead of rank 0 waiting forever in its all-reduce.
//   dist_failure_worker kill|raise|stall
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "kiln/dist/ddp.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

using namespace kiln;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "kill";
  dist::init();
  manual_seed(1);
  nn::Sequential net;
  net.emplace_back<nn::Linear>(32, 64);
  net.emplace_back<nn::ReLU>();
  net.emplace_back<nn::Linear>(64, 4);
  dist::DDP ddp(net, {.bucket_cap_mb = 0.004});
  optim::SGD opt(net.parameters(), 0.01);
  Tensor x = randn({16, 32}), y = randn({16, 4});
  for (int step = 0; step < 1000000; ++step) {
    if (step == 3 && dist::rank() == 1) {
      std::fprintf(stderr, "[worker] rank 1: failing on purpose (%s) at step 3\n", mode.c_str());
      std::fflush(stderr);
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "raise") fail("worker", "an error on rank 1 at step 3");
      if (mode == "stall") std::this_thread::sleep_for(std::chrono::seconds(120));
    }
    Tensor d = sub(net.forward(x), y);
    opt.zero_grad();
    mean(mul(d, d)).backward();  // rank 0 waits here for rank 1's gradients
    opt.step();
  }
  return 0;
}
