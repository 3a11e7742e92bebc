// Saved graphs in an ONNX container: the writer walks the nodes the outputs need and writes each
// as a node of domain ai.kiln (op name, positional attributes, while bodies as GRAPH
// attributes); the loader checks every field and replays the nodes through the dispatcher into a
// new Graph, so each node is built by the same op with the same attributes.
#include "kiln/onnx/saved_graph.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/wire_format_lite.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/exec/while_body.h"
#include "kiln/graph/node.h"
#include "kiln/io/file.h"
#include "kiln/onnx/external_data.h"
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx {
namespace kd = ::kiln::detail;
namespace od = ::kiln::onnx::detail;
namespace {

using kd::Node;
using kd::NodeKind;
using kd::ValueRef;

constexpr char kSave[] = "save_graph";
constexpr char kLoad[] = "load_graph";
constexpr char kVersionKey[] = "kiln.format_version";
constexpr int kMaxDepth = 16;

using od::fill_tensor;

// Saved graphs name no dynamic dim: "?" for each.
void fill_type(::onnx::ValueInfoProto* v, const std::string& name, DType dt, const Shape& s) {
  od::fill_value_info(v, name, dt, s, [] { return std::string("?"); });
}

class Writer {
 public:
  Writer(const Session* sess) : sess_(sess) {}

  // Writes the nodes of `g` that `roots` need into gp. `inputs` (placeholders of a body, in
  // order) become the graph's inputs; at the top level every needed placeholder does.
  void write(::onnx::GraphProto* gp, const Graph& g, const std::vector<Tensor>& roots,
             const std::vector<Tensor>* inputs, int depth) {
    if (depth > kMaxDepth) fail(kSave, "while loops nest deeper than ", kMaxDepth);
    std::set<const Node*> need;
    std::vector<const Node*> stack;
    for (const auto& r : roots) stack.push_back(g.node_of(r, kSave));
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!need.insert(n).second) continue;
      for (const auto& in : n->inputs) stack.push_back(in.node);
    }
    const std::string prefix = depth == 0 ? "" : str_cat("b", depth, "_");
    if (inputs) {
      for (const auto& ph : *inputs) {
        const Node* n = g.node_of(ph, kSave);
        names_[{n, 0}] = prefix + n->name;
        fill_type(gp->add_input(), prefix + n->name, n->outputs[0].dtype, n->outputs[0].shape);
      }
    }
    for (const auto& up : g.nodes()) {
      const Node* n = up.get();
      if (!need.count(n)) continue;
      switch (n->kind) {
        case NodeKind::Placeholder:
          if (inputs) {
            if (!names_.count({n, 0}))
              fail(kSave, "placeholder '", n->name, "' of a loop body is not one of its inputs");
            break;
          }
          names_[{n, 0}] = n->name;
          fill_type(gp->add_input(), n->name, n->outputs[0].dtype, n->outputs[0].shape);
          break;
        case NodeKind::Variable: {
          Tensor v = sess_ && depth == 0 ? sess_->variable(n->name) : n->value;
          const std::string init = "kiln_var_" + n->name;
          fill_tensor(gp->add_initializer(), v, init);
          auto* node = gp->add_node();
          node->set_domain(kKilnDomain);
          node->set_op_type("variable");
          node->add_input(init);
          node->add_output(prefix + n->name);
          auto* a = node->add_attribute();
          a->set_name("name");
          a->set_type(::onnx::AttributeProto::STRING);
          a->set_s(n->name);
          names_[{n, 0}] = prefix + n->name;
          break;
        }
        case NodeKind::Constant: {
          const std::string name = str_cat(prefix, "kiln_c", n->id);
          fill_tensor(gp->add_initializer(), n->value, name);
          names_[{n, 0}] = name;
          break;
        }
        case NodeKind::Op:
          write_op(gp, n, prefix, depth);
          break;
      }
    }
  }

  const std::string& name_of(const Graph& g, const Tensor& t) {
    return name_at(g.value_of(t, kSave));
  }
  const std::string& name_at(const ValueRef& v) {
    auto it = names_.find({v.node, v.index});
    if (it == names_.end())
      fail(kSave, "output ", v.index, " of ", v.node->label(),
           " is not saveable (a while node's per-iteration values serve only its gradient)");
    return it->second;
  }

 private:
  void write_op(::onnx::GraphProto* gp, const Node* n, const std::string& prefix, int depth) {
    if (kd::is_while_grad_op(n->op))
      fail(kSave, "a gradient through a while_loop cannot be saved yet; save the forward part");
    auto* node = gp->add_node();
    node->set_domain(kKilnDomain);
    node->set_op_type(n->op->name);
    for (const auto& in : n->inputs) node->add_input(name_at(in));
    // A while node's outputs past its loop vars (every iteration's vars, stacked) serve only its
    // gradient, which is not saved: while_loop rebuilds the node with the loop vars as outputs.
    const size_t n_out =
        kd::is_while_op(n->op) ? kd::while_body_of(n->attrs).var_ph.size() : n->outputs.size();
    for (size_t k = 0; k < n_out; ++k) {
      const std::string name = str_cat(prefix, "kiln_n", n->id, "_", k);
      names_[{n, static_cast<int>(k)}] = name;
      node->add_output(name);
    }
    const auto& an = n->op->attr_names;
    for (size_t k = 0; k < n->attrs.size(); ++k) {
      auto* a = node->add_attribute();
      a->set_name(k < an.size() ? an[k] : str_cat("attr", k));
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, int64_t>) {
              a->set_type(::onnx::AttributeProto::INT);
              a->set_i(v);
            } else if constexpr (std::is_same_v<T, double>) {
              // A double tensor, not FLOAT (32 bits): saved graphs reload bit for bit.
              a->set_type(::onnx::AttributeProto::TENSOR);
              fill_tensor(a->mutable_t(), scalar_tensor(v, Float64), "");
            } else if constexpr (std::is_same_v<T, bool>) {
              a->set_type(::onnx::AttributeProto::TENSOR);
              fill_tensor(a->mutable_t(), scalar_tensor(v ? 1 : 0, Bool), "");
            } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
              a->set_type(::onnx::AttributeProto::INTS);
              for (int64_t x : v) a->add_ints(x);
            } else {
              a->set_type(::onnx::AttributeProto::STRING);
              a->set_s(v);
            }
          },
          n->attrs[k]);
    }
    if (!n->patches.empty()) {  // symbolic sizes: (attribute, element) per trailing input
      auto* sp = node->add_attribute();
      sp->set_name("kiln_size_patches");
      sp->set_type(::onnx::AttributeProto::INTS);
      for (const auto& p : n->patches) {
        sp->add_ints(p.attr);
        sp->add_ints(p.elem);
      }
    }
    if (kd::is_while_op(n->op)) {
      kd::WhileBodyView b = kd::while_body_of(n->attrs);
      auto* nv = node->add_attribute();
      nv->set_name("kiln_num_vars");
      nv->set_type(::onnx::AttributeProto::INT);
      nv->set_i(static_cast<int64_t>(b.var_ph.size()));
      auto* ga = node->add_attribute();
      ga->set_name("kiln_body");
      ga->set_type(::onnx::AttributeProto::GRAPH);
      auto* sub = ga->mutable_g();
      sub->set_name(str_cat("while_body_", n->id));
      std::vector<Tensor> ins = b.var_ph;
      ins.insert(ins.end(), b.cap_ph.begin(), b.cap_ph.end());
      std::vector<Tensor> roots{b.cond_out};
      roots.insert(roots.end(), b.body_out.begin(), b.body_out.end());
      Writer inner(sess_);
      inner.write(sub, b.sub, roots, &ins, depth + 1);
      for (const auto& r : roots) {
        const Node* rn = b.sub.node_of(r, kSave);
        ValueRef v = b.sub.value_of(r, kSave);
        fill_type(sub->add_output(), inner.name_of(b.sub, r), rn->outputs[v.index].dtype,
                  rn->outputs[v.index].shape);
      }
    }
  }

  const Session* sess_;
  std::map<std::pair<const Node*, int>, std::string> names_;
};

}  // namespace

