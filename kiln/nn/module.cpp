// Module bookkeeping: registration, recursive traversal with dotted names, state dicts and
// parameter swapping.
#include "kiln/nn/module.h"

#include <algorithm>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"

using namespace kiln::detail;

namespace kiln::nn {

namespace {
thread_local BufferWriteHook t_buffer_write_hook = nullptr;
}  // namespace

void assign_buffer(Tensor& slot, const Tensor& value) {
  // Under a trace a concrete new value (a counter bumped with concrete ops) is state too.
  if (t_buffer_write_hook && value.defined() && t_buffer_write_hook(slot, value)) return;
  slot = value;
}

BufferWriteHook set_buffer_write_hook(BufferWriteHook h) {
  BufferWriteHook p = t_buffer_write_hook;
  t_buffer_write_hook = h;
  return p;
}

void Module::register_parameter(const std::string& name, Tensor* slot) {
  if (!slot || !slot->defined())
    fail("Module::register_parameter", "parameter '", name, "' of ", type_name(), " is undefined");
  for (auto& [n, s] : params_)
    if (n == name) fail("Module::register_parameter", "duplicate parameter name '", name, "'");
  slot->requires_grad_(true);
  params_.push_back({name, slot});
}

void Module::register_buffer(const std::string& name, Tensor* slot) {
  if (!slot) fail("Module::register_buffer", "buffer '", name, "' of ", type_name(), " is null");
  for (auto& [n, s] : buffers_)
    if (n == name) fail("Module::register_buffer", "duplicate buffer name '", name, "'");
  buffers_.push_back({name, slot});
}

void Module::register_module(const std::string& name, Module* child) {
  if (!child) fail("Module::register_module", "child '", name, "' is null");
  // A module inside its own subtree would make every traversal (parameters(), state_dict(),
  // train()) recurse until the stack overflows.
  if (child->contains(this))
    fail("Module::register_module", "child '", name, "' (", child->type_name(), ") would contain ",
         type_name(), " itself: modules cannot form a cycle");
  for (auto& [n, c] : children_)
    if (n == name) fail("Module::register_module", "duplicate child name '", name, "'");
  children_.push_back({name, child});
}

bool Module::contains(const Module* m) const {
  if (m == this) return true;
  for (const auto& [n, c] : children_)
    if (c->contains(m)) return true;
  return false;
}

void Module::collect(const std::string& prefix, bool params,
                     std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& [n, s] : params ? params_ : buffers_) out.push_back({prefix + n, s});
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, out);
}

std::vector<std::pair<std::string, std::vector<Tensor*>>> Module::slot_groups(bool params) const {
  std::vector<std::pair<std::string, Tensor*>> v;
  collect("", params, v);
  std::vector<std::pair<std::string, std::vector<Tensor*>>> out;
  // Same slot (a shared module) or same tensor (a tied weight): one group. An unset buffer has
  // no identity beyond its slot.
  std::unordered_map<const void*, size_t> group_of;
  for (auto& [n, slot] : v) {
    const void* key = slot->defined() ? static_cast<const void*>(slot->impl()) : slot;
    auto [it, fresh] = group_of.try_emplace(key, out.size());
    if (fresh) out.push_back({n, {}});
    auto& g = out[it->second].second;
    if (std::find(g.begin(), g.end(), slot) == g.end()) g.push_back(slot);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, g] : slot_groups(true)) out.push_back({n, *g[0]});
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, g] : slot_groups(false)) out.push_back({n, *g[0]});
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers()) out.push_back(t);
  return out;
}

std::vector<std::vector<Tensor*>> Module::parameter_slots() {
  std::vector<std::vector<Tensor*>> out;
  for (auto& [n, g] : slot_groups(true)) out.push_back(std::move(g));
  return out;
}

