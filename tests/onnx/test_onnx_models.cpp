// Real models exported by PyTorch 1.13 (tests/onnx/export_models.py, run by ctest as the
// onnx_models fixture): a torchvision-style ResNet with BatchNorm and residual blocks, a
// Transformer encoder block (opset 17 LayerNormalization and opset 13 decomposed), a 2-layer
// LSTM, a mix of recurrent layers (bidirectional GRU and RNN, an LSTM with its final states).
// Each is imported, run by a Session through Kiln's passes, and compared with PyTorch's
// outputs: max |kiln - torch| <= 1e-4 max |torch| in float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/onnx/onnx_import.h"
#include "kiln/registry/op_def.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct Agreement {
  double max_abs_diff = 0, max_abs_ref = 0;
};

Agreement agree(const Tensor& got, const Tensor& want) {
  Agreement a;
  auto g = contiguous(got).to_vector<double>(), w = want.to_vector<double>();
  EXPECT_EQ(g.size(), w.size());
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    a.max_abs_diff = std::max(a.max_abs_diff, std::fabs(g[i] - w[i]));
    a.max_abs_ref = std::max(a.max_abs_ref, std::fabs(w[i]));
  }
  return a;
}

class OnnxModels : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxModels, AgreesWithPyTorch) {
  const fs::path dir = fs::path(KILN_ONNX_MODELS_DIR) / GetParam();
  ASSERT_TRUE(fs::exists(dir / "model.onnx"))
      << dir << ": run tests/onnx/export_models.py (the onnx_models ctest fixture) first";
  onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string());
  std::vector<Tensor> feeds, want;
  for (size_t k = 0; k < m.inputs.size(); ++k)
    feeds.push_back(onnx::read_tensor_pb((dir / str_cat("input_", k, ".pb")).string()));
  for (size_t k = 0; k < m.outputs.size(); ++k)
    want.push_back(onnx::read_tensor_pb((dir / str_cat("output_", k, ".pb")).string()));
  Session sess(m.graph);
  std::vector<Tensor> got = m.run(sess, feeds);
  const RunStats st = sess.last_run();
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape());
    ASSERT_EQ(got[k].dtype(), Float32);
    Agreement a = agree(got[k], want[k]);
    const double rel = a.max_abs_diff / a.max_abs_ref;
    std::cout << GetParam() << " output " << k << " " << got[k].shape()
              << ": max |kiln - torch| = " << a.max_abs_diff << ", relative to max |torch| "
              << a.max_abs_ref << ": " << rel << " (" << m.graph.nodes().size() << " graph nodes, "
              << st.plan_steps << " plan steps; ops: ";
    for (const auto& op : m.op_types) std::cout << op << " ";
    std::cout << ")\n  passes: " << st.passes << "\n";
    EXPECT_LE(rel, 1e-4) << GetParam() << " output " << k;
  }
  // The imported graph runs through Kiln's passes: the plan has fewer steps than the graph has
  // nodes, and a second run replays the same plan with the same numbers.
  EXPECT_LT(st.plan_steps, static_cast<int64_t>(m.graph.nodes().size()));
  EXPECT_FALSE(st.passes.empty());
  std::vector<Tensor> again = m.run(sess, feeds);
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_EQ(contiguous(again[k]).to_vector<float>(), contiguous(got[k]).to_vector<float>());
  EXPECT_EQ(sess.plans_built(), 1u);
  if (std::string(GetParam()) == "recurrent") {  // every direction of every layer fused
    const auto fused = std::count_if(m.graph.nodes().begin(), m.graph.nodes().end(), [](auto& n) {
      return n->op && n->op->name == "rnn_sequence";
    });
    EXPECT_EQ(fused, 4 + 2 + 1);
  }
  if (std::string(GetParam()) == "resnet_bn") {
    EXPECT_NE(std::find(m.op_types.begin(), m.op_types.end(), "BatchNormalization"),
              m.op_types.end());
  }
}

