// Graph building: the dispatcher's handler for symbolic inputs, placeholders, variables,
// constants, the host-read error, and the verifier.
#include "kiln/graph/graph.h"

#include <atomic>
#include <set>
#include <sstream>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"

using namespace kiln::detail;

namespace kiln {
namespace {

std::atomic<uint64_t> g_graph_uid{1};
thread_local InputCapture* t_input_capture = nullptr;

std::shared_ptr<GraphImpl> graph_of(const Tensor& t) {
  if (!t.is_symbolic()) return nullptr;
  return t.impl()->sym->graph;
}

Tensor make_symbolic(const std::shared_ptr<GraphImpl>& g, Node* n, int index) {
  auto impl = make_tensor_impl();
  const TensorMeta& m = n->outputs[static_cast<size_t>(index)];
  impl->shape = m.shape;
  impl->strides = contiguous_strides(m.shape);
  impl->dtype = m.dtype;
  impl->sym = std::make_shared<SymbolicValue>(SymbolicValue{g, n, index});
  return Tensor(std::move(impl));
}

// Constant node for a concrete tensor used in the graph (one node per tensor object).
Node* constant_node(const std::shared_ptr<GraphImpl>& g, const Tensor& t, const std::string& name) {
  auto it = g->constants.find(t.impl());
  if (it != g->constants.end()) return it->second.second;
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::Constant;
  n->name = name;
  n->value = t.detach();
  n->outputs.push_back(TensorMeta{t.dtype(), t.shape()});
  Node* p = g->add_node(std::move(n));
  g->constants[t.impl()] = {t, p};
  return p;
}

// A symbolic tensor of a scratch graph with `shape`: what inference sees of an input when it
// runs on the traced sizes.
Tensor stand_in(const std::shared_ptr<GraphImpl>& scratch, DType dtype, const Shape& shape) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::Placeholder;
  n->outputs.push_back(TensorMeta{dtype, shape});
  return make_symbolic(scratch, scratch->add_node(std::move(n)), 0);
}

// Output shapes of `op` on the traced sizes of its inputs (Node::hints); empty when an input's
// are unknown or inference refuses them.
std::vector<Shape> hint_shapes(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs) {
  auto scratch = std::make_shared<GraphImpl>();
  TensorList stand;
  for (const auto& t : ins) {
    if (!t.defined() || !t.is_symbolic() || t.shape().is_static()) {
      stand.push_back(t);
      continue;
    }
    Shape h = hint_shape(t);
    if (h.rank() != t.shape().rank()) return {};
    stand.push_back(stand_in(scratch, t.dtype(), h));
  }
  try {
    MetaList m = op.infer(std::span<const Tensor>(stand.data(), stand.size()), attrs);
    std::vector<Shape> out;
    for (const auto& x : m) out.push_back(x.shape);
    return out;
  } catch (const std::exception&) {
    return {};
  }
}

// Metas of an op whose size attributes are symbolic: inference on the traced values, then on
// other values of the sizes; a dim that moves with them is dynamic. A dim wrongly taken as
// static would still be caught: the executor checks the static dims of a patched node's
// outputs on every run (and the JIT then compiles the call for its concrete shape).
MetaList patched_metas(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                       const std::vector<SizePatch>& patches) {
  auto hint_of = [&](const SizePatch& p) {
    const AttrValue& v = attrs[static_cast<size_t>(p.attr)];
    if (p.elem < 0) return std::get<int64_t>(v);
    return std::get<std::vector<int64_t>>(v).at(static_cast<size_t>(p.elem));
  };
  // A size without a traced value holds -1 (reshape's "dynamic"); where inference refuses
  // that, it runs on 1 instead (the moves below then find the dims that depend on it).
  Attrs base = attrs;
  MetaList metas;
  try {
    metas = with_attr_check(op, attrs, [&] { return op.infer(ins, attrs); });
  } catch (const std::exception&) {
    bool unknown = false;
    for (const auto& p : patches)
      if (hint_of(p) < 0) {
        unknown = true;
        base.set_int(static_cast<size_t>(p.attr), p.elem, 1);
      }
    if (!unknown) throw;
    metas = with_attr_check(op, base, [&] { return op.infer(ins, base); });
  }
  const std::pair<int64_t, int64_t> moves[] = {{1, 1}, {1, 2}, {2, 3}, {3, 7}, {1, 13}};
  for (auto [mul, add] : moves) {
    Attrs a = attrs;
    for (const auto& p : patches)  // -1: a size without a traced value (graph.h SizePatch)
      a.set_int(static_cast<size_t>(p.attr), p.elem, std::max<int64_t>(hint_of(p), 0) * mul + add);
    MetaList other;
    bool ok = true;
    try {
      other = op.infer(ins, a);
    } catch (const std::exception&) {
      ok = false;
    }
    for (size_t o = 0; o < metas.size(); ++o) {
      Shape& s = metas[o].shape;
      for (int64_t d = 0; d < s.rank(); ++d)
        if (!ok || o >= other.size() || other[o].shape.rank() != s.rank() ||
            other[o].shape[d] != s[d])
          s[d] = Dim::any();
    }
  }
  return metas;
}

class GraphBuilder : public SymbolicHandler {
 public:
  TensorList handle(const OpDef& op, std::span<const Tensor> given, const Attrs& attrs) override {
    std::vector<SizePatch> patches = take_patches(op);
    // Inside a cond branch or a loop body, captured values are rewritten first (the hook may add
    // Switch nodes or body placeholders), so the node is built on the rewritten inputs.
    TensorList captured;
    std::span<const Tensor> inputs = given;
    if (InputCapture* cap = t_input_capture) {
      for (const auto& t : given)
        captured.push_back(t.defined() && t.is_symbolic() ? cap->capture(t) : t);
      inputs = std::span<const Tensor>(captured.data(), captured.size());
    }
    // An eager dead tensor has no value to become a constant; graphs express deadness with
    // their own switch nodes.
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].is_dead())
        fail(op.name.c_str(), "input ", k, " is a dead eager tensor (", inputs[k].dtype(),
             inputs[k].shape(),
             ", from the untaken side of an eager switch_); a graph or a jit "
             "trace cannot take it: switch the graph value itself");
    std::shared_ptr<GraphImpl> g;
    for (const auto& t : inputs) {
      auto gt = graph_of(t);
      if (!gt) continue;
      if (g && gt != g)
        fail(op.name.c_str(),
             "inputs belong to different graphs; ops can only combine tensors "
             "of one graph");
      g = gt;
    }
    const std::span<const Tensor> op_ins = inputs.first(inputs.size() - patches.size());
    if (op.num_inputs >= 0 && static_cast<int>(op_ins.size()) != op.num_inputs)
      fail(op.name.c_str(), "expected ", op.num_inputs, " inputs, got ", op_ins.size());
    for (size_t k = 0; k < inputs.size(); ++k)
      if (!inputs[k].defined()) fail(op.name.c_str(), "input ", k, " is an undefined tensor");
    check_attr_count(op, attrs);
    // Shape and dtype inference runs now, so errors surface at build time with the shapes.
    MetaList metas = patches.empty()
                         ? with_attr_check(op, attrs, [&] { return op.infer(op_ins, attrs); })
                         : patched_metas(op, op_ins, attrs, patches);
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::Op;
    n->op = &op;
    n->attrs = attrs;
    n->patches = std::move(patches);
    for (const auto& t : inputs) {
      if (t.is_symbolic())
        n->inputs.push_back(ValueRef{t.impl()->sym->node, t.impl()->sym->index});
      else
        n->inputs.push_back(ValueRef{constant_node(g, t, ""), 0});
    }
    bool dynamic = false;
    for (auto& m : metas) {
      dynamic = dynamic || !m.shape.is_static();
      n->outputs.push_back(m);
    }
    if (g->track_hints && dynamic) n->hints = hint_shapes(op, op_ins, attrs);
    Node* p = g->add_node(std::move(n));
    TensorList outs;
    for (int i = 0; i < static_cast<int>(p->outputs.size()); ++i)
      outs.push_back(make_symbolic(g, p, i));
    return outs;
  }
};

