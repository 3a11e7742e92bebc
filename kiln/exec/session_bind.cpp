// Binding a Session plan to an arena and replaying it: the bound form (kiln/exec/session_plan.h)
// built from what a generic run recorded, and laid out again by symbol when feeds with dynamic
// dims change size (kiln/exec/sym_layout.h).
#include <algorithm>
#include <map>
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

// Whether a plan's feeds have dynamic dims it can follow by symbol (relayout) instead of
// rebinding at each new size: plain contiguous feeds, and no switch/merge.
bool lays_out_by_symbol(const Session::Plan& p) {
  if (p.has_control_flow) return false;
  bool any_dynamic = false;
  for (const auto& [s, n] : p.placeholders) {
    const auto& si = p.info[static_cast<size_t>(s)];
    any_dynamic = any_dynamic || !n->outputs[0].shape.is_static();
    if (!same_strides(si.strides, contiguous_strides(si.shape))) return false;
  }
  return any_dynamic;
}

// Session::bind's steps over one plan, filling a Bound. def / last: per slot, the step that
// makes it (-1: fed, constant or variable) and the last step that reads it (S: kept past the
// run); the step kinds, the fetched results and the views refine them before they become the
// arena plan's lifetimes.
class Binder {
 public:
  using Plan = Session::Plan;
  using StepKind = Plan::StepKind;

  explicit Binder(const Plan& p) : p_(p), S_(p.steps.size()), N_(static_cast<size_t>(p.num_slots)) {
    def.assign(N_, -1);
    last.assign(N_, -1);
    b.kind.resize(S_);
    b.fresh.assign(N_, 0);
    b.reuse.assign(N_, -1);
  }

  Plan::Bound b;
  std::vector<int> def, last;

  // Each step's kind; outputs of generic steps get a fresh buffer each run.
  void classify_steps(bool dynamic) {
    for (size_t i = 0; i < S_; ++i) {
      const auto& st = p_.steps[i];
      const StepKind k = kind_of(st, dynamic);
      b.kind[i] = k;
      for (int o : st.out) {
        def[static_cast<size_t>(o)] = static_cast<int>(i);
        if (k == StepKind::Generic) b.fresh[static_cast<size_t>(o)] = 1;
      }
      for (int x : st.in) last[static_cast<size_t>(x)] = static_cast<int>(i);
    }
  }

  void keep_fetched() {
    for (int f : p_.fetch_slots) {
      // Fetched results get buffers of their own (the caller keeps them); a fetched variable or
      // constant is the Session's own tensor, copied out by run() and kept in its slot (marking
      // it fresh dropped it after the first bound run: the third run of a plan fetching a
      // variable reported it dead).
      if (def[static_cast<size_t>(root(f))] >= 0) {
        b.fresh[static_cast<size_t>(f)] = 1;
        b.fresh[static_cast<size_t>(root(f))] = 1;
      }
      last[static_cast<size_t>(f)] = static_cast<int>(S_);
    }
  }

  // A view keeps the buffer it aliases alive until its own last use.
  void extend_view_lives() {
    for (size_t i = S_; i-- > 0;)
      if (p_.steps[i].op->view)
        for (int o : p_.steps[i].out) {
          const int base = p_.info[static_cast<size_t>(o)].view_of;
          if (base < 0) continue;
          last[static_cast<size_t>(base)] =
              std::max(last[static_cast<size_t>(base)], last[static_cast<size_t>(o)]);
        }
  }

  // Donation candidates: a fetched result of an in-place-capable kernel step (addmm onto its
  // input 0; an elementwise op onto any input) over a contiguous placeholder of its own shape
  // and dtype that no later step reads (views included) and no other input of the step aliases.
  void find_donations() {
    std::vector<int> ph_of(N_, -1);
    for (size_t k = 0; k < p_.placeholders.size(); ++k)
      ph_of[static_cast<size_t>(p_.placeholders[k].first)] = static_cast<int>(k);
    std::vector<char> taken(p_.placeholders.size(), 0);
    for (size_t i = 0; i < S_; ++i) {
      const auto& st = p_.steps[i];
      if (b.kind[i] != StepKind::Kernel || st.out.size() != 1) continue;
      const int o = st.out[0];
      const bool accumulates = st.op->has(kAccumulates);
      if (!b.fresh[static_cast<size_t>(o)] || !contiguous(o) ||
          (!accumulates && !(st.op->has(kElementwise) && st.op->has(kInplaceable))))
        continue;
      for (size_t j = 0; j < (accumulates ? 1 : st.in.size()); ++j) {
        const int k = ph_of[static_cast<size_t>(st.in[j])];
        if (k < 0 || taken[static_cast<size_t>(k)] || !donates(i, j)) continue;
        b.reuse[static_cast<size_t>(o)] = k;
        taken[static_cast<size_t>(k)] = 1;
        b.any_reuse = true;
        break;
      }
    }
  }

