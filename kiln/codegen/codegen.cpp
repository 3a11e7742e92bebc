// Fused-group codegen: emit C++ from each instruction's OpDef::expr, compile it with the
// system compiler, dlopen it, and keep it in a disk cache keyed by a hash of source + options.
// A cache entry is <key>.so plus <key>.sum (a checksum of the .so): an entry whose checksum does
// not match is rebuilt, never loaded. Installs itself as the fused op's compiler hook.
// The prelude every kernel starts with (vector math and the standard headers) is precompiled once
// per cache directory and compiler: parsing it was ~60% of a kernel's compile.
// Background compiles run at the lowest CPU priority and in batches (one compiler process for
// every kernel queued together): they must never slow down the computation that interprets
// meanwhile (on 2 cores a compiler at normal priority took the CNN demo's jit epoch from
// eager's speed to a third of it).
#include "kiln/codegen/codegen.h"

#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "kiln_prelude_vec_math.h"

using namespace kiln::detail;

namespace kiln::detail::codegen {
namespace {

// 512-bit vectors where the CPU has them (GCC's -march=native prefers 256 bits even there; a fused
// gelu is bound by vector-op throughput: W2 30 -> 35 GB/s at 2 threads). No FMA contraction:
// a group's kernel must give the interpreter's bits (one rounding per op), because a session
// interprets until its kernel is compiled in the background, and contracting x * s + b across
// two ops made the same Session's first and later runs differ in the last bit (resnet_bn's
// batch norm in CI). vec_math spells its own multiply-adds as std::fma, so it is unaffected.
const char* kFlags =
    "-O3 -march=native -mprefer-vector-width=512 -ffp-contract=off -std=c++20 -fPIC -shared "
    "-fno-math-errno -fno-trapping-math -w";

// Functions the ops' `expr` strings call, over float and double.
const char* kExprPrelude = R"(
namespace fused_kernel {
template <class T> [[gnu::always_inline]] inline T exp(T x) { return kiln::vec_math::exp<T>(x); }
template <class T> [[gnu::always_inline]] inline T tanh(T x) { return kiln::vec_math::tanh<T>(x); }
template <class T> [[gnu::always_inline]] inline T erf(T x) { return kiln::vec_math::erf<T>(x); }
template <class T> [[gnu::always_inline]] inline T sigmoid(T x) { return kiln::vec_math::sigmoid<T>(x); }
template <class T> [[gnu::always_inline]] inline T log(T x) { return std::log(x); }
template <class T> [[gnu::always_inline]] inline T sqrt(T x) { return std::sqrt(x); }
template <class T> [[gnu::always_inline]] inline T pow(T a, T b) { return static_cast<T>(std::pow(a, b)); }
template <class T> [[gnu::always_inline]] inline T abs(T x) { return x < 0 ? -x : x; }
template <class T> [[gnu::always_inline]] inline T sign(T x) { return T((x > 0) - (x < 0)); }
template <class T> [[gnu::always_inline]] inline T relu(T x) { return x <= T(0) ? T(0) : x; }
template <class T> [[gnu::always_inline]] inline T silu(T x) { return x * sigmoid<T>(x); }
template <class T> [[gnu::always_inline]] inline T max(T a, T b) { return a != a ? a : (a > b ? a : b); }
template <class T> [[gnu::always_inline]] inline T min(T a, T b) { return a != a ? a : (a < b ? a : b); }
template <class T> [[gnu::always_inline]] inline T clamp(T x, double lo, double hi) {
  return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
}
template <class T> [[gnu::always_inline]] inline T leaky_relu(T x, double s) { return x < T(0) ? x * T(s) : x; }
template <class T> [[gnu::always_inline]] inline T gelu(T x, double approximate) {
  return approximate != 0 ? kiln::vec_math::gelu_tanh<T>(x) : kiln::vec_math::gelu_erf<T>(x);
}
}  // namespace fused_kernel
)";

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string literal(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
  char b[48];
  std::snprintf(b, sizeof b, "%.17g", v);
  bool integral = std::string(b).find_first_of(".eE") == std::string::npos;
  char out[56];
  std::snprintf(out, sizeof out, "(%s%s)", b, integral ? ".0" : "");
  return out;
}

const char* ctype(DType d) {
  switch (d) {
    case Float32:
      return "float";
    case Float64:
      return "double";
    case Bool:
      return "bool";
    default:
      fail("codegen", "unsupported dtype ", d);
  }
}

// A kernel to compile in the background: its source, cache key, entry path and directory.
struct Job {
  std::string src, key, base, dir;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, fused::KernelPtr> loaded;  // key -> kernel
  Stats st;
  bool dir_checked = false;
  std::string dir_env;  // KILN_CACHE_DIR when the directory was checked
  bool dir_ok = false;
  bool compiler_ok = true;
  // Background compiles (set_async): queued entries, and per entry being compiled the spec
  // slots to fill when it is loaded.
  bool async = [] {
    const char* e = std::getenv("KILN_CODEGEN_ASYNC");
    return !(e && std::string(e) == "0");
  }();
  bool worker_started = false;
  bool compiling = false;  // the worker has a batch in the compiler
  pid_t worker_pid = 0;    // the process that started the worker
  std::deque<Job> queue;
  std::unordered_map<std::string, std::vector<std::atomic<fused::KernelPtr>*>> pending;
  std::condition_variable work_cv, idle_cv;
};
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

std::string compiler() {
  const char* c = std::getenv("KILN_CXX");
  return c && *c ? c : "c++";
}

// A kernel compiled alone exports `kiln_fused_kernel`; one compiled in a batch shares its .so
// with the others and exports `kiln_fused_kernel_<key>`.
fused::KernelPtr load(const std::string& so, const std::string& key) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  void* f = dlsym(h, "kiln_fused_kernel");
  if (!f) f = dlsym(h, ("kiln_fused_kernel_" + key).c_str());
  return reinterpret_cast<fused::KernelPtr>(f);
}

