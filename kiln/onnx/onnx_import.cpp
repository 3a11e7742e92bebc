// The ONNX importer's driver: parses the ModelProto, checks and converts tensors, walks the
// nodes in order and hands each to its converter (onnx_ops*.cpp), binding the results by name.
#include "kiln/onnx/onnx_import.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "kiln/io/file.h"
#include "kiln/onnx/external_data.h"
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx {
namespace detail {

namespace {

// Subgraphs nest (If inside Loop ...); a hostile file could nest them thousands deep.
constexpr int64_t kMaxDepth = 32;
// Import-time folding may create values larger than the file (ConstantOfShape, Expand, Range):
// it may create this many elements plus 16 per byte of the file in all, so a 100-byte file cannot
// ask for gigabytes while real models, whose folded values are shapes and small tables, never
// come near it.
constexpr int64_t kFoldBaseElements = int64_t(1) << 24;

template <typename T>
Tensor from_values(const Shape& shape, DType dt, const T* v, int64_t n) {
  Tensor t = empty(shape, dt);
  KILN_DISPATCH_ALL(dt, kOp, [&] {
    auto* out = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<scalar_t>(v[i]);
  });
  return t;
}

}  // namespace

std::unordered_map<std::string, Converter>& converters() {
  static std::unordered_map<std::string, Converter> m;
  return m;
}

const Tensor* Ctx::lookup(const std::string& name) const {
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return &f->second;
  }
  return nullptr;
}

const Tensor& NodeIn::req(size_t k) const {
  if (!has_input(k)) fail("input ", k, " is required but missing");
  return in[k];
}

const ::onnx::AttributeProto* NodeIn::attr(const char* name) const {
  for (const auto& a : proto.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t NodeIn::i(const char* name, int64_t def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::INT) fail("attribute '", name, "' must be an int");
  return a->i();
}
int64_t NodeIn::req_i(const char* name) const {
  if (!attr(name)) fail("attribute '", name, "' is required");
  return i(name, 0);
}
double NodeIn::f(const char* name, double def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::FLOAT) fail("attribute '", name, "' must be a float");
  return a->f();
}
std::string NodeIn::s(const char* name, const std::string& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::STRING) fail("attribute '", name, "' must be a string");
  return a->s();
}
std::vector<int64_t> NodeIn::ints(const char* name, std::vector<int64_t> def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::INTS) fail("attribute '", name, "' must be ints");
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}
std::vector<double> NodeIn::floats(const char* name, std::vector<double> def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::FLOATS) fail("attribute '", name, "' must be floats");
  return std::vector<double>(a->floats().begin(), a->floats().end());
}
Tensor NodeIn::t(const char* name) const {
  const auto* a = attr(name);
  if (!a) return Tensor();
  if (a->type() != ::onnx::AttributeProto::TENSOR) fail("attribute '", name, "' must be a tensor");
  return tensor_from_proto(a->t(), str_cat(type(), " attribute '", name, "'"), true);
}

DType dtype_from_onnx(int32_t et, const std::string& what) {
  switch (et) {
    case ::onnx::TensorProto::FLOAT:
      return Float32;
    case ::onnx::TensorProto::DOUBLE:
      return Float64;
    case ::onnx::TensorProto::INT64:
      return Int64;
    case ::onnx::TensorProto::INT32:
      return Int32;
    case ::onnx::TensorProto::BOOL:
      return Bool;
    case ::onnx::TensorProto::FLOAT16:
      return Float16;
    case ::onnx::TensorProto::BFLOAT16:
      return BF16;
    case ::onnx::TensorProto::INT8:
      return Int8;
    case ::onnx::TensorProto::UINT8:
      return UInt8;
    case ::onnx::TensorProto::INT16:
      return Int16;
    default:
      break;
  }
  const char* name =
      ::onnx::TensorProto::DataType_IsValid(et)
          ? ::onnx::TensorProto::DataType_Name(static_cast<::onnx::TensorProto::DataType>(et))
                .c_str()
          : "an unknown type";
  fail(kOp, what, ": element type ", et, " (", std::string(name),
       ") is not supported; Kiln has float32, float64, float16, bfloat16, int64, int32, int16, "
       "int8, uint8 and bool");
}

