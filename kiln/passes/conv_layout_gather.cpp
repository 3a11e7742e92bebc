// Helpers of the block_layout pass (conv_layout.cpp) for what a network does to channels
// besides computing them: channel gathers (slices, concatenations of padded values, the channel
// shuffle) composed into one, and the zero padding ONNX's Pad puts before an average pool.
#include "kiln/passes/conv_layout_gather.h"

#include <algorithm>

#include "kiln/ops/handles.h"

namespace kiln::detail::conv_layout {
namespace {

const OpHandle full_op{"full"};

Ints first_channels(const Ints& ch) {
  Ints f(ch.size(), 0);
  for (size_t j = 1; j < ch.size(); ++j) f[j] = f[j - 1] + ch[j - 1];
  return f;
}

// Whether v is all zeros: a constant or full(0).
bool zeros_value(ValueRef v) {
  if (v.node->is(full_op)) return v.node->attrs.f(1) == 0.0;
  const Tensor c = const_value(v);
  if (!c.defined() || c.dtype() != Float32) return false;
  const Tensor cc = c.contiguous();
  const float* p = cc.data_ptr<float>();
  return std::all_of(p, p + cc.numel(), [](float f) { return f == 0.0f; });
}

}  // namespace

Tensor const_value(ValueRef v) {
  const Node* c = v.node;
  return c->kind == NodeKind::Constant && c->value.is_concrete() ? c->value : Tensor{};
}

// g followed by part's channels (inputs both read are listed once).
void append(Gather& g, const Gather& part) {
  const Ints pf = first_channels(part.ch);
  std::vector<size_t> at(part.in.size());
  for (size_t j = 0; j < part.in.size(); ++j) {
    size_t k = 0;
    while (k < g.in.size() &&
           !(g.in[k].node == part.in[j].node && g.in[k].index == part.in[j].index))
      ++k;
    if (k == g.in.size()) g.in.push_back(part.in[j]), g.ch.push_back(part.ch[j]);
    at[j] = k;
  }
  const Ints gf = first_channels(g.ch);
  for (int64_t i : part.idx) {
    const auto j = static_cast<size_t>(std::upper_bound(pf.begin(), pf.end(), i) - pf.begin() - 1);
    g.idx.push_back(gf[at[j]] + i - pf[j]);
  }
}

// g's channels picked by sel (output channel c is g's channel sel[c]).
Gather select(const Gather& g, const Ints& sel) {
  Gather r{g.in, g.ch, {}};
  for (int64_t c : sel) r.idx.push_back(g.idx[static_cast<size_t>(c)]);
  return r;
}

// The channel shuffle as exported (reshape [N, g, C/g, H, W], transpose of dims 1 and 2,
// reshape [N, C, H, W]) starting at `r1`, whose readers `readers` lists: the last reshape and
// the number of groups, or null.
std::pair<Node*, int64_t> channel_shuffle_at(
    const Node* r1, const Shape& xs,
    const std::unordered_map<const Node*, std::vector<Node*>>& readers,
    const std::set<const Node*>& fetched) {
  auto only = [&](const Node* n) -> Node* {
    auto it = readers.find(n);
    return !fetched.count(n) && it != readers.end() && it->second.size() == 1 ? it->second[0]
                                                                              : nullptr;
  };
  const Shape& s1 = r1->outputs[0].shape;
  if (!r1->is(ops::reshape) || s1.rank() != 5 || !s1.is_static() || s1[0] != xs[0] ||
      s1[1] * s1[2] != xs[1] || s1[3] != xs[2] || s1[4] != xs[3])
    return {nullptr, 0};
  Node* t = only(r1);
  if (!t || !((t->is(ops::permute) && t->attrs.ints(0) == Ints{0, 2, 1, 3, 4}) ||
              (t->is(ops::transpose) && std::min(t->attrs.i(0), t->attrs.i(1)) == 1 &&
               std::max(t->attrs.i(0), t->attrs.i(1)) == 2)))
    return {nullptr, 0};
  Node* r2 = only(t);
  if (!r2 || !r2->is(ops::reshape) || r2->outputs[0].shape != xs) return {nullptr, 0};
  return {r2, s1[1]};
}

// A zero padding of a 4-D value as the pad op builds it (as_strided_scatter of the value into
// zeros): the rows and columns added before and after ({top, left}, {bottom, right}), or
// nothing.
std::optional<std::pair<Ints, Ints>> zero_padding(const Node* s, const Shape& xs) {
  if (!s->is(ops::as_strided_scatter) || s->inputs.size() != 2) return std::nullopt;
  const Shape& ps = s->outputs[0].shape;
  if (!ps.is_static() || ps.rank() != 4 || ps[0] != xs[0] || ps[1] != xs[1] ||
      s->attrs.ints(0) != xs.vec() ||
      s->attrs.ints(1) != Ints{ps[1] * ps[2] * ps[3], ps[2] * ps[3], ps[3], 1})
    return std::nullopt;
  const int64_t off = s->attrs.i(2), top = off / ps[3], left = off % ps[3];
  const int64_t bottom = ps[2] - xs[2] - top, right = ps[3] - xs[3] - left;
  if (top < 0 || bottom < 0 || right < 0 || left + xs[3] > ps[3] || !zeros_value(s->inputs[0]))
    return std::nullopt;
  return std::make_pair(Ints{top, left}, Ints{bottom, right});
}

}  // namespace kiln::detail::conv_layout
