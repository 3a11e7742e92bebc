// The ONNX backend node suite (Debian's libonnx-testdata, 932 cases): each model imported into a
// Kiln Graph, run by a Session on every data set and compared with the expected outputs as
// onnx.backend.test does (rtol 1e-3, atol 1e-7). Reports the pass count and a per-op table
// (written to the build tree; docs/onnx_coverage.md is a copy) and fails below the floor.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "kiln/kiln.h"
#include "kiln/onnx/onnx_import.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

// Raise it when the count goes up; the test fails when the count drops below it.
constexpr int kNodeSuiteFloor = 763;

std::string node_dir() {
  const char* e = std::getenv("KILN_ONNX_NODE_DIR");
  return e ? e : "/usr/share/libonnx-testdata/data/node";
}

// Empty when equal, else what differs.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return str_cat("dtype ", dtype_name(got.dtype()), " != expected ", dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return str_cat("shape ", got.shape(), " != expected ", want.shape());
  if (is_floating(want.dtype())) {
    auto g = got.to_vector<double>(), w = want.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(w[i]) && std::isnan(g[i])) continue;
      if (std::isinf(w[i]) && g[i] == w[i]) continue;
      if (!(std::fabs(g[i] - w[i]) <= 1e-7 + 1e-3 * std::fabs(w[i])))
        return str_cat("element ", i, ": ", g[i], " != expected ", w[i]);
    }
    return "";
  }
  auto g = got.to_vector<int64_t>(), w = want.to_vector<int64_t>();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i]) return str_cat("element ", i, ": ", g[i], " != expected ", w[i]);
  return "";
}

