// Data-parallel rows of the workload suite (issue #25), JSON lines as kiln_bench (rank 0 prints):
//   kiln_dist_bench W4|W7 THREADS [BUCKET_MB [overlap|no_overlap]]
//       one process (no launcher): the whole global batch on THREADS threads;
//       under `mpirun -np N`: each rank on global/N of the batch with DistributedDataParallel
//   kiln_dist_bench allreduce   (under mpirun): a 25 MB float32 bucket reduced by
//       kiln::dist::all_reduce beside MPI_Allreduce of the same buffer, interleaved
// The global batch is the design's (W4: 128, W7: 16), so steps/s compare one process on two
// threads with two processes on one thread each. bench/run DIST runs the set.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/bench_util.h"
#include "examples/text_lm_common.h"
#include "kiln/dist/comm_thread.h"
#include "kiln/dist/ddp.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

using namespace kiln;
using namespace kiln::bench;

namespace {

// Every rank runs the same number of steps: rank 0 calibrates and broadcasts the count.
int64_t agreed(int64_t n) {
  Tensor t = tensor(std::vector<int64_t>{n});
  dist::broadcast(t, 0);
  return t.item<int64_t>();
}

// Median seconds per call of f over `rounds` rounds of `inner` calls, each round started
// together on every rank (a barrier), measured on this rank.
double timed(const std::function<void()>& f, int rounds) {
  for (int i = 0; i < 3; ++i) f();
  int64_t inner = 1;
  {
    double t0 = now_s();
    f();
    inner = std::max<int64_t>(1, static_cast<int64_t>(0.3 / std::max(now_s() - t0, 1e-6)));
  }
  inner = agreed(inner);
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    dist::barrier();
    double t0 = now_s();
    for (int64_t i = 0; i < inner; ++i) f();
    dist::barrier();  // the slowest rank bounds the step
    t.push_back((now_s() - t0) / static_cast<double>(inner));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string layout(int threads, double bucket_mb, bool overlap) {
  if (dist::world_size() == 1) return "1proc_x" + std::to_string(threads) + "thr";
  char b[96];
  std::snprintf(b, sizeof b, "%dproc_x%dthr_%s_b%gMB", dist::world_size(), threads,
                overlap ? "overlap" : "no_overlap", bucket_mb);
  return b;
}

// Runs `step` (which trains on this rank's shard) and emits global steps/s on rank 0.
void train_rows(const char* w, const char* name, const std::string& params, nn::Module& model,
                const std::function<void()>& step, int threads, double bucket_mb, bool overlap) {
  std::unique_ptr<dist::DDP> ddp;
  if (dist::world_size() > 1)
    ddp = std::make_unique<dist::DDP>(
        model, dist::DDPOptions{.bucket_cap_mb = bucket_mb, .overlap = overlap});
  double s = timed(step, 7);
  if (dist::is_main()) {
    std::string p = params.substr(0, params.size() - 1) + ", \"note\": \"" +
                    std::to_string(ddp ? ddp->buckets().size() : 0) + " bucket(s)\"}";
    emit(w, name, "kiln", layout(threads, bucket_mb, overlap), dist::world_size() * threads, p,
         "steps/s", 1.0 / s);
  }
}

void w4(int threads, double bucket_mb, bool overlap) {
  const int64_t global = 128, B = global / dist::world_size();
  manual_seed(4);
  nn::Sequential net;
  net.emplace_back<nn::Linear>(784, 256);
  net.emplace_back<nn::ReLU>();
  net.emplace_back<nn::Linear>(256, 256);
  net.emplace_back<nn::ReLU>();
  net.emplace_back<nn::Linear>(256, 10);
  manual_seed(40 + static_cast<uint64_t>(dist::rank()));  // each rank its own shard
  Tensor x = rand({B, 784}), y = randint(0, 10, {B});
  optim::SGD opt(net.parameters(), 0.01);
  train_rows(
      "W4", "mlp_train_step_dp", "{\"global_batch\": 128, \"layers\": [784, 256, 256, 10]}", net,
      [&] {
        Tensor loss = cross_entropy(net.forward(x), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
      },
      threads, bucket_mb, overlap);
}

void w7(int threads, double bucket_mb, bool overlap) {
  const int64_t global = 16, B = global / dist::world_size(), T = 64, V = 96;
  manual_seed(7);
  lm::GPT net(V, T, 128, 4, 2);
  manual_seed(70 + static_cast<uint64_t>(dist::rank()));
  Tensor x = randint(0, V, {B, T}), y = randint(0, V, {B, T});
  optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  train_rows(
      "W7", "gpt_mini_train_step_dp",
      "{\"global_batch\": 16, \"blocks\": 2, \"d\": 128, \"seq\": 64, \"opt\": \"adamw\"}", net,
      [&] {
        Tensor lg = net.logits(x);
        Tensor loss = cross_entropy(reshape(lg, {B * T, V}), reshape(y, {B * T}));
        opt.zero_grad();
        loss.backward();
        opt.step();
      },
      threads, bucket_mb, overlap);
}

// A 25 MB bucket: kiln::dist's all_reduce from the caller's thread (queue, communication
// thread, back), beside MPI_Allreduce timed on the communication thread itself, interleaved.
void allreduce_rows() {
  const int64_t bytes = 25 * 1024 * 1024, n = bytes / 4;
  Tensor buf = ones({n});
  float* p = buf.data_ptr<float>();
  const int reps = 10, rounds = 7;
  std::vector<double> tk, tkm, tm;
  auto kiln_once = [&](dist::ReduceOp op) {
    dist::barrier();
    double t0 = now_s();
    for (int i = 0; i < reps; ++i) dist::all_reduce(buf, op);
    return (now_s() - t0) / reps;
  };
  auto mpi_once = [&] {
    dist::barrier();
    double dt = 0;
    detail::run_on_comm_thread([&] {
      double t0 = MPI_Wtime();
      for (int i = 0; i < reps; ++i)
        MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      dt = (MPI_Wtime() - t0) / reps;
    }).wait();
    return dt;
  };
  kiln_once(dist::ReduceOp::Sum), mpi_once();  // warm-up: pages, shared-memory segments
  for (int r = 0; r < rounds; ++r) {           // alternating which goes first
    if (r % 2) tm.push_back(mpi_once());
    tk.push_back(kiln_once(dist::ReduceOp::Sum));
    if (r % 2 == 0) tm.push_back(mpi_once());
    tkm.push_back(kiln_once(dist::ReduceOp::Mean));
  }
  // Every rank's median: the collective takes as long as its slowest rank.
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    Tensor t = tensor(std::vector<double>{v[v.size() / 2]});
    std::vector<double> all = dist::all_gather(t).to_vector<double>();
    return *std::max_element(all.begin(), all.end());
  };
  double mk = med(tk), mkm = med(tkm), mm = med(tm);
  if (!dist::is_main()) return;
  std::string params = "{\"bytes\": " + std::to_string(bytes) +
                       ", \"ranks\": " + std::to_string(dist::world_size()) + "}";
  const int t = dist::world_size();
  emit("DIST", "allreduce_25MB", "mpi", "MPI_Allreduce", t, params, "GB/s", bytes / mm / 1e9);
  emit("DIST", "allreduce_25MB", "kiln", "all_reduce_sum", t, params, "GB/s", bytes / mk / 1e9);
  emit("DIST", "allreduce_25MB", "kiln", "all_reduce_mean", t, params, "GB/s", bytes / mkm / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: kiln_dist_bench W4|W7 THREADS [BUCKET_MB [overlap|no_overlap]] | "
                 "allreduce\n");
    return 2;
  }
  dist::init();
  const std::string w = argv[1];
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const double bucket_mb = argc > 3 ? std::atof(argv[3]) : 25.0;
  const bool overlap = !(argc > 4 && std::string(argv[4]) == "no_overlap");
  set_num_threads(threads);
  if (w == "W4")
    w4(threads, bucket_mb, overlap);
  else if (w == "W7")
    w7(threads, bucket_mb, overlap);
  else if (w == "allreduce" && dist::world_size() > 1)
    allreduce_rows();
  else {
    std::fprintf(stderr, "kiln_dist_bench: unknown workload %s (allreduce needs mpirun)\n",
                 w.c_str());
    return 2;
  }
  return 0;
}
