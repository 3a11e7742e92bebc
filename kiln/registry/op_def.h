// OpDef: the one definition of a primitive op (name, attributes, inference, kernel, gradient rule,
// traits, scalar expression). Eager dispatch, graph building, tracing, autodiff, passes and
// printers all read the registry; nothing else lists ops.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::detail {

using AttrValue = std::variant<int64_t, double, bool, std::vector<int64_t>, std::string>;

/// A missing attribute or one of the wrong type. The dispatcher and graph builder catch it and
/// raise a kiln::Error that names the op and its attributes.
class AttrError : public Error {
 public:
  using Error::Error;
};

/// Positional attribute values; the names live in OpDef::attr_names. The typed accessors check
/// the index and the type (AttrError), so an op called through the registry with wrong
/// attributes raises instead of reading past them.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<AttrValue> v) : v_(v) {}
  size_t size() const { return v_.size(); }
  const AttrValue& operator[](size_t k) const { return v_.at(k); }
  int64_t i(size_t k) const { return get<int64_t>(k, "an integer"); }
  double f(size_t k) const { return get<double>(k, "a double"); }
  bool b(size_t k) const { return get<bool>(k, "a bool"); }
  const std::vector<int64_t>& ints(size_t k) const {
    return get<std::vector<int64_t>>(k, "an integer list");
  }
  const std::string& s(size_t k) const { return get<std::string>(k, "a string"); }
  void push(AttrValue v) { v_.push_back(std::move(v)); }
  /// Writes an integer at attribute k (elem < 0) or at element `elem` of its integer list: the
  /// executor resolving a symbolic size (SizePatch) before it runs the op.
  void set_int(size_t k, int elem, int64_t v);
  bool operator==(const Attrs& o) const { return v_ == o.v_; }
  size_t hash() const;
  std::string str(const std::vector<std::string>& names) const;

 private:
  template <typename T>
  const T& get(size_t k, const char* what) const {
    if (k >= v_.size() || !std::holds_alternative<T>(v_[k])) [[unlikely]]
      bad(k, what);
    return std::get<T>(v_[k]);
  }
  [[noreturn]] void bad(size_t k, const char* what) const;
  std::vector<AttrValue> v_;
};

/// A size attribute that is symbolic in a graph (kiln/ops/sym_int.h): the node takes its value
/// as an extra trailing input (a 0-d int64 computed in the graph from the sizes of other values)
/// and the executor writes it into attribute `attr` (element `elem` of an integer list, or the
/// integer itself when elem < 0) before each run of the op. The attribute keeps the value it
/// had while tracing (its hint).
struct SizePatch {
  int16_t attr = 0;
  int16_t elem = -1;
  bool operator==(const SizePatch& o) const { return attr == o.attr && elem == o.elem; }
};

struct TensorMeta {
  DType dtype = Float32;
  Shape shape;
};

using TensorList = SmallVec<Tensor, 4>;
using MetaList = SmallVec<TensorMeta, 4>;

/// What a gradient rule sees. Rules are written with Kiln ops, so the same rule serves eager
/// backward, symbolic gradients(), JIT backward and gradients of gradients.
struct GradCtx {
  const struct OpDef& op;
  const Attrs& attrs;
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  /// Gradient w.r.t. each output; zeros where nothing flowed (undefined for non-float outputs).
  std::span<const Tensor> grads;
  /// Which inputs need a gradient (rules may skip the others and return undefined).
  std::span<const bool> needs;
  /// Per output: whether a gradient really flowed into it (false: grads[k] is materialized
  /// zeros). Empty when the caller does not say; flowed() is then true.
  std::span<const bool> flows = {};
  /// Eager backward: each input's version when it was saved. in(k) refuses an input written in
  /// place since (torch's saved-variable check, made when a rule reads the value).
  std::span<const uint32_t> input_versions = {};
  /// A graph node with symbolic size attributes (SizePatch): the patches and their values (0-d
  /// int64 symbolic tensors). `attrs` holds the traced values; a rule that builds ops from size
  /// attributes passes these on (call_patched) so its ops resize with the forward's.
  std::span<const SizePatch> patches = {};
  std::span<const Tensor> sizes = {};
  const Tensor& in(size_t k) const {
    if (k < input_versions.size() && inputs[k].is_concrete() &&
        inputs[k].impl()->version() != input_versions[k]) [[unlikely]]
      stale_input(k);
    return inputs[k];
  }
  [[noreturn]] void stale_input(size_t k) const;
  const Tensor& out(size_t k) const { return outputs[k]; }
  const Tensor& g(size_t k = 0) const { return grads[k]; }
  bool need(size_t k) const { return needs[k]; }
  bool flowed(size_t k) const { return flows.empty() || flows[k]; }
};

