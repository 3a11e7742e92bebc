// ONNX export of symbolic sizes (docs/jit.md, "Symbolic sizes"): ops given a size computed from
// a dynamic dim (slice, reshape, expand, arange, full; sym_size itself, integer // and %) export
// with that size as a run-time value (Shape, Range, ConstantOfShape, Slice/Reshape/Expand fed a
// computed tensor), so one exported model serves every size. The models are written beside the
// other exports, where onnx.checker and onnxruntime check them; Kiln's importer runs them here
// at a second size.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "examples/text_lm_common.h"
#include "kiln/io/npy.h"
#include "kiln/kiln.h"
#include "kiln/onnx/onnx_export.h"
#include "kiln/onnx/onnx_import.h"
#include "kiln/onnx/saved_jit.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

double max_rel(const Tensor& got, const Tensor& want) {
  auto a = contiguous(got).to_vector<double>(), b = contiguous(want).to_vector<double>();
  if (a.size() != b.size()) return INFINITY;
  double md = 0, mr = 1e-30;
  for (size_t i = 0; i < a.size(); ++i)
    md = std::max(md, std::fabs(a[i] - b[i])), mr = std::max(mr, std::fabs(b[i]));
  return md / mr;
}

// Runs the exported file in Kiln's importer on `in` (Kiln's importer takes the sizes of an
// input's dynamic dims at import: it specializes the model to them).
std::vector<Tensor> run_exported(const fs::path& model, const std::string& input,
                                 const std::vector<Tensor>& in) {
  kiln::onnx::ImportOptions opt;
  opt.input_shapes[input] = in[0].shape();
  kiln::onnx::ImportedModel m = kiln::onnx::import_model(model.string(), opt);
  Session s(m.graph);
  return m.run(s, in);
}

}  // namespace

TEST(OnnxExportSymbolic, SizeOpsServeEverySize) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 4});
  const SymInt n = sym_size(x, 0), half = floordiv(n + 1, 2);
  Tensor top = slice(x, 0, 0, half);  // [h, 4]
  Tensor ramp = reshape_symint(arange_symint(0, half, 1, Float32), {half, SymInt(1)});
  Tensor twos = full_symint({half, SymInt(4)}, 2.0);                 // [h, 4]
  Tensor row = expand_symint(slice(x, 0, 0, 1), {half, SymInt(4)});  // [h, 4]
  Tensor y = add(add(mul(top, twos), ramp), row);
  Tensor flat = reshape_symint(y, {half * 4});      // [4h]
  Tensor left = full_symint({mod(n, 3) + 1}, 1.0);  // [n % 3 + 1]
  Session sess(g);
  const fs::path dir = fs::path(KILN_ONNX_EXPORT_DIR) / "symbolic_sizes";
  fs::create_directories(dir);
  kiln::onnx::export_onnx((dir / "model.onnx").string(), g, {{"y", flat}, {"left", left}}, &sess);
  Tensor x5 = randn({5, 4});
  auto want5 = sess.run({flat, left}, {{x, x5}});
  io::write_npy((dir / "input_x.npy").string(), x5);
  io::write_npy((dir / "want_y.npy").string(), want5[0]);
  io::write_npy((dir / "want_left.npy").string(), want5[1]);
  for (int64_t rows : {5, 8, 1}) {
    Tensor xv = randn({rows, 4});
    auto want = sess.run({flat, left}, {{x, xv}});
    auto got = run_exported(dir / "model.onnx", "x", {xv});
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].shape(), want[0].shape()) << rows;
    EXPECT_LE(max_rel(got[0], want[0]), 1e-6) << rows;
    EXPECT_EQ(got[1].shape(), (Shape{rows % 3 + 1})) << rows;
  }
}

// The examples' GPT, jitted at two lengths (its dynamic version), exported: one ONNX model for
// every length, equal to eager at a length it was not traced at.
TEST(OnnxExportSymbolic, JittedGptExportsOneModelForEveryLength) {
  manual_seed(7);
  lm::GPT gpt(30, 64, 32, 4, 2);
  auto f = jit([&gpt](const Tensor& ids) { return gpt.logits(ids); });
  f(randint(0, 30, {2, 5}));
  Tensor ids9 = randint(0, 30, {2, 9});
  Tensor want9 = f(ids9);
  ASSERT_EQ(f.stats().compiles, 2);
  const fs::path dir = fs::path(KILN_ONNX_EXPORT_DIR) / "jit_gpt_symbolic";
  fs::create_directories(dir);
  kiln::onnx::export_jit_onnx((dir / "model.onnx").string(), f, ids9);
  io::write_npy((dir / "input_arg0.npy").string(), ids9);
  io::write_npy((dir / "want_out0.npy").string(), want9);
  for (int64_t T : {9, 17, 3}) {
    Tensor ids = randint(0, 30, {2, T});
    Tensor want = gpt.logits(ids);
    auto got = run_exported(dir / "model.onnx", "arg0", {ids});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].shape(), want.shape()) << T;
    EXPECT_LE(max_rel(got[0], want), 1e-5) << T;
  }
}
