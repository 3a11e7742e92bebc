// The process group over MPI: one communication thread makes every MPI call (MPI_THREAD_FUNNELED,
// which every MPI supports), taking collectives from a FIFO queue, so that all ranks issue them
// in the order the program did and the caller's thread keeps computing meanwhile (backward,
// while a gradient bucket is reduced). A watchdog ends a process whose collective does not
// complete in time; mpirun then ends the job, so a dead or stalled peer never hangs the others.
#include "kiln/dist/dist.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/dist/comm_thread.h"
#include "kiln/ops/collective.h"

namespace kiln::dist {

struct Work::State {
  const char* name = "";  // heads errors: "[all_reduce] ..."
  std::string what;       // what the watchdog names: "all_reduce of float32[1000] (4000 bytes)"
  std::function<void()> run;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;
};

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct World {
  std::once_flag once;
  bool launched = false;
  std::atomic<bool> finalized{false};
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  double timeout = 300;
  MPI_Comm comm = MPI_COMM_NULL;
  std::thread worker, watchdog;
  std::mutex mu;  // guards q, stop, current
  std::condition_variable cv, watchdog_cv;
  std::deque<std::shared_ptr<Work::State>> q;
  bool stop = false;
  std::shared_ptr<Work::State> current;
  std::atomic<int64_t> busy_since{0};  // steady-clock ns when the running collective started
};

World& world() {
  static World w;
  return w;
}

// The launcher's environment: OpenMPI's mpirun, or a PMI launcher (MPICH's hydra, Slurm).
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

MPI_Datatype mpi_type(DType t, const char* op) {
  switch (t) {
    case Float32:
      return MPI_FLOAT;
    case Float64:
      return MPI_DOUBLE;
    case Int64:
      return MPI_INT64_T;
    case Int32:
      return MPI_INT32_T;
    case Bool:
      return MPI_C_BOOL;
    case Int8:
      return MPI_INT8_T;
    case UInt8:
      return MPI_UINT8_T;
    case Int16:
      return MPI_INT16_T;
    case Float16:
    case BF16:
      break;  // MPI has no 2-byte float to reduce
  }
  fail(op, "unsupported dtype ", t);
}

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(buf, len));
}

std::string describe(const char* op, const Tensor& t) {
  std::ostringstream os;
  os << op << " of " << t.dtype() << t.shape() << " (" << t.numel() * t.element_size() << " bytes)";
  return os.str();
}

// MPI counts are int: large buffers go in chunks.
constexpr int64_t kMaxChunk = INT_MAX / 2;

void worker_main(World* w, std::promise<std::string>* ready) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    ready->set_value("MPI_Init_thread failed");
    return;
  }
  // A private communicator whose errors come back as codes (raised by wait()) instead of
  // aborting inside MPI without a word about which collective failed.
  MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
  MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->comm, &w->rank);
  MPI_Comm_size(w->comm, &w->size);
  MPI_Comm local;
  MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &w->local_rank);
  MPI_Comm_size(local, &w->local_size);
  MPI_Comm_free(&local);
  ready->set_value("");
  for (;;) {
    std::shared_ptr<Work::State> s;
    {
      std::unique_lock<std::mutex> lk(w->mu);
      w->cv.wait(lk, [&] { return w->stop || !w->q.empty(); });
      if (w->q.empty()) break;  // stop requested and nothing left
      s = std::move(w->q.front());
      w->q.pop_front();
      w->current = s;
    }
    w->busy_since.store(now_ns());
    std::string err;
    try {
      s->run();
    } catch (const std::exception& e) {
      err = e.what();
    }
    w->busy_since.store(0);
    {
      std::lock_guard<std::mutex> lk(w->mu);
      w->current.reset();
    }
    {
      std::lock_guard<std::mutex> lk(s->mu);
      s->done = true;
      s->error = std::move(err);
      s->run = nullptr;  // drops the tensors it held
    }
    s->cv.notify_all();
  }
  MPI_Comm_free(&w->comm);
  MPI_Finalize();
}

