// Replay of a compiled version (version.h): a single-piece version through its Session, a trace
// tree by walking its pieces over the version's slot table and following the child traced for
// each guard value. Internal to the JIT engine.
#pragma once
#include <string>
#include <vector>

#include "kiln/jit/version.h"

namespace kiln::detail::jit_engine {

/// Replays `v` on a call's arguments into `outs`. Returns false, with the reason in *why, when
/// a guard value has no traced branch. `donate`: the argument positions whose buffers results
/// may take (JitOptions::donate; empty: none), for a version that replays through a Session. A
/// `probe` stops at the leaf without running it (whether the call's path is traced).
bool replay(Version& v, const std::vector<Arg>& args, std::vector<Tensor>& outs, std::string* why,
            const std::vector<int>& donate = {}, bool probe = false);

}  // namespace kiln::detail::jit_engine