int32_t onnx_from_dtype(DType dt) {
  switch (dt) {
    case Float32:
      return ::onnx::TensorProto::FLOAT;
    case Float64:
      return ::onnx::TensorProto::DOUBLE;
    case Int64:
      return ::onnx::TensorProto::INT64;
    case Int32:
      return ::onnx::TensorProto::INT32;
    case Bool:
      return ::onnx::TensorProto::BOOL;
    case Float16:
      return ::onnx::TensorProto::FLOAT16;
    case BF16:
      return ::onnx::TensorProto::BFLOAT16;
    case Int8:
      return ::onnx::TensorProto::INT8;
    case UInt8:
      return ::onnx::TensorProto::UINT8;
    case Int16:
      return ::onnx::TensorProto::INT16;
  }
  return 0;
}

Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& what,
                         bool widen_unsigned) {
  if (p.data_location() == ::onnx::TensorProto::EXTERNAL)
    fail(kOp, what, " ('", p.name(), "'): external data is not supported");
  if (p.has_segment()) fail(kOp, what, " ('", p.name(), "'): segmented tensors are not supported");
  const bool wide = widen_unsigned && unsigned_of_onnx(p.data_type()) != Unsigned::None;
  const DType dt =
      wide ? Int64 : dtype_from_onnx(p.data_type(), str_cat(what, " '", p.name(), "'"));
  Shape shape;
  int64_t n = 1;
  for (int64_t d : p.dims()) {
    if (d < 0) fail(kOp, what, " '", p.name(), "': negative dim ", d);
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      fail(kOp, what, " '", p.name(), "': element count overflows");
    n *= d;
    shape.push_back(d);
  }
  if (wide) return unsigned_from_proto(p, shape, n, what);
  const size_t esz = dtype_size(dt);
  if (p.has_raw_data()) {
    const std::string& raw = p.raw_data();
    // The count is checked against the bytes present before anything is allocated.
    if (static_cast<uint64_t>(n) > raw.size() / esz || raw.size() != static_cast<size_t>(n) * esz)
      fail(kOp, what, " '", p.name(), "': raw data holds ", raw.size(), " bytes, ", shape, " of ",
           dtype_name(dt), " needs ", static_cast<double>(n) * esz);
    Tensor t = empty(shape, dt);
    if (n > 0) std::memcpy(t.raw_data(), raw.data(), raw.size());
    if (dt == Bool) {  // a byte other than 0/1 is not a valid C++ bool
      auto* b = static_cast<uint8_t*>(t.raw_data());
      for (int64_t k = 0; k < n; ++k) b[k] = b[k] != 0;
    }
    return t;
  }
  auto check_count = [&](int64_t have) {
    if (have != n)
      fail(kOp, what, " '", p.name(), "': holds ", have, " values, its shape ", shape, " needs ",
           n);
  };
  switch (dt) {
    case Float32:
      check_count(p.float_data_size());
      return from_values(shape, dt, p.float_data().data(), n);
    case Float64:
      check_count(p.double_data_size());
      return from_values(shape, dt, p.double_data().data(), n);
    case Int64:
      check_count(p.int64_data_size());
      return from_values(shape, dt, p.int64_data().data(), n);
    case Int32:
      check_count(p.int32_data_size());
      return from_values(shape, dt, p.int32_data().data(), n);
    case Bool: {
      check_count(p.int32_data_size());
      Tensor t = empty(shape, dt);
      bool* out = t.data_ptr<bool>();
      for (int64_t k = 0; k < n; ++k) out[k] = p.int32_data(static_cast<int>(k)) != 0;
      return t;
    }
    case Float16:
    case BF16:
    case Int8:
    case UInt8:
    case Int16: {
      // ONNX keeps these in int32_data: the 16-bit patterns of float16/bfloat16, the values of
      // the small integers.
      check_count(p.int32_data_size());
      Tensor t = empty(shape, dt);
      for (int64_t k = 0; k < n; ++k) {
        const int32_t v = p.int32_data(static_cast<int>(k));
        if (dtype_size(dt) == 2)
          static_cast<uint16_t*>(t.raw_data())[k] = static_cast<uint16_t>(v);
        else
          static_cast<uint8_t*>(t.raw_data())[k] = static_cast<uint8_t>(v);
      }
      return t;
    }
  }
  fail(kOp, what, ": unreachable dtype");
}