// Entry is valid when the .so's checksum matches its .sum file.
bool entry_valid(const std::string& base) {
  std::string so, sum;
  if (!read_file(base + ".so", so) || !read_file(base + ".sum", sum)) return false;
  return hex(fnv1a(so.data(), so.size())) == sum;
}

// What compiling one entry gave; touches no shared state, so the background worker runs it
// without the cache's lock.
struct Built {
  fused::KernelPtr fn = nullptr;
  int rc = 0;
  std::string error;
};

// A unique temporary name beside `path`: compiles write under it and rename, so another process
// never sees half a file.
std::string temp_name(const std::string& path) {
  return str_cat(path, ".", ::getpid(), ".",
                 std::hash<std::thread::id>()(std::this_thread::get_id()));
}

std::string prelude_text() { return str_cat(vec_math_source(), "\n", kExprPrelude, "\n"); }

// The prelude as a header in `dir` with its precompiled form beside it (GCC reads
// <name>.h.gch in place of <name>.h when it is valid for the options; another compiler reads the
// header), or "" when it cannot be made: kernels then carry the prelude in their source. Named
// by a hash of compiler, flags and text; the .gch's checksum is checked once per process, and a
// header or .gch that does not match is rebuilt (the cache directory is private, see
// cache_dir(), but a crash can leave a file short).
std::string precompiled_prelude(const std::string& dir) {
  // Never destroyed, like cache(): the detached background compiler may still be in here while
  // the process runs its exit handlers (ThreadSanitizer caught the map's destructor racing it).
  struct State {
    std::mutex mu;
    std::unordered_map<std::string, std::string> ready;  // dir -> header path or ""
    std::unordered_map<std::string, int> without;        // kernels compiled without it
  };
  static State* st = new State();
  auto& ready = st->ready;
  auto& without = st->without;
  std::lock_guard<std::mutex> lk(st->mu);
  if (auto it = ready.find(dir); it != ready.end()) {
    // (A cache directory removed since is recreated by the caller: make the files again.)
    struct stat sb {};
    if (it->second.empty() || ::stat((it->second + ".gch").c_str(), &sb) == 0) return it->second;
    ready.erase(it);
  }
  const std::string text = prelude_text();
  const std::string opts = compiler() + " " + kFlags;
  const std::string h =
      str_cat(dir, "/prelude-",
              hex(fnv1a(text.data(), text.size(), fnv1a(opts.data(), opts.size()))), ".h");
  std::string have, gch, sum;
  if (read_file(h, have) && have == text && read_file(h + ".gch", gch) &&
      read_file(h + ".sum", sum) && sum == hex(fnv1a(gch.data(), gch.size())))
    return ready[dir] = h;
  // Making it costs about four kernels' compile time (0.6 s against 0.16 s saved per kernel): a
  // process that compiles only a few kernels (a model's first jitted step on an empty cache: 2
  // for W7, which took 1.5 s instead of 0.85 s when the first one waited for the .gch) does
  // better without it. The fourth compiler process (a batch counts once) makes it, for this
  // process and every later one.
  if (++without[dir] <= 3) return "";
  const std::string tmp = temp_name(h);
  {
    std::ofstream f(tmp + ".h");
    f << text;
  }
  const std::string cmd = str_cat("'", compiler(), "' ", kFlags, " -x c++-header -o '", tmp,
                                  ".h.gch' '", tmp, ".h' > /dev/null 2>&1");
  std::string out;
  if (std::system(cmd.c_str()) != 0 || !read_file(tmp + ".h.gch", out)) {
    std::remove((tmp + ".h").c_str());
    std::remove((tmp + ".h.gch").c_str());
    return ready[dir] = "";
  }
  {
    std::ofstream f(tmp + ".sum");
    f << hex(fnv1a(out.data(), out.size()));
  }
  // The header last: a reader that finds it finds its .gch and .sum in place.
  std::rename((tmp + ".h.gch").c_str(), (h + ".gch").c_str());
  std::rename((tmp + ".sum").c_str(), (h + ".sum").c_str());
  std::rename((tmp + ".h").c_str(), h.c_str());
  return ready[dir] = h;
}

