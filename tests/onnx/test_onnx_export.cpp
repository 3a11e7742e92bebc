// ONNX export (onnx_export.h): a trained CNN and a Transformer-style MLP block exported with
// standard ops into the build tree, with their inputs and Kiln's outputs as .npy; ctest then runs
// onnx.checker (check_export.py) and onnxruntime-node (check_ort.js) on them. Here: what export
// refuses (switch/merge), and that the exported file imports back to the same numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kiln/graph/node.h"
#include "kiln/io/npy.h"
#include "kiln/kiln.h"
#include "kiln/onnx/onnx_export.h"
#include "kiln/onnx/onnx_import.h"
#include "kiln/onnx/saved_jit.h"
#include "kiln/optim/optim.h"
#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

// model.onnx, input_<name>.npy, want_<output>.npy under KILN_ONNX_EXPORT_DIR/<name>; and the
// file imported back by Kiln gives the same outputs (relative 1e-6).
void export_case(const std::string& name, const Graph& g, const kiln::onnx::NamedTensors& outs,
                 const Session& sess, const FeedDict& feeds,
                 const kiln::onnx::SaveOptions& opts = {}) {
  const fs::path dir = fs::path(KILN_ONNX_EXPORT_DIR) / name;
  fs::create_directories(dir);
  kiln::onnx::export_onnx((dir / "model.onnx").string(), g, outs, &sess, opts);
  std::vector<Tensor> fetches;
  for (const auto& [n, t] : outs) fetches.push_back(t);
  Session& s = const_cast<Session&>(sess);
  std::vector<Tensor> want = s.run(fetches, feeds);
  for (const auto& [ph, v] : feeds)
    io::write_npy((dir / ("input_" + g.node_of(ph)->name + ".npy")).string(), v);
  for (size_t k = 0; k < outs.size(); ++k)
    io::write_npy((dir / ("want_" + outs[k].first + ".npy")).string(), want[k]);
  // Kiln's own importer reads the export back.
  kiln::onnx::ImportOptions opt;
  for (const auto& [ph, v] : feeds) opt.input_shapes[g.node_of(ph)->name] = v.shape();
  kiln::onnx::ImportedModel m = kiln::onnx::import_model((dir / "model.onnx").string(), opt);
  std::vector<Tensor> in;
  for (const auto& iname : m.input_names)
    for (const auto& [ph, v] : feeds)
      if (g.node_of(ph)->name == iname) in.push_back(v);
  Session s2(m.graph);
  std::vector<Tensor> got = m.run(s2, in);
  for (size_t k = 0; k < want.size(); ++k) {
    auto a = contiguous(got[k]).to_vector<double>(), b = want[k].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    double md = 0, mr = 1e-30;
    for (size_t i = 0; i < a.size(); ++i)
      md = std::max(md, std::fabs(a[i] - b[i])), mr = std::max(mr, std::fabs(b[i]));
    std::cout << name << " '" << outs[k].first << "': export imported back, max rel diff "
              << md / mr << "\n";
    EXPECT_LE(md / mr, 1e-6);
  }
}

TEST(OnnxExport, TrainedCnn) {
  manual_seed(3);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 1, 12, 12});
  Tensor y = g.placeholder("y", Int64, {Dim::any()});
  Tensor w1 = g.variable("w1", mul(randn({4, 1, 3, 3}), 0.3));
  Tensor b1 = g.variable("b1", zeros({4}));
  Tensor w2 = g.variable("w2", mul(randn({10, 36}), 0.1));
  Tensor b2 = g.variable("b2", zeros({10}));
  Tensor rm = g.variable("rm", mul(randn({4}), 0.1));
  Tensor rv = g.variable("rv", add(rand({4}), 0.5));
  Tensor h = conv2d(x, w1, b1, {1, 1}, {1, 1});
  h = batch_norm(h, rm, rv, Tensor(), Tensor(), false);
  h = avg_pool2d(max_pool2d(relu(h), {2, 2}), {2, 2});
  Tensor logits = linear(flatten(h, 1), w2, b2);
  Tensor probs = softmax(logits, -1);
  Tensor loss = cross_entropy(logits, y);
  Tensor step = optim::SGD(0.1, 0.9).minimize(loss);
  Session sess(g);
  Tensor xs = randn({16, 1, 12, 12});
  Tensor ys = randint(0, 10, {16});
  for (int i = 0; i < 20; ++i) sess.run(step, {{x, xs}, {y, ys}});
  Tensor xt = randn({3, 1, 12, 12});
  export_case("cnn", g, {{"logits", logits}, {"probs", probs}}, sess, {{x, xt}});
  // The same with its weights as ONNX external data in a safetensors file: onnx.checker and
  // onnxruntime read it from there, and so does Kiln's importer.
  export_case("cnn_external", g, {{"logits", logits}, {"probs", probs}}, sess, {{x, xt}},
              {.external_data = true, .external_min_bytes = 64});
  EXPECT_TRUE(fs::exists(fs::path(KILN_ONNX_EXPORT_DIR) / "cnn_external" / "model.safetensors"));
}