std::vector<int64_t> const_ints(const NodeIn& n, size_t i, const char* what) {
  const Tensor& t = n.req(i);
  if (!t.is_concrete())
    n.fail("input ", i, " (", what,
           ") must be known at import (a constant or computed from static shapes); give the "
           "model's inputs static shapes (ImportOptions::input_shapes)");
  if (!is_integral(t.dtype())) n.fail("input ", i, " (", what, ") must be int32 or int64");
  if (t.dim() > 1) n.fail("input ", i, " (", what, ") must be a scalar or 1-D, got ", t.shape());
  return t.to_vector<int64_t>();
}

bool all_concrete(const std::vector<Tensor>& ts) {
  for (const auto& t : ts)
    if (t.defined() && !t.is_concrete()) return false;
  return true;
}

void charge_fold(const NodeIn& n, int64_t numel) {
  if (numel < 0 || numel > n.ctx.fold_budget)
    n.fail("would create ", numel, " elements at import, more than the model's size justifies (",
           n.ctx.fold_budget, " left)");
  n.ctx.fold_budget -= numel;
}

int64_t static_numel(const Shape& s) {
  int64_t total = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d != 0 && total > (int64_t(1) << 62) / d) return -1;
    total *= d;
  }
  return total;
}

void check_result_size(const NodeIn& n, const Shape& result) {
  constexpr int64_t kMax = int64_t(1) << 28;
  int64_t total = 1;
  for (int64_t d : result) {
    if (d < 0) continue;  // a dynamic dim: the fed data decides
    if (d != 0 && total > kMax / d) n.fail("its result ", result, " would exceed 2^28 elements");
    total *= d;
  }
  if (total > kMax) n.fail("its result ", result, " would exceed 2^28 elements");
}

void charge_nodes(const NodeIn& n, int64_t nodes) {
  if (nodes < 0 || nodes > n.ctx.node_budget)
    n.fail("unrolling would add ", nodes, " nodes, more than the model's size justifies (",
           n.ctx.node_budget, " left)");
  n.ctx.node_budget -= nodes;
}

namespace {

// The declared dims of a tensor input as text: sizes, symbolic names ("batch") or "?".
std::string declared_shape(const ::onnx::ValueInfoProto& v) {
  const auto& tt = v.type().tensor_type();
  if (!tt.has_shape()) return "(no shape)";
  std::string s = "[";
  for (int k = 0; k < tt.shape().dim_size(); ++k) {
    const auto& d = tt.shape().dim(k);
    if (k) s += ", ";
    s += d.has_dim_value() ? std::to_string(d.dim_value())
                           : (d.dim_param().empty() ? std::string("?") : d.dim_param());
  }
  return s + "]";
}

Shape shape_from_value_info(const ::onnx::ValueInfoProto& v, const ImportOptions& opt) {
  if (!v.type().has_tensor_type())
    fail(kOp, "input '", v.name(),
         "' is not a tensor (sequences, maps and optionals are not "
         "supported)");
  const auto& tt = v.type().tensor_type();
  auto it = opt.input_shapes.find(v.name());
  if (it != opt.input_shapes.end()) {
    // A size given for the input fixes its symbolic dims; the dims the model fixes must agree
    // (an exported batch-1 model has no batch-8 form: its Reshapes hold the 1).
    if (!tt.has_shape()) return it->second;
    const Shape& given = it->second;
    const std::string dtype = dtype_name(boundary_dtype(tt.elem_type(), "input"));
    if (static_cast<int64_t>(given.size()) != tt.shape().dim_size())
      fail(kOp, "input '", v.name(), "' has rank ", tt.shape().dim_size(), " (the model expects ",
           dtype, declared_shape(v), "), given ", given.size(), "-D ", given);
    for (int k = 0; k < tt.shape().dim_size(); ++k) {
      const auto& d = tt.shape().dim(k);
      if (d.has_dim_value() && d.dim_value() != given[static_cast<size_t>(k)])
        fail(kOp, "input '", v.name(), "': the model fixes its shape to ", dtype, declared_shape(v),
             ", given ", given, " (dim ", k, " is ", given[static_cast<size_t>(k)],
             ", the model's ", d.dim_value(),
             "; re-export the model with that dim dynamic to feed other sizes)");
    }
    return given;
  }
  Shape s;
  if (!tt.has_shape())
    fail(kOp, "input '", v.name(), "' has no shape; give one in ImportOptions::input_shapes");
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) fail(kOp, "input '", v.name(), "': negative dim ", d.dim_value());
      s.push_back(d.dim_value());
    } else {
      s.push_back(Dim::any());
    }
  }
  return s;
}