// Runs the compiler on `text` (a translation unit) into `tmp`.so; on failure fills b.rc and
// b.error and removes what it wrote.
bool run_compiler(const std::string& text, const std::string& tmp, Built& b) {
  {
    std::ofstream f(tmp + ".cpp");
    f << text;
  }
  const std::string cmd = str_cat("'", compiler(), "' ", kFlags, " -o '", tmp, ".so' '", tmp,
                                  ".cpp' > '", tmp, ".log' 2>&1");
  b.rc = std::system(cmd.c_str());
  struct stat sb {};
  const bool ok = b.rc == 0 && ::stat((tmp + ".so").c_str(), &sb) == 0;
  if (!ok) {
    std::string log;
    read_file(tmp + ".log", log);
    b.error = "compiler exited with " + std::to_string(b.rc) + ": " + log.substr(0, 400);
    std::remove((tmp + ".so").c_str());
    std::remove((tmp + ".cpp").c_str());
  }
  std::remove((tmp + ".log").c_str());
  return ok;
}

// Writes `so` (a compiled .so, moved or linked from a temporary) as the entry `base` with its
// checksum, then loads the kernel. The .so last but one and the .sum last: entry_valid() only
// accepts an entry whose .sum matches.
void install(const std::string& so, const std::string& base, const std::string& key, Built& b) {
  std::string bytes;
  if (!read_file(so, bytes)) {
    b.error = "cannot read the compiled " + so;
    return;
  }
  const std::string tmp = temp_name(base);
  {
    std::ofstream f(tmp + ".sum");
    f << hex(fnv1a(bytes.data(), bytes.size()));
  }
  std::rename(so.c_str(), (base + ".so").c_str());
  std::rename((tmp + ".sum").c_str(), (base + ".sum").c_str());
  b.fn = load(base + ".so", key);
  if (!b.fn) b.error = std::string("dlopen failed: ") + dlerror();
}

