// The op handles' names: the one place outside the op families that spells op names.
#include "kiln/ops/handles.h"

namespace kiln::detail {
namespace {
// Constant-initialized, so it is null before any handle's constructor runs.
const OpHandle* g_handles = nullptr;
}  // namespace

OpHandle::OpHandle(const char* name) : name_(name), next_(g_handles) { g_handles = this; }

const OpDef& OpHandle::resolve() const {
  const OpDef& d = OpRegistry::get().at(name_);
  def_.store(&d, std::memory_order_release);
  return d;
}

namespace ops {
const OpHandle add{"add"}, sub{"sub"}, mul{"mul"}, div{"div"}, neg{"neg"};
const OpHandle cast{"cast"}, clone{"clone"}, expand{"expand"}, expand_as{"expand_as"},
    reshape{"reshape"}, transpose{"transpose"}, permute{"permute"}, cat{"cat"};
const OpHandle matmul{"matmul"}, addmm{"addmm"};
const OpHandle relu{"relu"}, conv2d{"conv2d"}, conv2d_grad_input{"conv2d_grad_input"},
    conv2d_grad_weight{"conv2d_grad_weight"}, conv2d_fused{"conv2d_fused"},
    conv2d_fused_add{"conv2d_fused_add"}, max_pool2d{"max_pool2d"},
    max_pool2d_blocked{"max_pool2d_blocked"};
const OpHandle as_strided{"as_strided"}, as_strided_scatter{"as_strided_scatter"};
const OpHandle sym_size{"sym_size"};
}  // namespace ops

std::vector<const OpHandle*> all_op_handles() {
  std::vector<const OpHandle*> all;
  for (const OpHandle* h = g_handles; h; h = h->next_) all.push_back(h);
  return all;
}

}  // namespace kiln::detail
