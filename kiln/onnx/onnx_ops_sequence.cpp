// ONNX sequences and optionals at import. Kiln has neither type: a sequence is kept as the list
// of its element tensors, an optional as whether it holds a value and that value, both with
// their counts known at import (from ImportOptions::sequence_inputs, or as the nodes build
// them); the elements themselves are ordinary graph values. The sequence ops, SequenceMap, and
// If and Loop over sequences (the branch taken or the loop unrolled at import) become list
// operations here.
#include <algorithm>
#include <map>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

using Kind = SeqValue::Kind;

// Unrolled iterations of a Loop over sequences, as the tensor Loop's bound.
constexpr int64_t kMaxUnroll = 4096;

struct SeqNode {
  Ctx& ctx;
  const ::onnx::NodeProto& node;
  NodeIn n;  // attribute reads and "[onnx_import] Op (opset N, node '...')" errors

  SeqNode(Ctx& c, const ::onnx::NodeProto& p) : ctx(c), node(p), n{p, {}, c.opset, c} {}

  bool has(int k) const { return k < node.input_size() && !node.input(k).empty(); }
  const SeqValue& seq(int k) const {
    if (!has(k)) n.fail("input ", k, " is required but missing");
    const SeqValue* s = ctx.lookup_seq(node.input(k));
    if (!s) n.fail("input ", k, " ('", node.input(k), "') must be a sequence or optional");
    return *s;
  }
  const Tensor& tensor(int k) const {
    if (!has(k)) n.fail("input ", k, " is required but missing");
    const Tensor* t = ctx.lookup(node.input(k));
    if (!t) n.fail("input ", k, " ('", node.input(k), "') must be a tensor");
    // Sequences hold no uint16/32/64 values: their elements would lose the exactness checks.
    if (ctx.unsigned_of(node.input(k)) != Unsigned::None)
      n.fail("input ", k, " is uint16/32/64, which Kiln does not keep in sequences");
    return *t;
  }
  Value value(int k) const {
    if (const SeqValue* s = has(k) ? ctx.lookup_seq(node.input(k)) : nullptr) return *s;
    return tensor(k);
  }
  // A position input known at import, in [-size, size] (insert) or [-size, size - 1].
  int64_t position(int k, int64_t size, bool insert) const {
    const Tensor& t = tensor(k);
    if (!t.is_concrete() || t.numel() != 1 || !is_integral(t.dtype()))
      n.fail("the position must be one integer known at import");
    int64_t p = t.to_vector<int64_t>()[0];
    const int64_t hi = insert ? size : size - 1;
    if (p < -size || p > hi)
      n.fail("position ", p, " is out of range for a sequence of ", size, " elements");
    return p < 0 ? p + size : p;
  }
  void out(int k, const Value& v) {
    if (k >= node.output_size() || node.output(k).empty()) return;
    ctx.bind_value(node.output(k), v);
    ctx.tag(node.output(k), Unsigned::None);
  }
};

bool is_plain_tensor_type(const ::onnx::TypeProto& t) { return t.has_tensor_type(); }

bool graph_gives_sequences(const ::onnx::GraphProto& g) {
  for (const auto& o : g.output())
    if (o.has_type() && !is_plain_tensor_type(o.type())) return true;
  return false;
}

const ::onnx::GraphProto& graph_attr(const SeqNode& s, const char* name) {
  const auto* a = s.n.attr(name);
  if (!a || a->type() != ::onnx::AttributeProto::GRAPH)
    s.n.fail("attribute '", name, "' must be a graph");
  return a->g();
}

SeqValue sequence_of(std::vector<Tensor> items, DType dt) {
  SeqValue v;
  v.items = std::move(items);
  v.dtype = dt;
  return v;
}

Tensor bool_scalar(bool b) { return scalar_tensor(b ? 1.0 : 0.0, Bool); }

void sequence_construct(SeqNode& s) {
  std::vector<Tensor> items;
  for (int k = 0; k < s.node.input_size(); ++k) items.push_back(s.tensor(k));
  if (items.empty()) s.n.fail("takes at least one tensor");
  for (const Tensor& t : items)
    if (t.dtype() != items[0].dtype())
      s.n.fail("elements of one dtype, got ", dtype_name(items[0].dtype()), " and ",
               dtype_name(t.dtype()));
  s.out(0, sequence_of(items, items[0].dtype()));
}

void sequence_empty(SeqNode& s) {
  s.out(0, sequence_of({}, dtype_from_onnx(static_cast<int32_t>(s.n.i("dtype", 1)), "dtype")));
}

