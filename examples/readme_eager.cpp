// README example: eager mode (define-by-run, autograd).
#include "kiln/kiln.h"
using namespace kiln;

int main() {
  manual_seed(0);
  Tensor x = randn({4, 3});
  Tensor w = randn({3, 2}).requires_grad_();
  Tensor b = zeros({2}).requires_grad_();
  Tensor y = relu(matmul(x, w) + b);  // runs now
  std::cout << "y =\n" << y << "\n";  // print anything, anywhere
  Tensor loss = (y * y).mean();
  loss.backward();  // autograd tape
  std::cout << "loss = " << loss.item<float>() << "\n";
  std::cout << "dloss/db = " << b.grad() << "\n";
  // Gradients of gradients: at x = 3, d/dx x^3 = 27 and d2/dx2 x^3 = 18.
  Tensor s = scalar_tensor(3.0, Float64).requires_grad_();
  Tensor d1 = grad({s * s * s}, {s}, {}, false, /*create_graph=*/true)[0];
  std::cout << "d/dx x^3 = " << d1.item<double>()
            << ", d2/dx2 x^3 = " << grad({d1}, {s})[0].item<double>() << "\n";
}