// The value of `v` at the placeholders' example sizes (Graph::set_hint) when it depends on them
// only through their sizes (sym_size of hinted placeholders, constants, integer or bool scalar
// ops); undefined otherwise.
Tensor value_at_hints(ValueRef v) {
  const Node* n = v.node;
  if (n->kind == NodeKind::Constant) return n->value;
  if (n->kind != NodeKind::Op || !n->patches.empty() || n->op->has(kRandom) ||
      n->op->has(kSideEffect) || n->op->has(kControlFlow))
    return Tensor();
  if (n->is(ops::sym_size)) {
    const Node* x = n->inputs[0].node;
    if (x->kind != NodeKind::Placeholder || x->hints.empty()) return Tensor();
    const Shape& h = x->hints[0];
    return scalar_tensor(static_cast<double>(h[wrap_dim(n->attrs.i(0), h, "sym_size")]), Int64);
  }
  for (const auto& m : n->outputs)
    if (m.shape.rank() != 0 || !(is_integral(m.dtype) || m.dtype == Bool)) return Tensor();
  TensorList ins;
  for (const auto& in : n->inputs) {
    Tensor x = value_at_hints(in);
    if (!x.defined()) return Tensor();
    ins.push_back(x);
  }
  return run_kernel(*n->op, std::span<const Tensor>(ins.data(), ins.size()), n->attrs)[v.index];
}

