// Per-op time profile of eager kernels and executor steps, switched on by KILN_PROFILE=1 (one
// row per op) or KILN_PROFILE=shapes (one row per op and input shapes): the answer to "where
// does a training step's time go" without perf (which some VMs lack).
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace kiln {
class Tensor;

namespace detail {
struct OpDef;
extern const bool g_profile;
extern const bool g_profile_shapes;
/// Adds one call of `op` that took `seconds` of self time (kernel and any input copies it
/// needed, less the ops it ran itself); `inputs` name its row under KILN_PROFILE=shapes.
void profile_record(const OpDef& op, double seconds, std::span<const Tensor> inputs = {});
}  // namespace detail
/// True when KILN_PROFILE=1 was set at startup (read once).
inline bool profiling_enabled() { return detail::g_profile; }
/// Seconds on a monotonic clock (for the timed paths).
double profile_now();
/// The table so far (op, calls, total ms, share, us per call), largest first; also printed to
/// stderr at exit when profiling is on.
std::string profile_report();
/// Forgets what was recorded.
void profile_reset();

}  // namespace kiln