  // The arena plan's input: kernel outputs that are not fresh each run are plannable.
  std::vector<ValueLife> lifetimes() const {
    std::vector<ValueLife> life(N_);
    for (size_t s = 0; s < N_; ++s) {
      const auto& si = p_.info[s];
      life[s].plannable = made_by(s, StepKind::Kernel) && !b.fresh[s];
      life[s].bytes =
          static_cast<int64_t>(si.shape.numel() * static_cast<int64_t>(dtype_size(si.dtype)));
      life[s].def = std::max(def[s], 0);
      life[s].last_use = std::max(last[s], life[s].def);
    }
    return life;
  }

  // Concatenations copying nothing: a kConcat step's input that this step reads last, made by
  // a kernel into the arena, is placed where it lands in the output when that piece is one
  // contiguous range there (every dim before the concatenated one has size 1: a batch-1
  // image's channel blocks); the producer writes it in place and the kernel skips it. Static
  // plans only (a piece's offset would move with the sizes).
  void place_pieces(std::vector<ValueLife>& life) const {
    for (size_t i = 0; i < S_; ++i) {
      const auto& st = p_.steps[i];
      if (b.kind[i] != StepKind::Kernel || !st.op->has(kConcat) || st.out.size() != 1) continue;
      const size_t o = static_cast<size_t>(st.out[0]);
      const Shape& os = p_.info[o].shape;
      if (!life[o].plannable || os.rank() == 0 || st.attrs.size() < 1) continue;
      const int64_t d = wrap_dim(st.attrs.i(0), os.rank(), "cat");
      int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(p_.info[o].dtype));
      for (int64_t k = 0; k < d; ++k) outer *= os[k];
      for (int64_t k = d + 1; k < os.rank(); ++k) inner *= os[k];
      if (outer != 1) continue;
      int64_t at = 0;
      for (size_t j = 0; j < st.in.size(); ++j) {
        const int x = st.in[j];
        const size_t xs = static_cast<size_t>(x);
        const int64_t len = p_.info[xs].shape.rank() == os.rank() ? p_.info[xs].shape[d] : -1;
        if (len < 0) break;  // the kernel's own checks speak for a malformed step
        bool once = true;
        for (size_t q = 0; q < st.in.size(); ++q) once = once && (q == j || st.in[q] != x);
        if (once && life[xs].plannable && last[xs] == static_cast<int>(i) &&
            p_.info[xs].dtype == p_.info[o].dtype && (at * inner) % kPlanAlignment == 0) {
          life[xs].within = static_cast<int>(o);
          life[xs].within_offset = at * inner;
        }
        at += len;
      }
    }
  }

  // The arena and the prebuilt tensors over it: planned slots at their offsets, views whose
  // storage each run re-points at the buffer they alias.
  void make_slots(const MemoryPlan& mp) {
    b.arena = std::make_shared<Storage>(static_cast<size_t>(std::max<int64_t>(mp.arena_bytes, 64)));
    b.slots.assign(N_, Tensor());
    b.is_view.assign(N_, 0);
    for (size_t s = 0; s < N_; ++s) {
      const auto& si = p_.info[s];
      const bool is_view = made_by(s, StepKind::View);
      b.is_view[s] = is_view;
      if (mp.offset[s] < 0 && !is_view) continue;
      auto impl = make_tensor_impl();
      impl->dtype = si.dtype;
      impl->shape = si.shape;
      if (is_view) {
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
  }

  // Fresh, unfetched buffers go at their last use, as in the generic run.
  void schedule_releases() {
    b.release.assign(S_, {});
    std::vector<char> fetched(N_, 0);
    for (int f : p_.fetch_slots) fetched[static_cast<size_t>(f)] = 1;
    // A value nobody reads (an unused second output) goes right after the step that made it
    // (last is -1 there: indexing release with it wrote out of bounds).
    for (size_t s = 0; s < N_; ++s)
      if (b.fresh[s] && !fetched[s] && def[s] >= 0 && !b.is_view[s]) {
        const int at = std::min<int>(std::max(last[s], def[s]), static_cast<int>(S_) - 1);
        b.release[static_cast<size_t>(at)].push_back(static_cast<int>(s));
      }
  }

 private:
  StepKind kind_of(const Plan::Step& st, bool dynamic) const {
    // assign is a view that writes; a patched op resolves its sizes on every run
    if (st.op->has(kSideEffect) || st.op->has(kControlFlow) || !st.patches.empty())
      return StepKind::Generic;
    if (st.op->view && dynamic) return StepKind::Generic;  // its strides move with the sizes
    if (st.op->view) {
      for (int o : st.out)
        if (p_.info[static_cast<size_t>(o)].view_of < 0) return StepKind::Generic;
      return StepKind::View;
    }
    if (!st.op->kernel) return StepKind::Generic;
    if (st.op->contiguous_inputs)
      for (int x : st.in)
        if (!contiguous(x)) return StepKind::Generic;
    return StepKind::Kernel;
  }

  // Whether step i's output may be written over its input j (a placeholder): read last there,
  // contiguous, of the output's dtype and shape, and aliased by no other input of the step.
  bool donates(size_t i, size_t j) const {
    const auto& st = p_.steps[i];
    const int x = st.in[j];
    const auto& xi = p_.info[static_cast<size_t>(x)];
    const auto& oi = p_.info[static_cast<size_t>(st.out[0])];
    if (last[static_cast<size_t>(x)] != static_cast<int>(i) || !contiguous(x) ||
        xi.dtype != oi.dtype || xi.shape != oi.shape)
      return false;
    for (size_t q = 0; q < st.in.size(); ++q)
      if (q != j && root(st.in[q]) == x) return false;
    return true;
  }

  bool made_by(size_t s, StepKind k) const {
    return def[s] >= 0 && b.kind[static_cast<size_t>(def[s])] == k;
  }
  int root(int s) const {
    while (p_.info[static_cast<size_t>(s)].view_of >= 0)
      s = p_.info[static_cast<size_t>(s)].view_of;
    return s;
  }
  bool contiguous(int s) const {
    const auto& si = p_.info[static_cast<size_t>(s)];
    return same_strides(si.strides, contiguous_strides(si.shape));
  }

  const Plan& p_;
  const size_t S_, N_;
};

// Which donated feeds this run may write into (b.donate_now): contiguous, and sharing storage
// with no other feed and no variable (the result would change what another input or the
// Session holds). Which feeds are donated is looked up again only after set_donated.
void mark_donations(Session::Plan& p, const std::vector<const Tensor*>& feed_of,
                    const std::vector<std::string>& donated, int64_t donated_gen,
                    const std::map<std::string, Tensor>& vars) {
  auto& b = p.bound;
  const size_t P = p.placeholders.size();
  if (b.donated_gen != donated_gen) {
    b.ph_donated.assign(P, 0);
    for (size_t i = 0; i < P; ++i)
      b.ph_donated[i] = std::find(donated.begin(), donated.end(), p.placeholders[i].second->name) !=
                        donated.end();
    b.donated_gen = donated_gen;
  }
  b.donate_now.assign(P, 0);
  for (size_t i = 0; i < P; ++i) {
    if (!b.ph_donated[i]) continue;
    const Tensor& t = *feed_of[i];
    bool ok = t.is_contiguous();
    for (size_t j = 0; ok && j < P; ++j) ok = j == i || !t.shares_storage(*feed_of[j]);
    for (auto it = vars.begin(); ok && it != vars.end(); ++it) ok = !t.shares_storage(it->second);
    b.donate_now[i] = ok;
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
  for (const auto& si : p.info)
    if (!si.seen) return;  // some value was never computed
  // Dynamic dims in the feeds: the bound form is laid out again at each new size (relayout).
  const bool dynamic = lays_out_by_symbol(p);
  Binder binder(p);
  binder.classify_steps(dynamic);
  binder.keep_fetched();
  binder.extend_view_lives();
  binder.find_donations();
  std::vector<ValueLife> life = binder.lifetimes();
  if (!dynamic && pass_enabled("concat_in_place")) binder.place_pieces(life);
  MemoryPlan mp = plan_memory(life, kPlanAlignment);
  Plan::Bound& b = binder.b;
  b.reuse_at_bind = b.reuse;
  if (dynamic) {
    std::vector<std::pair<int, Tensor>> variables;
    for (const auto& [s, name] : p.variables) variables.push_back({s, vars_.at(name)});
    bind_symbolic(p, b, variables, life, mp, binder.def);
  }
  b.arena_bytes = mp.arena_bytes;
  b.unplanned_bytes = mp.unplanned_bytes;
  b.pieces_in_place = mp.nested;
  // The generic run's intermediates sit freed in the allocator's cache, sized for a run that
  // bound runs no longer make: hand them back before the arena comes, so that peak memory is the
  // larger of the two, not their sum (W6 graph: 154 -> 114 MiB peak RSS).
  empty_cache();
  binder.make_slots(mp);
  for (auto& [s, v] : p.constants) b.slots[static_cast<size_t>(s)] = v;
  for (auto& [s, name] : p.variables) b.slots[static_cast<size_t>(s)] = vars_.at(name);
  binder.schedule_releases();
  b.ok = true;
  p.bound = std::move(b);
}

void Session::run_bound(Plan& p) {
  auto& b = p.bound;
  auto& slots = b.slots;
  for (size_t i = 0; i < p.placeholders.size(); ++i)
    slots[static_cast<size_t>(p.placeholders[i].first)] = *feed_of_[i];
  if (b.any_reuse) mark_donations(p, feed_of_, donated_, donated_gen_, vars_);
  int64_t donated_writes = 0;
  TensorList ins, outs;
  std::optional<NoInterruptGuard> writing;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    before_step(p, i, writing);
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
