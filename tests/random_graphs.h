// Random graphs of registry elementwise ops with random broadcast shapes, shared by the fusion
// tests (interpreter, a sample under codegen) and the slow test (every graph under codegen).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "kiln/exec/session.h"
#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/ops/fused.h"
#include "kiln/passes/passes.h"

using namespace kiln::detail;

namespace kiln::testing {

inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    worst = std::max(worst, std::fabs(x[i] - y[i]) / std::max(1.0, std::fabs(y[i])));
  }
  return worst;
}

inline int count_ops(const Program& p, const std::string& name) {
  int n = 0;
  for (const auto& node : p.graph->nodes) n += node->kind == NodeKind::Op && node->op->name == name;
  return n;
}

// Random graphs of registry elementwise ops with random broadcast shapes: eager, the optimized
// graph through the interpreter, and through generated code agree (relative 1e-5), on the
// output alone and, for every other graph, on an intermediate value fetched beside it.
struct RandomGraph {
  std::vector<Shape> in_shapes;
  /// {the output, one intermediate value (a "tap")}: fetching the tap as well makes it a value
  /// needed outside its fusion group, which the pass turns into an extra output of the group.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
};

inline RandomGraph make_random(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 1000000);
  int rank = 1 + pick(rng) % 3;
  Shape full;
  for (int d = 0; d < rank; ++d) full.push_back(1 + pick(rng) % 9);
  int ninputs = 1 + pick(rng) % 4;
  RandomGraph rg;
  for (int k = 0; k < ninputs; ++k) {
    Shape s;  // broadcastable to full: drop leading dims, set some to 1
    int drop = k == 0 ? 0 : pick(rng) % (rank + 1);
    for (int d = drop; d < rank; ++d) s.push_back(pick(rng) % 3 == 0 && k ? 1 : full[d]);
    rg.in_shapes.push_back(s);
  }
  int nops = 2 + pick(rng) % 8;
  std::vector<int> ops;
  for (int i = 0; i < nops; ++i) ops.push_back(pick(rng));
  const int tap = pick(rng) % nops;
  rg.fn = [ops, ninputs, tap](const std::vector<Tensor>& in) {
    std::vector<Tensor> vals(in.begin(), in.end());
    for (int code : ops) {
      const Tensor& a = vals[static_cast<size_t>(code % vals.size())];
      const Tensor& b = vals[static_cast<size_t>((code / 7) % vals.size())];
      Tensor r;
      switch ((code / 101) % 16) {
        case 0:
          r = add(a, b);
          break;
        case 1:
          r = sub(a, b);
          break;
        case 2:
          r = mul(a, b);
          break;
        case 3:
          r = div(a, add(abs(b), 1.0));
          break;
        case 4:
          r = tanh(a);
          break;
        case 5:
          r = sigmoid(a);
          break;
        case 6:
          r = relu(a);
          break;
        case 7:
          r = gelu(a, (code & 1) != 0);
          break;
        case 8:
          r = exp(clamp(a, -5.0, 5.0));
          break;
        case 9:
          r = maximum(a, b);
          break;
        case 10:
          r = where(gt(a, b), a, neg(b));
          break;
        case 11:
          r = silu(a);
          break;
        case 12:
          r = leaky_relu(a, 0.1);
          break;
        case 13:
          r = sqrt(add(mul(a, a), 1.0));
          break;
        case 14:
          r = minimum(a, mul(b, 0.5));
          break;
        default:
          r = erf(a);
          break;
      }
      vals.push_back(r);
    }
    (void)ninputs;
    // Sum the last value with the broadcast of everything so the output has the full shape.
    Tensor out = vals.back();
    for (size_t k = 0; k < in.size(); ++k) out = add(out, mul(in[k], 0.25));
    return std::vector<Tensor>{out, vals[in.size() + static_cast<size_t>(tap)]};
  };
  return rg;
}

// Bitwise equality of two float tensors (NaN included, which == would call unequal).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<float> x = contiguous(a).to_vector<float>(),
                           y = contiguous(b).to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

inline void run_random_graphs(int count, bool with_codegen) {
  std::mt19937 rng(1234);
  int fused_graphs = 0, multi_output_graphs = 0;
  for (int gi = 0; gi < count; ++gi) {
    RandomGraph rg = make_random(rng);
    std::vector<Tensor> vals;
    for (const auto& s : rg.in_shapes) vals.push_back(randn(s));
    // Odd graphs fetch the tap too.
    const size_t nfetch = gi % 2 ? 2 : 1;
    std::vector<Tensor> ref = rg.fn(vals);
    Graph g;
    std::vector<Tensor> phs;
    FeedDict feeds;
    for (size_t k = 0; k < rg.in_shapes.size(); ++k) {
      phs.push_back(g.placeholder("in" + std::to_string(k), Float32, rg.in_shapes[k]));
      feeds.push_back({phs.back(), vals[k]});
    }
    std::vector<Tensor> y = rg.fn(phs);
    y.resize(nfetch);
    std::vector<ValueRef> fetches;
    for (const auto& t : y) fetches.push_back(g.value_of(t));
    Program p = prune(*g.impl(), fetches);
    optimize(p);
    fused_graphs += count_ops(p, "fused") > 0;
    for (const auto& n : p.graph->nodes)
      if (n->kind == NodeKind::Op && n->op->name == "fused" && n->outputs.size() > 1) {
        ++multi_output_graphs;
        break;
      }
    std::vector<Tensor> interpreted;
    for (bool cg : {false, true}) {
      if (cg && !with_codegen) continue;
      fused::set_codegen(cg);
      Session s(g);
      std::vector<Tensor> out = s.run(y, feeds);
      // Generated code and the interpreter must give the same bits: a session's first runs are
      // interpreted while its kernel compiles in the background, so any difference would make
      // the same session answer differently from one run to the next.
      if (!cg) interpreted = out;
      for (size_t f = 0; cg && f < nfetch; ++f)
        ASSERT_TRUE(same_bits(out[f], interpreted[f]))
            << "graph " << gi << " fetch " << f << ": generated code differs from the interpreter";
      for (size_t f = 0; f < nfetch; ++f) {
        ASSERT_EQ(out[f].shape(), ref[f].shape()) << "graph " << gi << " fetch " << f;
        ASSERT_LT(max_rel_diff(out[f], ref[f]), 1e-5)
            << "graph " << gi << " fetch " << f << " codegen " << cg << "\n"
            << [&] {
                 std::string s;
                 for (auto& n : p.graph->nodes)
                   if (n->kind == NodeKind::Op)
                     s += n->op->name + " " + n->attrs.str(n->op->attr_names) + "\n";
                 for (auto& sh : rg.in_shapes) s += "in " + sh.str() + "\n";
                 return s;
               }();
      }
    }
  }
  fused::set_codegen(true);
  EXPECT_GT(fused_graphs, count * 3 / 4);
  // Fetching the tap as well must give the pass extra outputs to make (60 of the 200 graphs
  // here have a multi-output group, 11 of the first 40).
  EXPECT_GT(multi_output_graphs, count / 20) << "of " << count << " graphs";
}

}  // namespace kiln::testing