void watchdog_main(World* w) {
  std::unique_lock<std::mutex> lk(w->mu);
  while (!w->stop) {
    w->watchdog_cv.wait_for(lk, std::chrono::milliseconds(200));
    int64_t since = w->busy_since.load();
    if (since == 0 || (now_ns() - since) * 1e-9 < w->timeout) continue;
    std::string what = w->current ? w->current->what : "a collective";
    std::fprintf(stderr,
                 "[dist] rank %d of %d: %s did not complete within %.0f s (KILN_DIST_TIMEOUT): "
                 "another rank has probably died, raised an error or stopped calling "
                 "collectives; ending this process so that the launcher ends the job\n",
                 w->rank, w->size, what.c_str(), w->timeout);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

Work completed_work() {
  auto s = std::make_shared<Work::State>();
  s->done = true;
  return Work(std::move(s));
}

Work submit(const char* name, std::string what, std::function<void()> run) {
  World& w = world();
  if (w.finalized.load()) fail(name, "the process group was finalized");
  auto s = std::make_shared<Work::State>();
  s->name = name;
  s->what = std::move(what);
  s->run = std::move(run);
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.q.push_back(s);
  }
  w.cv.notify_one();
  return Work(std::move(s));
}

// Reduces in place on the communication thread (the caller keeps the tensor alive).
void reduce_buffer(const Tensor& t, ReduceOp op) {
  World& w = world();
  MPI_Datatype dt = mpi_type(t.dtype(), "all_reduce");
  char* p = static_cast<char*>(t.raw_data());
  const int64_t n = t.numel(), es = static_cast<int64_t>(t.element_size());
  for (int64_t b = 0; b < n; b += kMaxChunk) {
    int c = static_cast<int>(std::min(kMaxChunk, n - b));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, p + b * es, c, dt, MPI_SUM, w.comm), "MPI_Allreduce");
  }
  if (op == ReduceOp::Mean && w.size > 1) {
    if (t.dtype() == Float32) {
      float* f = t.data_ptr<float>();
      const float d = static_cast<float>(w.size);
      for (int64_t i = 0; i < n; ++i) f[i] /= d;
    } else {
      double* f = t.data_ptr<double>();
      const double d = static_cast<double>(w.size);
      for (int64_t i = 0; i < n; ++i) f[i] /= d;
    }
  }
}

void check_buffer(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "tensor is undefined");
  if (t.is_dead()) fail(op, "tensor is dead (the untaken side of a switch)");
  if (!t.is_concrete())
    fail(op, "needs a concrete tensor, got a symbolic ", t.dtype(), t.shape(),
         (std::string(op) == "all_reduce" ? "" : " (only all_reduce has a graph op)"));
  if (!t.is_contiguous())
    fail(op, "needs a contiguous tensor, got a strided view of ", t.dtype(), t.shape(),
         "; call .contiguous() and copy back");
}

void check_reduce(const Tensor& t, ReduceOp op) {
  check_buffer("all_reduce", t);
  if (t.dtype() == Bool) fail("all_reduce", "cannot sum bool tensors (shape ", t.shape(), ")");
  if (op == ReduceOp::Mean && !is_floating(t.dtype()))
    fail("all_reduce", "mean needs a float32 or float64 tensor, got ", t.dtype(), t.shape(),
         "; reduce with Sum and divide");
}

// The graph op's transport (kiln/ops/collective.h): the op's kernel blocks on the result.
void graph_hook(Tensor& buf, const std::string& op) {
  ReduceOp r = op == "mean" ? ReduceOp::Mean : ReduceOp::Sum;
  if (world().launched) all_reduce_async(buf, r).wait();
}

void on_terminate() {
  std::string msg = "no active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      msg = x.what();
    } catch (...) {
      msg = "an exception that is not a std::exception";
    }
  }
  std::fprintf(stderr, "[dist] rank %d of %d: terminating: %s\n", world().rank, world().size,
               msg.c_str());
  std::fflush(stderr);
  std::abort();  // no MPI_Finalize: mpirun sees the abnormal exit and ends the other ranks
}

}  // namespace

void Work::wait() const {
  if (!s_) return;
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->cv.wait(lk, [&] { return s_->done; });
  if (!s_->error.empty()) fail(s_->name, s_->error, " (", s_->what, ")");
}

bool Work::completed() const {
  if (!s_) return true;
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->done;
}

void init() {
  World& w = world();
  std::call_once(w.once, [&] {
    if (const char* t = std::getenv("KILN_DIST_TIMEOUT")) {
      char* end = nullptr;
      double v = std::strtod(t, &end);
      if (end == t || !(v > 0))
        fail("dist::init", "KILN_DIST_TIMEOUT must be a positive number of seconds, got '", t, "'");
      w.timeout = v;
    }
    if (!launched_by_mpi()) return;  // world of one: every collective is a no-op
    // The communication thread shares the cores with the compute threads by design; OpenMPI's
    // default busy-polling inside a collective then takes a core from backward (and from the
    // other rank). Yielding when idle, W7 on 2 ranks x 1 thread, 0.5 MB buckets, 2-core dev VM:
    // overlapped 74.8 -> 100.5 steps/s; under load 9 (other builds) medians 12.1 -> 25.3
    // overlapped, 11.4 -> 27.6 not. A value the user set is kept.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    std::promise<std::string> ready;
    std::future<std::string> f = ready.get_future();
    w.worker = std::thread(worker_main, &w, &ready);
    std::string err = f.get();
    if (!err.empty()) {
      w.worker.join();
      fail("dist::init", err);
    }
    w.launched = true;
    w.watchdog = std::thread(watchdog_main, &w);
    detail::set_collective_hook(graph_hook);
    std::set_terminate(on_terminate);
    std::atexit([] { finalize(); });
  });
}

bool launched() { return world().launched; }
int rank() { return world().rank; }
int world_size() { return world().size; }
int local_rank() { return world().local_rank; }
int local_world_size() { return world().local_size; }
double timeout_s() { return world().timeout; }

