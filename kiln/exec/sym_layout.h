// A Session plan's memory layout by symbol: one placement, planned once, whose offsets are
// evaluated for each new set of feed shapes, so a graph with dynamic dims (a JIT version run
// at every sequence length) keeps its arena and its direct kernel calls at any size instead of
// one plan per size. Shapes come from the ops' own inference on stand-ins of the new sizes.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/passes/memory_plan.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {

struct GraphImpl;

/// One step as the layout sees it (pointers into the plan, which outlives the layout).
struct LayoutStep {
  const OpDef* op = nullptr;
  const Attrs* attrs = nullptr;
  const std::vector<int>* in = nullptr;
  const std::vector<int>* out = nullptr;
  const std::vector<SizePatch>* patches = nullptr;
};

class SymbolicLayout {
 public:
  /// `dtypes` per slot (as recorded); `constants` and `variables`: those slots with their
  /// tensors (inference may read a constant's value, as when the graph was built; a 0-d integer
  /// constant takes part in size arithmetic); `fed`: placeholder slots in feed order; `life`
  /// and `plan`: the arena plan made at the recorded sizes.
  SymbolicLayout(std::vector<LayoutStep> steps, std::vector<DType> dtypes,
                 const std::vector<std::pair<int, Tensor>>& constants,
                 const std::vector<std::pair<int, Tensor>>& variables, std::vector<int> fed,
                 const std::vector<ValueLife>& life, const MemoryPlan& plan);
  ~SymbolicLayout();
  SymbolicLayout(const SymbolicLayout&) = delete;
  SymbolicLayout& operator=(const SymbolicLayout&) = delete;

  /// Every slot's shape for these feed shapes (in `fed` order), by inference step by step;
  /// false when some step's shape cannot be known before running (a size read from data, a
  /// symbolic size computed from values), or inference refuses the sizes.
  bool shapes(const std::vector<Shape>& feeds, std::vector<Shape>& out);

  /// Offsets of the planned slots for these byte sizes (-1 for the others), evaluated along the
  /// placement: each buffer sits above every buffer placed below it that is live at the same
  /// time, so no two overlap at any sizes. Returns the arena's size.
  int64_t offsets(const std::vector<int64_t>& bytes, std::vector<int64_t>& offset) const;

 private:
  std::vector<LayoutStep> steps_;
  std::vector<DType> dtypes_;
  std::vector<Tensor> fixed_;   // per slot: a constant's or variable's tensor, else undefined
  std::vector<char> constant_;  // per slot: a constant (its value may enter size arithmetic)
  std::vector<int> fed_;
  // Placement: planned slots in order of their offset at the recorded sizes, each with the
  // planned slots below it whose lifetimes overlap its own.
  std::vector<int> order_;
  std::vector<std::vector<int>> below_;
  // Stand-ins: one symbolic tensor per slot on a scratch graph, resized for each evaluation.
  std::shared_ptr<GraphImpl> scratch_;
  std::vector<Tensor> stand_;
};

}  // namespace kiln::detail
