// Binding a Session plan to an arena and replaying it: the bound form (kiln/exec/session_plan.h)
// built from what a generic run recorded, and laid out again by symbol when feeds with dynamic
// dims change size (kiln/exec/sym_layout.h).
#include <algorithm>
#include <optional>

#include "kiln/core/allocator.h"
#include "kiln/core/interrupt.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/dispatch/profile.h"
#include "kiln/exec/session_plan.h"
#include "kiln/passes/memory_plan.h"

using namespace kiln::detail;

namespace kiln {

// Runs a step whose size attributes are symbolic: their values come from its trailing inputs.
// A static dim of the node's outputs that came out otherwise is an error (the graph was built
// believing it fixed), which the JIT answers by compiling the call for its concrete shape.
TensorList run_patched_step(const Session::Plan::Step& st, std::span<const Tensor> ins) {
  TensorList outs = run_node_kernel(*st.op, ins, st.attrs, st.patches);
  for (size_t o = 0; o < outs.size() && o < st.out_shapes.size(); ++o) {
    const Shape& want = st.out_shapes[o];
    const Shape& got = outs[o].shape();
    bool ok = want.rank() == got.rank();
    for (int64_t d = 0; ok && d < want.rank(); ++d) ok = want[d] < 0 || want[d] == got[d];
    if (!ok)
      fail(st.op->name.c_str(), "output ", o, " has shape ", got, " where the graph has ", want,
           ": a symbolic size changed a dim taken as static (needs a static size)");
  }
  return outs;
}

namespace {

// A dynamic plan's layout by symbol: the placement of `mp` (made at the recorded sizes) becomes
// a SymbolicLayout whose inference reproduces every recorded shape, or the plan stays bound to
// these sizes alone (b.sym null) when some shape cannot be known before running.
void bind_symbolic(const Session::Plan& p, Session::Plan::Bound& b,
                   const std::vector<std::pair<int, Tensor>>& variables,
                   const std::vector<ValueLife>& life, MemoryPlan& mp,
                   const std::vector<int>& def) {
  const size_t N = static_cast<size_t>(p.num_slots);
  std::vector<LayoutStep> steps;
  for (const auto& st : p.steps) steps.push_back({st.op, &st.attrs, &st.in, &st.out, &st.patches});
  std::vector<DType> dtypes(N, Float32);
  for (size_t s = 0; s < N; ++s) dtypes[s] = p.info[s].dtype;
  std::vector<int> fed;
  std::vector<Shape> feeds;
  for (const auto& [s, n] : p.placeholders) {
    fed.push_back(s);
    feeds.push_back(p.info[static_cast<size_t>(s)].shape);
  }
  auto sym = std::make_shared<SymbolicLayout>(std::move(steps), std::move(dtypes), p.constants,
                                              variables, std::move(fed), life, mp);
  std::vector<Shape> shapes;
  if (!sym->shapes(feeds, shapes)) return;
  for (size_t s = 0; s < N; ++s)
    if (p.info[s].seen && shapes[s] != p.info[s].shape) return;
  std::vector<int64_t> bytes(N);
  for (size_t s = 0; s < N; ++s) bytes[s] = life[s].bytes;
  mp.arena_bytes = sym->offsets(bytes, mp.offset);
  b.sym = std::move(sym);
  b.planned.assign(N, 0);
  for (size_t s = 0; s < N; ++s) b.planned[s] = mp.offset[s] >= 0;
  // Kernels that need contiguous inputs check those a generic step (a view) makes.
  b.check_contig.assign(p.steps.size(), 0);
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (b.kind[i] == Session::Plan::StepKind::Kernel && p.steps[i].op->contiguous_inputs)
      for (int x : p.steps[i].in) {
        const int d = def[static_cast<size_t>(x)];
        if (d >= 0 && b.kind[static_cast<size_t>(d)] == Session::Plan::StepKind::Generic)
          b.check_contig[i] = 1;
      }
}

// A generic step of a plan laid out by symbol made what the layout said, so the kernels after
// it write where the layout put their outputs: anything else is a bug caught here, never a
// write past an arena buffer.
void check_layout(const Session::Plan& p, const Session::Plan::Step& st, const TensorList& o) {
  for (size_t k = 0; k < st.out.size() && k < o.size(); ++k) {
    const Shape& want = p.info[static_cast<size_t>(st.out[k])].shape;
    if (o[k].defined() && o[k].shape() != want)
      fail(st.op->name.c_str(), "output ", k, " has shape ", o[k].shape(),
           " where the Session's layout for these feed shapes has ", want);
  }
}

}  // namespace

// New feed shapes for a plan laid out by symbol: every slot's shape by inference, offsets along
// the placement, the arena grown if these sizes need more; false (a generic run follows) when
// the feeds or the sizes are beyond what the layout can evaluate.
bool Session::relayout(Plan& p) {
  Plan::Bound& b = p.bound;
  if (!b.sym) return false;
  std::vector<Shape> feeds;
  for (size_t i = 0; i < p.placeholders.size(); ++i) {
    const Tensor& v = *feed_of_[i];
    if (v.dtype() != p.info[static_cast<size_t>(p.placeholders[i].first)].dtype ||
        !v.is_contiguous())
      return false;
    feeds.push_back(v.shape());
  }
  std::vector<Shape> shapes;
  if (!b.sym->shapes(feeds, shapes)) return false;
  const size_t N = static_cast<size_t>(p.num_slots);
  std::vector<int64_t> bytes(N, 0), offset;
  for (size_t s = 0; s < N; ++s) {
    auto& si = p.info[s];
    if (!si.seen) continue;
    si.shape = shapes[s];
    si.strides = contiguous_strides(si.shape);
    si.offset = 0;
    bytes[s] = si.shape.numel() * static_cast<int64_t>(dtype_size(si.dtype));
  }
  for (size_t i = 0; i < p.placeholders.size(); ++i) {
    auto& si = p.info[static_cast<size_t>(p.placeholders[i].first)];
    si.strides = feed_of_[i]->strides();
    si.offset = feed_of_[i]->offset();
  }
  const int64_t arena = b.sym->offsets(bytes, offset);
  if (arena > static_cast<int64_t>(b.arena->nbytes()))
    b.arena = std::make_shared<Storage>(static_cast<size_t>(arena));
  for (size_t s = 0; s < N; ++s) {
    if (!b.planned[s]) continue;
    const auto& si = p.info[s];
    auto impl = make_tensor_impl();
    impl->dtype = si.dtype;
    impl->shape = si.shape;
    impl->storage = b.arena;
    impl->strides = si.strides;
    impl->offset = offset[s] / static_cast<int64_t>(dtype_size(si.dtype));
    impl->recompute_contiguous();
    b.slots[s] = Tensor(std::move(impl));
  }
  // A donated feed takes a result only where their shapes agree at these sizes too.
  for (size_t s = 0; s < N; ++s) {
    const int k = b.reuse_at_bind[s];
    b.reuse[s] =
        k >= 0 && p.info[static_cast<size_t>(p.placeholders[static_cast<size_t>(k)].first)].shape ==
                      p.info[s].shape
            ? k
            : -1;
  }
  b.arena_bytes = arena;
  ++p.relayouts;
  stats_.relaid_out = true;
  return true;
}

// Builds the bound form from what the generic run recorded: step kinds, which slots need a
// fresh buffer each run (fetched results and what they alias, outputs of generic steps), and
// an arena plan for the rest over lifetimes in this plan's own step order.
void Session::bind(Plan& p) {
  Plan::Bound b;
  const size_t S = p.steps.size(), N = static_cast<size_t>(p.num_slots);
  for (const auto& si : p.info)
    if (!si.seen) return;  // some value was never computed
  b.kind.resize(S);
  b.fresh.assign(N, 0);
  // Dynamic dims in the feeds: the bound form is laid out again at each new size (relayout).
  bool dynamic = !p.has_control_flow;
  bool any_dynamic = false;
  for (const auto& [s, n] : p.placeholders) {
    const auto& si = p.info[static_cast<size_t>(s)];
    any_dynamic = any_dynamic || !n->outputs[0].shape.is_static();
    dynamic = dynamic && same_strides(si.strides, contiguous_strides(si.shape));
  }
  dynamic = dynamic && any_dynamic;
  std::vector<int> def(N, -1), last(N, -1);
  for (size_t i = 0; i < S; ++i) {
    const auto& st = p.steps[i];
    Plan::StepKind k = Plan::StepKind::Kernel;
    if (st.op->has(kSideEffect) || st.op->has(kControlFlow) || !st.patches.empty()) {
      // assign is a view that writes; a patched op resolves its sizes on every run
      k = Plan::StepKind::Generic;
    } else if (st.op->view && dynamic) {
      k = Plan::StepKind::Generic;  // its strides move with the sizes
    } else if (st.op->view) {
      k = Plan::StepKind::View;
      for (int o : st.out)
        k = p.info[static_cast<size_t>(o)].view_of >= 0 ? k : Plan::StepKind::Generic;
    } else if (!st.op->kernel) {
      k = Plan::StepKind::Generic;
    } else if (st.op->contiguous_inputs) {
      for (int x : st.in) {
        const auto& si = p.info[static_cast<size_t>(x)];
        if (!same_strides(si.strides, contiguous_strides(si.shape))) k = Plan::StepKind::Generic;
      }
    }
    b.kind[i] = k;
    for (int o : st.out) {
      def[static_cast<size_t>(o)] = static_cast<int>(i);
      if (k == Plan::StepKind::Generic) b.fresh[static_cast<size_t>(o)] = 1;
    }
    for (int x : st.in) last[static_cast<size_t>(x)] = static_cast<int>(i);
  }
  auto root = [&](int s) {
    while (p.info[static_cast<size_t>(s)].view_of >= 0) s = p.info[static_cast<size_t>(s)].view_of;
    return s;
  };
  for (int f : p.fetch_slots) {
    // Fetched results get buffers of their own (the caller keeps them); a fetched variable or
    // constant is the Session's own tensor, copied out by run() and kept in its slot (marking
    // it fresh dropped it after the first bound run: the third run of a plan fetching a
    // variable reported it dead).
    if (def[static_cast<size_t>(root(f))] >= 0) {
      b.fresh[static_cast<size_t>(f)] = 1;
      b.fresh[static_cast<size_t>(root(f))] = 1;
    }
    last[static_cast<size_t>(f)] = static_cast<int>(S);
  }
  // A view keeps the buffer it aliases alive until its own last use.
  for (size_t i = S; i-- > 0;)
    if (p.steps[i].op->view)
      for (int o : p.steps[i].out) {
        int base = p.info[static_cast<size_t>(o)].view_of;
        if (base < 0) continue;
        last[static_cast<size_t>(base)] =
            std::max(last[static_cast<size_t>(base)], last[static_cast<size_t>(o)]);
      }
  // Donation candidates: a fetched result of an in-place-capable kernel step (addmm onto its
  // input 0; an elementwise op onto any input) over a contiguous placeholder of its own shape
  // and dtype that no later step reads (views included) and no other input of the step aliases.
  b.reuse.assign(N, -1);
  {
    std::vector<int> ph_of(N, -1);
    for (size_t k = 0; k < p.placeholders.size(); ++k)
      ph_of[static_cast<size_t>(p.placeholders[k].first)] = static_cast<int>(k);
    std::vector<char> taken(p.placeholders.size(), 0);
    auto contiguous = [&](int s) {
      const auto& si = p.info[static_cast<size_t>(s)];
      return same_strides(si.strides, contiguous_strides(si.shape));
    };
    for (size_t i = 0; i < S; ++i) {
      const auto& st = p.steps[i];
      if (b.kind[i] != Plan::StepKind::Kernel || st.out.size() != 1) continue;
      const int o = st.out[0];
      const bool accumulates = st.op->has(kAccumulates);
      if (!b.fresh[static_cast<size_t>(o)] || !contiguous(o) ||
          (!accumulates && !(st.op->has(kElementwise) && st.op->has(kInplaceable))))
        continue;
      const auto& oi = p.info[static_cast<size_t>(o)];
      for (size_t j = 0; j < (accumulates ? 1 : st.in.size()); ++j) {
        const int x = st.in[j];
        const int k = ph_of[static_cast<size_t>(x)];
        if (k < 0 || taken[static_cast<size_t>(k)] ||
            last[static_cast<size_t>(x)] != static_cast<int>(i) || !contiguous(x) ||
            p.info[static_cast<size_t>(x)].dtype != oi.dtype ||
            p.info[static_cast<size_t>(x)].shape != oi.shape)
          continue;
        bool aliased = false;
        for (size_t q = 0; q < st.in.size(); ++q)
          aliased = aliased || (q != j && root(st.in[q]) == x);
        if (aliased) continue;
        b.reuse[static_cast<size_t>(o)] = k;
        taken[static_cast<size_t>(k)] = 1;
        b.any_reuse = true;
        break;
      }
    }
  }
  std::vector<ValueLife> life(N);
  for (size_t s = 0; s < N; ++s) {
    const auto& si = p.info[s];
    bool kernel_out = def[s] >= 0 && b.kind[static_cast<size_t>(def[s])] == Plan::StepKind::Kernel;
    life[s].plannable = kernel_out && !b.fresh[s];
    life[s].bytes =
        static_cast<int64_t>(si.shape.numel() * static_cast<int64_t>(dtype_size(si.dtype)));
    life[s].def = std::max(def[s], 0);
    life[s].last_use = std::max(last[s], life[s].def);
  }
  MemoryPlan mp = plan_memory(life);
  b.reuse_at_bind = b.reuse;
  if (dynamic) {
    std::vector<std::pair<int, Tensor>> variables;
    for (const auto& [s, name] : p.variables) variables.push_back({s, vars_.at(name)});
    bind_symbolic(p, b, variables, life, mp, def);
  }
  b.arena_bytes = mp.arena_bytes;
  b.unplanned_bytes = mp.unplanned_bytes;
  // The generic run's intermediates sit freed in the allocator's cache, sized for a run that
  // bound runs no longer make: hand them back before the arena comes, so that peak memory is the
  // larger of the two, not their sum (W6 graph: 154 -> 114 MiB peak RSS).
  empty_cache();
  b.arena = std::make_shared<Storage>(static_cast<size_t>(std::max<int64_t>(mp.arena_bytes, 64)));
  b.slots.assign(N, Tensor());
  b.is_view.assign(N, 0);
  for (size_t s = 0; s < N; ++s) {
    const auto& si = p.info[s];
    bool is_view = def[s] >= 0 && b.kind[static_cast<size_t>(def[s])] == Plan::StepKind::View;
    b.is_view[s] = is_view;
    if (mp.offset[s] < 0 && !is_view) continue;
    auto impl = make_tensor_impl();
    impl->dtype = si.dtype;
    impl->shape = si.shape;
    if (is_view) {  // storage re-pointed each run at the aliased buffer
      impl->strides = si.strides;
      impl->offset = si.offset;
    } else {
      impl->storage = b.arena;
      impl->strides = contiguous_strides(si.shape);
      impl->offset = mp.offset[s] / static_cast<int64_t>(dtype_size(si.dtype));
    }
    impl->recompute_contiguous();
    b.slots[s] = Tensor(std::move(impl));
  }
  for (auto& [s, v] : p.constants) b.slots[static_cast<size_t>(s)] = v;
  for (auto& [s, name] : p.variables) b.slots[static_cast<size_t>(s)] = vars_.at(name);
  // Fresh, unfetched buffers go at their last use, as in the generic run.
  b.release.assign(S, {});
  std::vector<char> fetched(N, 0);
  for (int f : p.fetch_slots) fetched[static_cast<size_t>(f)] = 1;
  // A value nobody reads (an unused second output) goes right after the step that made it
  // (last is -1 there: indexing release with it wrote out of bounds).
  for (size_t s = 0; s < N; ++s)
    if (b.fresh[s] && !fetched[s] && def[s] >= 0 && !b.is_view[s]) {
      const int at = std::min<int>(std::max(last[s], def[s]), static_cast<int>(S) - 1);
      b.release[static_cast<size_t>(at)].push_back(static_cast<int>(s));
    }
  b.ok = true;
  p.bound = std::move(b);
}

void Session::run_bound(Plan& p) {
  auto& b = p.bound;
  auto& slots = b.slots;
  for (size_t i = 0; i < p.placeholders.size(); ++i)
    slots[static_cast<size_t>(p.placeholders[i].first)] = *feed_of_[i];
  // Which donated feeds this run may write into: contiguous, and sharing storage with no other
  // feed and no variable (the result would change what another input or the Session holds).
  int64_t donated_writes = 0;
  if (b.any_reuse) {
    const size_t P = p.placeholders.size();
    if (b.donated_gen != donated_gen_) {
      b.ph_donated.assign(P, 0);
      for (size_t i = 0; i < P; ++i)
        b.ph_donated[i] = std::find(donated_.begin(), donated_.end(),
                                    p.placeholders[i].second->name) != donated_.end();
      b.donated_gen = donated_gen_;
    }
    b.donate_now.assign(P, 0);
    for (size_t i = 0; i < P; ++i) {
      if (!b.ph_donated[i]) continue;
      const Tensor& t = *feed_of_[i];
      bool ok = t.is_contiguous();
      for (size_t j = 0; ok && j < P; ++j) ok = j == i || !t.shares_storage(*feed_of_[j]);
      for (auto it = vars_.begin(); ok && it != vars_.end(); ++it)
        ok = !t.shares_storage(it->second);
      b.donate_now[i] = ok;
    }
  }
  TensorList ins, outs;
  std::optional<NoInterruptGuard> writing;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (i < p.first_write) [[likely]]
      interruption_point("Session::run");
    else if (i == p.first_write)
      writing.emplace();
    const auto& st = p.steps[i];
    switch (b.kind[i]) {
      case Plan::StepKind::View:
        for (int o : st.out) {
          const auto& si = p.info[static_cast<size_t>(o)];
          const Tensor& base = slots[static_cast<size_t>(si.view_of)];
          TensorImpl* impl = slots[static_cast<size_t>(o)].impl();
          impl->storage = base.impl()->storage;
          impl->offset = base.impl()->offset + si.view_rel;  // the base may sit in the arena
        }
        break;
      case Plan::StepKind::Kernel: {
        ins.clear();
        outs.clear();
        for (int x : st.in) ins.push_back(slots[static_cast<size_t>(x)]);
        if (b.sym && b.check_contig[i])  // a generic step's view, strided at these sizes
          for (auto& t : ins)
            if (!t.is_contiguous()) t = t.contiguous();
        for (int o : st.out) {
          Tensor& t = slots[static_cast<size_t>(o)];
          if (b.fresh[static_cast<size_t>(o)]) {
            const int k = b.reuse[static_cast<size_t>(o)];
            if (k >= 0 && b.donate_now[static_cast<size_t>(k)]) {
              t = slots[static_cast<size_t>(p.placeholders[static_cast<size_t>(k)].first)];
              ++donated_writes;
            } else {
              const auto& si = p.info[static_cast<size_t>(o)];
              t = empty(si.shape, si.dtype);
            }
          }
          outs.push_back(t);
        }
        const double t0 = profiling_enabled() ? profile_now() : 0;
        invoke_kernel(*st.op, std::span<const Tensor>(ins.data(), ins.size()),
                      std::span<Tensor>(outs.data(), outs.size()), st.attrs);
        if (profiling_enabled())
          profile_record(*st.op, profile_now() - t0,
                         std::span<const Tensor>(ins.data(), ins.size()));
        break;
      }
      case Plan::StepKind::Generic: {
        ins.clear();
        for (int x : st.in) ins.push_back(slots[static_cast<size_t>(x)]);
        const std::span<const Tensor> in_span(ins.data(), ins.size());
        TensorList o = st.patches.empty() ? run_kernel(*st.op, in_span, st.attrs)
                                          : run_patched_step(st, in_span);
        if (b.sym) check_layout(p, st, o);
        for (size_t k = 0; k < st.out.size(); ++k)
          slots[static_cast<size_t>(st.out[k])] = std::move(o[k]);
        break;
      }
    }
    for (int r : b.release[i]) slots[static_cast<size_t>(r)] = Tensor();
  }
  stats_.nodes_executed = static_cast<int64_t>(p.steps.size());
  stats_.donated_writes = donated_writes;
}

}  // namespace kiln
