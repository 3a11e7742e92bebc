// Progress bar / periodic progress lines.
#include "kiln/io/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"

namespace kiln::io {

std::string format_duration(double s) {
  // Past ~3e11 years llround has no int64 result to give.
  if (!std::isfinite(s) || s < 0 || s > 1e18) return "?";
  auto t = static_cast<int64_t>(std::llround(s));
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  else if (s < 10)
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

Progress::Progress(int64_t total, std::string label, ProgressOptions opts)
    : total_(total), label_(std::move(label)), opts_(opts), start_(Clock::now()) {
  if (total < 0) fail("Progress", "total must be >= 0 (0: unknown), got ", total);
  if (!(opts.percent_every > 0) || !(opts.seconds_every > 0) || !(opts.redraw_seconds >= 0))
    fail("Progress", "percent_every and seconds_every must be > 0 and redraw_seconds >= 0, got ",
         opts.percent_every, ", ", opts.seconds_every, ", ", opts.redraw_seconds);
  out_ = opts.out ? opts.out : stdout;
  bar_ = opts.mode == ProgressOptions::Mode::Bar ||
         (opts.mode == ProgressOptions::Mode::Auto && ::isatty(::fileno(out_)));
  next_percent_ = opts.percent_every;
}

Progress::~Progress() {
  try {
    finish();
  } catch (...) {  // never throw from a destructor; output is best effort
  }
}

double Progress::elapsed() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

std::string Progress::status(int64_t step, double secs) const {
  std::string s = label_.empty() ? "" : label_ + " ";
  if (total_ > 0) {
    s += str_cat(step, "/", total_);
    char pct[16];
    std::snprintf(pct, sizeof pct, " %3.0f%%",
                  100.0 * static_cast<double>(step) / static_cast<double>(total_));
    s += pct;
  } else {
    s += str_cat("step ", step);
  }
  for (const auto& [k, v] : metrics_) {
    char buf[48];
    std::snprintf(buf, sizeof buf, " %.4g", v);
    s.append(" ").append(k).append(buf);
  }
  const double rate = secs > 0 ? static_cast<double>(step) / secs : 0;
  char buf[48];
  std::snprintf(buf, sizeof buf, rate >= 100 ? " | %.0f it/s" : " | %.3g it/s", rate);
  s += buf;
  if (total_ > 0 && rate > 0 && step < total_) {
    s += " | eta ";
    s += format_duration(static_cast<double>(total_ - step) / rate);
  }
  return s;
}

void Progress::print_line(const std::string& s) {
  std::fputs(s.c_str(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void Progress::update(int64_t step, const Metrics& metrics) {
  if (finished_) fail("Progress", "update(", step, ") after finish()");
  if (step < step_) fail("Progress", "steps must not decrease: got ", step, " after ", step_);
  step_ = step;
  metrics_ = metrics;
  const double now = elapsed();
  if (bar_) {
    const bool last = total_ > 0 && step >= total_;
    if (!last && now - last_print_ < opts_.redraw_seconds) return;
    last_print_ = now;
    std::string line;
    if (total_ > 0) {
      constexpr int kWidth = 24;
      const double frac = std::min(1.0, static_cast<double>(step) / static_cast<double>(total_));
      const int filled = static_cast<int>(frac * kWidth);
      // Appended piecewise: GCC 12 misreports "literal" + std::string&& under -Wrestrict.
      line.push_back('[');
      line.append(static_cast<size_t>(filled), '#');
      line.append(static_cast<size_t>(kWidth - filled), '.');
      line += "] ";
    }
    line += status(step, now);
    const size_t width = line.size();
    if (line.size() < bar_width_) line.append(bar_width_ - line.size(), ' ');
    bar_width_ = width;
    std::fputc('\r', out_);
    std::fputs(line.c_str(), out_);
    std::fflush(out_);
    return;
  }
  bool due = now - last_print_ >= opts_.seconds_every;
  if (total_ > 0) {
    const double pct = 100.0 * static_cast<double>(step) / static_cast<double>(total_);
    // A step of 0.1 is not exact in binary: 6 * 0.1 lands just above the 0.6% that step 6 of
    // 1000 reaches, so thresholds are compared (and counted) with a relative tolerance.
    const double every = opts_.percent_every, tol = 1e-9 * every;
    if (pct >= next_percent_ - tol) {
      due = true;
      // Skip thresholds already passed, so a jump prints one line, not several. Computed, not
      // stepped: with a tiny percent_every a loop would take ~pct / percent_every steps, or
      // never end once the increment is below the rounding of next_percent_.
      next_percent_ =
          std::max((std::floor(pct / every + 1e-9) + 1) * every, std::nextafter(pct, HUGE_VAL));
    }
  }
  if (last_print_ < 0) due = true;  // first update: show that the loop started
  if (!due) return;
  last_print_ = now;
  print_line(status(step, now));
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  const double secs = elapsed();
  if (bar_ && bar_width_ > 0) std::fputc('\n', out_);
  std::string s = label_.empty() ? "done: " : label_ + " done: ";
  s += str_cat(step_, " steps in ", format_duration(secs));
  char buf[48];
  const double rate = secs > 0 ? static_cast<double>(step_) / secs : 0.0;
  std::snprintf(buf, sizeof buf, rate >= 100 ? " (%.0f it/s)" : " (%.3g it/s)", rate);
  s += buf;
  for (const auto& [k, v] : metrics_) {
    std::snprintf(buf, sizeof buf, " %.4g", v);
    s.append(" ").append(k).append(buf);
  }
  print_line(s);
}

}  // namespace kiln::io
