// The ONNX exporter's rules, one row per Kiln op with a standard ONNX form (opset 17): rsqrt as
// Reciprocal(Sqrt), gelu through Erf or Tanh, matmul with a bias as MatMul + Add, ...; attributes
// are translated and constants (axes, shapes, bounds) become initializers. Rows are keyed by op
// handle, so a test resolves every row against the registry.
#include "kiln/onnx/onnx_export_rules.h"

#include <cmath>
#include <unordered_map>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace kd = ::kiln::detail;
namespace {

using kd::Node;
using kd::OpHandle;

constexpr char kExp[] = "export_onnx";

// Handles of the exported ops that kiln/ops/handles.h does not already name.
const OpHandle h_pow{"pow"}, h_maximum{"maximum"}, h_minimum{"minimum"};
const OpHandle h_lt{"lt"}, h_le{"le"}, h_gt{"gt"}, h_ge{"ge"}, h_eq{"eq"}, h_ne{"ne"};
const OpHandle h_logical_and{"logical_and"}, h_logical_or{"logical_or"},
    h_logical_not{"logical_not"};
const OpHandle h_abs{"abs"}, h_exp{"exp"}, h_log{"log"}, h_sqrt{"sqrt"}, h_sigmoid{"sigmoid"},
    h_tanh{"tanh"}, h_erf{"erf"}, h_sin{"sin"}, h_cos{"cos"}, h_sign{"sign"}, h_detach{"detach"},
    h_print{"print"};
const OpHandle h_rsqrt{"rsqrt"}, h_silu{"silu"}, h_gelu{"gelu"}, h_leaky_relu{"leaky_relu"},
    h_clamp{"clamp"}, h_where{"where"}, h_fill_like{"fill_like"};
const OpHandle h_avg_pool2d{"avg_pool2d"}, h_softmax{"softmax"}, h_log_softmax{"log_softmax"},
    h_layer_norm{"layer_norm"};
const OpHandle h_sum{"sum"}, h_mean{"mean"}, h_max{"max"}, h_min{"min"};
const OpHandle h_slice{"slice"}, h_squeeze{"squeeze"}, h_unsqueeze{"unsqueeze"},
    h_index_select{"index_select"}, h_embedding{"embedding"};
const OpHandle h_sdpa{"scaled_dot_product_attention"}, h_split{"split"}, h_fmod{"fmod"},
    h_remainder{"remainder"}, h_arange{"arange"}, h_full{"full"};

DType out_dtype(const Node* n) { return n->outputs[0].dtype; }
DType in_dtype(const Node* n, size_t k) {
  return n->inputs[k].node->outputs[n->inputs[k].index].dtype;
}
std::string scalar_const(ExportCtx& e, double v, DType dt) {
  return e.constant(cast(scalar_tensor(v, Float64), dt));
}

// ---- symbolic sizes (kiln/ops/sym_int.h): a patched attribute is a run-time value -------------

// The trailing input of n that patches attribute `attr` (element `elem`), or -1.
int patch_input(const Node* n, int attr, int elem) {
  for (size_t k = 0; k < n->patches.size(); ++k)
    if (n->patches[k].attr == attr && n->patches[k].elem == elem)
      return static_cast<int>(n->op_inputs() + k);
  return -1;
}
// A 1-D int64 [1] holding attribute `attr` (element `elem`): the patched size, or a constant.
std::string size_1d(ExportCtx& e, const Node* n, int attr, int elem, int64_t value) {
  const int k = patch_input(n, attr, elem);
  if (k < 0) return e.ints_const({value});
  const std::string u = e.fresh();
  e.emit("Unsqueeze", {e.in_as(n, static_cast<size_t>(k), Int64), e.ints_const({0})}, u);
  return u;
}
// A 0-d int64 scalar for attribute `attr` (an integer attribute).
std::string size_0d(ExportCtx& e, const Node* n, int attr) {
  const int k = patch_input(n, attr, -1);
  if (k < 0) return e.constant(scalar_tensor(static_cast<double>(n->attrs.i(attr)), Int64));
  return e.in_as(n, static_cast<size_t>(k), Int64);
}
// The integer-list attribute `attr` as a 1-D int64: a constant, or its patched elements concat'd.
std::string sizes_1d(ExportCtx& e, const Node* n, int attr, std::vector<int64_t> values) {
  bool patched = false;
  for (const auto& p : n->patches) patched = patched || p.attr == attr;
  if (!patched) return e.ints_const(values);
  std::vector<std::string> parts;
  for (size_t i = 0; i < values.size(); ++i)
    parts.push_back(size_1d(e, n, attr, static_cast<int>(i), values[i]));
  const std::string c = e.fresh();
  attr_i(e.emit("Concat", parts, c), "axis", 0);
  return c;
}

// ---- rules shared by a table of ops (ExportRule::onnx names the ONNX op) --------------------

void binary(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  e.emit(r.onnx, {e.in_as(n, 0, out_dtype(n)), e.in_as(n, 1, out_dtype(n))}, out);
}
// Comparisons read both operands in their promoted dtype (the output is bool).
void compare(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  const DType dt = promote(in_dtype(n, 0), in_dtype(n, 1));
  e.emit(r.onnx, {e.in_as(n, 0, dt), e.in_as(n, 1, dt)}, out);
}
void logical(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  e.emit(r.onnx, {e.in_as(n, 0, Bool), e.in_as(n, 1, Bool)}, out);
}
void unary(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  e.emit(r.onnx, {e.in(n, 0)}, out);
}
void softmax(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  attr_i(e.emit(r.onnx, {e.in(n, 0)}, out), "axis", n->attrs.i(0));
}
void squeeze(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  e.emit(r.onnx, {e.in(n, 0), e.ints_const({n->attrs.i(0)})}, out);
}
// Kiln's reductions take dims and keepdim; ReduceSum (opset 13) reads its axes from an input,
// the others (until opset 18) from an attribute.
void reduce(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  const kd::Attrs& a = n->attrs;
  const bool sum = std::string(r.onnx) == "ReduceSum";
  std::vector<std::string> ins{e.in_as(n, 0, out_dtype(n))};
  if (sum && !a.ints(0).empty()) ins.push_back(e.ints_const(a.ints(0)));
  auto* rn = e.emit(r.onnx, ins, out);
  if (!sum && !a.ints(0).empty()) attr_ints(rn, "axes", a.ints(0));
  attr_i(rn, "keepdims", a.b(1) ? 1 : 0);
}
void pool2d(const ExportRule& r, ExportCtx& e, const Node* n, const std::string& out) {
  const kd::Attrs& a = n->attrs;
  auto* pl = e.emit(r.onnx, {e.in(n, 0)}, out);
  attr_ints(pl, "kernel_shape", a.ints(0));
  attr_ints(pl, "strides", a.ints(1));
  const auto& p = a.ints(2);
  attr_ints(pl, "pads", {p[0], p[1], p[0], p[1]});
  if (std::string(r.onnx) == "AveragePool")
    attr_i(pl, "count_include_pad", 1);  // torch's default, as Kiln
}
void gather_rows(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  // embedding(weight, indices) picks rows: axis 0; index_select names its dim.
  const int64_t axis = n->op == h_embedding ? 0 : n->attrs.i(0);
  attr_i(e.emit("Gather", {e.in(n, 0), e.in(n, 1)}, out), "axis", axis);
}

// ---- rules of one op ---------------------------------------------------------------------------

void ne(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const DType dt = promote(in_dtype(n, 0), in_dtype(n, 1));
  const std::string eq = e.fresh();
  e.emit("Equal", {e.in_as(n, 0, dt), e.in_as(n, 1, dt)}, eq);
  e.emit("Not", {eq}, out);
}
void rsqrt(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const std::string s = e.fresh();
  e.emit("Sqrt", {e.in(n, 0)}, s);
  e.emit("Reciprocal", {s}, out);
}
void silu(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const std::string s = e.fresh();
  e.emit("Sigmoid", {e.in(n, 0)}, s);
  e.emit("Mul", {e.in(n, 0), s}, out);
}
void gelu(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const std::string x = e.in(n, 0);
  const DType dt = out_dtype(n);
  auto c = [&](double v) { return scalar_const(e, v, dt); };
  const std::string h = e.fresh(), inner = e.fresh(), t = e.fresh(), one = e.fresh();
  if (!n->attrs.b(0)) {  // 0.5 x (1 + erf(x / sqrt 2))
    const std::string s = e.fresh();
    e.emit("Mul", {x, c(M_SQRT1_2)}, s);
    e.emit("Erf", {s}, t);
  } else {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const std::string x3 = e.fresh(), p = e.fresh(), q = e.fresh();
    e.emit("Pow", {x, c(3.0)}, x3);
    e.emit("Mul", {x3, c(0.044715)}, p);
    e.emit("Add", {x, p}, q);
    e.emit("Mul", {q, c(std::sqrt(2.0 / M_PI))}, inner);
    e.emit("Tanh", {inner}, t);
  }
  e.emit("Add", {t, c(1.0)}, one);
  e.emit("Mul", {x, c(0.5)}, h);
  e.emit("Mul", {h, one}, out);
}
void leaky_relu(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  attr_f(e.emit("LeakyRelu", {e.in(n, 0)}, out), "alpha", n->attrs.f(0));
}
void clamp(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const kd::Attrs& a = n->attrs;
  std::vector<std::string> ins{e.in(n, 0), "", ""};
  if (std::isfinite(a.f(0))) ins[1] = scalar_const(e, a.f(0), out_dtype(n));
  if (std::isfinite(a.f(1))) ins[2] = scalar_const(e, a.f(1), out_dtype(n));
  e.emit("Clip", ins, out);
}
void where(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const DType dt = out_dtype(n);
  e.emit("Where", {e.in_as(n, 0, Bool), e.in_as(n, 1, dt), e.in_as(n, 2, dt)}, out);
}
// zeros_like, ones_like, full_like: ConstantOfShape of the input's run-time shape.
void fill_like(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const std::string sh = e.fresh();
  e.emit("Shape", {e.in(n, 0)}, sh);
  auto* at = e.emit("ConstantOfShape", {sh}, out)->add_attribute();
  at->set_name("value");
  at->set_type(::onnx::AttributeProto::TENSOR);
  fill_tensor(at->mutable_t(),
              cast(reshape(scalar_tensor(n->attrs.f(0), Float64), {1}), out_dtype(n)), "");
}
void cast_rule(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  attr_i(e.emit("Cast", {e.in(n, 0)}, out), "to", onnx_from_dtype(out_dtype(n)));
}
void matmul(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  if (n->inputs.size() == 3) {  // the bias row linear folds in
    const std::string m = e.fresh();
    e.emit("MatMul", {e.in(n, 0), e.in(n, 1)}, m);
    e.emit("Add", {m, e.in(n, 2)}, out);
  } else {
    e.emit("MatMul", {e.in(n, 0), e.in(n, 1)}, out);
  }
}
void addmm(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  auto* g = e.emit("Gemm", {e.in(n, 1), e.in(n, 2), e.in(n, 0)}, out);
  attr_f(g, "beta", n->attrs.f(0));
  attr_f(g, "alpha", n->attrs.f(1));
}
void conv2d(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const kd::Attrs& a = n->attrs;
  const Shape& ws = n->inputs[1].node->outputs[n->inputs[1].index].shape;
  std::vector<std::string> ins{e.in(n, 0), e.in(n, 1)};
  if (n->inputs.size() > 2) ins.push_back(e.in(n, 2));
  auto* c = e.emit("Conv", ins, out);
  attr_ints(c, "kernel_shape", {ws[2], ws[3]});
  attr_ints(c, "strides", a.ints(0));
  const auto& p = a.ints(1);
  attr_ints(c, "pads", {p[0], p[1], p[0], p[1]});
  attr_ints(c, "dilations", a.ints(2));
  attr_i(c, "group", a.i(3));
}
void layer_norm(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const kd::Attrs& a = n->attrs;
  const int64_t nd = a.i(0);
  const bool hw = a.b(2), hb = a.b(3);
  const Shape& xs = n->inputs[0].node->outputs[n->inputs[0].index].shape;
  std::string scale;
  size_t next = 1;
  if (hw) {
    scale = e.in(n, next++);
  } else {
    Shape s;
    for (int64_t d = xs.rank() - nd; d < xs.rank(); ++d) {
      if (xs[d] < 0) fail(kExp, "layer_norm without weight needs static normalized dims");
      s.push_back(xs[d]);
    }
    scale = e.constant(ones(s, out_dtype(n)));
  }
  std::vector<std::string> ins{e.in(n, 0), scale};
  if (hb) ins.push_back(e.in(n, next));
  auto* ln = e.emit("LayerNormalization", ins, out);
  // Kiln's extra outputs (the mean and 1/std the backward reads) are ONNX's Mean, InvStdDev.
  for (size_t k = 1; k < n->outputs.size() && k < 3; ++k)
    ln->add_output(e.extra_output(n, static_cast<int>(k)));
  attr_i(ln, "axis", -nd);
  attr_f(ln, "epsilon", a.f(1));
}
void reshape_rule(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  e.emit("Reshape", {e.in(n, 0), sizes_1d(e, n, 0, n->attrs.ints(0))}, out);
}
void permute(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  attr_ints(e.emit("Transpose", {e.in(n, 0)}, out), "perm", n->attrs.ints(0));
}
void transpose(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const int64_t rank = n->outputs[0].shape.rank();
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d) perm.push_back(d);
  std::swap(perm.at(wrap_dim(n->attrs.i(0), rank, kExp)),
            perm.at(wrap_dim(n->attrs.i(1), rank, kExp)));
  attr_ints(e.emit("Transpose", {e.in(n, 0)}, out), "perm", perm);
}
void cat(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  std::vector<std::string> ins;
  for (size_t j = 0; j < n->inputs.size(); ++j) ins.push_back(e.in_as(n, j, out_dtype(n)));
  attr_i(e.emit("Concat", ins, out), "axis", n->attrs.i(0));
}
void slice(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const kd::Attrs& a = n->attrs;
  e.emit("Slice",
         {e.in(n, 0), size_1d(e, n, 1, -1, a.i(1)), size_1d(e, n, 2, -1, a.i(2)),
          e.ints_const({a.i(0)}), size_1d(e, n, 3, -1, a.i(3))},
         out);
}
void expand(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  std::vector<int64_t> s = n->attrs.ints(0);
  for (size_t i = 0; i < s.size(); ++i)  // Kiln's -1 keeps a dim; ONNX's 1 broadcasts
    if (s[i] < 0 && patch_input(n, 0, static_cast<int>(i)) < 0) s[i] = 1;
  e.emit("Expand", {e.in(n, 0), sizes_1d(e, n, 0, s)}, out);
}
// scaled_dot_product_attention(q, k, v; causal, scale): MatMul, Mul, the causal mask (key j >
// query i) as Where over two Ranges of the run-time lengths, Softmax, MatMul. Kiln's output 0 is
// "raw" ([..., T, H, E] for rank >= 3: dims -3 and -2 swapped), output 1 the probabilities.
void sdpa(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const int64_t rank = n->inputs[0].node->outputs[n->inputs[0].index].shape.rank();
  const DType dt = out_dtype(n);
  auto swap_last = [&](int64_t a, int64_t b) {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d) perm.push_back(d);
    std::swap(perm[static_cast<size_t>(rank + a)], perm[static_cast<size_t>(rank + b)]);
    return perm;
  };
  const std::string kt = e.fresh(), qk = e.fresh(), s = e.fresh();
  attr_ints(e.emit("Transpose", {e.in(n, 1)}, kt), "perm", swap_last(-2, -1));
  e.emit("MatMul", {e.in(n, 0), kt}, qk);
  double scale = n->attrs.f(1);
  if (scale == 0) {
    const Shape& qs = n->inputs[0].node->outputs[n->inputs[0].index].shape;
    if (qs[rank - 1] < 0) fail(kExp, "attention with the default scale needs a static head dim");
    scale = 1.0 / std::sqrt(static_cast<double>(qs[rank - 1]));
  }
  e.emit("Mul", {qk, scalar_const(e, scale, dt)}, s);
  std::string logits = s;
  if (n->attrs.b(0)) {             // causal
    auto length = [&](size_t k) {  // dim -2 of input k, 0-d
      const std::string sh = e.fresh(), l = e.fresh();
      auto* shp = e.emit("Shape", {e.in(n, k)}, sh);
      attr_i(shp, "start", rank - 2);
      attr_i(shp, "end", rank - 1);
      e.emit("Squeeze", {sh, e.ints_const({0})}, l);
      return l;
    };
    const std::string zero = e.constant(scalar_tensor(0, Int64));
    const std::string one = e.constant(scalar_tensor(1, Int64));
    const std::string rows = e.fresh(), cols = e.fresh(), rows2 = e.fresh(), mask = e.fresh();
    e.emit("Range", {zero, length(0), one}, rows);
    e.emit("Range", {zero, length(1), one}, cols);
    e.emit("Unsqueeze", {rows, e.ints_const({1})}, rows2);
    e.emit("Greater", {cols, rows2}, mask);
    logits = e.fresh();
    e.emit("Where", {mask, scalar_const(e, -INFINITY, dt), s}, logits);
  }
  const std::string p = n->outputs.size() > 1 ? e.extra_output(n, 1) : e.fresh();
  attr_i(e.emit("Softmax", {logits}, p), "axis", -1);
  if (rank < 3) {
    e.emit("MatMul", {p, e.in(n, 2)}, out);
    return;
  }
  const std::string o = e.fresh();
  e.emit("MatMul", {p, e.in(n, 2)}, o);
  attr_ints(e.emit("Transpose", {o}, out), "perm", swap_last(-3, -2));
}
// split(x; dim, sizes): ONNX Split with the sizes as an input, one output per piece.
void split(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const int64_t rank = n->inputs[0].node->outputs[n->inputs[0].index].shape.rank();
  auto* sp = e.emit("Split", {e.in(n, 0), e.ints_const(n->attrs.ints(1))}, out);
  for (size_t k = 1; k < n->outputs.size(); ++k)
    sp->add_output(e.extra_output(n, static_cast<int>(k)));
  attr_i(sp, "axis", wrap_dim(n->attrs.i(0), rank, kExp));
}
// sym_size(x; dim): Shape's one-dim slice, squeezed to the 0-d int64 Kiln has.
void sym_size(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const Shape& xs = n->inputs[0].node->outputs[n->inputs[0].index].shape;
  const int64_t d = wrap_dim(n->attrs.i(0), xs.rank(), kExp);
  const std::string s = e.fresh();
  auto* sh = e.emit("Shape", {e.in(n, 0)}, s);
  attr_i(sh, "start", d);
  attr_i(sh, "end", d + 1);
  e.emit("Squeeze", {s, e.ints_const({0})}, out);
}
// arange(; start, end, step, dtype) with bounds that may be symbolic: Range over int64.
void arange(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const DType dt = out_dtype(n);
  const std::string r = dt == Int64 ? out : e.fresh();
  e.emit("Range", {size_0d(e, n, 0), size_0d(e, n, 1), size_0d(e, n, 2)}, r);
  if (dt != Int64) attr_i(e.emit("Cast", {r}, out), "to", onnx_from_dtype(dt));
}
// full(; shape, value, dtype): ConstantOfShape of the (possibly symbolic) shape.
void full(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  auto* at = e.emit("ConstantOfShape", {sizes_1d(e, n, 0, n->attrs.ints(0))}, out)->add_attribute();
  at->set_name("value");
  at->set_type(::onnx::AttributeProto::TENSOR);
  fill_tensor(at->mutable_t(),
              cast(reshape(scalar_tensor(n->attrs.f(1), Float64), {1}), out_dtype(n)), "");
}
// remainder (Python's %, the divisor's sign) is Mod with fmod 0, defined by ONNX for integers
// only; fmod (C's, the dividend's sign) is Mod with fmod 1.
void mod(const ExportRule&, ExportCtx& e, const Node* n, const std::string& out) {
  const bool c_fmod = n->op == h_fmod;
  if (!c_fmod && is_floating(out_dtype(n)))
    fail(kExp, "remainder of floating tensors has no ONNX form (Mod with fmod=0 takes integers)");
  auto* m = e.emit("Mod", {e.in_as(n, 0, out_dtype(n)), e.in_as(n, 1, out_dtype(n))}, out);
  attr_i(m, "fmod", c_fmod ? 1 : 0);
}

}  // namespace

