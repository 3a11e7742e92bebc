// Recording the per-op time profile (kiln/dispatch/profiler.h): the dispatcher and the Session
// time each kernel or step when KILN_PROFILE is set; the check is one load of a flag, inline.
// Internal: kiln.h does not reach it.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "kiln/dispatch/profiler.h"

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

}  // namespace kiln
