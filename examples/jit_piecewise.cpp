// The lecture's piecewise compilation with guards, under kiln::jit:
//   case 1: an input x with a constant c -> one compiled version per constant;
//   case 2: static -> dynamic (a host read) -> static -> the host code reruns on every call,
//           with a compiled piece before the read and one per branch after it;
// and the lecture's f(x, y, z) = x < y ? x + z : y * y written two ways: a plain C++ `if` on a
// host read (a graph break) and `cond` (one graph with Switch/Merge). explain() shows both.
#include <cstdio>

#include "kiln/kiln.h"

using namespace kiln;

int main() {
  // ---- case 1: one version per constant ------------------------------------------------------
  auto scale = jit([](const Tensor& x, int c) { return relu(x) * static_cast<double>(c); },
                   JitOptions{.name = "case1_scale"});
  Tensor x = tensor({-1.f, 0.5f, 2.f});
  for (int c : {1, 2, 3, 2, 1})
    std::printf("case 1: c=%d -> %s\n", c, str_cat(scale(x, c)).c_str());
  std::printf("\n%s\n", scale.explain().c_str());

  // ---- case 2: static -> dynamic -> static ----------------------------------------------------
  auto piecewise = jit(
      [](const Tensor& v) {
        Tensor h = tanh(v * 2.0);                    // piece 1 (compiled)
        bool positive = (h.sum() > 0).item<bool>();  // host read: graph break, host decides
        return positive ? h + 1.0 : h * h;           // piece 2 (compiled, one per branch)
      },
      JitOptions{.name = "case2_piecewise"});
  for (auto v :
       {tensor({1.f, 2.f}), tensor({-1.f, -2.f}), tensor({3.f, -1.f}), tensor({-3.f, 1.f})})
    std::printf("case 2: %s -> %s\n", str_cat(v).c_str(), str_cat(piecewise(v)).c_str());
  std::printf("\n%s\n", piecewise.explain().c_str());

  // ---- x < y ? x + z : y * y, two ways ----------------------------------------------------------
  auto with_break = jit(
      [](const Tensor& a, const Tensor& b, const Tensor& c) {
        if ((a < b).item<bool>()) return a + c;  // C++ if on a host read: a graph break
        return b * b;
      },
      JitOptions{.name = "lecture_if"});
  auto with_cond = jit(
      [](const Tensor& a, const Tensor& b, const Tensor& c) {
        return cond(
            lt(a, b), [&] { return a + c; }, [&] { return b * b; });  // Switch/Merge
      },
      JitOptions{.name = "lecture_cond"});
  for (auto [a, b] : {std::pair{1.f, 2.f}, std::pair{4.f, 2.f}}) {
    Tensor ta = scalar_tensor(a), tb = scalar_tensor(b), tc = scalar_tensor(3.f);
    std::printf("x=%g y=%g z=3: graph-break version %g, cond version %g\n", a, b,
                with_break(ta, tb, tc).item<double>(), with_cond(ta, tb, tc).item<double>());
  }
  std::printf("\n%s\n%s", with_break.explain().c_str(), with_cond.explain().c_str());
  return 0;
}
