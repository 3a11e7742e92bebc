// Shared bench plumbing: timing by median of repeats, peak RSS, JSON-line output in the format
// bench/run aggregates: {"workload","name","impl","mode","threads","params","metric","value",
// "peak_rss_mib"}.
#pragma once
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kiln::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Runs f `warmup` times, then `reps` timed batches of `inner` calls; returns the median seconds
/// per call.
inline double median_time(const std::function<void()>& f, int reps = 7, int inner = 1,
                          int warmup = 2) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    for (int i = 0; i < inner; ++i) f();
    t.push_back((now_s() - t0) / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Calls per timed batch so that one batch takes about `target_s`.
inline int calibrate(const std::function<void()>& f, double target_s = 0.05) {
  f();
  double t0 = now_s();
  f();
  double dt = std::max(now_s() - t0, 1e-9);
  return std::max(1, static_cast<int>(target_s / dt));
}

inline double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

inline void emit(const std::string& workload, const std::string& name, const std::string& impl,
                 const std::string& mode, int threads, const std::string& params_json,
                 const std::string& metric, double value) {
  std::printf(
      "{\"workload\": \"%s\", \"name\": \"%s\", \"impl\": \"%s\", \"mode\": \"%s\", "
      "\"threads\": %d, \"params\": %s, \"metric\": \"%s\", \"value\": %.6g, "
      "\"peak_rss_mib\": %.1f}\n",
      workload.c_str(), name.c_str(), impl.c_str(), mode.c_str(), threads, params_json.c_str(),
      metric.c_str(), value, peak_rss_mib());
  std::fflush(stdout);
}

}  // namespace kiln::bench