void finalize() {
  World& w = world();
  if (!w.launched || w.finalized.exchange(true)) return;
  detail::set_collective_hook(nullptr);
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.stop = true;
  }
  w.cv.notify_all();
  w.watchdog_cv.notify_all();
  // The worker drains the queue first, so collectives already started complete everywhere.
  if (w.worker.joinable()) w.worker.join();
  if (w.watchdog.joinable()) w.watchdog.join();
}

Work all_reduce_async(Tensor& t, ReduceOp op) {
  check_reduce(t, op);
  if (!world().launched || t.numel() == 0) return completed_work();
  Tensor keep = t;
  return submit("all_reduce", describe("all_reduce", t), [keep, op] { reduce_buffer(keep, op); });
}

void all_reduce(Tensor& t, ReduceOp op) {
  if (t.defined() && t.is_symbolic()) {
    t = detail::all_reduce_value(t, op == ReduceOp::Mean ? "mean" : "sum");
    return;
  }
  all_reduce_async(t, op).wait();
}

Work broadcast_async(Tensor& t, int root) {
  check_buffer("broadcast", t);
  World& w = world();
  if (root < 0 || root >= w.size)
    fail("broadcast", "root ", root, " is not a rank of this world of ", w.size);
  if (!w.launched || t.numel() == 0) return completed_work();
  Tensor keep = t;
  return submit("broadcast", describe("broadcast", t), [keep, root] {
    World& w = world();
    MPI_Datatype dt = mpi_type(keep.dtype(), "broadcast");
    char* p = static_cast<char*>(keep.raw_data());
    const int64_t n = keep.numel(), es = static_cast<int64_t>(keep.element_size());
    for (int64_t b = 0; b < n; b += kMaxChunk) {
      int c = static_cast<int>(std::min(kMaxChunk, n - b));
      check_mpi(MPI_Bcast(p + b * es, c, dt, root, w.comm), "MPI_Bcast");
    }
  });
}

void broadcast(Tensor& t, int root) { broadcast_async(t, root).wait(); }

Work all_gather_async(const Tensor& t, Tensor& out) {
  check_buffer("all_gather", t);
  check_buffer("all_gather", out);
  World& w = world();
  Shape want;
  want.push_back(w.size);
  for (int64_t d : t.shape()) want.push_back(d);
  if (out.shape() != want || out.dtype() != t.dtype())
    fail("all_gather", "out must be ", t.dtype(), want, " for input ", t.dtype(), t.shape(),
         ", got ", out.dtype(), out.shape());
  if (!w.launched) {
    if (t.numel())
      std::memcpy(out.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * t.element_size());
    return completed_work();
  }
  Tensor in = t, o = out;
  return submit("all_gather", describe("all_gather", t), [in, o] {
    World& w = world();
    // Every rank first learns every rank's dtype and shape, so a mismatch raises on all of them
    // (naming the ranks) instead of corrupting or hanging inside MPI.
    std::vector<int64_t> sig{static_cast<int64_t>(in.dtype()), in.dim()};
    for (int64_t d : in.shape()) sig.push_back(d);
    sig.resize(8 + 2, -1);
    if (in.dim() > 8) sig[9] = in.numel();  // rank > 8: compare the element count only
    std::vector<int64_t> all(sig.size() * static_cast<size_t>(w.size));
    check_mpi(MPI_Allgather(sig.data(), static_cast<int>(sig.size()), MPI_INT64_T, all.data(),
                            static_cast<int>(sig.size()), MPI_INT64_T, w.comm),
              "MPI_Allgather");
    for (int r = 1; r < w.size; ++r)
      if (!std::equal(all.begin(), all.begin() + static_cast<int64_t>(sig.size()),
                      all.begin() + static_cast<int64_t>(r * sig.size())))
        throw std::runtime_error("rank " + std::to_string(r) +
                                 "'s tensor differs from rank 0's in shape or dtype");
    if (in.numel() == 0) return;
    if (in.numel() > kMaxChunk)
      throw std::runtime_error("tensors over 2^30 elements are not gathered yet");
    MPI_Datatype dt = mpi_type(in.dtype(), "all_gather");
    int c = static_cast<int>(in.numel());
    check_mpi(MPI_Allgather(in.raw_data(), c, dt, o.raw_data(), c, dt, w.comm), "MPI_Allgather");
  });
}

Tensor all_gather(const Tensor& t) {
  check_buffer("all_gather", t);
  Shape s;
  s.push_back(world().size);
  for (int64_t d : t.shape()) s.push_back(d);
  Tensor out = empty(s, t.dtype());
  all_gather_async(t, out).wait();
  return out;
}

Work barrier_async() {
  if (!world().launched) return completed_work();
  return submit("barrier", "barrier", [] { check_mpi(MPI_Barrier(world().comm), "MPI_Barrier"); });
}

void barrier() { barrier_async().wait(); }

}  // namespace kiln::dist

namespace kiln::detail {

dist::Work run_on_comm_thread(std::function<void()> fn) {
  if (!dist::world().launched) fail("run_on_comm_thread", "no launcher: MPI is not running");
  return dist::submit("run_on_comm_thread", "a call on the communication thread", std::move(fn));
}

}  // namespace kiln::detail
