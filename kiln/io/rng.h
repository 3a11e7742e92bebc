// A small private generator for kiln/io samplers: reproducible from a seed on every platform and
// independent of the global generator, so a data pipeline's order does not shift when model code
// draws random numbers.
#pragma once
#include <cstdint>

namespace kiln::io {

/// splitmix64 stream: good enough for shuffles and window offsets, and cheap to seed per epoch.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform integer in [0, n), n > 0 (rejection sampling, so no modulo bias).
  uint64_t below(uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      uint64_t r = next();
      if (r < limit) return r % n;
    }
  }

 private:
  uint64_t s_;
};

/// Mixes two words into one seed (for per-epoch / per-stream seeds).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  SplitMix64 g(a ^ (b * 0xd1b54a32d192ed03ULL));
  g.next();
  return g.next();
}

}  // namespace kiln::io
