// Thread count of Kiln's kernels and oneDNN (one OpenMP pool): torch.set_num_threads.
#pragma once

namespace kiln {

/// Threads Kiln (and oneDNN) use.
int get_num_threads();
/// Sets the thread count for this process's kernels (at least 1).
void set_num_threads(int n);

}  // namespace kiln
