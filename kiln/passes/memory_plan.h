// Memory planning: from value lifetimes to offsets in one arena, so a run allocates nothing per
// op. A pure function the executor calls; plan_program_memory derives the lifetimes of a
// Program with static shapes (what benchmarks report as "planned peak vs unplanned sum").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/passes/passes.h"

namespace kiln::detail {

/// Offsets in an arena are multiples of this (a cache line; AVX-512 loads).
inline constexpr int64_t kPlanAlignment = 64;

/// One value's size and lifetime. Steps are numbered 0..S-1; a value is live from `def` to
/// `last_use` inclusive (a value nobody reads has last_use == def).
struct ValueLife {
  int64_t bytes = 0;
  int def = 0;
  int last_use = 0;
  /// Index of an input value whose buffer this value may reuse when that input dies at `def`
  /// (elementwise ops); -1: none.
  int inplace_from = -1;
  /// false: fed, constant, variable, view aliasing, fetched output (not in the arena).
  bool plannable = true;
  /// Index of a value this one is placed inside, `within_offset` bytes into it (-1: none): a
  /// piece of a concatenation its producer writes in place, so the concatenation copies
  /// nothing. Taken when this value (the tail of its buffer) is last read where `within` is
  /// made, and that value's buffer holds no such piece itself.
  int within = -1;
  int64_t within_offset = 0;
};

/// Where each value lives in the arena.
struct MemoryPlan {
  std::vector<int64_t> offset;  ///< per value; -1 when not planned
  int64_t arena_bytes = 0;      ///< planned peak
  int64_t unplanned_bytes = 0;  ///< sum of bytes of all plannable values
  int64_t inplace = 0;          ///< values that took their input's buffer
  int64_t nested = 0;           ///< values placed inside another (`within`)
  int64_t reused = 0;           ///< planned buffers that share arena space with an earlier one
  int64_t planned = 0;          ///< values given an offset
  int64_t not_planned = 0;      ///< values left out (not plannable)
  int64_t dynamic = 0;          ///< of those, values with dynamic dims (plan_program_memory)
  /// "arena 1.5 MiB (planned peak) vs 4.2 MiB unplanned sum (36%), 12 values, ...".
  std::string summary() const;
};

/// Greedy-by-size offset assignment (as in TFLite): buffers sorted by size, largest first, each
/// at the lowest aligned offset that overlaps no already placed buffer live at the same time. A
/// value with `inplace_from` set shares its input's buffer when that input's last use is its
/// def and the sizes match (the two then form one buffer). A value with `within` set lies inside
/// that value's buffer, whose life then starts where the piece's does. kiln::Error on
/// inconsistent input (negative bytes, last_use < def, bad inplace or within index, a piece
/// outside its value or unaligned, alignment not a power of two).
MemoryPlan plan_memory(const std::vector<ValueLife>& values, int64_t alignment = kPlanAlignment);

/// Checks a plan: every plannable value has an aligned offset inside the arena, and no two
/// values overlap in both time and space, except a value and the input whose buffer it took in
/// place, and a piece and the value it was placed inside. On failure returns false and says why in
/// `why`.
bool validate_plan(const std::vector<ValueLife>& values, const MemoryPlan& plan,
                   std::string* why = nullptr, int64_t alignment = kPlanAlignment);

/// Lifetimes of a Program's values in node order (op nodes are the steps): op outputs are
/// planned unless they are views, fetched, side-effecting or of dynamic shape; a view extends
/// the life of the buffer it aliases to its own last use; an in-placeable elementwise op may
/// reuse an input buffer that dies at it when size and dtype match. Values are indexed in node
/// order, each node's outputs in turn; `dynamic` (optional) gets how many were left out because
/// of dynamic dims.
std::vector<ValueLife> program_lifetimes(const Program& p, int64_t* dynamic = nullptr);

/// program_lifetimes + plan_memory.
MemoryPlan plan_program_memory(const Program& p);

}  // namespace kiln::detail
