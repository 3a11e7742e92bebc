// Helpers of the graph-pass tests (test_graph_passes*.cpp): a Program from fetches, a reference
// interpreter with no passes and no plan, op counts, exact and close comparison, and a scoped
// KILN_DISABLE_PASSES.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/passes/passes.h"

namespace kiln_test {

using namespace kiln;
using namespace kiln::detail;

inline Program program_of(const std::vector<Tensor>& fetches) {
  Graph g = Graph::of(fetches.at(0));
  std::vector<ValueRef> refs;
  for (const auto& f : fetches) refs.push_back(g.value_of(f));
  return prune(*g.impl(), refs);
}

// A reference interpreter: every node in order, kernels through run_kernel (no passes, no plan).
inline std::vector<Tensor> evaluate(const Program& p, const std::map<std::string, Tensor>& feeds) {
  NoGradGuard ng;
  std::map<std::pair<const Node*, int>, Tensor> vals;
  for (const auto& up : p.graph->nodes) {
    const Node* n = up.get();
    switch (n->kind) {
      case NodeKind::Constant:
      case NodeKind::Variable:
        vals[{n, 0}] = n->value;
        break;
      case NodeKind::Placeholder:
        vals[{n, 0}] = feeds.at(n->name);
        break;
      case NodeKind::Op: {
        TensorList ins;
        for (const auto& in : n->inputs) ins.push_back(vals.at({in.node, in.index}));
        TensorList outs =
            run_kernel(*n->op, std::span<const Tensor>(ins.data(), ins.size()), n->attrs);
        for (size_t k = 0; k < outs.size(); ++k) vals[{n, static_cast<int>(k)}] = outs[k];
        break;
      }
    }
  }
  std::vector<Tensor> out;
  for (const auto& f : p.fetches) out.push_back(vals.at({f.node, f.index}));
  return out;
}

inline int count_op(const Program& p, const std::string& name) {
  int c = 0;
  for (const auto& n : p.graph->nodes) c += n->kind == NodeKind::Op && n->op->name == name;
  return c;
}
inline int count_ops(const Program& p) {
  int c = 0;
  for (const auto& n : p.graph->nodes) c += n->kind == NodeKind::Op;
  return c;
}

inline void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].shape(), b[i].shape()) << "fetch " << i;
    EXPECT_EQ(a[i].dtype(), b[i].dtype()) << "fetch " << i;
    EXPECT_EQ(a[i].to_vector<double>(), b[i].to_vector<double>()) << "fetch " << i;
  }
}

// Same shapes, values within tol relative to b (+ tol absolute).
inline void expect_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].shape(), b[i].shape()) << "fetch " << i;
    std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k)
      EXPECT_NEAR(x[k], y[k], tol * (1 + std::fabs(y[k]))) << "fetch " << i << " element " << k;
  }
}

// Sets KILN_DISABLE_PASSES for one scope.
class DisablePasses {
 public:
  explicit DisablePasses(const char* list) {
    const char* old = std::getenv("KILN_DISABLE_PASSES");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("KILN_DISABLE_PASSES", list, 1);
  }
  ~DisablePasses() {
    if (had_)
      setenv("KILN_DISABLE_PASSES", old_.c_str(), 1);
    else
      unsetenv("KILN_DISABLE_PASSES");
  }

 private:
  bool had_ = false;
  std::string old_;
};

inline const OpDef& op(const char* name) { return OpRegistry::get().at(name); }

}  // namespace kiln_test