namespace detail {

::onnx::ModelProto saved_graph_model(const Graph& g, const NamedTensors& outputs,
                                     const Session* sess) {
  if (outputs.empty()) fail(kSave, "no outputs to save");
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln");
  m.set_producer_version("0.1");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(17);
  auto* ok = m.add_opset_import();
  ok->set_domain(kKilnDomain);
  ok->set_version(kSavedGraphVersion);
  auto* md = m.add_metadata_props();
  md->set_key(kVersionKey);
  md->set_value(std::to_string(kSavedGraphVersion));
  auto* gp = m.mutable_graph();
  gp->set_name("kiln_graph");
  std::vector<Tensor> roots;
  std::set<std::string> seen;
  for (const auto& [name, t] : outputs) {
    if (!t.is_symbolic()) fail(kSave, "output '", name, "' is not a symbolic tensor of the graph");
    if (name.empty() || !seen.insert(name).second)
      fail(kSave, "output names must be unique and non-empty ('", name, "')");
    roots.push_back(t);
  }
  Writer w(sess);
  w.write(gp, g, roots, nullptr, 0);
  // Outputs get their names through standard Identity nodes, typed for other tools.
  for (const auto& [name, t] : outputs) {
    auto* id = gp->add_node();
    id->set_op_type("Identity");
    id->add_input(w.name_of(g, t));
    id->add_output(name);
    const Node* n = g.node_of(t, kSave);
    const ValueRef v = g.value_of(t, kSave);
    fill_type(gp->add_output(), name, n->outputs[v.index].dtype, n->outputs[v.index].shape);
  }
  return m;
}

void write_model(::onnx::ModelProto& m, const std::string& path, const SaveOptions& opts,
                 const char* op) {
  if (opts.external_data) {
    std::string file = opts.external_file;
    if (file.empty())
      file = std::filesystem::path(path).filename().replace_extension(".safetensors").string();
    write_external_data(m, path, file, opts.external_min_bytes, op);
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes)) fail(op, "the model does not serialize (over 2 GiB?)");
  std::ofstream f(path, std::ios::binary);
  if (!f) fail(op, "cannot write '", path, "'");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) fail(op, "writing '", path, "' failed");
}

