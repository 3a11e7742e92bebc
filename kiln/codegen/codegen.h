// Codegen for fused elementwise groups: a program (kiln/ops/fused.h) becomes C++ source, is
// compiled with the system compiler into a shared object, loaded with dlopen and cached on disk
// by a content hash of the source and the compiler options. KILN_CODEGEN=0, or no compiler:
// the tile interpreter runs instead, with the same results.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ops/fused.h"

namespace kiln::detail::codegen {

/// C++ source of one specialization (exported as `kiln_fused_kernel`).
std::string emit(const fused::Program& p, DType dtype, const std::vector<DType>& in_dtypes,
                 uint64_t pattern);

struct Stats {
  int64_t compiles = 0;     ///< compiler processes run
  int64_t disk_hits = 0;    ///< kernels loaded from the disk cache without compiling
  int64_t memory_hits = 0;  ///< kernels already loaded in this process
  int64_t rebuilt = 0;      ///< cache entries found corrupt and rebuilt
  int64_t failures = 0;     ///< compiles or loads that failed (the interpreter ran)
  int64_t background = 0;   ///< compiles handed to the background worker
  double compile_ms = 0;    ///< time in the compiler (cold)
  double load_ms = 0;       ///< time loading cached entries (warm)
  std::string cache_dir;    ///< where entries live ("" when caching is refused)
  std::string options;      ///< compiler and flags used
  std::string last_error;
};
Stats stats();
/// Whether generated code will be used (KILN_CODEGEN is not 0 and a usable compiler and
/// cache directory were found so far).
bool enabled();
/// Whether a kernel not in any cache compiles in the background (default: yes, unless
/// KILN_CODEGEN_ASYNC=0): the first calls of a new fused kernel run in the interpreter, with the
/// same results, and switch to the generated code once it is loaded, so a cold compile never
/// stalls a caller (jit's first step, a Session's first run). Off: the first call compiles.
void set_async(bool on);
bool async();
/// Blocks until every background compile queued so far has finished (tests, benchmarks).
void wait_idle();
/// Forgets kernels loaded in this process (tests: the next request goes to the disk cache).
void clear_memory_cache();
/// The cache directory in force: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
/// ~/.cache/kiln. Created 0700; refused (kiln::Error) when it is world-writable or owned by
/// another user.
std::string cache_dir();

}  // namespace kiln::detail::codegen
