// Shape guards (shape_guard.h): recognizing a host read of a size comparison, keeping its
// subgraph, and evaluating it on a call's argument shapes.
#include "kiln/jit/shape_guard.h"

#include <sstream>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"

namespace kiln::detail::jit_engine {
namespace {

bool is_sym_size(const Node* n) { return n->is(ops::sym_size); }

// A scalar integer or bool op that computes from its inputs alone.
bool scalar_arith(const Node* n) {
  if (n->kind != NodeKind::Op || n->op->has(kRandom) || n->op->has(kSideEffect) ||
      n->op->has(kControlFlow) || n->outputs.empty())
    return false;
  for (const auto& m : n->outputs)
    if (m.shape.rank() != 0 || !(is_integral(m.dtype) || m.dtype == Bool)) return false;
  return true;
}

std::string value_text(const Tensor& t) {
  std::ostringstream os;
  if (t.dtype() == Bool)
    os << (t.item<bool>() ? "True" : "False");
  else
    os << t.item<int64_t>();
  return os.str();
}

// `arg0.size(1) <= 64`-style text of the guard's expression.
std::string expr_text(const Program& p) {
  std::unordered_map<const Node*, std::string> txt;
  static const std::unordered_map<std::string, std::string> infix = {
      {"add", "+"}, {"sub", "-"},           {"mul", "*"},        {"div", "//"}, {"remainder", "%"},
      {"lt", "<"},  {"le", "<="},           {"gt", ">"},         {"ge", ">="},  {"eq", "=="},
      {"ne", "!="}, {"logical_and", "and"}, {"logical_or", "or"}};
  for (const auto& up : p.graph->nodes) {
    const Node* n = up.get();
    if (n->kind == NodeKind::Placeholder) {
      txt[n] = n->name;
    } else if (n->kind == NodeKind::Constant) {
      txt[n] = n->value.numel() == 1 ? value_text(n->value) : "const";
    } else if (is_sym_size(n)) {
      txt[n] = str_cat(txt[n->inputs[0].node], ".size(", n->attrs.i(0), ")");
    } else if (auto it = infix.find(n->op->name); it != infix.end() && n->inputs.size() == 2) {
      txt[n] =
          str_cat("(", txt[n->inputs[0].node], " ", it->second, " ", txt[n->inputs[1].node], ")");
    } else {
      std::string a;
      for (const auto& in : n->inputs) a += (a.empty() ? "" : ", ") + txt[in.node];
      txt[n] = str_cat(n->op->name, "(", a, ")");
    }
  }
  std::string s = txt[p.fetches[0].node];
  if (s.size() > 2 && s.front() == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
  return s;
}

}  // namespace

bool shape_only(ValueRef v) {
  std::vector<const Node*> stack{v.node};
  bool any_size = false;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->kind == NodeKind::Constant) continue;
    if (is_sym_size(n)) {
      if (n->inputs[0].node->kind != NodeKind::Placeholder) return false;
      any_size = true;
      continue;
    }
    if (!scalar_arith(n) || !n->patches.empty()) return false;
    for (const auto& in : n->inputs) stack.push_back(in.node);
  }
  return any_size;
}

ShapeGuard make_shape_guard(const GraphImpl& g, ValueRef v, const Tensor& value,
                            const std::vector<Tensor>& placeholders, const std::string& what,
                            const std::string& where) {
  ShapeGuard sg;
  sg.prog = prune(g, {v});
  for (const auto& up : sg.prog.graph->nodes) {
    if (up->kind != NodeKind::Placeholder) continue;
    int pos = -1;
    for (size_t k = 0; k < placeholders.size(); ++k) {
      const Node* ph = placeholders[k].impl()->sym->node;
      if (ph->name == up->name) pos = static_cast<int>(k);
    }
    if (pos < 0)
      fail("jit", "internal: a shape guard reads placeholder '", up->name,
           "' that is not an argument");
    sg.feeds.push_back(pos);
  }
  sg.expected = value.clone();
  sg.what = what;
  sg.where = where;
  sg.text = str_cat(expr_text(sg.prog), " -> ", value_text(value));
  return sg;
}

Tensor eval_shape_guard(const ShapeGuard& sg, const std::vector<Tensor>& flat) {
  std::unordered_map<const Node*, TensorList> vals;
  size_t ph = 0;
  TensorList ins;
  for (const auto& up : sg.prog.graph->nodes) {
    const Node* n = up.get();
    if (n->kind == NodeKind::Placeholder) {
      const int pos = sg.feeds[ph++];
      if (pos >= static_cast<int>(flat.size())) return Tensor();
      vals[n] = {flat[static_cast<size_t>(pos)]};
    } else if (n->kind == NodeKind::Constant || n->kind == NodeKind::Variable) {
      vals[n] = {n->value};
    } else {
      ins.clear();
      for (const auto& in : n->inputs)
        ins.push_back(vals.at(in.node)[static_cast<size_t>(in.index)]);
      vals[n] = run_node_kernel(*n->op, std::span<const Tensor>(ins.data(), ins.size()), n->attrs,
                                n->patches);
    }
  }
  const ValueRef& f = sg.prog.fetches[0];
  return vals.at(f.node)[static_cast<size_t>(f.index)];
}

bool shape_guard_holds(const ShapeGuard& sg, const std::vector<Tensor>& flat) {
  Tensor v = eval_shape_guard(sg, flat);
  if (!v.defined() || v.dtype() != sg.expected.dtype()) return false;
  return v.dtype() == Bool ? v.item<bool>() == sg.expected.item<bool>()
                           : v.item<int64_t>() == sg.expected.item<int64_t>();
}

std::string failed_shape_guard(const std::vector<ShapeGuard>& guards,
                               const std::vector<Tensor>& flat) {
  for (const auto& sg : guards)
    if (!shape_guard_holds(sg, flat))
      return str_cat("shape guard ", sg.text, " (", sg.where, ") failed");
  return "";
}

}  // namespace kiln::detail::jit_engine