// The kernel part of `src` (what emit() returns: the prelude, then the kernel), or npos.
size_t kernel_start(const std::string& src, const std::string& pre) {
  const size_t at = src.find(pre);
  return at == std::string::npos ? at : at + pre.size();
}

// One kernel, one compiler process. With the prelude precompiled in `dir`, the file compiled
// includes it instead of repeating it.
Built build(const std::string& src, const std::string& base, const std::string& key,
            const std::string& dir) {
  Built b;
  const std::string tmp = temp_name(base);
  const std::string pre = prelude_text(), h = precompiled_prelude(dir);
  const size_t at = src.find(pre);
  const std::string text =
      !h.empty() && at != std::string::npos
          ? str_cat(src.substr(0, at), "#include \"", h, "\"\n", src.substr(at + pre.size()))
          : src;
  if (!run_compiler(text, tmp, b)) return b;
  std::rename((tmp + ".cpp").c_str(), (base + ".cpp").c_str());
  install(tmp + ".so", base, key, b);
  return b;
}

// Several kernels, one compiler process: the prelude is parsed once and each kernel exports
// `kiln_fused_kernel_<key>`. Every entry's .so is a hard link to the one shared object (a copy
// where links fail); its .cpp is the kernel's own source, for reading. A batch the compiler
// refuses is compiled one kernel at a time, so one bad kernel costs only itself.
std::vector<Built> build_batch(const std::vector<Job>& jobs) {
  std::vector<Built> out(jobs.size());
  auto one_by_one = [&] {
    for (size_t i = 0; i < jobs.size(); ++i)
      out[i] = build(jobs[i].src, jobs[i].base, jobs[i].key, jobs[i].dir);
    return out;
  };
  if (jobs.size() == 1) return one_by_one();
  const std::string pre = prelude_text(), h = precompiled_prelude(jobs[0].dir);
  const std::string name = "kiln_fused_kernel(";
  std::string text = h.empty() ? pre : str_cat("#include \"", h, "\"\n");
  for (const Job& j : jobs) {
    const size_t k = kernel_start(j.src, pre);
    const size_t at = k == std::string::npos ? k : j.src.find(name, k);
    if (at == std::string::npos) return one_by_one();  // not emit()'s layout
    text += str_cat(j.src.substr(k, at - k), "kiln_fused_kernel_", j.key, "(",
                    j.src.substr(at + name.size()));
  }
  const std::string tmp = temp_name(jobs[0].base + "-batch");
  Built whole;
  if (!run_compiler(text, tmp, whole)) return one_by_one();
  std::remove((tmp + ".cpp").c_str());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const std::string mine = temp_name(j.base);
    {
      std::ofstream f(mine + ".cpp");
      f << j.src;
    }
    std::rename((mine + ".cpp").c_str(), (j.base + ".cpp").c_str());
    if (::link((tmp + ".so").c_str(), (mine + ".so").c_str()) != 0) {
      std::string bytes;
      read_file(tmp + ".so", bytes);
      std::ofstream f(mine + ".so", std::ios::binary);
      f << bytes;
    }
    install(mine + ".so", j.base, j.key, out[i]);
    out[i].rc = whole.rc;
  }
  std::remove((tmp + ".so").c_str());
  return out;
}

// Books one kernel's finished compile (under the cache's lock): the kernel, or the failure.
void record(Cache& c, const std::string& key, const Built& b) {
  if (!b.fn) {
    c.st.last_error = b.error;
    ++c.st.failures;
    if (WIFEXITED(b.rc) && WEXITSTATUS(b.rc) == 127) c.compiler_ok = false;  // no compiler
    return;
  }
  c.loaded[key] = b.fn;
}

// Takes the queued jobs that share the first one's cache directory (under the lock).
std::vector<Job> take_batch(Cache& c) {
  std::vector<Job> batch;
  const std::string dir = c.queue.front().dir;
  for (auto it = c.queue.begin(); it != c.queue.end();) {
    if (it->dir == dir) {
      batch.push_back(std::move(*it));
      it = c.queue.erase(it);
    } else {
      ++it;
    }
  }
  return batch;
}

