// The `fused` op: a group of elementwise ops that the fusion pass (kiln/passes/fusion.cpp)
// replaced by one node. Its program is a list of instructions over the group's inputs; it runs
// in one pass over memory, either through code generated for it (kiln/codegen installs the
// compiler hook) or through the tile interpreter here, where each tile of 256 elements passes
// through every instruction while it is in L1.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/registry/op_def.h"

namespace kiln::detail::fused {

/// Interpreter opcodes (Instr::code): the ops the tile interpreter has a loop of its own for
/// (`native`); kGeneric runs any other supported op's kernel on the tile.
enum Code : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kAnd,
  kOr,
  kNot,
  kWhere,
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kAbs,
  kSign,
  kErf,
  kClamp,
  kRelu,
  kLeaky,
  kSigmoid,
  kTanh,
  kGelu,
  kSilu,
  kCopy,
  kGeneric  // any other elementwise op: its kernel runs on the tile
};

/// One instruction: op (an elementwise OpDef), arguments (>= 0: group input k; < 0: the result
/// of instruction -1-k), attribute values as doubles.
struct Instr {
  const OpDef* op = nullptr;
  int code = 0;  ///< interpreter opcode, a Code (kGeneric: the op's own kernel runs on the tile)
  std::vector<int> args;
  std::vector<double> attrs;
  Attrs kernel_attrs;  ///< attrs as the op's kernel reads them (generic instructions)
};

/// Most outputs a program may have (the last instruction and up to 7 more).
constexpr int kMaxOutputs = 8;
/// Most inputs a program may have (parse refuses more).
constexpr int kMaxInputs = 64;

/// A parsed program. Text form: "mul(i0,i1);add(t0,i2);gelu(t1|0)" — iK a group input, tK the
/// result of instruction K, attributes after '|'. The last instruction is output 0; a final
/// segment ">t0,t1" makes more instructions outputs 1, 2, ... (a multi-output group: values the
/// group computes that are also needed outside it, written in the same pass).
struct Program {
  std::vector<Instr> code;
  int num_inputs = 0;
  std::vector<int> outputs;  ///< instruction index of each output; outputs[0] is the last
  std::string text;
};

/// Whether `op` can be an instruction: an elementwise op with an `expr` (what codegen emits)
/// and a kernel. Ops the interpreter has no loop of its own for (see `native`) run their
/// kernel on each tile there; they must map the group's dtype to itself and take double
/// attributes only (the fusion pass checks both; so does the fused op for hand-written
/// programs).
bool supported(const OpDef& op);
/// Whether the interpreter has its own loop for `op` (the core arithmetic, comparisons and
/// activations): adding an elementwise op needs no entry here, only its OpDef.
bool native(const OpDef& op);
/// Whether `op` yields a bool value (comparisons, logical ops): such an instruction can feed
/// others in a group but cannot be one of its outputs.
bool bool_valued(const OpDef& op);
/// Parses the text form; kiln::Error on a malformed program.
Program parse(const std::string& text);
/// Text of the program computing output `k` of `p` alone, over the inputs that reach it;
/// `inputs` gets their indices in `p` (input j of the new program is input inputs[j] of `p`).
std::string output_program(const Program& p, size_t k, std::vector<int>& inputs);
/// Text of one instruction, for the fusion pass to build programs.
std::string instr_text(const OpDef& op, const std::vector<std::string>& args, const Attrs& attrs);

/// A compiled specialization: `n` elements; in[k] points at input k's first element (inputs
/// marked scalar in the pattern are read once); out[k] at output k's.
using KernelPtr = void (*)(int64_t n, const void* const* in, void* const* out);

/// What a compiler (kiln/codegen) provides: C++ source for a program specialized to a dtype
/// and an input pattern (bit k set: input k advances with the index; clear: input k is one
/// value), compiled and loaded. Returns null when it cannot (no compiler): the interpreter runs.
/// With `later` set, a kernel that must be compiled (not in a cache) may instead be compiled in
/// the background: the hook returns null at once, the interpreter runs the calls meanwhile, and
/// the kernel is stored into *later when it is loaded (calls switch over from then on).
using CompilerHook = KernelPtr (*)(const Program& p, DType dtype,
                                   const std::vector<DType>& in_dtypes, uint64_t pattern,
                                   std::atomic<KernelPtr>* later);
void set_compiler(CompilerHook hook);
/// Switches generated code on or off for kernels specialized from now on (default: on unless
/// KILN_CODEGEN=0). Off: the tile interpreter runs. Tests use it to compare the two paths.
void set_codegen(bool on);
bool codegen_on();

/// Registers a program text (deduplicated) and returns its id: the `kid` attribute of a fused
/// node, so the kernel finds its state by index, never by hashing on the hot path.
int64_t register_program(const std::string& text);

struct Stats {
  int64_t programs = 0;         ///< distinct programs registered
  int64_t specializations = 0;  ///< (program, dtype, pattern) kernels made
  int64_t compiled = 0;         ///< of those, compiled code (the rest interpret)
};
Stats stats();

/// The `fused` OpDef (also registered under that name).
const OpDef& fused_op();
/// Runs a program on inputs through the dispatcher (the public wrapper; the fusion pass makes
/// these nodes itself) and returns its outputs. Not differentiable: fusion runs after gradients
/// are built.
std::vector<Tensor> call(const std::string& program, const std::vector<Tensor>& inputs);

}  // namespace kiln::detail::fused