void sequence_insert(SeqNode& s) {
  SeqValue v = s.seq(0);
  const Tensor& t = s.tensor(1);
  if (!v.items.empty() && t.dtype() != v.dtype)
    s.n.fail("inserts ", dtype_name(t.dtype()), " into a sequence of ", dtype_name(v.dtype));
  const int64_t size = static_cast<int64_t>(v.items.size());
  const int64_t p = s.has(2) ? s.position(2, size, true) : size;
  v.items.insert(v.items.begin() + p, t);
  v.dtype = t.dtype();
  s.out(0, v);
}

void sequence_at(SeqNode& s) {
  const SeqValue& v = s.seq(0);
  s.out(0, v.items[s.position(1, static_cast<int64_t>(v.items.size()), false)]);
}

void sequence_length(SeqNode& s) {
  s.out(0, scalar_tensor(static_cast<double>(s.seq(0).items.size()), Int64));
}

void sequence_erase(SeqNode& s) {
  SeqValue v = s.seq(0);
  const int64_t size = static_cast<int64_t>(v.items.size());
  if (size == 0) s.n.fail("erases from an empty sequence");
  v.items.erase(v.items.begin() + (s.has(1) ? s.position(1, size, false) : size - 1));
  s.out(0, v);
}

void concat_from_sequence(SeqNode& s) {
  const SeqValue& v = s.seq(0);
  if (v.items.empty()) s.n.fail("concatenates an empty sequence");
  const int64_t axis = s.n.req_i("axis");
  s.out(0, s.n.i("new_axis", 0) ? stack(v.items, axis) : cat(v.items, axis));
}

// An Optional without an input is empty; its 'type' attribute still says what it would hold.
SeqValue empty_optional(SeqNode& s) {
  const auto* a = s.n.attr("type");
  if (!a || a->type() != ::onnx::AttributeProto::TYPE_PROTO)
    s.n.fail("an empty Optional needs its 'type' attribute");
  const ::onnx::TypeProto& t = a->tp();
  SeqValue v;
  v.present = false;
  if (t.has_sequence_type()) {
    v.kind = Kind::OptionalSequence;
    if (t.sequence_type().elem_type().has_tensor_type())
      v.dtype =
          dtype_from_onnx(t.sequence_type().elem_type().tensor_type().elem_type(), "Optional type");
  } else if (t.has_tensor_type()) {
    v.kind = Kind::OptionalTensor;
    v.dtype = dtype_from_onnx(t.tensor_type().elem_type(), "Optional type");
  } else {
    s.n.fail("'type' must be a tensor or sequence type");
  }
  return v;
}

void optional_of_input(SeqNode& s) {
  if (!s.has(0)) {
    s.out(0, empty_optional(s));
    return;
  }
  SeqValue v;
  Value in = s.value(0);
  if (in.seq) {
    if (in.seq->kind != Kind::Sequence) s.n.fail("an optional of an optional");
    v = *in.seq;
    v.kind = Kind::OptionalSequence;
  } else {
    v.kind = Kind::OptionalTensor;
    v.items = {in.tensor};
    v.dtype = in.tensor.dtype();
  }
  s.out(0, v);
}

void optional_has_element(SeqNode& s) {
  bool has = false;
  if (s.has(0)) {
    const SeqValue* v = s.ctx.lookup_seq(s.node.input(0));
    has = v ? (v->kind == Kind::Sequence || v->present) : true;  // a tensor: present
  }
  s.out(0, bool_scalar(has));
}

void optional_get_element(SeqNode& s) {
  Value in = s.value(0);
  if (!in.seq || in.seq->kind == Kind::Sequence) {  // opset 18: a plain value passes through
    s.out(0, in);
    return;
  }
  if (!in.seq->present) s.n.fail("the optional holds no value");
  if (in.seq->kind == Kind::OptionalTensor) {
    s.out(0, in.seq->items.at(0));
  } else {
    SeqValue v = *in.seq;
    v.kind = Kind::Sequence;
    s.out(0, v);
  }
}