// Converts the nodes of `g` in order, in the innermost scope of ctx.
void import_nodes(Ctx& ctx, const ::onnx::GraphProto& g, std::vector<std::string>* op_types) {
  for (const auto& init : g.initializer()) {
    ctx.bind(init.name(), tensor_from_proto(init, "initializer", true));
    ctx.tag(init.name(), unsigned_of_onnx(init.data_type()));
  }
  for (const auto& node : g.node()) {
    // The preview training domain's ops are registered as "<domain>.<op>".
    const bool training = node.domain() == "ai.onnx.preview.training";
    if (!node.domain().empty() && node.domain() != "ai.onnx" && !training)
      fail(kOp, node.op_type(), " (domain '", node.domain(),
           "'): only the default ONNX domain and ai.onnx.preview.training are supported");
    // Sequences and optionals (and If/Loop over them) take their own path.
    const int64_t unsigned_at_seq = ctx.unsigned_nodes;
    if (!training && convert_sequence_node(ctx, node)) {
      // As below: a subgraph over uint16/32/64 values gives untagged results.
      if (ctx.unsigned_nodes != unsigned_at_seq)
        fail(kOp, node.op_type(),
             ": its subgraph computes on uint16/32/64 values, which Kiln does not carry through "
             "control flow");
      if (op_types &&
          std::find(op_types->begin(), op_types->end(), node.op_type()) == op_types->end())
        op_types->push_back(node.op_type());
      continue;
    }
    auto it = converters().find(training ? node.domain() + "." + node.op_type() : node.op_type());
    if (it == converters().end())
      fail(kOp, "unsupported op ", node.op_type(), " (", training ? node.domain() + " " : "",
           "opset ", ctx.opset, ")");
    if (op_types &&
        std::find(op_types->begin(), op_types->end(), node.op_type()) == op_types->end())
      op_types->push_back(node.op_type());
    NodeIn n{node, {}, ctx.opset, ctx};
    if (ctx.opset < 7 && n.has("broadcast"))
      n.fail("the legacy broadcast attribute (opsets before 7) is not supported");
    for (const auto& name : node.input()) {
      if (name.empty()) {
        n.in.emplace_back();
        continue;
      }
      const Tensor* t = ctx.lookup(name);
      if (!t && ctx.lookup_seq(name))
        n.fail("input '", name, "' is a sequence or optional; this op takes tensors");
      if (!t) n.fail("input '", name, "' is not produced by any earlier node or input");
      n.in.push_back(*t);
    }
    // Values of ONNX's wider unsigned types take the checked path (onnx_ops_unsigned.cpp).
    std::vector<Unsigned> tags;
    bool any_unsigned = false;
    for (const auto& name : node.input()) {
      tags.push_back(name.empty() ? Unsigned::None : ctx.unsigned_of(name));
      any_unsigned |= tags.back() != Unsigned::None;
    }
    Unsigned out_tag = produced_unsigned(node);
    const int64_t unsigned_before = ctx.unsigned_nodes;
    std::vector<Tensor> outs;
    if (any_unsigned) {
      ++ctx.unsigned_nodes;
      outs = convert_unsigned(n, it->second, tags, &out_tag);
    } else {
      outs = it->second(n);
    }
    // A subgraph's outputs leave it untagged: one that computes on unsigned values is refused.
    if (ctx.unsigned_nodes != unsigned_before + (any_unsigned ? 1 : 0))
      n.fail(
          "its subgraph computes on uint16/32/64 values, which Kiln does not carry through "
          "control flow");
    for (int k = 0; k < node.output_size(); ++k) {
      if (node.output(k).empty()) continue;
      if (static_cast<size_t>(k) >= outs.size() || !outs[k].defined())
        n.fail("output ", k, " ('", node.output(k), "') is not supported");
      ctx.bind(node.output(k), outs[k]);
      ctx.tag(node.output(k), out_tag);
    }
  }
}

}  // namespace