INSTANTIATE_TEST_SUITE_P(Exported, OnnxModels,
                         ::testing::Values("resnet", "resnet_bn", "transformer", "transformer_op13",
                                           "lstm", "recurrent", "video3d", "swin_tiny"));

fs::path model_path(const char* name) { return fs::path(KILN_ONNX_MODELS_DIR) / name; }

// The message of the kiln::Error `f` raises ("" when it raises none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  EXPECT_FALSE(msg.empty()) << "no error raised";
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks " << p;
}

// An export with fixed input shapes (batch 2) refuses another batch, naming the input, the
// model's shape and the one given; at import (input_shapes, what kiln-run passes) and at run.
TEST(OnnxInputs, FixedShapeRefusesAnotherShape) {
  const std::string path = (model_path("resnet") / "model.onnx").string();
  onnx::ImportOptions opt;
  opt.input_shapes["input_0"] = Shape{3, 3, 64, 64};
  expect_has(error_of([&] { onnx::import_model(path, opt); }),
             {"[onnx_import] input 'input_0'", "fixes its shape to float32[2, 3, 64, 64]",
              "given [3, 3, 64, 64]", "dim 0 is 3"});
  opt.input_shapes["input_0"] = Shape{3, 64, 64};
  expect_has(error_of([&] { onnx::import_model(path, opt); }),
             {"input 'input_0' has rank 4", "float32[2, 3, 64, 64]", "given 3-D [3, 64, 64]"});
  onnx::ImportedModel m = onnx::import_model(path);
  Session sess(m.graph);
  expect_has(error_of([&] {
               m.run(sess, {randn({3, 3, 64, 64})});
             }),
             {"input 'input_0' expects float32[2, 3, 64, 64]", "given float32[3, 3, 64, 64]",
              "dim 0 is 3, the model fixes it to 2"});
  expect_has(error_of([&] {
               m.run(sess, {randn({3, 64, 64})});
             }),
             {"input 'input_0' expects float32[2, 3, 64, 64] (rank 4)", "(rank 3)"});
  expect_has(error_of([&] {
               m.run(sess, {ones({2, 3, 64, 64}, Float64)});
             }),
             {"input 'input_0' expects float32[2, 3, 64, 64]", "given float64[2, 3, 64, 64]"});
  expect_has(error_of([&] { m.run(sess, {}); }),
             {"takes 1 inputs ('input_0' float32[2, 3, 64, 64]), 0 given"});
  // The right shape still runs.
  EXPECT_EQ(m.run(sess, {randn({2, 3, 64, 64})})[0].shape(), (Shape{2, 10}));
}

// A dynamic batch axis: without its size an op that needs it fails naming the input and its
// symbolic dim; with it the model runs at any batch, and the fixed dims are still checked.
TEST(OnnxInputs, DynamicAxisNeedsItsSize) {
  const fs::path dir = model_path("transformer_dynamic");
  ASSERT_TRUE(fs::exists(dir / "model.onnx"));
  expect_has(error_of([&] { onnx::import_model((dir / "model.onnx").string()); }),
             {"inputs with dynamic dims: 'input_0' [batch, 10, 64]", "input_shapes",
              "--input NAME=FILE.npy"});
  Tensor x = onnx::read_tensor_pb((dir / "input_0.pb").string());
  Tensor want = onnx::read_tensor_pb((dir / "output_0.pb").string());
  onnx::ImportOptions opt;
  opt.input_shapes["input_0"] = x.shape();
  onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string(), opt);
  Session sess(m.graph);
  Agreement a = agree(m.run(sess, {x})[0], want);
  EXPECT_LE(a.max_abs_diff / a.max_abs_ref, 1e-4);
  opt.input_shapes["input_0"] = Shape{5, 11, 64};
  expect_has(error_of([&] { onnx::import_model((dir / "model.onnx").string(), opt); }),
             {"input 'input_0'", "float32[batch, 10, 64]", "dim 1 is 11, the model's 10"});
}

}  // namespace
