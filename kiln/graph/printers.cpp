// Graph printers: text (one line per node), Graphviz DOT, and Mermaid in the lecture's style.
#include <sstream>

#include "kiln/graph/graph.h"
#include "kiln/graph/node.h"

using namespace kiln::detail;

namespace kiln {
namespace {

std::string meta_str(const TensorMeta& m) { return str_cat(dtype_name(m.dtype), m.shape); }

std::string ref_str(const ValueRef& v) {
  if (v.node->outputs.size() > 1) return str_cat("%", v.node->id, ":", v.index);
  return str_cat("%", v.node->id);
}

std::string mermaid_id(const Node& n) { return str_cat("n", n.id); }

// Edge label for a multi-output producer: a switch's outputs read as F/T (the side taken when the
// predicate is false/true), others by output index.
std::string edge_label(const ValueRef& v) {
  if (v.node->kind == NodeKind::Op && v.node->op->has(kSwitch)) return v.index ? "T" : "F";
  return std::to_string(v.index);
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"')
      o += "&quot;";
    else if (c == '[' || c == ']')
      o += c == '[' ? "&#91;" : "&#93;";
    else
      o += c;
  }
  return o;
}

}  // namespace

std::string Graph::to_text() const {
  std::ostringstream os;
  for (const auto& n : impl_->nodes) {
    os << "%" << n->id << " = ";
    switch (n->kind) {
      case NodeKind::Placeholder:
        os << "placeholder \"" << n->name << "\"";
        break;
      case NodeKind::Variable:
        os << "variable \"" << n->name << "\"";
        break;
      case NodeKind::Constant:
        os << "constant " << n->label();
        break;
      case NodeKind::Op: {
        os << n->op->name << "(";
        for (size_t i = 0; i < n->inputs.size(); ++i)
          os << (i ? ", " : "") << ref_str(n->inputs[i]);
        os << ")";
        if (n->attrs.size()) os << " {" << n->attrs.str(n->op->attr_names) << "}";
        break;
      }
    }
    os << " : ";
    for (size_t i = 0; i < n->outputs.size(); ++i) os << (i ? ", " : "") << meta_str(n->outputs[i]);
    os << "\n";
  }
  return os.str();
}

std::string Graph::to_dot() const {
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n";
  for (const auto& n : impl_->nodes) {
    const char* shape = n->kind == NodeKind::Op            ? "box"
                        : n->kind == NodeKind::Placeholder ? "ellipse"
                        : n->kind == NodeKind::Variable    ? "cylinder"
                                                           : "plaintext";
    os << "  n" << n->id << " [label=\"" << n->label() << "\\n"
       << meta_str(n->outputs.empty() ? TensorMeta{} : n->outputs[0]) << "\", shape=" << shape
       << "];\n";
  }
  for (const auto& n : impl_->nodes)
    for (const auto& in : n->inputs) {
      os << "  n" << in.node->id << " -> n" << n->id;
      if (in.node->outputs.size() > 1) os << " [label=\"" << edge_label(in) << "\"]";
      os << ";\n";
    }
  os << "}\n";
  return os.str();
}

std::string Graph::to_mermaid() const {
  std::ostringstream os;
  os << "graph LR\n";
  for (const auto& n : impl_->nodes) {
    std::string l = escape(n->label());
    os << "    " << mermaid_id(*n);
    switch (n->kind) {
      case NodeKind::Placeholder:
        os << "[" << l << "]";
        break;
      case NodeKind::Variable:
        os << "[" << l << "]";
        break;
      case NodeKind::Constant:
        os << "([" << l << "])";
        break;
      case NodeKind::Op:
        os << "[" << l << "]";
        break;
    }
    os << "\n";
  }
  for (const auto& n : impl_->nodes)
    for (const auto& in : n->inputs) {
      os << "    " << mermaid_id(*in.node) << " -->";
      if (in.node->outputs.size() > 1) os << "|" << edge_label(in) << "|";
      os << " " << mermaid_id(*n) << "\n";
    }
  return os.str();
}

}  // namespace kiln
