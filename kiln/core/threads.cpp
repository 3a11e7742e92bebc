// Thread-count control shared with oneDNN (both use OpenMP's pool).
#include "kiln/core/threads.h"

#include <omp.h>

#include <algorithm>

namespace kiln {

int get_num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) { omp_set_num_threads(std::max(1, n)); }

}  // namespace kiln
