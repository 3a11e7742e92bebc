// README example: JIT (trace eager code into compiled pieces, with guards).
#include "kiln/kiln.h"
using namespace kiln;

int main() {
  // The same eager code, compiled per constant `k` and per input shape/dtype.
  auto f = jit(
      [](const Tensor& x, int k) {
        Tensor h = tanh(x * static_cast<double>(k));
        if ((h.sum() > 0).item<bool>())  // host read: a graph break; this line runs every call
          return h + 1.0;
        return h * h;
      },
      JitOptions{.name = "f"});
  std::cout << f(tensor({1.f, 2.f}), 2) << "\n";    // traced, compiled
  std::cout << f(tensor({3.f, 4.f}), 2) << "\n";    // compiled pieces, no compile
  std::cout << f(tensor({-1.f, -2.f}), 2) << "\n";  // other branch: one new piece
  std::cout << f(tensor({1.f, 2.f}), 3) << "\n";    // new constant: new version
  std::cout << f.explain();
}
