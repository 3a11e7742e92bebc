// Per-op time profile of eager kernels and executor steps, switched on by KILN_PROFILE=1 (one
// row per op) or KILN_PROFILE=shapes (one row per op and input shapes): the answer to "where
// does a training step's time go" without perf (which some VMs lack). The recording side is
// internal (kiln/dispatch/profile.h).
#pragma once
#include <string>

namespace kiln {

/// Seconds on a monotonic clock (for the timed paths).
double profile_now();
/// The table so far (op, calls, total ms, share, us per call), largest first; also printed to
/// stderr at exit when profiling is on.
std::string profile_report();
/// Forgets what was recorded.
void profile_reset();

}  // namespace kiln
