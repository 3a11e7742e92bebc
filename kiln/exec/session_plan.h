// The Session's plan (kiln/exec/session.cpp builds and runs it; session_bind.cpp binds it to
// an arena and replays it): shared by the two files, seen by no one else.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/interrupt.h"
#include "kiln/exec/session.h"
#include "kiln/exec/sym_layout.h"
#include "kiln/graph/node.h"
#include "kiln/passes/passes.h"

namespace kiln {

struct Session::Plan {
  struct Step {
    const detail::OpDef* op;
    detail::Attrs attrs;
    std::vector<int> in;
    std::vector<int> out;
    std::vector<int> free_after;  // slots whose last use is this step
    // Symbolic size attributes (Node::patches): the last patches.size() inputs are their
    // values; out_shapes are the node's output shapes, whose static dims each run checks.
    std::vector<detail::SizePatch> patches;
    std::vector<Shape> out_shapes;
    bool takes_dead = false;  // merge: runs with dead inputs and forwards the live one
  };
  detail::Program program;
  std::vector<Step> steps;
  int num_slots = 0;
  std::vector<std::pair<int, Tensor>> constants;          // slot, value
  std::vector<std::pair<int, std::string>> variables;     // slot, name
  std::vector<std::pair<int, const Node*>> placeholders;  // slot, node (in the program)
  std::vector<std::string> placeholder_names;
  std::vector<int> fetch_slots;
  std::string passes;
  bool has_control_flow = false;
  // The first step that writes a variable (steps.size(): none). Interrupts are taken only
  // before it, so an interrupted run leaves every variable as it was.
  size_t first_write = 0;

  // ---- the bound form: built after a first run, replayed while feeds keep their layouts ----
  // Every op output lives at a planned offset in one arena (kiln/passes/memory_plan.h), or is a
  // view whose storage is re-pointed each run; kernels are called directly on prebuilt tensors.
  // A replay allocates only the fetched results.
  struct SlotInfo {
    DType dtype = Float32;
    Shape shape;
    Strides strides;
    int64_t offset = 0;
    bool seen = false;
    int view_of = -1;      // slot whose storage this value aliases (view steps), -1: none
    int64_t view_rel = 0;  // its offset minus the aliased value's offset (elements)
  };
  enum class StepKind : uint8_t { Kernel, View, Generic };
  struct Bound {
    bool ok = false;
    std::vector<StepKind> kind;             // per step
    std::vector<char> fresh;                // per slot: allocate a new buffer each run
    std::vector<char> is_view;              // per slot: a prebuilt view re-pointed each run
    std::vector<Tensor> slots;              // prebuilt tensors (arena-backed or views)
    std::vector<std::vector<int>> release;  // per step: fresh slots to drop after it
    std::shared_ptr<Storage> arena;
    int64_t arena_bytes = 0, unplanned_bytes = 0;
    int64_t pieces_in_place = 0;  // concatenation pieces written where they land
    // Per slot: the placeholder (index into placeholders) whose buffer this fetched result may
    // be written into when that placeholder is donated, or -1 (see set_donated).
    std::vector<int> reuse;
    int64_t donated_gen = -1;      // the Session's set_donated generation of ph_donated
    std::vector<char> ph_donated;  // per placeholder: named in set_donated
    std::vector<char> donate_now;  // per placeholder: donated and safe to write this run
    bool any_reuse = false;
    // Feeds with dynamic dims: the layout evaluated again at each new set of feed shapes
    // (kiln/exec/sym_layout.h) instead of a generic run and a new plan. Views then run as
    // generic steps (their strides move with the sizes), and a kernel that needs contiguous
    // inputs checks the ones such steps make.
    std::shared_ptr<detail::SymbolicLayout> sym;
    std::vector<char> planned;       // per slot: lives in the arena
    std::vector<int> reuse_at_bind;  // reuse as bound; relayout keeps the pairs whose shapes agree
    std::vector<char> check_contig;  // per step
  };
  std::vector<SlotInfo> info;  // recorded by the last generic run
  Bound bound;
  int64_t relayouts = 0;  // times the bound form was laid out again by symbol
  int binds = 0;          // times this plan was bound (a new feed layout rebinds it)
};

inline bool same_strides(const Strides& a, const Strides& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

/// Interrupts are taken only before the plan's first variable write (`writing` holds them off
/// from there on), so an interrupted run leaves every variable as it was.
inline void before_step(const Session::Plan& p, size_t i,
                        std::optional<NoInterruptGuard>& writing) {
  if (i < p.first_write) [[likely]]
    interruption_point("Session::run");
  else if (i == p.first_write)
    writing.emplace();
}

/// Runs a step whose size attributes are symbolic (Step::patches), checking its static dims.
detail::TensorList run_patched_step(const Session::Plan::Step& st, std::span<const Tensor> ins);

}  // namespace kiln