::onnx::ModelProto parse_model(const void* data, size_t size, const std::string& what,
                               const char* op) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    fail(op, what, ": more than protobuf's 2 GiB limit");
  ::onnx::ModelProto m;
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data),
                                            static_cast<int>(size));
  in.SetRecursionLimit(64);
  if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    fail(op, what, ": not a valid ONNX file (truncated or corrupt?)");
  return m;
}

}  // namespace detail

std::string save_graph_bytes(const Graph& g, const NamedTensors& outputs, const Session* sess) {
  ::onnx::ModelProto m = od::saved_graph_model(g, outputs, sess);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) fail(kSave, "the model does not serialize (over 2 GiB?)");
  return bytes;
}

void save_graph(const std::string& path, const Graph& g, const NamedTensors& outputs,
                const Session* sess, const SaveOptions& options) {
  ::onnx::ModelProto m = od::saved_graph_model(g, outputs, sess);
  od::write_model(m, path, options, kSave);
}

// ---- loading ---------------------------------------------------------------------------------

namespace {

// One graph's names while it is replayed: the values defined so far and its initializers, which
// become graph constants only where something reads them.
struct Scope {
  Graph& g;
  std::unordered_map<std::string, Tensor> values;
  std::unordered_map<std::string, Tensor> inits;

  void bind(const std::string& name, const Tensor& t) {
    if (name.empty() || !values.emplace(name, t).second)
      fail(kLoad, "value name '", name, "' is empty or defined twice");
  }

  Tensor value(const std::string& name) {
    if (auto it = values.find(name); it != values.end()) return it->second;
    if (auto it = inits.find(name); it != inits.end()) {
      Tensor c = g.constant(it->second);
      values[name] = c;
      return c;
    }
    fail(kLoad, "value '", name, "' is used before it is defined");
  }

  void read_initializers(const ::onnx::GraphProto& gp) {
    for (const auto& init : gp.initializer()) {
      if (!inits.emplace(init.name(), od::tensor_from_proto(init, "initializer")).second)
        fail(kLoad, "initializer '", init.name(), "' is defined twice");
    }
  }
};

// A Kiln node's attributes: the op's own, and the ones the saver adds (kiln_*) for while bodies
// and for sizes read from trailing inputs.
struct NodeAttrs {
  kd::Attrs attrs;
  const ::onnx::GraphProto* body = nullptr;
  int64_t num_vars = -1;
  std::vector<kd::SizePatch> patches;
};

class Loader {
 public:
  explicit Loader(Graph g) : g_(std::move(g)) {}

