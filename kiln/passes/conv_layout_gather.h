// Helpers of the conv_epilogue and block_layout passes (conv_epilogue.cpp, conv_layout.cpp):
// the node builders both use, and channel gathers and zero paddings on channel-blocked values
// (conv_layout_gather.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/graph/node.h"
#include "kiln/passes/passes.h"

namespace kiln::detail::conv_layout {

using Ints = std::vector<int64_t>;

/// The metadata of value v.
const TensorMeta& meta(ValueRef v);

/// Whether p has switch/merge nodes (the passes leave such programs alone).
bool has_control_flow(const Program& p);

/// A new node of op with one output.
std::unique_ptr<Node> op_node(const OpDef& op, Attrs attrs, std::vector<ValueRef> inputs,
                              TensorMeta out);

/// A new constant node holding v.
std::unique_ptr<Node> constant_node(const Tensor& v);

/// The conv attributes {stride, padding, dilation, groups} followed by conv2d_fused's own.
/// act: a cpu::ConvAct.
Attrs fused_attrs(const Attrs& conv, bool bias, int64_t act, int64_t in_block, int64_t out_block,
                  bool w_blocked);

/// A concrete constant's value, or an undefined tensor.
Tensor const_value(ValueRef v);

/// The channels of a blocked value as gather_channels_blocked would take them: inputs, each
/// input's channel count, and for each channel its index in the inputs' concatenation.
struct Gather {
  std::vector<ValueRef> in;
  Ints ch, idx;
};

/// g followed by part's channels (inputs both read are listed once).
void append(Gather& g, const Gather& part);

/// g's channels picked by sel (output channel c is g's channel sel[c]).
Gather select(const Gather& g, const Ints& sel);

/// The channel shuffle as exported (reshape [N, g, C/g, H, W], transpose of dims 1 and 2,
/// reshape [N, C, H, W]) starting at `r1`, a reshape of a value of NCHW shape `xs`: the last
/// reshape and the number of groups, or null (`readers`: each node's readers).
std::pair<Node*, int64_t> channel_shuffle_at(
    const Node* r1, const Shape& xs,
    const std::unordered_map<const Node*, std::vector<Node*>>& readers,
    const std::set<const Node*>& fetched);

/// A zero padding of a 4-D value of shape `xs` as the pad op builds it (as_strided_scatter of
/// the value into zeros) at node `s`: the rows and columns added before and after ({top, left},
/// {bottom, right}), or nothing.
std::optional<std::pair<Ints, Ints>> zero_padding(const Node* s, const Shape& xs);

}  // namespace kiln::detail::conv_layout