std::vector<Tensor> import_subgraph(Ctx& ctx, const ::onnx::GraphProto& g,
                                    const std::vector<Tensor>& inputs, const std::string& what) {
  std::vector<Value> vin(inputs.begin(), inputs.end());
  std::vector<Tensor> outs;
  for (Value& v : import_subgraph_values(ctx, g, vin, what)) {
    if (v.seq)
      fail(kOp, what, ": output ", outs.size(),
           " is a sequence or optional, which this op takes only when its count is known "
           "at import");
    outs.push_back(v.tensor);
  }
  return outs;
}

std::vector<Value> import_subgraph_values(Ctx& ctx, const ::onnx::GraphProto& g,
                                          const std::vector<Value>& inputs,
                                          const std::string& what) {
  if (ctx.depth >= kMaxDepth) fail(kOp, what, ": subgraphs nest deeper than ", kMaxDepth);
  if (static_cast<size_t>(g.input_size()) != inputs.size())
    fail(kOp, what, ": the subgraph takes ", g.input_size(), " inputs, ", inputs.size(), " given");
  ++ctx.depth;
  ctx.scopes.emplace_back();
  std::vector<Value> outs;
  try {
    for (int k = 0; k < g.input_size(); ++k) {
      ctx.bind_value(g.input(k).name(), inputs[k]);
      ctx.tag(g.input(k).name(), Unsigned::None);
    }
    import_nodes(ctx, g, nullptr);
    for (const auto& o : g.output()) {
      if (const Tensor* t = ctx.lookup(o.name())) {
        outs.emplace_back(*t);
      } else if (const SeqValue* sv = ctx.lookup_seq(o.name())) {
        outs.emplace_back(*sv);
      } else {
        fail(kOp, what, ": output '", o.name(), "' is never computed");
      }
    }
  } catch (...) {
    ctx.scopes.pop_back();
    --ctx.depth;
    throw;
  }
  ctx.scopes.pop_back();
  --ctx.depth;
  return outs;
}

}  // namespace detail

using namespace detail;

namespace {

::onnx::ModelProto parse_onnx(const void* data, size_t size, const std::string& what) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    fail(kOp, what, ": ", size, " bytes, more than protobuf's 2 GiB limit");
  ::onnx::ModelProto m;
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data),
                                            static_cast<int>(size));
  // Deeply nested messages (subgraph in attribute in node ...) are bounded here first.
  in.SetRecursionLimit(64);
  if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    fail(kOp, what,
         ": not a valid ONNX model (the protobuf does not parse; truncated or "
         "corrupt?)");
  if (!m.has_graph()) fail(kOp, what, ": the model has no graph");
  return m;
}

int64_t default_opset(const ::onnx::ModelProto& m, const std::string& what) {
  int64_t opset = 0;
  for (const auto& os : m.opset_import())
    if (os.domain().empty() || os.domain() == "ai.onnx") opset = os.version();
  if (opset == 0 && m.opset_import_size() == 0) opset = 1;  // IR v2 and older: opset 1
  // A model of other domains' ops only (the training optimizers) has no default opset: its
  // default-domain ops, if any, are read as the newest supported.
  if (opset == 0 && m.opset_import_size() > 0) opset = 17;
  // Opsets 1-6 are accepted where an op's meaning did not change (converters check the rest:
  // the legacy broadcast attributes, for one); the suite and the exporters use 7-17.
  if (opset < 1 || opset > 17)
    fail(kOp, what, ": opset ", opset, " of the default domain is not supported (1-17)");
  return opset;
}