TEST(OnnxExport, TransformerMlpBlock) {
  manual_seed(4);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 6, 16});
  Tensor w1 = g.variable("w1", mul(randn({16, 32}), 0.2));
  Tensor w2 = g.variable("w2", mul(randn({32, 16}), 0.2));
  Tensor gam = g.variable("gamma", add(rand({16}), 0.5));
  Tensor bet = g.variable("beta", mul(randn({16}), 0.1));
  Tensor h = layer_norm(x, {16}, gam, bet);
  Tensor f = matmul(gelu(matmul(h, w1)), w2);
  Tensor r = add(x, f);
  Tensor att = softmax(div(matmul(r, transpose(r, 1, 2)), 4.0), -1);  // [B, 6, 6]
  Tensor o = add(matmul(att, r), silu(mean(r, {2}, true)));
  Session sess(g);
  export_case("mlp_block", g, {{"out", o}, {"pooled", sum(o, {1})}}, sess,
              {{x, randn({2, 6, 16})}});
}

// A jitted function (saved_jit.h): its version with a dynamic batch dim, exported as standard
// ONNX; onnx.checker and onnxruntime check it with the other exports.
TEST(OnnxExport, JittedFunctionWithDynamicBatch) {
  manual_seed(5);
  Tensor w = mul(randn({10, 6}), 0.3), b = mul(randn({6}), 0.1);
  auto f = jit([&](const Tensor& x, double scale) {
    return std::make_pair(softmax(mul(add(matmul(tanh(x), w), b), scale), -1), sum(x, {1}));
  });
  Tensor x2 = randn({2, 10}), x5 = randn({5, 10});
  f(x2, 2.0);
  auto [p, s] = f(x5, 2.0);
  ASSERT_EQ(f.stats().compiles, 2);
  const fs::path dir = fs::path(KILN_ONNX_EXPORT_DIR) / "jit_mlp";
  fs::create_directories(dir);
  kiln::onnx::export_jit_onnx((dir / "model.onnx").string(), f, x5, 2.0);
  io::write_npy((dir / "input_arg0.npy").string(), x5);
  io::write_npy((dir / "want_out0.npy").string(), p);
  io::write_npy((dir / "want_out1.npy").string(), s);
}

// kiln::cond (Switch/Merge) as ONNX If, nested inside a branch too, fed inputs that take each
// branch; checked by onnx.checker, onnxruntime and Kiln's importer like the other exports.
TEST(OnnxExport, CondAsIf) {
  manual_seed(6);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 4});
  Tensor w = g.variable("w", mul(randn({4, 3}), 0.5));
  Tensor h = matmul(x, w);
  auto outs = cond(
      gt(sum(x), 0.0),
      [&] {
        // An inner cond on a value computed in the branch.
        Tensor t = tanh(h);
        Tensor inner = cond(
            gt(mean(t), 0.1), [&] { return mul(t, 2.0); }, [&] { return exp(t); });
        return std::vector<Tensor>{inner, sum(t, {1})};
      },
      [&] {
        return std::vector<Tensor>{neg(relu(h)), full({1}, 7.0)};
      });
  Tensor out = add(outs[0], 1.0);  // a consumer after the If
  Session sess(g);
  const std::string ok = kiln::onnx::export_onnx_bytes(g, {{"out", out}, {"r", outs[1]}}, &sess);
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(ok));
  int ifs = 0;
  for (const auto& n : m.graph().node()) ifs += n.op_type() == "If";
  EXPECT_EQ(ifs, 1);  // one If with two outputs (and a nested If in its then branch)
  export_case("cond_then", g, {{"out", out}, {"r", outs[1]}}, sess, {{x, abs(randn({3, 4}))}});
  export_case("cond_else", g, {{"out", out}, {"r", outs[1]}}, sess, {{x, neg(abs(randn({3, 4})))}});
}

// while_loop as ONNX Loop: an RNN over a fed length, its weights captured from outside.
TEST(OnnxExport, WhileLoopAsLoop) {
  manual_seed(7);
  const int64_t hidden = 5;
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 2, 3});
  Tensor len = g.placeholder("len", Int64, {});
  Tensor wx = g.variable("wx", mul(randn({3, hidden}), 0.5));
  Tensor wh = g.variable("wh", mul(randn({hidden, hidden}), 0.3));
  auto x_at = [&](const Tensor& t) { return squeeze(index_select(x, 0, reshape(t, {1})), 0); };
  Tensor h0 = zeros_like(matmul(x_at(scalar_tensor(0, Int64)), wx));
  auto fin = while_loop([&](const std::vector<Tensor>& v) { return lt(v[0], len); },
                        [&](const std::vector<Tensor>& v) {
                          Tensor h = tanh(add(matmul(x_at(v[0]), wx), matmul(v[1], wh)));
                          return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), h};
                        },
                        {scalar_tensor(0, Int64), h0});
  Tensor pred = sum(fin[1], {1});
  Session sess(g);
  export_case("while_rnn", g, {{"pred", pred}, {"steps", fin[0]}}, sess,
              {{x, randn({6, 2, 3})}, {len, scalar_tensor(4.0, Int64)}});
}

TEST(OnnxExport, RefusesWhatOnnxCannotSay) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {});
  auto s = switch_(x, gt(x, 0.0));
  // A switch output that no merge gates: the value is dead on one side.
  try {
    kiln::onnx::export_onnx_bytes(g, {{"out", neg(s[1])}});
    FAIL() << "a lone switch exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is used outside a cond"), std::string::npos) << e.what();
  }
  // A merge of values no switch gates.
  try {
    kiln::onnx::export_onnx_bytes(g, {{"out", merge({neg(x), x})[0]}});
    FAIL() << "a merge of live values exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a cond's merge"), std::string::npos) << e.what();
  }
}

}  // namespace