  // Replays `gp` with its inputs bound to `inputs` (a body) or to new placeholders (top level,
  // inputs == nullptr); returns the values of its outputs.
  std::vector<Tensor> load(const ::onnx::GraphProto& gp, const std::vector<Tensor>* inputs,
                           int depth, NamedTensors* placeholders) {
    if (depth > kMaxDepth) fail(kLoad, "while bodies nest deeper than ", kMaxDepth);
    Scope sc{g_, {}, {}};
    bind_inputs(gp, inputs, placeholders, sc);
    sc.read_initializers(gp);
    for (const auto& node : gp.node()) load_node(node, depth, sc);
    std::vector<Tensor> res;
    for (const auto& o : gp.output()) res.push_back(sc.value(o.name()));
    return res;
  }

  Graph& graph() { return g_; }

 private:
  void bind_inputs(const ::onnx::GraphProto& gp, const std::vector<Tensor>* inputs,
                   NamedTensors* placeholders, Scope& sc) {
    if (inputs && static_cast<size_t>(gp.input_size()) != inputs->size())
      fail(kLoad, "a loop body takes ", gp.input_size(), " inputs, its node gives ",
           inputs->size());
    for (int k = 0; k < gp.input_size(); ++k) {
      const auto& v = gp.input(k);
      if (inputs) {
        sc.bind(v.name(), (*inputs)[k]);
        continue;
      }
      if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
        fail(kLoad, "input '", v.name(), "' has no tensor type and shape");
      const DType dt = od::dtype_from_onnx(v.type().tensor_type().elem_type(),
                                           str_cat("input '", v.name(), "'"));
      Shape s;
      for (const auto& d : v.type().tensor_type().shape().dim()) {
        if (d.has_dim_value() && d.dim_value() < 0)
          fail(kLoad, "input '", v.name(), "': negative dim");
        s.push_back(d.has_dim_value() ? d.dim_value() : Dim::any());
      }
      Tensor ph = g_.placeholder(v.name(), dt, s);
      sc.bind(v.name(), ph);
      placeholders->emplace_back(v.name(), ph);
    }
  }

  void load_node(const ::onnx::NodeProto& node, int depth, Scope& sc) {
    if (node.domain().empty() && node.op_type() == "Identity") {
      if (node.input_size() != 1 || node.output_size() != 1) fail(kLoad, "bad Identity node");
      sc.bind(node.output(0), sc.value(node.input(0)));
      return;
    }
    if (node.domain() != kKilnDomain)
      fail(kLoad, "node ", node.op_type(), " of domain '", node.domain(),
           "' is not a Kiln op (use kiln::onnx::import_model for standard ONNX)");
    if (node.op_type() == "variable") {
      sc.bind(node.output(0), load_variable(node, depth, sc));
      return;
    }
    const kd::OpDef* op = kd::OpRegistry::get().find(node.op_type());
    if (!op) fail(kLoad, "unknown op '", node.op_type(), "' (a newer Kiln?)");
    if (kd::is_while_grad_op(op)) fail(kLoad, "while_grad nodes are not loadable");
    std::vector<Tensor> ins;
    for (const auto& name : node.input()) ins.push_back(sc.value(name));
    const NodeAttrs na = node_attrs(node);
    std::vector<Tensor> outs = kd::is_while_op(op)
                                   ? load_while(node, ins, na.attrs, na.body, na.num_vars, depth)
                                   : call_op(node, *op, ins, na);
    if (outs.size() < static_cast<size_t>(node.output_size()))
      fail(kLoad, node.op_type(), " gives ", outs.size(), " outputs, the file names ",
           node.output_size());
    for (int k = 0; k < node.output_size(); ++k) sc.bind(node.output(k), outs[k]);
  }

  // A variable's value is the initializer it reads; it keeps its name in the new graph.
  Tensor load_variable(const ::onnx::NodeProto& node, int depth, Scope& sc) {
    if (node.input_size() != 1 || node.output_size() != 1 || node.attribute_size() != 1 ||
        node.attribute(0).type() != ::onnx::AttributeProto::STRING)
      fail(kLoad, "bad variable node");
    auto it = sc.inits.find(node.input(0));
    if (it == sc.inits.end()) fail(kLoad, "variable '", node.attribute(0).s(), "' has no value");
    if (depth > 0) fail(kLoad, "a variable inside a loop body");
    if (g_.find(node.attribute(0).s()))
      fail(kLoad, "variable '", node.attribute(0).s(), "' is defined twice");
    return g_.variable(node.attribute(0).s(), it->second);
  }

