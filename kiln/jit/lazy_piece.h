// A piece of a lazy call (lazy.h): its structure as recorded, which the cache of compiled pieces
// keys on (ops, attributes, input wiring, input and constant dtypes and shapes), and its compiled
// form, a graph of its own run by a Session. Internal to the JIT engine.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/node.h"

namespace kiln::detail::jit_engine {

// One piece as recorded in a call's graph: its ops in order, what they read from outside the
// piece (arguments, values of earlier pieces) and the constants they use.
struct PieceDesc {
  std::vector<int64_t> code;  // op identities, input wiring, input and constant metas
  std::vector<const Node*> ops;
  std::vector<ValueRef> ext;
  std::vector<const Node*> consts;
  size_t hash = 0;
};

/// The piece of `g`'s ops whose ids are in [lo, hi), described; `hash` covers code and attributes.
PieceDesc describe(const Graph& g, int lo, int hi);

/// Whether a constant keeps its value: small ones compare by value (NaN equal to NaN), larger
/// ones by identity.
bool same_const(const Tensor& a, const Tensor& b);

// A piece structure of the cache: what it was compiled with, what it keeps for later pieces,
// and its compiled form.
struct CompiledPiece {
  std::vector<int64_t> code;
  std::vector<Attrs> attrs;
  // Per constant: the value compiled in, or whether it is fed (seen to change).
  std::vector<Tensor> baked;
  std::vector<char> fed;
  // (op, output) values later pieces or the outputs read: fetched on every run.
  std::set<std::pair<int, int>> keep;
  std::string where;  // the host read that ends the piece ("" when it ends the function)
  int index = 0;      // in the cache's order
  int compiles = 0;
  int64_t runs = 0;
  bool interpret = false;
  std::string interpret_reason;
  int64_t num_ops = 0;
  // The compiled form: a graph of its own with placeholders for the outside values and the fed
  // constants, run by a Session (optimizer, fusion, memory plan as any static graph).
  Graph pg;
  std::unique_ptr<Session> sess;
  std::vector<Tensor> ext_ph, const_ph;
  std::vector<TensorList> outs;  // per op, its symbolic outputs in pg
};

/// (Re)builds `e`'s graph and Session from the piece `d`: placeholders for what it reads from
/// outside and for the constants `e.fed` marks, the other constants compiled in.
void compile_piece(CompiledPiece& e, const PieceDesc& d);

}  // namespace kiln::detail::jit_engine