// SequenceMap: the body imported once per element, over the i-th element of each sequence input
// and the tensor inputs as they are; each body output gathered into a sequence.
void sequence_map(SeqNode& s) {
  const auto& body = graph_attr(s, "body");
  const SeqValue& first = s.seq(0);
  const size_t L = first.items.size();
  std::vector<Value> ins;
  for (int k = 0; k < s.node.input_size(); ++k) ins.push_back(s.value(k));
  for (size_t k = 0; k < ins.size(); ++k)
    if (ins[k].seq && ins[k].seq->items.size() != L)
      s.n.fail("input ", k, " has ", ins[k].seq->items.size(), " elements, input 0 has ", L);
  charge_nodes(s.n, static_cast<int64_t>(L) * (body.node_size() + 1));
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(body.output_size()));
  for (size_t i = 0; i < L; ++i) {
    std::vector<Value> step;
    for (const Value& v : ins) step.push_back(v.seq ? Value(v.seq->items[i]) : v);
    std::vector<Value> r = import_subgraph_values(s.ctx, body, step, "SequenceMap body");
    for (size_t k = 0; k < r.size(); ++k) {
      if (r[k].seq) s.n.fail("body output ", k, " is a sequence; SequenceMap gathers tensors");
      outs[k].push_back(r[k].tensor);
    }
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    DType dt = outs[k].empty() ? first.dtype : outs[k][0].dtype();
    if (outs[k].empty() && body.output(static_cast<int>(k)).type().has_tensor_type())
      dt = dtype_from_onnx(body.output(static_cast<int>(k)).type().tensor_type().elem_type(),
                           "SequenceMap output");
    s.out(static_cast<int>(k), sequence_of(outs[k], dt));
  }
}

bool known_bool(const Value& v, bool* b) {
  if (v.seq || !v.tensor.is_concrete() || v.tensor.numel() != 1) return false;
  *b = v.tensor.to_vector<int64_t>()[0] != 0;
  return true;
}

// If whose branches give sequences or optionals: the branch taken, chosen at import.
void if_over_sequences(SeqNode& s) {
  bool c;
  if (!known_bool(s.value(0), &c))
    s.n.fail(
        "the condition must be known at import when the branches give sequences or "
        "optionals (their element counts may differ)");
  std::vector<Value> r = import_subgraph_values(
      s.ctx, graph_attr(s, c ? "then_branch" : "else_branch"), {}, "If branch");
  for (size_t k = 0; k < r.size(); ++k) s.out(static_cast<int>(k), r[k]);
}

// Loop carrying sequences or optionals: unrolled at import, which needs the trip count and the
// conditions known there (each iteration may change the element counts).
void loop_over_sequences(SeqNode& s) {
  const auto& body = graph_attr(s, "body");
  if (s.node.input_size() < 2)
    s.n.fail("takes the trip count, the condition and the loop values: ", s.node.input_size(),
             " inputs given, expected at least 2");
  int64_t trips = -1;
  if (s.has(0)) {
    const Tensor& m = s.tensor(0);
    if (!m.is_concrete() || m.numel() != 1)
      s.n.fail("the trip count must be known at import when the loop carries sequences");
    trips = m.to_vector<int64_t>()[0];
  }
  bool go = true;
  if (s.has(1) && !known_bool(s.value(1), &go))
    s.n.fail("the condition must be known at import when the loop carries sequences");
  const int nv = s.node.input_size() - 2;
  std::vector<Value> vars;
  for (int k = 0; k < nv; ++k) vars.push_back(s.value(2 + k));
  const int64_t n_scan = body.output_size() - 1 - nv;
  if (n_scan < 0) s.n.fail("the body has ", body.output_size(), " outputs for ", nv, " values");
  std::vector<std::vector<Tensor>> scans(static_cast<size_t>(n_scan));
  for (int64_t it = 0; go && (trips < 0 || it < trips); ++it) {
    if (it >= kMaxUnroll) s.n.fail("more than ", kMaxUnroll, " iterations to unroll");
    charge_nodes(s.n, body.node_size() + 1);
    std::vector<Value> in{scalar_tensor(static_cast<double>(it), Int64), bool_scalar(true)};
    in.insert(in.end(), vars.begin(), vars.end());
    std::vector<Value> out = import_subgraph_values(s.ctx, body, in, "Loop body");
    if (!known_bool(out[0], &go))
      s.n.fail("the body's condition must be known at import when the loop carries sequences");
    for (int k = 0; k < nv; ++k) vars[k] = out[1 + k];
    for (int64_t k = 0; k < n_scan; ++k) {
      if (out[1 + nv + k].seq) s.n.fail("scan output ", k, " is a sequence");
      scans[k].push_back(out[1 + nv + k].tensor);
    }
  }
  for (int k = 0; k < nv; ++k) s.out(k, vars[k]);
  for (int64_t k = 0; k < n_scan; ++k) {
    if (scans[k].empty()) s.n.fail("scan output ", k, " of a loop that ran no iteration");
    s.out(static_cast<int>(nv + k), stack(scans[k], 0));
  }
}