// One model's import: its inputs become placeholders (or the constants given for them), its
// nodes are converted in order, and its outputs are listed with their declared types.
class ModelImporter {
 public:
  ModelImporter(const ::onnx::GraphProto& g, const ImportOptions& options, ImportedModel& out,
                size_t size)
      : g_(g), options_(options), out_(out) {
    ctx_.graph = out.graph;
    ctx_.opset = out.opset;
    ctx_.fold_budget = kFoldBaseElements + 16 * static_cast<int64_t>(size);
    // Unrolled Loops and RNNs: 2^18 nodes plus 8 per byte (the 12-step LSTM test model adds
    // ~500).
    ctx_.node_budget = (int64_t(1) << 18) + 8 * static_cast<int64_t>(size);
    ctx_.scopes.emplace_back();
    for (const auto& init : g.initializer()) is_init_.insert(init.name());
  }

  void bind_inputs() {
    for (const auto& v : g_.input()) {
      if (is_init_.count(v.name())) continue;  // IR < 4 lists initializers as inputs too
      if (v.type().has_tensor_type())
        bind_tensor_input(v);
      else
        bind_sequence_input(v);
    }
  }

  void import_nodes_naming_dynamic_inputs() {
    try {
      import_nodes(ctx_, g_, &out_.op_types);
    } catch (const Error& e) {
      // An op that needs static sizes failed while some input has dims no one fixed: say which
      // input and how to fix them, since the op's own message only names the op.
      const std::string msg = e.what();
      if (msg.find("known at import") == std::string::npos &&
          msg.find("static") == std::string::npos)
        throw;
      const std::string dyn = dynamic_inputs();
      if (dyn.empty()) throw;
      throw Error(str_cat(msg, " (inputs with dynamic dims: ", dyn,
                          "; give their sizes: ImportOptions::input_shapes, kiln-run --input "
                          "NAME=FILE.npy)"));
    }
  }

  void collect_outputs() {
    for (const auto& o : g_.output()) {
      if (const SeqValue* sv = ctx_.lookup_seq(o.name())) {
        // A sequence's elements, or an optional's value if it has one, one output each.
        const size_t count = sv->present ? sv->items.size() : 0;
        out_.output_layout.emplace_back(o.name(), static_cast<int64_t>(count));
        for (size_t k = 0; k < count; ++k) {
          out_.output_names.push_back(str_cat(o.name(), "[", k, "]"));
          out_.outputs.push_back(sv->items[k]);
          out_.output_elem_types.push_back(0);
        }
        continue;
      }
      const Tensor* t = ctx_.lookup(o.name());
      if (!t) fail(kOp, "output '", o.name(), "' is never computed");
      out_.output_layout.emplace_back(o.name(), 1);
      out_.output_names.push_back(o.name());
      out_.outputs.push_back(*t);
      // Kept so that a uint16/32/64 output, computed widened, is written back in its own type.
      out_.output_elem_types.push_back(
          o.type().has_tensor_type() ? o.type().tensor_type().elem_type() : 0);
    }
  }

 private:
  // A sequence or optional: its elements become placeholders, in the count and shapes given (a
  // graph is built for a structure).
  void bind_sequence_input(const ::onnx::ValueInfoProto& v) {
    SeqValue sv = sequence_input(v, options_);
    for (size_t k = 0; k < sv.items.size(); ++k) {
      const Tensor& e = sv.items[k];
      Tensor ph = out_.graph.placeholder(str_cat(v.name(), "[", k, "]"), e.dtype(), e.shape());
      sv.items[k] = ph;
      out_.input_names.push_back(str_cat(v.name(), "[", k, "]"));
      out_.inputs.push_back(ph);
      out_.input_elem_types.push_back(0);
    }
    out_.input_layout.emplace_back(v.name(), static_cast<int64_t>(sv.items.size()));
    ctx_.bind_seq(v.name(), sv);
  }