std::vector<std::vector<Tensor*>> Module::buffer_slots() {
  std::vector<std::vector<Tensor*>> out;
  for (auto& [n, g] : slot_groups(false)) out.push_back(std::move(g));
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const { return children_; }

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void Module::to(DType dtype) {
  if (!is_floating(dtype))
    fail("Module::to", type_name(), " can only be cast to a floating dtype, got ",
         dtype_name(dtype));
  NoGradGuard ng;
  // One cast per tensor, given to every slot that holds it (tied weights stay tied).
  for (auto& g : parameter_slots())
    if (is_floating(g[0]->dtype()) && g[0]->dtype() != dtype) {
      Tensor t = g[0]->detach().to(dtype).requires_grad_(true);
      for (Tensor* slot : g) *slot = t;
    }
  for (auto& g : buffer_slots())
    if (g[0]->defined() && is_floating(g[0]->dtype()) && g[0]->dtype() != dtype) {
      Tensor t = g[0]->detach().to(dtype);
      for (Tensor* slot : g) *slot = t;
    }
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> ps, bs;
  collect("", true, ps);
  collect("", false, bs);
  StateDict sd;
  for (auto& [n, s] : ps) sd.push_back({n, *s});
  // An unset buffer holds no state (PyTorch leaves None buffers out too).
  for (auto& [n, s] : bs)
    if (s->defined()) sd.push_back({n, *s});
  return sd;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> all, mine;
  collect("", true, all);
  collect("", false, all);
  for (auto& e : all)
    if (e.second->defined()) mine.push_back(e);
  // Validate everything first so that a bad dict changes nothing.
  for (size_t i = 0; i < sd.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (sd[i].first == sd[j].first)
        fail("load_state_dict", type_name(), ": duplicate key '", sd[i].first, "' (entries ", j,
             " and ", i, ")");
  std::vector<std::pair<Tensor*, const Tensor*>> todo;
  for (auto& [name, slot] : mine) {
    const Tensor* found = nullptr;
    for (auto& [n, t] : sd)
      if (n == name) found = &t;
    if (!found) {
      if (strict) fail("load_state_dict", type_name(), ": missing key '", name, "'");
      continue;
    }
    if (!found->defined() || found->shape() != slot->shape() || found->dtype() != slot->dtype())
      fail("load_state_dict", type_name(), ": '", name, "' expects ", slot->dtype(), slot->shape(),
           ", got ", found->defined() ? dtype_name(found->dtype()) : "undefined",
           found->defined() ? found->shape() : Shape{});
    // copy_ would refuse a graph value only after the earlier entries were written.
    if (!found->is_concrete())
      fail("load_state_dict", type_name(), ": '", name, "' is a symbolic ", found->dtype(),
           found->shape(), " (a graph value); expected a concrete tensor");
    todo.push_back({slot, found});
  }
  if (strict)
    for (auto& [n, t] : sd) {
      bool known = false;
      for (auto& [name, slot] : mine) known = known || name == n;
      if (!known) fail("load_state_dict", type_name(), ": unexpected key '", n, "'");
    }
  NoGradGuard ng;
  for (auto& [slot, src] : todo) slot->copy_(*src);
}

ParameterSwap::ParameterSwap(Module& m, const std::vector<Tensor>& params,
                             const std::vector<Tensor>& buffers) {
  std::vector<std::vector<Tensor*>> ps = m.parameter_slots();
  if (params.size() != ps.size())
    fail("ParameterSwap", m.type_name(), " has ", ps.size(), " parameters, got ", params.size());
  std::vector<std::vector<Tensor*>> bs;
  if (!buffers.empty()) {
    bs = m.buffer_slots();
    if (buffers.size() != bs.size())
      fail("ParameterSwap", m.type_name(), " has ", bs.size(), " buffers, got ", buffers.size());
  }
  // Layers read their parameters' shapes and dtypes; an undefined one has neither.
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].defined())
      fail("ParameterSwap", m.type_name(), ": parameter ", i, " is undefined");
  // Every slot of a shared or tied tensor gets the same replacement.
  for (size_t i = 0; i < ps.size(); ++i)
    for (Tensor* slot : ps[i]) {
      slots_.push_back(slot);
      saved_.push_back(*slot);
      *slot = params[i];
    }
  for (size_t i = 0; i < bs.size(); ++i)
    for (Tensor* slot : bs[i]) {
      slots_.push_back(slot);
      saved_.push_back(*slot);
      *slot = buffers[i];
    }
}

ParameterSwap::~ParameterSwap() {
  for (size_t i = 0; i < slots_.size(); ++i) *slots_[i] = saved_[i];
}

}  // namespace kiln::nn