// Compiles a batch without the lock, then books it and hands each kernel to the calls waiting
// for it. `lk` holds the cache's lock on entry and on return.
void compile_batch(Cache& c, std::unique_lock<std::mutex>& lk, std::vector<Job> batch) {
  lk.unlock();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Built> built = build_batch(batch);
  const double ms = ms_since(t0);
  lk.lock();
  ++c.st.compiles;
  c.st.compile_ms += ms;
  for (size_t i = 0; i < batch.size(); ++i) {
    record(c, batch[i].key, built[i]);
    for (auto* slot : c.pending[batch[i].key]) slot->store(built[i].fn, std::memory_order_release);
    c.pending.erase(batch[i].key);
  }
  c.idle_cv.notify_all();
}

// At exit, a batch in the compiler gets up to kExitWait to finish, so its kernels are in the
// cache for the next process: at the lowest priority it may only have had the CPU time a busy
// process left idle, and the process is idle now. Queued batches are dropped (the next process
// compiles them). Without this the compiler would finish as an orphan and its work be lost.
// A child made by fork() has no worker (and its copy of the lock may be held): it returns.
void finish_at_exit() {
  constexpr auto kExitWait = std::chrono::seconds(3);
  Cache& c = cache();
  if (::getpid() != c.worker_pid) return;
  std::unique_lock<std::mutex> lk(c.mu);
  for (const Job& j : c.queue) c.pending.erase(j.key);
  c.queue.clear();
  c.idle_cv.wait_for(lk, kExitWait, [&] { return !c.compiling; });
}

// The background compiler: one thread, started on first use. It and the compilers it starts run
// at the lowest CPU priority (nice 19, inherited by the child processes): they take the CPU time
// the computation leaves idle, never a core it is using. The kernels of a graph are requested
// within milliseconds of each other (its first run), so the thread waits until requests stop
// for kSettle and compiles all of them in one process: the prelude's headers are parsed once,
// not once per kernel. One process at a time: a second would only halve the first one's speed
// on a 2-core machine.
void worker() {
#ifdef __linux__
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);  // this thread only
#endif
  constexpr auto kSettle = std::chrono::milliseconds(100);
  constexpr auto kMaxSettle = std::chrono::milliseconds(1000);
  Cache& c = cache();
  std::unique_lock<std::mutex> lk(c.mu);
  for (;;) {
    c.work_cv.wait(lk, [&] { return !c.queue.empty(); });
    const auto until = std::chrono::steady_clock::now() + kMaxSettle;
    for (size_t seen = 0; seen != c.queue.size() && std::chrono::steady_clock::now() < until;) {
      seen = c.queue.size();
      c.work_cv.wait_for(lk, kSettle);
    }
    if (c.queue.empty()) continue;  // wait_idle() compiled them meanwhile
    c.compiling = true;
    compile_batch(c, lk, take_batch(c));
    c.compiling = false;
    c.idle_cv.notify_all();
  }
}