enum OpTrait : uint32_t {
  kElementwise = 1u << 0,  ///< output[i] depends on input[i] (after broadcasting) only
  kFusable = 1u << 1,      ///< may join an elementwise fusion group
  kInplaceable = 1u << 2,  ///< output may reuse an input's buffer
  kControlFlow = 1u << 3,  ///< switch/merge and friends: deadness semantics
  kSideEffect = 1u << 4,   ///< never pruned or CSE'd (print, assign)
  kView = 1u << 5,         ///< output aliases input 0 (no copy)
  kRandom = 1u << 6,       ///< draws from the generator: never CSE'd or folded
  kReduction = 1u << 7,    ///< reduces over dims (fusion may end a group with it)
  /// Some calls need a static size (squeeze of a dim that may or may not be 1): its inference
  /// refuses a dynamic dim it cannot handle with an error saying it "needs a static size", and
  /// the JIT then compiles the call for the concrete shape. The mode-agreement suite checks
  /// both; ops without this trait must take dynamic dims.
  kStaticShapes = 1u << 8,
  /// Switch: output 0 is live when the predicate is false, output 1 when true; the other is dead.
  kSwitch = 1u << 9,
  /// Merge: forwards whichever input is live (it alone runs with dead inputs).
  kMerge = 1u << 10,
  /// out = f(input 0, ...) where the kernel reads each element of input 0 before it writes that
  /// element of out (addmm's beta * input + a @ b): out may take input 0's buffer (donation).
  kAccumulates = 1u << 11,
  /// Writes a variable (assign): a Session schedules it after the other reads of that variable.
  kWritesVariable = 1u << 12,
  /// Its gradient rule takes the gradient of an output no gradient reached as undefined
  /// (GradCtx::flows false) instead of zeros, so autograd does not materialize them: jit_call,
  /// whose hidden outputs (saved activations) never get one.
  kUndefinedGradOutputs = 1u << 13,
  /// The output is the inputs laid end to end along the dim in attr 0 (cat): a Session may have
  /// the producers write their pieces in place, and the kernel then skips a piece whose data
  /// already sits where it goes.
  kConcat = 1u << 14,
};

/// What an autocast scope (kiln/dispatch/autocast.h) does to an op's floating inputs before it
/// runs, as torch.autocast's op lists on CPU: the dispatcher reads this field.
enum class AutocastPolicy : uint8_t {
  kNone,     ///< runs in the (promoted) dtype of its inputs
  kLower,    ///< float32 inputs cast to the autocast dtype (matmul, addmm, conv, attention)
  kFloat32,  ///< lower-precision inputs cast to float32 (losses, prod: precision-sensitive)
};

using InferFn = MetaList (*)(std::span<const Tensor> in, const Attrs& attrs);
using KernelFn = void (*)(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs);
using ViewFn = TensorList (*)(std::span<const Tensor> in, const Attrs& attrs);
using GradFn = TensorList (*)(const GradCtx& ctx);

struct OpDef {
  std::string name;
  int num_inputs = 1;   ///< -1: variadic
  int num_outputs = 1;  ///< -1: decided by infer
  std::vector<std::string> attr_names;
  uint32_t traits = 0;
  InferFn infer = nullptr;
  KernelFn kernel = nullptr;  ///< writes into outputs allocated from infer's metas
  ViewFn view = nullptr;      ///< for kView ops: builds outputs aliasing the input
  GradFn grad = nullptr;      ///< null: not differentiable
  /// For elementwise ops: the scalar expression fusion and codegen use; $0, $1 are inputs,
  /// @0, @1 attributes, e.g. "($0 + $1)".
  std::string expr;
  /// Inputs handed to the kernel are made contiguous first (once, by the dispatcher).
  bool contiguous_inputs = false;
  /// What autocast does to its floating inputs (float64 inputs are never cast).
  AutocastPolicy autocast = AutocastPolicy::kNone;
  std::string doc;
  /// The reduced dtypes (float16, bfloat16, int8, uint8, int16: dtype_bit of each) the kernel
  /// handles itself. For the others, invoke_kernel runs it on inputs cast to compute_dtype
  /// (float32 / int32) and casts its outputs down to the inferred dtypes, so every kernel takes
  /// every dtype; a native kernel only makes it faster.
  uint32_t native_dtypes = 0;
  /// Bit k set: a backward after input k was modified in place is refused before the rule runs.
  /// Rules that read inputs only through GradCtx::in clear the bits: in() then refuses a stale
  /// input only when the rule reads it, as torch saves only what a gradient needs (add saves
  /// nothing, mul saves the other operand): `x[x > 0] = 0` after `y = x * 3` stays
  /// differentiable.
  uint32_t grad_reads_inputs = ~0u;

  bool reads_input(size_t k) const { return k >= 32 || ((grad_reads_inputs >> k) & 1u) != 0; }
  bool has(OpTrait t) const { return (traits & t) != 0; }
};

class OpRegistry {
 public:
  static OpRegistry& get();
  /// Adds an op; a duplicate name is an error. The returned reference is stable.
  const OpDef& add(OpDef def);
  const OpDef* find(std::string_view name) const;
  const OpDef& at(std::string_view name) const;
  std::vector<const OpDef*> all() const;

 private:
  std::vector<std::unique_ptr<OpDef>> ops_;
};

/// Raises naming the op when it declares attribute names and `a` has another count of values.
void check_attr_count(const OpDef& op, const Attrs& a);
/// A kiln::Error naming the op, its attributes and what `e` found wrong with them.
[[noreturn]] void attr_fail(const OpDef& op, const Attrs& a, const AttrError& e);
/// Runs f() (inference, a kernel, a view), turning an AttrError into attr_fail's error.
template <typename F>
decltype(auto) with_attr_check(const OpDef& op, const Attrs& a, F&& f) {
  try {
    return f();
  } catch (const AttrError& e) {
    attr_fail(op, a, e);
  }
}

/// Registers an op at static-init time: `static const OpDef& kAdd = def_op({...});`
inline const OpDef& def_op(OpDef d) { return OpRegistry::get().add(std::move(d)); }

}  // namespace kiln::detail
