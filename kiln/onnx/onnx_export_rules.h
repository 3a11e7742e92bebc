// The ONNX exporter's per-op rules (onnx_export_rules.cpp): one row per Kiln op with a standard
// ONNX form, keyed by an op handle, so that renaming an op fails the test that resolves every
// row (tests/onnx/test_onnx_export.cpp) instead of silently dropping its export. The graph walk,
// cond -> If and while -> Loop stay in onnx_export.cpp.
#pragma once
#include <string>
#include <vector>

#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx::detail {

/// What a rule may do while one node is exported: name the node's inputs (cast to a dtype when
/// Kiln's promotion gave them another), make fresh value names and initializers, and emit ONNX
/// nodes into the graph being written.
class ExportCtx {
 public:
  virtual ~ExportCtx() = default;
  /// The ONNX name of input k of n.
  virtual std::string in(const ::kiln::detail::Node* n, size_t k) = 0;
  /// The same, cast to `dt` when it has another dtype.
  virtual std::string in_as(const ::kiln::detail::Node* n, size_t k, DType dt) = 0;
  virtual std::string fresh() = 0;
  /// An initializer holding t; returns its name.
  virtual std::string constant(const Tensor& t) = 0;
  /// A 1-D int64 initializer (axes, shapes, starts).
  virtual std::string ints_const(const std::vector<int64_t>& v) = 0;
  virtual ::onnx::NodeProto* emit(const char* op, std::vector<std::string> ins,
                                  std::string out) = 0;
  /// Names output k > 0 of n (output 0 is the `out` a rule is given) and returns the name.
  virtual std::string extra_output(const ::kiln::detail::Node* n, int k) = 0;
};

struct ExportRule;
using ExportFn = void (*)(const ExportRule& rule, ExportCtx& e, const ::kiln::detail::Node* n,
                          const std::string& out);

/// One Kiln op's translation: `onnx` is the ONNX op type for the rules that share a function
/// (the binary, comparison and unary tables), else null.
struct ExportRule {
  const ::kiln::detail::OpHandle* op;
  const char* onnx;
  ExportFn fn;
};

/// Every rule, one per op.
const std::vector<ExportRule>& export_rules();
/// The rule of `op`, or null when it has no standard ONNX form.
const ExportRule* find_export_rule(const ::kiln::detail::OpDef* op);

void attr_i(::onnx::NodeProto* n, const char* name, int64_t v);
void attr_f(::onnx::NodeProto* n, const char* name, double v);
void attr_ints(::onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v);

}  // namespace kiln::onnx::detail