// The ops on sequences and optionals that need no subgraph, each one step on known elements.
const std::map<std::string, void (*)(SeqNode&)>& sequence_rules() {
  static const std::map<std::string, void (*)(SeqNode&)> rules = {
      {"SequenceConstruct", sequence_construct},    {"SequenceEmpty", sequence_empty},
      {"SequenceInsert", sequence_insert},          {"SequenceAt", sequence_at},
      {"SequenceLength", sequence_length},          {"SequenceErase", sequence_erase},
      {"ConcatFromSequence", concat_from_sequence}, {"Optional", optional_of_input},
      {"OptionalHasElement", optional_has_element}, {"OptionalGetElement", optional_get_element},
  };
  return rules;
}

}  // namespace

bool convert_sequence_node(Ctx& ctx, const ::onnx::NodeProto& node) {
  const std::string& op = node.op_type();
  bool seq_in = false;
  for (const auto& name : node.input()) seq_in |= !name.empty() && ctx.lookup_seq(name);
  auto graph_named = [&](const char* name) -> const ::onnx::GraphProto* {
    for (const auto& a : node.attribute())
      if (a.name() == name && a.type() == ::onnx::AttributeProto::GRAPH) return &a.g();
    return nullptr;
  };
  SeqNode s(ctx, node);
  if (auto rule = sequence_rules().find(op); rule != sequence_rules().end()) {
    rule->second(s);
  } else if (op == "SequenceMap") {
    sequence_map(s);
  } else if (op == "Identity" && seq_in) {
    s.out(0, s.value(0));
  } else if (op == "If") {
    const auto *t = graph_named("then_branch"), *e = graph_named("else_branch");
    if (!(t && graph_gives_sequences(*t)) && !(e && graph_gives_sequences(*e))) return false;
    if_over_sequences(s);
  } else if (op == "Loop") {
    const auto* b = graph_named("body");
    if (!seq_in && !(b && graph_gives_sequences(*b))) return false;
    loop_over_sequences(s);
  } else {
    return false;
  }
  return true;
}

SeqValue sequence_input(const ::onnx::ValueInfoProto& v, const ImportOptions& options) {
  const ::onnx::TypeProto& t = v.type();
  const bool optional = t.has_optional_type();
  const ::onnx::TypeProto& inner = optional ? t.optional_type().elem_type() : t;
  SeqValue sv;
  const ::onnx::TypeProto* elem = nullptr;
  if (inner.has_sequence_type()) {
    sv.kind = optional ? Kind::OptionalSequence : Kind::Sequence;
    elem = &inner.sequence_type().elem_type();
  } else if (optional && inner.has_tensor_type()) {
    sv.kind = Kind::OptionalTensor;
    elem = &inner;
  }
  if (!elem || !elem->has_tensor_type())
    fail(kOp, "input '", v.name(),
         "': only sequences of tensors and optionals of a tensor or of such a sequence are "
         "supported (no maps, no nesting)");
  sv.dtype = dtype_from_onnx(elem->tensor_type().elem_type(), str_cat("input '", v.name(), "'"));
  const char* what = sv.kind == Kind::Sequence ? "sequence" : "optional";
  const bool absent = std::find(options.absent_inputs.begin(), options.absent_inputs.end(),
                                v.name()) != options.absent_inputs.end();
  auto it = options.sequence_inputs.find(v.name());
  if (absent) {
    if (!optional) fail(kOp, "input '", v.name(), "' is a sequence; only optionals may be absent");
    sv.present = false;
    return sv;
  }
  if (it == options.sequence_inputs.end())
    fail(kOp, "input '", v.name(), "' is a ", what,
         ": its element count and shapes must be known at import (give the elements in "
         "ImportOptions::sequence_inputs, or name an absent optional in absent_inputs)");
  sv.items = it->second;
  if (sv.kind == Kind::OptionalTensor && sv.items.size() != 1)
    fail(kOp, "input '", v.name(), "' is an optional tensor: give one element, got ",
         sv.items.size());
  const auto& tt = elem->tensor_type();
  for (size_t k = 0; k < sv.items.size(); ++k) {
    const Tensor& e = sv.items[k];
    if (!e.defined() || e.dtype() != sv.dtype)
      fail(kOp, "input '", v.name(), "' element ", k, " must be ", dtype_name(sv.dtype),
           e.defined() ? str_cat(", got ", dtype_name(e.dtype())) : std::string(", got none"));
    if (tt.has_shape()) {
      bool ok = tt.shape().dim_size() == e.dim();
      for (int d = 0; ok && d < tt.shape().dim_size(); ++d)
        ok = !tt.shape().dim(d).has_dim_value() || tt.shape().dim(d).dim_value() == e.size(d);
      if (!ok)
        fail(kOp, "input '", v.name(), "' element ", k, " ", e.shape(),
             " does not match the declared element shape");
    }
  }
  return sv;
}

}  // namespace kiln::onnx::detail
