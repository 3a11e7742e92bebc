// The ONNX exporter's rule table (kiln/onnx/onnx_export_rules.cpp) against the op registry:
// every row names a registered op, so renaming an op fails here instead of silently dropping
// its export; no op has two rows; the exporter finds each row by its op; and an op without a
// row is refused by name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/kiln.h"
#include "kiln/onnx/onnx_export.h"
#include "kiln/onnx/onnx_export_rules.h"

namespace od = kiln::onnx::detail;
namespace kd = kiln::detail;

TEST(OnnxExportRules, EveryRowNamesARegisteredOp) {
  std::string missing;
  for (const od::ExportRule& r : od::export_rules())
    if (!kd::OpRegistry::get().find(r.op->name())) missing += std::string(" ") + r.op->name();
  EXPECT_TRUE(missing.empty()) << "export rules for ops the registry does not have:" << missing;
  EXPECT_GE(od::export_rules().size(), 60u);
}

TEST(OnnxExportRules, OneRowPerOpAndTheExporterFindsIt) {
  std::set<std::string> seen;
  for (const od::ExportRule& r : od::export_rules()) {
    EXPECT_TRUE(seen.insert(r.op->name()).second) << "two export rules for " << r.op->name();
    const kd::OpDef& d = r.op->def();
    EXPECT_EQ(od::find_export_rule(&d), &r) << r.op->name();
    EXPECT_NE(r.fn, nullptr) << r.op->name();
  }
  // Every registered op either has a row or none: never a row of another op.
  for (const kd::OpDef* d : kd::OpRegistry::get().all()) {
    if (const od::ExportRule* r = od::find_export_rule(d)) {
      EXPECT_EQ(d->name, r->op->name());
    }
  }
}

TEST(OnnxExportRules, AnOpWithoutARowIsRefusedByName) {
  kiln::Graph g;
  kiln::Tensor x = g.placeholder("x", kiln::Float32, {2, 3});
  kiln::Tensor y = kiln::cumsum(x, 1);
  ASSERT_EQ(od::find_export_rule(g.node_of(y)->op), nullptr);
  try {
    kiln::onnx::export_onnx_bytes(g, {{"y", y}});
    FAIL() << "cumsum has no ONNX rule and must be refused";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Kiln op 'cumsum' has no standard ONNX form"),
              std::string::npos)
        << e.what();
  }
}
