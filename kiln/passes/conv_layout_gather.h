// Helpers of the block_layout pass (conv_layout.cpp): channel gathers and zero paddings on
// channel-blocked values (conv_layout_gather.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/graph/node.h"

namespace kiln::detail::conv_layout {

using Ints = std::vector<int64_t>;

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
