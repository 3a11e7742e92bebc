// Libraries loaded on first use: oneDNN and OpenBLAS are not linked into libkiln but opened when
// a kernel first calls them, so a process that never runs a large GEMM or a convolution does not
// pay their start-up (gen_lazy_stubs.py writes the calling side).
#pragma once

namespace kiln {

/// The address of `symbol` in the shared library `soname`, opening the library on the first
/// call for it (thread-safe). Raises kiln::Error naming both when either is missing.
void* lazy_symbol(const char* soname, const char* symbol);

}  // namespace kiln