fused::KernelPtr compile_hook(const fused::Program& p, DType dtype,
                              const std::vector<DType>& in_dtypes, uint64_t pattern,
                              std::atomic<fused::KernelPtr>* later) {
  if (!enabled()) return nullptr;
  std::string src = emit(p, dtype, in_dtypes, pattern);
  std::string opts = compiler() + " " + kFlags;
  std::string key = hex(fnv1a(opts.data(), opts.size(), fnv1a(src.data(), src.size())));
  Cache& c = cache();
  std::unique_lock<std::mutex> lk(c.mu);
  auto it = c.loaded.find(key);
  if (it != c.loaded.end()) {
    ++c.st.memory_hits;
    return it->second;
  }
  if (auto pend = c.pending.find(key); pend != c.pending.end()) {
    if (later) pend->second.push_back(later);
    return nullptr;  // being compiled: interpreted until then
  }
  struct stat db {};
  if (::stat(c.st.cache_dir.c_str(), &db) != 0) {  // removed since it was checked: recreate
    try {
      c.st.cache_dir = cache_dir();
    } catch (const Error& err) {
      c.st.last_error = err.what();
      ++c.st.failures;
      return nullptr;
    }
  }
  std::string base = c.st.cache_dir + "/" + key;
  auto t0 = std::chrono::steady_clock::now();
  struct stat sb {};
  bool exists = ::stat((base + ".so").c_str(), &sb) == 0;
  if (exists && entry_valid(base)) {
    if (fused::KernelPtr fn = load(base + ".so", key)) {
      c.st.load_ms += ms_since(t0);
      ++c.st.disk_hits;
      c.loaded[key] = fn;
      return fn;
    }
  }
  if (exists) ++c.st.rebuilt;  // present but corrupt or unloadable
  if (!c.compiler_ok) return nullptr;
  if (later && c.async) {
    c.pending[key].push_back(later);
    c.queue.push_back(Job{std::move(src), key, base, c.st.cache_dir});
    ++c.st.background;
    if (!c.worker_started) {
      c.worker_started = true;
      c.worker_pid = ::getpid();
      std::thread(worker).detach();
      std::atexit(finish_at_exit);
    }
    c.work_cv.notify_one();
    return nullptr;
  }
  Built b = build(src, base, key, c.st.cache_dir);
  ++c.st.compiles;
  c.st.compile_ms += ms_since(t0);
  record(c, key, b);
  return b.fn;
}

struct Installer {
  Installer() { fused::set_compiler(compile_hook); }
} g_installer;

}  // namespace

namespace {
// Removes files that compiles of processes no longer running left under temporary names
// (`<name>.<pid>.<thread>.<ext>`, see temp_name()): a process killed while compiling.
void remove_stale_temporaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  auto digits = [](const std::string& t) {
    return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
  };
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    std::vector<std::string> tok;
    std::stringstream ss(e->d_name);
    for (std::string t; std::getline(ss, t, '.');) tok.push_back(t);
    for (size_t i = 1; i + 2 < tok.size(); ++i) {
      if (!digits(tok[i]) || !digits(tok[i + 1]) || tok[i].size() > 9) continue;
      const auto pid = static_cast<pid_t>(std::stol(tok[i]));
      if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(e->d_name);
      break;
    }
  }
  ::closedir(d);
  for (const std::string& n : stale) std::remove((dir + "/" + n).c_str());
}
}  // namespace

std::string cache_dir() {
  std::string dir;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/kiln";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/kiln";
  } else {
    fail("codegen", "no cache directory: set KILN_CACHE_DIR or HOME");
  }
  if (dir.find_first_of("'\"") != std::string::npos)
    fail("codegen", "cache directory '", dir, "' contains a quote");
  // Parents as usual, the cache itself private.
  for (size_t pos = 1; (pos = dir.find('/', pos)) != std::string::npos; ++pos)
    ::mkdir(dir.substr(0, pos).c_str(), 0755);
  ::mkdir(dir.c_str(), 0700);
  struct stat sb {};
  if (::stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode))
    fail("codegen", "cannot create cache directory '", dir, "'");
  if (sb.st_uid != ::geteuid())
    fail("codegen", "refusing cache directory '", dir, "': owned by uid ", sb.st_uid,
         ", not by this user (", ::geteuid(), ")");
  if (sb.st_mode & (S_IWGRP | S_IWOTH))
    fail("codegen", "refusing cache directory '", dir, "': writable by others (mode ",
         sb.st_mode & 0777, "); a planted kernel would be loaded");
  return dir;
}

