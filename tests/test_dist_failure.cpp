// A rank that dies, raises or stalls mid-training ends the whole job with a message in bounded
// time (the issue asks for 30 s): mpirun ends the others when a rank dies (SIGKILL, or abort()
// after the terminate handler names the rank), and the watchdog ends a rank whose collective
// outlives KILN_DIST_TIMEOUT. Runs `mpirun -np 2 dist_failure_worker MODE` per mode.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace {

struct Outcome {
  int status = -1;  // mpirun's exit status (128 + N: it passes on a rank's signal N)
  std::string output;
  double seconds = 0;
};

Outcome run_job(const std::string& mode, const std::string& env = "") {
  // The outer timeout only keeps a broken build from hanging ctest; the bound checked is 30 s.
  std::string cmd =
      env + " timeout -s KILL 90 " KILN_MPIEXEC " -np 2 " KILN_DIST_WORKER " " + mode + " 2>&1";
  auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  Outcome o;
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.output.append(buf.data(), n);
  int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

void expect_contains(const Outcome& o, const std::string& s) {
  EXPECT_NE(o.output.find(s), std::string::npos) << "'" << s << "' not in:\n" << o.output;
}

TEST(DistFailure, KilledRankEndsTheJobWithAMessage) {
  Outcome o = run_job("kill");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  expect_contains(o, "[worker] rank 1: failing on purpose (kill)");
  expect_contains(o, "process rank 1");  // mpirun's own report
  expect_contains(o, "signal 9");
  std::printf("killed rank: mpirun exited %d after %.1f s\n", o.status, o.seconds);
}

TEST(DistFailure, UncaughtErrorNamesTheRankAndEndsTheJob) {
  Outcome o = run_job("raise");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  expect_contains(o, "[dist] rank 1 of 2: terminating: [worker] an error on rank 1 at step 3");
  std::printf("raising rank: mpirun exited %d after %.1f s\n", o.status, o.seconds);
}

TEST(DistFailure, StalledPeerTripsTheWatchdog) {
  Outcome o = run_job("stall", "KILN_DIST_TIMEOUT=3");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  expect_contains(o, "[dist] rank 0 of 2: all_reduce of float32[");
  expect_contains(o, "did not complete within 3 s (KILN_DIST_TIMEOUT)");
  std::printf("stalled rank: mpirun exited %d after %.1f s\n", o.status, o.seconds);
}

}  // namespace
