// The global seedable generator: xoshiro256** (fast, reproducible across platforms), with
// Box-Muller for normals so results do not depend on the standard library.
#include <cmath>
#include <mutex>

#include "kiln/core/tensor.h"

namespace kiln {
namespace {

struct Gen {
  uint64_t s[4];
  std::mutex mu;
  void seed(uint64_t x) {
    for (auto& v : s) {  // splitmix64
      x += 0x9e3779b97f4a7c15ULL;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      v = z ^ (z >> 31);
    }
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

Gen& gen() {
  static Gen* g = [] {
    auto* p = new Gen();
    p->seed(0);
    return p;
  }();
  return *g;
}

}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lk(gen().mu);
  gen().seed(seed);
}

std::vector<uint64_t> get_rng_state() {
  std::lock_guard<std::mutex> lk(gen().mu);
  return std::vector<uint64_t>(gen().s, gen().s + 4);
}

void set_rng_state(const std::vector<uint64_t>& state) {
  if (state.size() != 4 || (state[0] | state[1] | state[2] | state[3]) == 0)
    fail("set_rng_state", "expected the 4 nonzero words get_rng_state gives, got ", state.size(),
         " words");
  std::lock_guard<std::mutex> lk(gen().mu);
  for (int i = 0; i < 4; ++i) gen().s[i] = state[static_cast<size_t>(i)];
}

uint64_t random_u64() {
  std::lock_guard<std::mutex> lk(gen().mu);
  return gen().next();
}

Tensor rand(const Shape& shape, DType dtype) {
  if (is_reduced(dtype)) return cast_to(rand(shape, compute_dtype(dtype)), dtype);
  Tensor t = empty(shape, dtype);
  Gen& g = gen();
  std::lock_guard<std::mutex> lk(g.mu);
  KILN_DISPATCH_FLOAT(dtype, "rand", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<scalar_t>(g.uniform());
  });
  return t;
}

Tensor randn(const Shape& shape, DType dtype) {
  if (is_reduced(dtype)) return cast_to(randn(shape, compute_dtype(dtype)), dtype);
  Tensor t = empty(shape, dtype);
  Gen& g = gen();
  std::lock_guard<std::mutex> lk(g.mu);
  KILN_DISPATCH_FLOAT(dtype, "randn", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; i += 2) {
      double u1 = g.uniform(), u2 = g.uniform();
      if (u1 < 1e-300) u1 = 1e-300;
      double r = std::sqrt(-2.0 * std::log(u1));
      p[i] = static_cast<scalar_t>(r * std::cos(2 * M_PI * u2));
      if (i + 1 < n) p[i + 1] = static_cast<scalar_t>(r * std::sin(2 * M_PI * u2));
    }
  });
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype) {
  if (high <= low)
    fail("randint", "expected low < high, got low=", low, " high=", high, " (shape ", shape, ")");
  if (is_reduced(dtype)) return cast_to(randint(low, high, shape, compute_dtype(dtype)), dtype);
  Tensor t = empty(shape, dtype);
  Gen& g = gen();
  std::lock_guard<std::mutex> lk(g.mu);
  uint64_t span = static_cast<uint64_t>(high - low);
  KILN_DISPATCH_NUMERIC(dtype, "randint", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = static_cast<scalar_t>(low + static_cast<int64_t>(g.next() % span));
  });
  return t;
}

}  // namespace kiln