  void bind_tensor_input(const ::onnx::ValueInfoProto& v) {
    out_.input_layout.emplace_back(v.name(), 1);
    // uint16/32/64 inputs are fed widened (int32, int64), as read_tensor_pb reads them.
    const int32_t et = v.type().tensor_type().elem_type();
    const DType dt = boundary_dtype(et, str_cat("input '", v.name(), "'"));
    ctx_.tag(v.name(), unsigned_of_onnx(et));
    Tensor t;
    if (auto c = options_.constant_inputs.find(v.name()); c != options_.constant_inputs.end()) {
      if (!c->second.is_concrete() || c->second.dtype() != dt)
        fail(kOp, "constant_inputs['", v.name(), "'] must be a concrete ", dtype_name(dt),
             " tensor");
      t = c->second;
    } else {
      t = out_.graph.placeholder(v.name(), dt, shape_from_value_info(v, options_));
    }
    ctx_.bind(v.name(), t);
    out_.input_names.push_back(v.name());
    out_.inputs.push_back(t);
    out_.input_elem_types.push_back(et);
  }

  // The inputs whose dims nothing fixed (no input_shapes, no constant), with their declared
  // shapes, for the error message.
  std::string dynamic_inputs() const {
    std::string dyn;
    for (const auto& v : g_.input()) {
      if (is_init_.count(v.name()) || options_.input_shapes.count(v.name()) ||
          options_.constant_inputs.count(v.name()))
        continue;
      const auto* ph = ctx_.lookup(v.name());
      if (ph && !ph->shape().is_static())
        dyn += str_cat(dyn.empty() ? "" : ", ", "'", v.name(), "' ", declared_shape(v));
    }
    return dyn;
  }

  const ::onnx::GraphProto& g_;
  const ImportOptions& options_;
  ImportedModel& out_;
  Ctx ctx_;
  std::unordered_set<std::string> is_init_;
};

ImportedModel import_impl(const void* data, size_t size, const ImportOptions& options,
                          const std::string& what, bool nodes, const std::string& path = "") {
  ::onnx::ModelProto m = parse_onnx(data, size, what);
  // External initializers, read and checked beside the model file (a model from bytes keeps
  // them and tensor_from_proto refuses them).
  if (nodes && !path.empty()) read_external_data(m, path, kOp);
  ImportedModel out;
  out.opset = default_opset(m, what);
  ModelImporter imp(m.graph(), options, out, size);
  imp.bind_inputs();
  if (!nodes) return out;
  imp.import_nodes_naming_dynamic_inputs();
  imp.collect_outputs();
  return out;
}

}  // namespace

ImportedModel import_model_bytes(const void* data, size_t size, const ImportOptions& options,
                                 const std::string& what) {
  return import_impl(data, size, options, what, true);
}

ImportedModel import_model(const std::string& path, const ImportOptions& options) {
  const io::MappedFile bytes(path, kOp);
  return import_impl(bytes.data(), bytes.size(), options, path, true, path);
}

ImportedModel import_model_inputs_only(const std::string& path) {
  const io::MappedFile bytes(path, kOp);
  return import_impl(bytes.data(), bytes.size(), {}, path, false);
}

std::vector<std::string> model_op_types(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ::onnx::ModelProto m;
  std::vector<std::string> ops;
  if (!f || !m.ParseFromIstream(&f)) return ops;
  for (const auto& node : m.graph().node())
    if (std::find(ops.begin(), ops.end(), node.op_type()) == ops.end())
      ops.push_back(node.op_type());
  return ops;
}

