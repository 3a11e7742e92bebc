// The `fused` op's program text (kiln/ops/fused.h): which ops may be instructions, the text of
// one instruction as the fusion pass writes it, and the parser the op runs once per new program.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <unordered_map>

#include "kiln/ops/fused.h"
#include "kiln/ops/op_util.h"

namespace kiln::detail::fused {
namespace {

const std::unordered_map<std::string, int>& codes() {
  static const std::unordered_map<std::string, int> m = {
      {"add", kAdd},         {"sub", kSub},         {"mul", kMul},       {"div", kDiv},
      {"pow", kPow},         {"maximum", kMax},     {"minimum", kMin},   {"lt", kLt},
      {"le", kLe},           {"gt", kGt},           {"ge", kGe},         {"eq", kEq},
      {"ne", kNe},           {"logical_and", kAnd}, {"logical_or", kOr}, {"logical_not", kNot},
      {"where", kWhere},     {"neg", kNeg},         {"exp", kExp},       {"log", kLog},
      {"sqrt", kSqrt},       {"rsqrt", kRsqrt},     {"abs", kAbs},       {"sign", kSign},
      {"erf", kErf},         {"clamp", kClamp},     {"relu", kRelu},     {"leaky_relu", kLeaky},
      {"sigmoid", kSigmoid}, {"tanh", kTanh},       {"gelu", kGelu},     {"silu", kSilu},
      {"clone", kCopy}};
  return m;
}

}  // namespace

bool native(const OpDef& op) { return codes().count(op.name) != 0; }

bool supported(const OpDef& op) {
  if (native(op)) return true;
  return op.has(kElementwise) && op.has(kFusable) && op.kernel && !op.expr.empty() &&
         op.num_outputs == 1 && op.num_inputs >= 1 && op.num_inputs <= 3;
}

bool bool_valued(const OpDef& op) {
  static const std::set<std::string> names = {"lt", "le",          "gt",         "ge",         "eq",
                                              "ne", "logical_and", "logical_or", "logical_not"};
  return names.count(op.name) != 0;
}

std::string instr_text(const OpDef& op, const std::vector<std::string>& args, const Attrs& attrs) {
  std::string s = op.name;
  s += '(';
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) s += ',';
    s += args[i];
  }
  for (size_t i = 0; i < attrs.size(); ++i) {
    double v = 0;
    if (auto* d = std::get_if<double>(&attrs[i]))
      v = *d;
    else if (auto* b = std::get_if<bool>(&attrs[i]))
      v = *b ? 1 : 0;
    else if (auto* n = std::get_if<int64_t>(&attrs[i]))
      v = static_cast<double>(*n);
    else
      fail("fused", "op ", op.name, " has a non-numeric attribute");
    char tmp[40];
    std::snprintf(tmp, sizeof tmp, "%.17g", v);
    s += (i ? "," : "|");
    s += tmp;
  }
  return s + ")";
}

std::string output_program(const Program& p, size_t k, std::vector<int>& inputs) {
  const int root = p.outputs.at(k);
  std::vector<char> need(p.code.size(), 0);
  need[static_cast<size_t>(root)] = 1;
  for (int i = root; i >= 0; --i)
    if (need[static_cast<size_t>(i)])
      for (int a : p.code[static_cast<size_t>(i)].args)
        if (a < 0) need[static_cast<size_t>(-1 - a)] = 1;
  std::vector<int> temp(p.code.size(), -1), input_of(static_cast<size_t>(p.num_inputs), -1);
  inputs.clear();
  std::string text;
  int t = 0;
  for (int i = 0; i <= root; ++i) {
    if (!need[static_cast<size_t>(i)]) continue;
    const Instr& ins = p.code[static_cast<size_t>(i)];
    std::vector<std::string> args;
    for (int a : ins.args) {
      if (a < 0) {
        args.push_back(str_cat("t", temp[static_cast<size_t>(-1 - a)]));
        continue;
      }
      int& j = input_of[static_cast<size_t>(a)];
      if (j < 0) {
        j = static_cast<int>(inputs.size());
        inputs.push_back(a);
      }
      args.push_back(str_cat("i", j));
    }
    if (!text.empty()) text += ";";
    text += instr_text(*ins.op, args, ins.kernel_attrs);
    temp[static_cast<size_t>(i)] = t++;
  }
  return text;
}

namespace {

// The attribute values as the op's kernel reads them (doubles, in order).
Attrs kernel_attrs(const std::vector<double>& values) {
  Attrs a;
  for (double v : values) a.push(v);
  return a;
}

// Reads a program's text left to right; an error names the offset of the piece being read.
struct Parser {
  const std::string& text;
  size_t pos = 0;
  Program p;

  [[noreturn]] void bad(const std::string& why) const {
    fail("fused", "malformed program at offset ", pos, " (", why, "): '", text, "'");
  }