std::vector<fs::path> data_sets(const fs::path& dir) {
  std::vector<fs::path> sets;
  for (const auto& ds : fs::directory_iterator(dir))
    if (ds.is_directory() && ds.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(ds.path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

std::vector<Tensor> read_set(const fs::path& ds, const char* prefix, size_t n) {
  std::vector<Tensor> v;
  for (size_t k = 0; k < n; ++k)
    v.push_back(onnx::read_tensor_pb((ds / str_cat(prefix, k, ".pb")).string()));
  return v;
}

// Imports the model (with `constants` bound at import) and checks one data set; empty on
// success, else the reason.
std::string check_set(const fs::path& dir, const fs::path& ds, bool specialize,
                      std::vector<std::string>* ops) {
  onnx::ImportOptions opt;
  if (specialize) {
    // Parameter-like inputs bound to this data set's values: every integer or bool input (shapes,
    // axes, counts) and float inputs of at most 8 elements and rank <= 1 (Resize's scales and
    // roi, Range's bounds, OneHot's depth). Data tensors stay placeholders.
    onnx::ImportedModel probe = onnx::import_model_inputs_only((dir / "model.onnx").string());
    std::vector<Tensor> in = read_set(ds, "input_", probe.input_names.size());
    for (size_t k = 0; k < in.size(); ++k)
      if (!is_floating(in[k].dtype()) || (in[k].dim() <= 1 && in[k].numel() <= 8))
        opt.constant_inputs[probe.input_names[k]] = in[k];
  }
  onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string(), opt);
  *ops = m.op_types;
  Session sess(m.graph);
  std::vector<Tensor> feeds = read_set(ds, "input_", m.inputs.size());
  std::vector<Tensor> want = read_set(ds, "output_", m.outputs.size());
  std::vector<Tensor> got = m.run(sess, feeds);
  for (size_t k = 0; k < want.size(); ++k) {
    std::string d = compare(contiguous(got[k]), want[k]);
    if (!d.empty()) return str_cat("output ", k, " (", m.output_names[k], "): ", d);
  }
  return "";
}

enum class Outcome { Pass, PassSpecialized, Fail };

// Runs one case: as a general graph, and when that fails because a size or axis comes from an
// input, again with the integer inputs bound at import.
Outcome run_case(const fs::path& dir, std::vector<std::string>* ops, std::string* why) {
  auto run_all = [&](bool specialize) -> std::string {
    try {
      auto sets = data_sets(dir);
      if (sets.empty()) return "no test_data_set";
      for (const auto& ds : sets)
        if (std::string w = check_set(dir, ds, specialize, ops); !w.empty()) return w;
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  *why = run_all(false);
  if (why->empty()) return Outcome::Pass;
  if (why->find("known at import") == std::string::npos) return Outcome::Fail;
  std::string again = run_all(true);
  if (again.empty()) return Outcome::PassSpecialized;
  *why = again;
  return Outcome::Fail;
}

TEST(OnnxNodeSuite, PassCountAndCoverage) {
  const fs::path root = node_dir();
  ASSERT_TRUE(fs::is_directory(root)) << root << " is missing: apt-get install libonnx-testdata";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  const char* only = std::getenv("KILN_ONNX_CASE");
  const bool verbose = std::getenv("KILN_ONNX_VERBOSE") != nullptr;
  std::map<std::string, std::array<int, 3>> per_op;  // op -> {general, specialized, cases}
  std::map<std::string, int> reasons;
  int passed = 0, specialized = 0, total = 0;
  for (const auto& c : cases) {
    const std::string name = c.filename().string();
    if (only && name.find(only) == std::string::npos) continue;
    ++total;
    std::vector<std::string> ops;
    std::string why;
    const Outcome r = run_case(c, &ops, &why);
    if (ops.empty()) ops = onnx::model_op_types((c / "model.onnx").string());
    const bool ok = r != Outcome::Fail;
    passed += r == Outcome::Pass;
    specialized += r == Outcome::PassSpecialized;
    for (const auto& op : ops) {
      per_op[op][2]++;
      per_op[op][0] += r == Outcome::Pass;
      per_op[op][1] += r == Outcome::PassSpecialized;
    }
    if (!ok) {
      std::string key = why.substr(0, why.find(':', why.find(']') + 1));
      reasons[key.substr(0, 90)]++;
      if (verbose || only) std::cout << "FAIL " << name << ": " << why << "\n";
    }
  }
  std::ostringstream md;
  md << "# ONNX backend node suite: Kiln's coverage\n\n"
     << "Generated by `tests/onnx/test_onnx_node_suite.cpp` (ctest -R OnnxNodeSuite) over "
        "Debian's libonnx-testdata 1.12 (`"
     << root.string() << "`), each case imported into a Kiln Graph and run by a Session, "
     << "outputs compared as onnx.backend.test does (rtol 1e-3, atol 1e-7).\n\n"
     << "**" << passed + specialized << " of " << total << " cases pass**: " << passed
     << " as general graphs (every input a placeholder), " << specialized
     << " more with their parameter inputs (integer inputs such as shapes, axes and counts, and "
        "float inputs of at most 8 elements such as Resize's scales) bound "
        "at import (`ImportOptions::constant_inputs`). A case counts under every op its model "
        "uses.\n\n| op | passed | passed specialized | cases |\n|---|---|---|---|\n";
  for (const auto& [op, pt] : per_op)
    md << "| " << op << " | " << pt[0] << " | " << pt[1] << " | " << pt[2] << " |\n";
  md << "\n## Why the others fail (first words of the error)\n\n| reason | cases |\n|---|---|\n";
  std::vector<std::pair<int, std::string>> rs;
  for (const auto& [r, k] : reasons) rs.emplace_back(k, r);
  std::sort(rs.rbegin(), rs.rend());
  for (const auto& [k, r] : rs) md << "| " << r << " | " << k << " |\n";
  std::ofstream(KILN_ONNX_COVERAGE_OUT) << md.str();
  std::cout << "ONNX node suite: " << passed + specialized << " of " << total << " cases pass ("
            << passed << " general, " << specialized
            << " specialized; table: " << KILN_ONNX_COVERAGE_OUT << ")\n";
  if (!only) {
    EXPECT_GE(passed + specialized, kNodeSuiteFloor) << "the node-suite pass count dropped";
  }
}

}  // namespace
