// An out-of-tree program built against an installed Kiln (find_package(kiln) or pkg-config):
// eager matmul and add, a backward pass, and a jit-compiled elementwise function (whose fused
// kernel the installed library compiles at run time). Exits non-zero on a wrong value.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace kiln;

namespace {

int failures = 0;

void print(const char* what, const std::vector<float>& got) {
  std::printf("%s:", what);
  for (float v : got) std::printf(" %g", v);
  std::printf("\n");
}

void check(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  print(what, got);
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = std::fabs(got[i] - want[i]) <= 1e-5f;
  if (!ok) {
    print("  expected", want);
    ++failures;
  }
}

}  // namespace

int main() {
  Tensor a = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}).requires_grad_();
  Tensor b = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {3, 2});
  Tensor c = matmul(a, b) + tensor({10.f, 20.f});
  check("matmul(a, b) + [10, 20]", c.to_vector<float>(), {32, 48, 59, 84});
  Tensor loss = c.sum();
  check("loss", {loss.item<float>()}, {223});
  loss.backward();
  // d(sum(a @ b))/da = ones @ b^T: each row of the gradient is b's row sums.
  check("dloss/da", a.grad().to_vector<float>(), {3, 7, 11, 3, 7, 11});

  auto f = jit([](const Tensor& x) { return tanh(x * 2.0) * 0.5 + 1.0; }, JitOptions{.name = "f"});
  Tensor x = tensor({0.f, 0.25f, -0.25f, 1.f});
  std::vector<float> want;
  for (float v : x.to_vector<float>()) want.push_back(std::tanh(2 * v) * 0.5f + 1);
  check("jit tanh(2x)/2 + 1", f(x).to_vector<float>(), want);
  check("jit again (replayed)", f(x).to_vector<float>(), want);

  std::printf(failures ? "kiln consumer: %d FAILED\n" : "kiln consumer: ok\n", failures);
  return failures ? 1 : 0;
}