  // The last segment, ">t1,t3": instructions that are outputs 1, 2, ... as well.
  std::vector<int> extra_outputs() const {
    std::vector<int> extra;
    size_t a = pos + 1;
    while (a <= text.size()) {
      size_t c = text.find(',', a);
      std::string tok = text.substr(a, c == std::string::npos ? std::string::npos : c - a);
      if (tok.size() < 2 || tok[0] != 't' ||
          tok.find_first_not_of("0123456789", 1) != std::string::npos)
        bad(str_cat("bad output '", tok, "'"));
      extra.push_back(std::stoi(tok.substr(1)));
      if (c == std::string::npos) break;
      a = c + 1;
    }
    return extra;
  }

  // "i0,t1": group inputs and earlier instructions' results.
  void read_args(const std::string& args, Instr& ins) {
    size_t a = 0;
    while (a < args.size()) {
      size_t c = args.find(',', a);
      std::string tok = args.substr(a, c == std::string::npos ? std::string::npos : c - a);
      if (tok.size() < 2 || (tok[0] != 'i' && tok[0] != 't'))
        bad(str_cat("bad argument '", tok, "'"));
      int v = std::stoi(tok.substr(1));
      if (tok[0] == 'i') {
        ins.args.push_back(v);
        p.num_inputs = std::max(p.num_inputs, v + 1);
      } else {
        if (v < 0 || v >= static_cast<int>(p.code.size())) bad(str_cat("forward reference ", tok));
        ins.args.push_back(-1 - v);
      }
      if (c == std::string::npos) break;
      a = c + 1;
    }
  }

  // One "op(args|attrs)" instruction, then its ';'.
  void instruction() {
    size_t lp = text.find('(', pos), rp = text.find(')', pos);
    if (lp == std::string::npos || rp == std::string::npos || rp < lp) bad("expected op(...)");
    Instr ins;
    std::string name = text.substr(pos, lp - pos);
    auto it = codes().find(name);
    ins.op = OpRegistry::get().find(name);
    if (!ins.op || !supported(*ins.op)) bad(str_cat("unknown op '", name, "'"));
    ins.code = it != codes().end() ? it->second : kGeneric;
    std::string body = text.substr(lp + 1, rp - lp - 1);
    size_t bar = body.find('|');
    read_args(body.substr(0, bar), ins);
    const std::string attrs = bar == std::string::npos ? "" : body.substr(bar + 1);
    for (size_t a = 0; a < attrs.size();) {
      size_t c = attrs.find(',', a);
      ins.attrs.push_back(
          std::stod(attrs.substr(a, c == std::string::npos ? std::string::npos : c - a)));
      if (c == std::string::npos) break;
      a = c + 1;
    }
    size_t want =
        ins.op->num_inputs < 0 ? ins.args.size() : static_cast<size_t>(ins.op->num_inputs);
    if (ins.args.size() != want) bad(str_cat(name, " takes ", want, " arguments"));
    if (ins.attrs.size() != ins.op->attr_names.size())
      bad(str_cat(name, ": wrong attribute count"));
    ins.kernel_attrs = kernel_attrs(ins.attrs);
    p.code.push_back(std::move(ins));
    pos = rp + 1;
    if (pos < text.size()) {
      if (text[pos] != ';') bad("expected ';'");
      ++pos;
    }
  }

  // Output 0 is the last instruction; the extra ones come before it, once each, not bool.
  void set_outputs(const std::vector<int>& extra) {
    const int last = static_cast<int>(p.code.size()) - 1;
    p.outputs = {last};
    for (int t : extra) {
      if (t < 0 || t >= last) bad(str_cat("output t", t, " is not an instruction before the last"));
      if (std::find(p.outputs.begin(), p.outputs.end(), t) != p.outputs.end())
        bad(str_cat("output t", t, " listed twice"));
      // Comparisons are bool values inside generated code; outputs share the group's float
      // dtype.
      if (bool_valued(*p.code[static_cast<size_t>(t)].op))
        bad(str_cat("output t", t, " is a ", p.code[static_cast<size_t>(t)].op->name));
      p.outputs.push_back(t);
    }
    if (static_cast<int>(p.outputs.size()) > kMaxOutputs)
      bad(str_cat("more than ", kMaxOutputs, " outputs"));
  }
};

}  // namespace

Program parse(const std::string& text) {
  Parser ps{text};
  ps.p.text = text;
  std::vector<int> extra;
  while (ps.pos < text.size()) {
    if (text[ps.pos] == '>') {  // the extra outputs, last segment
      extra = ps.extra_outputs();
      ps.pos = text.size();
      break;
    }
    ps.instruction();
  }
  if (ps.p.code.empty()) ps.bad("empty");
  if (ps.p.num_inputs > kMaxInputs) ps.bad(str_cat("more than ", kMaxInputs, " inputs"));
  ps.set_outputs(extra);
  return std::move(ps.p);
}

}  // namespace kiln::detail::fused
