// Non-temporal (streaming) stores for outputs larger than the caches: a normal store first
// reads the line it writes (read-for-ownership), so a kernel that reads N bytes and writes N
// moves 3N; streaming the result out moves 2N, as memcpy does for large copies.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kiln::cpu {

/// Bytes of output above which kernels stream their results (well past L2 per core here).
inline constexpr int64_t kStreamBytes = int64_t(4) << 20;

/// Copies `bytes` from `src` (in cache) to `dst` with streaming stores where aligned. Call
/// stream_fence() before another thread may read `dst`.
inline void stream_copy(void* dst, const void* src, int64_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  int64_t head = static_cast<int64_t>((32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31);
  if (head > bytes) head = bytes;
  std::memcpy(d, s, static_cast<size_t>(head));
  d += head;
  s += head;
  bytes -= head;
  int64_t n = bytes / 32;
  for (int64_t i = 0; i < n; ++i)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32 * i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32 * i)));
  std::memcpy(d + 32 * n, s + 32 * n, static_cast<size_t>(bytes - 32 * n));
}

/// Orders this thread's streaming stores before later stores (and the end of a parallel region).
inline void stream_fence() { _mm_sfence(); }

}  // namespace kiln::cpu