  static NodeAttrs node_attrs(const ::onnx::NodeProto& node) {
    NodeAttrs na;
    for (const auto& a : node.attribute()) {
      if (a.name() == "kiln_size_patches") {
        na.patches = size_patches(node, a);
      } else if (a.name() == "kiln_body") {
        if (a.type() != ::onnx::AttributeProto::GRAPH) fail(kLoad, "kiln_body must be a graph");
        na.body = &a.g();
      } else if (a.name() == "kiln_num_vars") {
        if (a.type() != ::onnx::AttributeProto::INT) fail(kLoad, "kiln_num_vars must be an int");
        na.num_vars = a.i();
      } else {
        na.attrs.push(attr_value(node, a));
      }
    }
    return na;
  }

  // Bounded here so that a hostile file cannot make call_node index past its attributes.
  static std::vector<kd::SizePatch> size_patches(const ::onnx::NodeProto& node,
                                                 const ::onnx::AttributeProto& a) {
    if (a.type() != ::onnx::AttributeProto::INTS || a.ints_size() % 2 != 0 ||
        a.ints_size() / 2 > node.input_size())
      fail(kLoad, node.op_type(), ": kiln_size_patches must be (attribute, element) pairs, ",
           "one per trailing size input (", node.input_size(), " inputs)");
    std::vector<kd::SizePatch> patches;
    for (int k = 0; k + 1 < a.ints_size(); k += 2) {
      if (a.ints(k) < 0 || a.ints(k) >= 64 || a.ints(k + 1) < -1 || a.ints(k + 1) >= 4096)
        fail(kLoad, node.op_type(), ": size patch (", a.ints(k), ", ", a.ints(k + 1),
             ") is out of range");
      patches.push_back(
          kd::SizePatch{static_cast<int16_t>(a.ints(k)), static_cast<int16_t>(a.ints(k + 1))});
    }
    return patches;
  }

  static std::vector<Tensor> call_op(const ::onnx::NodeProto& node, const kd::OpDef& op,
                                     const std::vector<Tensor>& ins, const NodeAttrs& na) {
    if (na.patches.size() > ins.size())
      fail(kLoad, node.op_type(), ": more size patches than inputs");
    for (const auto& p : na.patches)
      if (static_cast<size_t>(p.attr) >= na.attrs.size())
        fail(kLoad, node.op_type(), ": size patch of attribute ", p.attr, " but only ",
             na.attrs.size(), " attributes");
    kd::TensorList r =
        kd::call_node(op, std::span<const Tensor>(ins.data(), ins.size()), na.attrs, na.patches);
    return std::vector<Tensor>(r.begin(), r.end());
  }

  static kd::AttrValue attr_value(const ::onnx::NodeProto& node, const ::onnx::AttributeProto& a) {
    switch (a.type()) {
      case ::onnx::AttributeProto::INT:
        return a.i();
      case ::onnx::AttributeProto::INTS:
        return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case ::onnx::AttributeProto::STRING:
        return a.s();
      case ::onnx::AttributeProto::TENSOR: {
        Tensor t = od::tensor_from_proto(a.t(), "attribute");
        if (t.numel() != 1 || t.dim() != 0) break;
        if (t.dtype() == Float64) return t.item<double>();
        if (t.dtype() == Bool) return t.item<bool>();
        break;
      }
      default:
        break;
    }
    fail(kLoad, node.op_type(), ": attribute '", a.name(), "' has an unsupported type");
  }

