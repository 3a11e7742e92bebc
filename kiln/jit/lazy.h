// Lazy pieces: how a jitted function whose host code reruns on every call runs (the lecture's
// case 2 in full; JitOptions::host_code). Internal to the JIT engine.
//
// The function runs for real on every call. Its tensor ops record into a graph instead of
// computing; a host read (item(), a bool, to_vector()) cuts the ops recorded since the last read
// into a piece, which is compiled once per structure (ops, attributes, input dtypes and shapes)
// and run, and the host code after the read goes on with the concrete value. A constant of a
// piece (a scalar the host computed, a tensor it made) is baked in while it keeps its value and
// becomes an input of the piece once it has been seen to change: a piece compiles at most twice
// however many values the host feeds it.
#pragma once
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"
#include "kiln/jit/arg.h"
#include "kiln/jit/guard_key.h"

namespace kiln::detail::jit_engine {

/// What one lazy call left behind.
struct LazyResult {
  /// Whether the call ran to its outputs (`outs` concrete). False only when the caller asked to
  /// stop a call without host reads: then `graph`, `placeholders` and `outs` (symbolic) are a
  /// complete trace, nothing has run, and the caller compiles it as one piece.
  bool complete = false;
  int host_reads = 0;
  Graph graph;
  std::vector<Tensor> placeholders;  // one per tensor fed, in argument order
  FeedDict feeds;
  std::vector<Tensor> outs;
  bool wrote_buffers = false;
  /// Captured tensors the call read (jit/capture.h), and whether one of them needs the call
  /// traced instead (it requires grad under grad mode, or fn writes it in place).
  std::vector<Tensor> captures;
  bool need_trace = false;
};

/// The compiled pieces of one version of a jitted function, by structure.
class LazyCache {
 public:
  LazyCache();
  ~LazyCache();
  LazyCache(const LazyCache&) = delete;
  LazyCache& operator=(const LazyCache&) = delete;

  /// Runs `fn` once on `args` (whose guard key is `key`: it says which scalars are runtime
  /// inputs). With `stop_if_no_reads`, a call that made no host read and assigned no module
  /// buffer stops before running anything (see LazyResult::complete).
  LazyResult run(const Key& key, const std::vector<Arg>& args, const TraceFn& fn,
                 bool stop_if_no_reads);

  struct Stats {
    int64_t calls = 0;
    int64_t pieces_run = 0;   // compiled pieces run
    int64_t compiles = 0;     // piece compiles (a structure's first, and once more per
                              // constant that turned out to change)
    int64_t interpreted = 0;  // pieces run op by op (compile failed, or too many structures)
    int64_t recomputed = 0;   // ops rerun op by op for values a later piece needed that
                              // their piece had not kept yet
    int64_t structures = 0;   // distinct pieces cached
  };
  Stats stats() const;
  /// The most compiles any one piece structure took (the fed-value test's figure).
  int max_compiles_per_piece() const;
  /// One line per cached piece: where it ends, its size, compiles, runs, fed constants.
  void explain(std::ostream& os, const std::string& indent) const;
  /// Mermaid lines: `entry` --> each piece a call started with, piece --> piece for each host
  /// read seen between them (labelled with its file:line), piece --> `exit`. Node ids start
  /// with `prefix`.
  void mermaid(std::ostream& os, const std::string& prefix, const std::string& entry,
               const std::string& exit) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::detail::jit_engine