Tensor host_read(const Tensor& t, const char* what, const std::string& where) {
  // Building from example inputs (kiln.onnx.export): a comparison of sizes is taken at the
  // examples' sizes, as a tracing exporter does.
  if (t.is_symbolic())
    if (Tensor v = value_at_hints(ValueRef{t.impl()->sym->node, t.impl()->sym->index}); v.defined())
      return v;
  std::string name = "?";
  if (t.is_symbolic()) {
    Node* n = t.impl()->sym->node;
    name = n->name.empty() ? n->label() : n->name;
  }
  fail(what, "value of '", name, "' is unknown while building a graph; fetch it with Session::run",
       " (at ", where, ")");
}

struct Install {
  Install() {
    static GraphBuilder builder;
    set_graph_handler(&builder);
    set_host_read_hook(&host_read);
    set_producer_hook([](const Tensor& t) -> const OpDef* {
      const Node* n = t.impl()->sym->node;
      return n && n->kind == NodeKind::Op ? n->op : nullptr;
    });
    set_hint_hook([](const Tensor& t) -> Shape {
      const Node* n = t.impl()->sym->node;
      const auto i = static_cast<size_t>(t.impl()->sym->index);
      return n && i < n->hints.size() ? n->hints[i] : Shape{};
    });
  }
} g_install;

}  // namespace

InputCapture* detail::set_input_capture(InputCapture* c) {
  InputCapture* p = t_input_capture;
  t_input_capture = c;
  return p;
}
InputCapture* detail::input_capture() { return t_input_capture; }

std::string Node::label() const {
  switch (kind) {
    case NodeKind::Placeholder:
    case NodeKind::Variable:
      return name;
    case NodeKind::Constant: {
      if (!name.empty()) return name;
      if (value.defined() && value.numel() == 1) {
        std::ostringstream os;
        os << value.item<double>();
        return os.str();
      }
      return "const" + value.shape().str();
    }
    case NodeKind::Op:
      return op->name;
  }
  return "?";
}

Node* GraphImpl::add_node(std::unique_ptr<Node> n) {
  n->id = static_cast<int>(nodes.size());
  nodes.push_back(std::move(n));
  return nodes.back().get();
}

Tensor GraphImpl::tensor_of(const std::shared_ptr<GraphImpl>& self, ValueRef v) const {
  return make_symbolic(self, v.node, v.index);
}

Graph::Graph() : impl_(std::make_shared<GraphImpl>()) { impl_->uid = g_graph_uid++; }

Graph Graph::of(const Tensor& t) {
  if (!t.defined() || !t.is_symbolic()) fail("graph", "tensor is not symbolic");
  return Graph(t.impl()->sym->graph);
}

std::string Graph::unique_name(const std::string& base) const {
  if (!find(base)) return base;
  for (int i = 1;; ++i)
    if (!find(base + "_" + std::to_string(i))) return base + "_" + std::to_string(i);
}

Tensor Graph::placeholder(const std::string& name, DType dtype, const Shape& shape) {
  if (name.empty()) fail("placeholder", "a placeholder needs a name");
  if (find(name)) fail("placeholder", "name '", name, "' is already used in this graph");
  for (auto d : shape)
    if (d < -1) fail("placeholder", "invalid dim ", d, " in shape ", shape, " of '", name, "'");
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::Placeholder;
  n->name = name;
  n->outputs.push_back(TensorMeta{dtype, shape});
  Node* p = impl_->add_node(std::move(n));
  return make_symbolic(impl_, p, 0);
}