bool enabled() {
  const char* e = std::getenv("KILN_CODEGEN");
  if (e && std::string(e) == "0") return false;
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  const char* env = std::getenv("KILN_CACHE_DIR");
  std::string env_now = env ? env : "";
  if (!c.dir_checked || env_now != c.dir_env) {
    c.dir_checked = true;
    c.dir_env = env_now;
    c.dir_ok = false;
    c.st.options = compiler() + " " + kFlags;
    try {
      c.st.cache_dir = cache_dir();
      c.dir_ok = true;
      remove_stale_temporaries(c.st.cache_dir);
    } catch (const Error& err) {
      c.st.last_error = err.what();
      std::fprintf(stderr, "kiln: codegen off: %s\n", err.what());
    }
  }
  return c.dir_ok && c.compiler_ok;
}

std::string emit(const fused::Program& p, DType dtype, const std::vector<DType>& in_dtypes,
                 uint64_t pattern) {
  std::ostringstream os;
  os << "// Kiln fused kernel: " << p.text << "\n";
  os << prelude_text();
  os << "namespace fused_kernel {\nextern \"C\" void kiln_fused_kernel(long n, const void* const* "
        "in_, "
        "void* const* out_) {\n";
  os << "  using T = " << ctype(dtype) << ";\n";
  std::vector<std::string> arg(static_cast<size_t>(p.num_inputs));
  for (int k = 0; k < p.num_inputs; ++k) {
    const char* ct = ctype(in_dtypes[static_cast<size_t>(k)]);
    if ((pattern >> k) & 1) {
      os << "  const " << ct << "* __restrict__ in" << k << " = static_cast<const " << ct
         << "*>(in_[" << k << "]);\n";
      arg[static_cast<size_t>(k)] = std::string("in").append(std::to_string(k)).append("[j]");
    } else {
      os << "  const " << ct << " s" << k << " = *static_cast<const " << ct << "*>(in_[" << k
         << "]);\n";
      arg[static_cast<size_t>(k)] = std::string("s").append(std::to_string(k));
    }
  }
  for (size_t k = 0; k < p.outputs.size(); ++k)
    os << "  T* __restrict__ out" << k << " = static_cast<T*>(out_[" << k << "]);\n";
  os << "#pragma GCC ivdep\n  for (long j = 0; j < n; ++j) {\n";
  for (size_t i = 0; i < p.code.size(); ++i) {
    const fused::Instr& ins = p.code[i];
    const std::string& e = ins.op->expr;
    std::string out;
    for (size_t c = 0; c < e.size(); ++c) {
      if ((e[c] == '$' || e[c] == '@') && c + 1 < e.size() && std::isdigit(e[c + 1])) {
        size_t d = c + 1;
        int k = 0;
        while (d < e.size() && std::isdigit(e[d])) k = k * 10 + (e[d++] - '0');
        if (e[c] == '$') {
          int a = ins.args.at(static_cast<size_t>(k));
          if (a >= 0)
            out += arg[static_cast<size_t>(a)];
          else
            out.append("t").append(std::to_string(-1 - a));
        } else {
          out += literal(ins.attrs.at(static_cast<size_t>(k)));
        }
        c = d - 1;
      } else {
        out += e[c];
      }
    }
    // Results of arithmetic are T (so `x * 0.5` stays float); comparisons stay bool.
    os << "    const " << (fused::bool_valued(*ins.op) ? "bool" : "T") << " t" << i << " = " << out
       << ";\n";
  }
  for (size_t k = 0; k < p.outputs.size(); ++k)
    os << "    out" << k << "[j] = t" << p.outputs[k] << ";\n";
  os << "  }\n}\n}  // namespace fused_kernel\n";
  return os.str();
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  return c.st;
}

void set_async(bool on) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.async = on;
}

bool async() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  return c.async;
}

void wait_idle() {
  Cache& c = cache();
  std::unique_lock<std::mutex> lk(c.mu);
  // What is still queued compiles here, at the caller's priority: the worker's lowest priority
  // is for not slowing a computation, and a caller that waits has none running.
  while (!c.queue.empty()) compile_batch(c, lk, take_batch(c));
  c.idle_cv.wait(lk, [&] { return c.pending.empty(); });
}

void clear_memory_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.loaded.clear();
}

}  // namespace kiln::detail::codegen
