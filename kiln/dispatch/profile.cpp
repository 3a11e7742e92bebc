// KILN_PROFILE=1: per-op totals behind a mutex. Only the profiled path pays for it; the normal
// path tests one global flag.
#include "kiln/dispatch/profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/registry/op_def.h"

using namespace kiln::detail;

namespace kiln {
namespace {
struct Entry {
  int64_t calls = 0;
  double seconds = 0;
};
struct Profile {
  std::mutex mu;
  std::unordered_map<std::string, Entry> by_op;
  ~Profile() {
    if (profiling_enabled()) std::fputs(profile_report().c_str(), stderr);
  }
};
Profile& prof() {
  static Profile p;
  return p;
}
}  // namespace

namespace detail {
const bool g_profile = [] {
  const char* e = std::getenv("KILN_PROFILE");
  return e && (std::strcmp(e, "1") == 0 || std::strcmp(e, "shapes") == 0);
}();
const bool g_profile_shapes = [] {
  const char* e = std::getenv("KILN_PROFILE");
  return e && std::strcmp(e, "shapes") == 0;
}();
}  // namespace detail

double profile_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void detail::profile_record(const detail::OpDef& op, double seconds,
                            std::span<const Tensor> inputs) {
  std::string key = op.name;
  if (detail::g_profile_shapes) {
    // One row per op and input shapes: which of a step's many calls of an op cost the time.
    std::ostringstream os;
    os << op.name;
    for (const auto& t : inputs) {
      if (!t.defined()) {
        os << " -";
        continue;
      }
      os << " [";
      for (size_t i = 0; i < t.shape().size(); ++i) os << (i ? "," : "") << t.shape()[i];
      os << "]";
      if (!t.is_contiguous()) os << "nc";
    }
    key = os.str();
  }
  Profile& p = prof();
  std::lock_guard<std::mutex> lk(p.mu);
  Entry& e = p.by_op[key];
  ++e.calls;
  e.seconds += seconds;
}

std::string profile_report() {
  Profile& p = prof();
  std::lock_guard<std::mutex> lk(p.mu);
  std::vector<std::pair<std::string, Entry>> v(p.by_op.begin(), p.by_op.end());
  std::sort(v.begin(), v.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [op, e] : v) total += e.seconds;
  std::ostringstream os;
  char line[400];
  std::snprintf(line, sizeof line, "%-24s %10s %12s %7s %12s\n", "op (KILN_PROFILE)", "calls",
                "total ms", "share", "us/call");
  os << line;
  for (const auto& [op, e] : v) {
    std::snprintf(line, sizeof line, "%-24s %10lld %12.3f %6.1f%% %12.2f\n", op.c_str(),
                  static_cast<long long>(e.calls), e.seconds * 1e3,
                  total > 0 ? 100.0 * e.seconds / total : 0.0, e.seconds * 1e6 / e.calls);
    os << line;
  }
  std::snprintf(line, sizeof line, "%-24s %10s %12.3f\n", "total in kernels", "", total * 1e3);
  os << line;
  return os.str();
}

void profile_reset() {
  Profile& p = prof();
  std::lock_guard<std::mutex> lk(p.mu);
  p.by_op.clear();
}

}  // namespace kiln