const std::vector<ExportRule>& export_rules() {
  namespace ops = kd::ops;
  static const std::vector<ExportRule> rules = {
      {&ops::add, "Add", binary},
      {&ops::sub, "Sub", binary},
      {&ops::mul, "Mul", binary},
      {&ops::div, "Div", binary},
      {&h_pow, "Pow", binary},
      {&h_maximum, "Max", binary},
      {&h_minimum, "Min", binary},
      {&h_lt, "Less", compare},
      {&h_le, "LessOrEqual", compare},
      {&h_gt, "Greater", compare},
      {&h_ge, "GreaterOrEqual", compare},
      {&h_eq, "Equal", compare},
      {&h_ne, nullptr, ne},
      {&h_logical_and, "And", logical},
      {&h_logical_or, "Or", logical},
      {&ops::neg, "Neg", unary},
      {&h_abs, "Abs", unary},
      {&h_exp, "Exp", unary},
      {&h_log, "Log", unary},
      {&h_sqrt, "Sqrt", unary},
      {&ops::relu, "Relu", unary},
      {&h_sigmoid, "Sigmoid", unary},
      {&h_tanh, "Tanh", unary},
      {&h_erf, "Erf", unary},
      {&h_sin, "Sin", unary},
      {&h_cos, "Cos", unary},
      {&h_sign, "Sign", unary},
      {&ops::clone, "Identity", unary},
      {&h_detach, "Identity", unary},
      {&h_print, "Identity", unary},
      {&h_logical_not, "Not", unary},
      {&h_rsqrt, nullptr, rsqrt},
      {&h_silu, nullptr, silu},
      {&h_gelu, nullptr, gelu},
      {&h_leaky_relu, nullptr, leaky_relu},
      {&h_clamp, nullptr, clamp},
      {&h_where, nullptr, where},
      {&h_fill_like, nullptr, fill_like},
      {&ops::cast, nullptr, cast_rule},
      {&ops::matmul, nullptr, matmul},
      {&ops::addmm, nullptr, addmm},
      {&ops::conv2d, nullptr, conv2d},
      {&ops::max_pool2d, "MaxPool", pool2d},
      {&h_avg_pool2d, "AveragePool", pool2d},
      {&h_softmax, "Softmax", softmax},
      {&h_log_softmax, "LogSoftmax", softmax},
      {&h_layer_norm, nullptr, layer_norm},
      {&ops::reshape, nullptr, reshape_rule},
      {&ops::permute, nullptr, permute},
      {&ops::transpose, nullptr, transpose},
      {&h_sum, "ReduceSum", reduce},
      {&h_mean, "ReduceMean", reduce},
      {&h_max, "ReduceMax", reduce},
      {&h_min, "ReduceMin", reduce},
      {&ops::cat, nullptr, cat},
      {&h_slice, nullptr, slice},
      {&h_squeeze, "Squeeze", squeeze},
      {&h_unsqueeze, "Unsqueeze", squeeze},
      {&ops::expand, nullptr, expand},
      {&h_index_select, nullptr, gather_rows},
      {&h_embedding, nullptr, gather_rows},
      {&h_split, nullptr, split},
      {&h_sdpa, nullptr, sdpa},
      {&kd::ops::sym_size, nullptr, sym_size},
      {&h_arange, nullptr, arange},
      {&h_full, nullptr, full},
      {&h_fmod, nullptr, mod},
      {&h_remainder, nullptr, mod},
  };
  return rules;
}

const ExportRule* find_export_rule(const kd::OpDef* op) {
  // Built on first use, after every op registered. A row whose op is not registered is left
  // out here (its export fails as an unknown op would) and fails the test that resolves rows.
  static const std::unordered_map<const kd::OpDef*, const ExportRule*> by_op = [] {
    std::unordered_map<const kd::OpDef*, const ExportRule*> m;
    for (const ExportRule& r : export_rules())
      if (const kd::OpDef* d = kd::OpRegistry::get().find(r.op->name())) m.emplace(d, &r);
    return m;
  }();
  auto it = by_op.find(op);
  return it == by_op.end() ? nullptr : it->second;
}

void attr_i(::onnx::NodeProto* n, const char* name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_f(::onnx::NodeProto* n, const char* name, double v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(v));
}
void attr_ints(::onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

}  // namespace kiln::onnx::detail
