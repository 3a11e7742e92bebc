// Training progress output: a one-line "\r" bar with rate and ETA on a terminal, plain periodic
// lines otherwise, so interactive runs stay tidy and CI logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace kiln::io {

/// Named numbers shown beside the step, e.g. {{"loss", 2.31}, {"acc", 0.87}}.
using Metrics = std::vector<std::pair<std::string, double>>;

struct ProgressOptions {
  enum class Mode { Auto, Bar, Lines };
  /// Auto: Bar when `out` is a terminal (isatty), else Lines.
  Mode mode = Mode::Auto;
  /// Where to write; stdout by default.
  std::FILE* out = nullptr;
  /// Lines mode: print when another `percent_every` percent of total is done...
  double percent_every = 10;
  /// ...or when this many seconds passed since the last line (also the only trigger when the
  /// total is unknown).
  double seconds_every = 30;
  /// Bar mode: at most one redraw per this many seconds (the last step is always drawn).
  double redraw_seconds = 0.1;
};

/// Progress of a loop of `total` steps (0: unknown total, so no percentage or ETA):
///
///   io::Progress prog(steps, "train");
///   for (int64_t s = 1; s <= steps; ++s) { ...; prog.update(s, {{"loss", loss}}); }
///   prog.finish();
///
/// The rate (it/s) is measured from construction; ETA = remaining steps / rate. finish() prints
/// the summary line (steps, time, rate, last metrics); the destructor calls it if needed.
class Progress {
 public:
  explicit Progress(int64_t total, std::string label = "", ProgressOptions opts = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Reports that `step` steps are done (1-based, non-decreasing) with the current metrics.
  void update(int64_t step, const Metrics& metrics = {});
  /// Ends the output with the summary line. Later calls do nothing.
  void finish();
  /// Whether this instance draws a terminal bar (else periodic lines).
  bool is_bar() const { return bar_; }

 private:
  using Clock = std::chrono::steady_clock;
  double elapsed() const;
  std::string status(int64_t step, double secs) const;
  void print_line(const std::string& s);

  int64_t total_;
  std::string label_;
  ProgressOptions opts_;
  std::FILE* out_;
  bool bar_;
  bool finished_ = false;
  Clock::time_point start_;
  double last_print_ = -1e300;  // seconds since start of the last output
  double next_percent_ = 0;     // Lines mode: next percentage that triggers a line
  int64_t step_ = 0;
  Metrics metrics_;
  size_t bar_width_ = 0;  // length of the last bar drawn, to blank leftovers
};

/// "1:02:03", "4:05" or "7s": a duration for progress lines.
std::string format_duration(double seconds);

}  // namespace kiln::io
