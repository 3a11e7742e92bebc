// Lets kiln::grad(outputs, inputs) work on symbolic tensors by routing it to gradients(), so a
// training step written once runs eagerly, in a graph and under jit.
#include "kiln/autograd/autograd.h"
#include "kiln/autograd/grad_node.h"
#include "kiln/graph/graph.h"

using namespace kiln::detail;

namespace kiln {
namespace {
struct InstallGradHook {
  InstallGradHook() {
    set_symbolic_grad_hook([](const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& gys) { return gradients(ys, xs, gys); });
  }
} g_install_grad_hook;
}  // namespace
}  // namespace kiln