std::vector<Tensor> ImportedModel::run(Session& sess, const std::vector<Tensor>& feeds) const {
  if (feeds.size() != inputs.size()) {
    std::string names;
    for (size_t k = 0; k < inputs.size(); ++k)
      names += str_cat(k ? ", " : "", "'", input_names[k], "' ", dtype_name(inputs[k].dtype()),
                       inputs[k].shape());
    fail(kOp, "run: the model takes ", inputs.size(), " inputs (", names, "), ", feeds.size(),
         " given");
  }
  FeedDict fd;
  for (size_t k = 0; k < feeds.size(); ++k) {
    if (!inputs[k].is_symbolic()) continue;  // bound at import (constant_inputs)
    const Tensor& f = feeds[k];
    const Shape& want = inputs[k].shape();
    auto expects = [&] { return str_cat(dtype_name(inputs[k].dtype()), want); };
    if (!f.defined()) fail(kOp, "run: input '", input_names[k], "' (", expects(), ") is missing");
    if (f.dtype() != inputs[k].dtype())
      fail(kOp, "run: input '", input_names[k], "' expects ", expects(), ", given ",
           dtype_name(f.dtype()), f.shape(), " (another dtype)");
    if (f.dim() != static_cast<int64_t>(want.size()))
      fail(kOp, "run: input '", input_names[k], "' expects ", expects(), " (rank ", want.size(),
           "), given ", dtype_name(f.dtype()), f.shape(), " (rank ", f.dim(), ")");
    for (size_t d = 0; d < want.size(); ++d)
      if (want[d] >= 0 && f.size(static_cast<int64_t>(d)) != want[d])
        fail(kOp, "run: input '", input_names[k], "' expects ", expects(), ", given ",
             dtype_name(f.dtype()), f.shape(), " (dim ", d, " is ", f.size(static_cast<int64_t>(d)),
             ", the model fixes it to ", want[d], ")");
    fd.emplace_back(inputs[k], f);
  }
  std::vector<Tensor> fetches;
  std::vector<size_t> where;
  std::vector<Tensor> res(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].is_concrete()) {
      res[k] = outputs[k];
    } else {
      bool fed = false;  // an output that is an input: the feed itself
      for (size_t j = 0; j < inputs.size(); ++j)
        if (outputs[k].is_same(inputs[j])) res[k] = feeds[j], fed = true;
      if (!fed) fetches.push_back(outputs[k]), where.push_back(k);
    }
  }
  if (!fetches.empty()) {
    std::vector<Tensor> got = sess.run(fetches, fd);
    for (size_t k = 0; k < got.size(); ++k) res[where[k]] = got[k];
  }
  return res;
}

Tensor parse_tensor_pb(const void* data, size_t size, const std::string& what) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    fail(kOp, what, ": more than protobuf's 2 GiB limit");
  ::onnx::TensorProto p;
  if (!p.ParseFromArray(data, static_cast<int>(size))) fail(kOp, what, ": not a valid TensorProto");
  return tensor_from_proto(p, what, true);
}

void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name,
                     int32_t elem_type) {
  if (!t.is_concrete()) fail(kOp, "write_tensor_pb: '", name, "' is not a concrete tensor");
  Tensor c = t.is_contiguous() ? t : t.clone();
  ::onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(onnx_from_dtype(c.dtype()));
  for (int64_t d : c.shape()) p.add_dims(d);
  const Unsigned u = unsigned_of_onnx(elem_type);
  if (u != Unsigned::None) {
    // Back from the widened form: every value must fit (uint64 takes int64's bits as they are).
    if (!is_integral(c.dtype()) || c.dtype() == Bool)
      fail(kOp, "write_tensor_pb: '", name, "' is ", dtype_name(c.dtype()),
           "; an unsigned output is held as an integer tensor");
    const size_t esz = u == Unsigned::U16 ? 2 : u == Unsigned::U32 ? 4 : 8;
    const std::vector<int64_t> v = c.to_vector<int64_t>();
    std::string raw(v.size() * esz, '\0');
    for (size_t k = 0; k < v.size(); ++k) {
      const uint64_t max = u == Unsigned::U16 ? 0xFFFF : u == Unsigned::U32 ? 0xFFFFFFFF : 0;
      if (max && (v[k] < 0 || static_cast<uint64_t>(v[k]) > max))
        fail(kOp, "write_tensor_pb: '", name, "' element ", k, " is ", v[k], ", outside ",
             u == Unsigned::U16 ? "uint16" : "uint32");
      const uint64_t bits = static_cast<uint64_t>(v[k]);
      std::memcpy(raw.data() + k * esz, &bits, esz);  // ONNX raw data is little-endian
    }
    p.set_data_type(elem_type);
    p.set_raw_data(raw);
  } else {
    p.set_raw_data(std::string(static_cast<const char*>(c.raw_data()),
                               static_cast<size_t>(c.numel()) * dtype_size(c.dtype())));
  }
  std::ofstream f(path, std::ios::binary);
  if (!f || !p.SerializeToOstream(&f)) fail(kOp, "cannot write '", path, "'");
}

Tensor read_tensor_pb(const std::string& path) {
  const io::MappedFile bytes(path, kOp);
  return parse_tensor_pb(bytes.data(), bytes.size(), path);
}

}  // namespace kiln::onnx