  std::vector<Tensor> load_while(const ::onnx::NodeProto& node, const std::vector<Tensor>& ins,
                                 const kd::Attrs& attrs, const ::onnx::GraphProto* body,
                                 int64_t num_vars, int depth) {
    if (!body || num_vars <= 0 || num_vars > static_cast<int64_t>(ins.size()) ||
        attrs.size() != 2 || !std::holds_alternative<int64_t>(attrs[1]))
      fail(kLoad, "bad while node '", node.name(), "'");
    if (body->output_size() != num_vars + 1)
      fail(kLoad, "a while body must give the condition and ", num_vars, " loop vars");
    std::vector<Tensor> vars(ins.begin(), ins.begin() + num_vars);
    std::vector<Tensor> caps(ins.begin() + num_vars, ins.end());
    std::vector<Tensor> results;
    // while_loop asks for cond_fn then body_fn on the same placeholders: the body graph is
    // replayed once and both read its results.
    auto replay = [&](const std::vector<Tensor>& v) -> const std::vector<Tensor>& {
      if (results.empty()) {
        std::vector<Tensor> bound = v;
        bound.insert(bound.end(), caps.begin(), caps.end());
        results = load(*body, &bound, depth + 1, nullptr);
      }
      return results;
    };
    return while_loop([&](const std::vector<Tensor>& v) { return replay(v)[0]; },
                      [&](const std::vector<Tensor>& v) {
                        const auto& r = replay(v);
                        return std::vector<Tensor>(r.begin() + 1, r.end());
                      },
                      vars, WhileOptions{.max_iterations = attrs.i(1)});
  }

  Graph g_;
};

}  // namespace

namespace detail {

// The format version, checked before anything else is read (external data included): a
// standard ONNX file is told to use import_model.
void check_version(const ::onnx::ModelProto& m, const std::string& what) {
  int64_t version = -1;
  for (const auto& p : m.metadata_props())
    if (p.key() == kVersionKey) {
      const std::string& v = p.value();
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
        fail(kLoad, what, ": bad format version '", v, "'");
      version = std::stoll(v);
    }
  if (version < 0)
    fail(kLoad, what, ": not a Kiln saved graph (no ", kVersionKey,
         "); import standard ONNX with kiln::onnx::import_model");
  if (version > kSavedGraphVersion)
    fail(kLoad, what, ": written in saved-graph format version ", version,
         ", newer than this Kiln reads (", kSavedGraphVersion, "); upgrade Kiln");
}

LoadedGraph load_graph_model(const ::onnx::ModelProto& m, const std::string& what) {
  check_version(m, what);
  LoadedGraph out;
  Loader l(out.graph);
  std::vector<Tensor> res = l.load(m.graph(), nullptr, 0, &out.inputs);
  for (int k = 0; k < m.graph().output_size(); ++k)
    out.outputs.emplace_back(m.graph().output(k).name(), res[static_cast<size_t>(k)]);
  return out;
}

}  // namespace detail

LoadedGraph load_graph_bytes(const void* data, size_t size, const std::string& what) {
  ::onnx::ModelProto m = od::parse_model(data, size, what, kLoad);
  od::check_version(m, what);
  od::read_external_data(m, "", kLoad);
  return od::load_graph_model(m, what);
}

bool is_saved_graph(const std::string& path) {
  namespace pio = google::protobuf::io;
  using google::protobuf::internal::WireFormatLite;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // (a FIFO: no wait)
  if (fd < 0) return false;
  pio::FileInputStream raw(fd);
  raw.SetCloseOnDelete(true);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  pio::CodedInputStream in(&raw);
  constexpr int kMetadataProps = 14;  // ModelProto.metadata_props
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kMetadataProps &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      // The entry is parsed from the stream under a limit of its length, which the file's size
      // bounds: a forged length allocates nothing up front, and an entry padded with unknown
      // fields is read as the full parser reads it.
      uint32_t len = 0;
      if (!in.ReadVarint32(&len) || len > static_cast<uint64_t>(st.st_size) ||
          len > static_cast<uint32_t>(std::numeric_limits<int>::max()))
        return false;
      const auto limit = in.PushLimit(static_cast<int>(len));
      ::onnx::StringStringEntryProto e;
      if (!e.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) return false;
      in.PopLimit(limit);
      if (e.key() == kVersionKey) return true;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  return false;
}

LoadedGraph load_graph(const std::string& path) {
  const io::MappedFile bytes(path, kLoad);
  ::onnx::ModelProto m = od::parse_model(bytes.data(), bytes.size(), path, kLoad);
  od::check_version(m, path);
  od::read_external_data(m, path, kLoad);
  return od::load_graph_model(m, path);
}

Tensor LoadedGraph::input(const std::string& name) const {
  for (const auto& [n, t] : inputs)
    if (n == name) return t;
  fail(kLoad, "no input '", name, "'");
}
Tensor LoadedGraph::output(const std::string& name) const {
  for (const auto& [n, t] : outputs)
    if (n == name) return t;
  fail(kLoad, "no output '", name, "'");
}

}  // namespace kiln::onnx
