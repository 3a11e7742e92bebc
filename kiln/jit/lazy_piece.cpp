// A piece of a lazy call (lazy_piece.h): its description, the constants' comparison and its
// compile into a graph of its own.
#include "kiln/jit/lazy_piece.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"

namespace kiln::detail::jit_engine {
namespace {

// Constants up to this many elements compare by value; larger ones (weights, tensors the host
// made) by identity, as comparing them would cost what the piece costs.
constexpr int64_t kSmallConst = 64;

size_t mix(size_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

void push_meta(std::vector<int64_t>& code, const TensorMeta& m) {
  code.push_back(static_cast<int64_t>(m.dtype));
  code.push_back(static_cast<int64_t>(m.shape.size()));
  for (size_t d = 0; d < m.shape.size(); ++d) code.push_back(m.shape[d]);
}

}  // namespace

PieceDesc describe(const Graph& g, int lo, int hi) {
  PieceDesc d;
  const auto& nodes = g.nodes();
  std::vector<int> local(static_cast<size_t>(hi - lo), -1);  // by node id - lo
  std::vector<std::pair<const Node*, int>> ext_keys;
  for (int id = lo; id < hi; ++id) {
    const Node* n = nodes[static_cast<size_t>(id)].get();
    if (n->kind != NodeKind::Op) continue;
    local[static_cast<size_t>(id - lo)] = static_cast<int>(d.ops.size());
    d.ops.push_back(n);
    d.code.push_back(reinterpret_cast<int64_t>(n->op));
    d.code.push_back(static_cast<int64_t>(n->inputs.size()));
    for (const auto& in : n->inputs) {
      const int id_in = in.node->id;
      if (in.node->kind == NodeKind::Constant) {
        auto pos = std::find(d.consts.begin(), d.consts.end(), in.node);
        d.code.push_back(-2);
        d.code.push_back(pos - d.consts.begin());
        if (pos == d.consts.end()) d.consts.push_back(in.node);
      } else if (id_in >= lo && id_in < hi && local[static_cast<size_t>(id_in - lo)] >= 0) {
        d.code.push_back(-1);
        d.code.push_back(local[static_cast<size_t>(id_in - lo)]);
        d.code.push_back(in.index);
      } else {
        auto key = std::make_pair(static_cast<const Node*>(in.node), in.index);
        auto pos = std::find(ext_keys.begin(), ext_keys.end(), key);
        int k = static_cast<int>(pos - ext_keys.begin());
        if (pos == ext_keys.end()) {
          ext_keys.push_back(key);
          d.ext.push_back(in);
        }
        d.code.push_back(-3);
        d.code.push_back(k);
      }
    }
  }
  d.code.push_back(-4);
  for (const auto& e : d.ext) push_meta(d.code, e.node->outputs[static_cast<size_t>(e.index)]);
  d.code.push_back(-5);
  for (const Node* c : d.consts) push_meta(d.code, TensorMeta{c->value.dtype(), c->value.shape()});
  size_t h = 14695981039346656037ull;
  for (int64_t v : d.code) h = mix(h, static_cast<uint64_t>(v));
  for (const Node* n : d.ops) h = mix(h, n->attrs.hash());
  d.hash = h;
  return d;
}

bool same_const(const Tensor& a, const Tensor& b) {
  if (a.impl() == b.impl()) return true;
  if (a.numel() > kSmallConst) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i]) && !(std::isnan(x[i]) && std::isnan(y[i]))) return false;
  return true;
}

void compile_piece(CompiledPiece& e, const PieceDesc& d) {
  e.pg = Graph();
  e.ext_ph.clear();
  e.const_ph.assign(d.consts.size(), Tensor());
  e.outs.assign(d.ops.size(), TensorList());
  std::vector<Tensor> ext_sym, const_sym(d.consts.size());
  for (size_t k = 0; k < d.ext.size(); ++k) {
    const TensorMeta& m = d.ext[k].node->outputs[static_cast<size_t>(d.ext[k].index)];
    e.ext_ph.push_back(e.pg.placeholder(str_cat("in", k), m.dtype, m.shape));
  }
  for (size_t k = 0; k < d.consts.size(); ++k) {
    const Tensor& c = d.consts[k]->value;
    if (e.fed[k]) {
      e.const_ph[k] = e.pg.placeholder(str_cat("fed", k), c.dtype(), c.shape());
      const_sym[k] = e.const_ph[k];
    } else {
      const_sym[k] = e.pg.constant(c);
    }
  }
  std::unordered_map<const Node*, int> local;
  for (size_t i = 0; i < d.ops.size(); ++i) local[d.ops[i]] = static_cast<int>(i);
  std::unordered_map<const Node*, int> cidx;
  for (size_t k = 0; k < d.consts.size(); ++k) cidx[d.consts[k]] = static_cast<int>(k);
  for (size_t i = 0; i < d.ops.size(); ++i) {
    const Node& n = *d.ops[i];
    TensorList ins;
    for (const auto& in : n.inputs) {
      if (in.node->kind == NodeKind::Constant) {
        ins.push_back(const_sym[static_cast<size_t>(cidx.at(in.node))]);
      } else if (auto it = local.find(in.node); it != local.end()) {
        ins.push_back(e.outs[static_cast<size_t>(it->second)][static_cast<size_t>(in.index)]);
      } else {
        size_t k = 0;
        while (!(d.ext[k] == in)) ++k;
        ins.push_back(e.ext_ph[k]);
      }
    }
    e.outs[i] =
        call_node(*n.op, std::span<const Tensor>(ins.data(), ins.size()), n.attrs, n.patches);
  }
  e.sess = std::make_unique<Session>(e.pg);
  ++e.compiles;
}

}  // namespace kiln::detail::jit_engine