void Graph::set_hint(const Tensor& placeholder, const Shape& sizes) {
  Node* n = node_of(placeholder, "set_hint");
  if (n->kind != NodeKind::Placeholder)
    fail("set_hint", "%", n->id, " (", n->label(), ") is not a placeholder");
  const Shape& s = n->outputs[0].shape;
  bool ok = s.rank() == sizes.rank();
  for (int64_t d = 0; ok && d < s.rank(); ++d) ok = sizes[d] >= 0 && (s[d] < 0 || s[d] == sizes[d]);
  if (!ok)
    fail("set_hint", "example sizes ", sizes, " do not fit placeholder '", n->name, "' of shape ",
         s);
  n->hints = {sizes};
  impl_->track_hints = true;
}

Tensor Graph::variable(const std::string& name, const Tensor& initial) {
  if (name.empty()) fail("variable", "a variable needs a name");
  if (find(name)) fail("variable", "name '", name, "' is already used in this graph");
  if (!initial.defined() || !initial.is_concrete())
    fail("variable", "initial value of '", name, "' must be a concrete tensor");
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::Variable;
  n->name = name;
  n->value = initial.detach().clone();
  n->outputs.push_back(TensorMeta{initial.dtype(), initial.shape()});
  Node* p = impl_->add_node(std::move(n));
  return make_symbolic(impl_, p, 0);
}

Tensor Graph::constant(const Tensor& value, const std::string& name) {
  if (!value.defined() || !value.is_concrete()) fail("constant", "value must be a concrete tensor");
  return make_symbolic(impl_, constant_node(impl_, value, name), 0);
}

Node* Graph::node_of(const Tensor& t, const char* what) const { return value_of(t, what).node; }

ValueRef Graph::value_of(const Tensor& t, const char* what) const {
  if (!t.defined()) fail(what, "tensor is undefined");
  if (!t.is_symbolic())
    fail(what, "tensor of shape ", t.shape(), " is concrete, not a node of this graph");
  if (t.impl()->sym->graph != impl_)
    fail(what, "tensor '", t.impl()->sym->node->label(), "' (%", t.impl()->sym->node->id,
         ", shape ", t.shape(), ") belongs to another graph");
  return ValueRef{t.impl()->sym->node, t.impl()->sym->index};
}

std::vector<Node*> Graph::variables() const {
  std::vector<Node*> v;
  for (const auto& n : impl_->nodes)
    if (n->kind == NodeKind::Variable) v.push_back(n.get());
  return v;
}

std::vector<Node*> Graph::placeholders() const {
  std::vector<Node*> v;
  for (const auto& n : impl_->nodes)
    if (n->kind == NodeKind::Placeholder) v.push_back(n.get());
  return v;
}

Tensor Graph::tensor_of(ValueRef v) const { return impl_->tensor_of(impl_, v); }
const std::vector<std::unique_ptr<Node>>& Graph::nodes() const { return impl_->nodes; }

Node* Graph::find(const std::string& name) const {
  for (const auto& n : impl_->nodes)
    if ((n->kind == NodeKind::Placeholder || n->kind == NodeKind::Variable) && n->name == name)
      return n.get();
  return nullptr;
}

void Graph::verify() const {
  std::set<const Node*> seen;
  for (const auto& n : impl_->nodes) {
    for (const auto& in : n->inputs) {
      if (!seen.count(in.node))
        fail("verify", "node %", n->id, " (", n->label(), ") uses a node defined after it");
      if (in.index < 0 || in.index >= static_cast<int>(in.node->outputs.size()))
        fail("verify", "node %", n->id, " uses output ", in.index, " of %", in.node->id,
             " which has ", in.node->outputs.size(), " outputs");
    }
    if (n->kind == NodeKind::Op) {
      if (n->op->num_inputs >= 0 && static_cast<int>(n->op_inputs()) != n->op->num_inputs)
        fail("verify", "node %", n->id, " (", n->op->name, ") has ", n->op_inputs(),
             " inputs, expected ", n->op->num_inputs);
    }
    seen.insert(n.get());
  }
}

}  // namespace kiln
