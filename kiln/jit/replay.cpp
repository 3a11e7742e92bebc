// Replay of a compiled version (replay.h): the Session of a single-piece version, fed the call's
// tensors (with donated buffers), or the walk down a trace tree, running each piece's steps over
// the slot table with dataflow deadness as the Session has it.
#include "kiln/jit/replay.h"

#include <algorithm>

#include "kiln/autograd/autograd.h"
#include "kiln/core/interrupt.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/jit/trace_tree.h"

namespace kiln::detail::jit_engine {
namespace {

// The placeholders of the donated arguments, for Session::set_donated.
std::vector<Tensor> donated_placeholders(const Version& v, const std::vector<Arg>& args,
                                         const std::vector<int>& donate) {
  std::vector<Tensor> phs;
  size_t p = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool d = std::find(donate.begin(), donate.end(), static_cast<int>(i)) != donate.end();
    size_t n = args[i].kind == Arg::kTensor       ? 1
               : args[i].kind == Arg::kTensorList ? args[i].ts.size()
               : v.key[i].runtime                 ? 1
                                                  : 0;
    for (size_t t = 0; t < n; ++t, ++p)
      if (d && args[i].kind != Arg::kScalar && args[i].kind != Arg::kBool)
        phs.push_back(v.fwd_feeds[p].first);
  }
  return phs;
}

// A single-piece version: its Session, fed the call's tensors (a runtime scalar as a 0-d one).
void replay_session(Version& v, const std::vector<Arg>& args, std::vector<Tensor>& outs,
                    const std::vector<int>& donate) {
  const bool donating = !donate.empty();
  if (donating != v.fwd_donating) {
    v.fwd_session->set_donated(donating ? donated_placeholders(v, args, donate)
                                        : std::vector<Tensor>{});
    v.fwd_donating = donating;
  }
  size_t p = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& k = v.key[i];
    if (args[i].kind == Arg::kTensor) {
      v.fwd_feeds[p++].second = args[i].t;
    } else if (args[i].kind == Arg::kTensorList) {
      for (const auto& t : args[i].ts) v.fwd_feeds[p++].second = t;
    } else if (k.runtime) {
      v.fwd_feeds[p++].second = scalar_tensor(args[i].v, Float32);
    }
  }
  // Hold no caller tensor between calls, also when the run raises.
  struct Clear {
    FeedDict& f;
    ~Clear() {
      for (auto& x : f) x.second = Tensor();
    }
  } clear{v.fwd_feeds};
  outs = v.fwd_session->run(v.fwd_outs, v.fwd_feeds);
}

// Loads the call's arguments into the slots the trace gave them.
void load_args(Version& v, const std::vector<Arg>& args) {
  auto& slots = v.slots;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& s = v.arg_slots[i];
    if (args[i].kind == Arg::kTensor) {
      if (s[0] >= 0) slots[static_cast<size_t>(s[0])] = args[i].t;
    } else if (args[i].kind == Arg::kTensorList) {
      for (size_t t = 0; t < s.size(); ++t)
        if (s[t] >= 0) slots[static_cast<size_t>(s[t])] = args[i].ts[t];
    } else if (!s.empty() && s[0] >= 0) {
      slots[static_cast<size_t>(s[0])] = scalar_tensor(args[i].v, Float32);
    }
  }
}

// Runs one piece's constants and steps over the slots.
void run_piece(const TreeNode& t, std::vector<Tensor>& slots, TensorList& ins) {
  for (auto& [s, val] : t.constants) slots[static_cast<size_t>(s)] = val;
  for (auto& st : t.steps) {
    interruption_point("jit");
    ins.clear();
    bool dead = false;
    for (int x : st.in) {
      ins.push_back(slots[static_cast<size_t>(x)]);
      dead = dead || !ins.back().defined();
    }
    // Dataflow deadness (cond inside a jitted fn), as in the Session: a step with a dead
    // input is skipped, except merge, which forwards its live input.
    bool merge = st.op->has(kMerge);
    if (dead && !merge) continue;
    std::span<const Tensor> in_span(ins.data(), ins.size());
    TensorList o = merge ? st.op->view(in_span, st.attrs)
                         : run_node_kernel(*st.op, in_span, st.attrs, st.patches);
    for (size_t k = 0; k < st.out.size() && k < o.size(); ++k)
      slots[static_cast<size_t>(st.out[k])] = std::move(o[k]);
    for (int fs : st.free_after) slots[static_cast<size_t>(fs)] = Tensor();
  }
}

}  // namespace

bool replay(Version& v, const std::vector<Arg>& args, std::vector<Tensor>& outs, std::string* why,
            const std::vector<int>& donate, bool probe) {
  if (v.fwd_session) {
    replay_session(v, args, outs, donate);
    return true;
  }
  auto& slots = v.slots;
  load_args(v, args);
  NoGradGuard ng;
  // Release this call's intermediates, also when a step raises.
  struct Release {
    std::vector<Tensor>& s;
    ~Release() {
      for (auto& x : s) x = Tensor();
    }
  } release{slots};
  if (!v.root) fail("jit", "internal: version without a compiled trace");
  TreeNode* cur = v.root.get();
  TensorList ins;
  bool ok = true;
  while (cur) {
    if (probe && cur->leaf) break;
    run_piece(*cur, slots, ins);
    if (cur->leaf) {
      outs.clear();
      for (int s : cur->out_slots) outs.push_back(slots[static_cast<size_t>(s)]);
      break;
    }
    const Tensor& gv = slots[static_cast<size_t>(cur->guard_slot)];
    TreeNode* next = nullptr;
    for (auto& [val, child] : cur->children)
      if (same_value(val, gv)) next = child.get();
    if (!next) {
      *why = str_cat("graph break at ", cur->guard_where, ": ", cur->guard_what, "() gave ",
                     value_str(gv), ", a branch not traced yet");
      ok = false;
      break;
    }
    cur = next;
  }
  ins.clear();
  return ok;
}

TensorList run_version_plain(Version& v, std::span<const Tensor> tensors) {
  std::vector<Arg> args = args_from_inputs(v, tensors);
  std::vector<Tensor> outs;
  std::string why;
  if (!replay(v, args, outs, &why)) fail("jit", why);
  TensorList r;
  for (auto& o : outs) r.push_back(o);
  return r;
}

}  // namespace kiln::detail::jit_engine
