// What the engine holds, said (engine.h): stats() with the rerunning versions' pieces,
// explain() (versions, guards, pieces, breaks, captured state, recompiles) and to_mermaid().
#include <algorithm>
#include <functional>
#include <ostream>
#include <sstream>

#include "kiln/jit/engine.h"
#include "kiln/jit/trace_tree.h"

namespace kiln::detail::jit_engine {

namespace {

// A label for a Mermaid node: its double quotes escaped.
std::string quote(std::string t) {
  for (size_t i = 0; (i = t.find('"', i)) != std::string::npos; i += 6) t.replace(i, 1, "#quot;");
  return t;
}

// A compiled version's trace tree (or graph) drawn from version node `p`in, guards as diamonds,
// then the breaks healed inside the graph: each a Switch on its predicate whose two sides meet
// again in a Merge, in trace order.
void mermaid_tree(std::ostream& os, const Version& v, const std::string& p) {
  int n = 0;
  std::function<std::string(const TreeNode*)> walk = [&](const TreeNode* t) {
    const std::string id = str_cat(p, "t", n++);
    os << "  " << id << "[\"" << (v.root.get() == t && t->leaf ? "graph" : "piece") << ": "
       << t->nodes << " nodes\"]\n";
    if (t->leaf) {
      os << "  " << id << " --> result\n";
      return id;
    }
    const std::string gid = id + "g";
    os << "  " << gid << "{\"" << quote(t->guard_what) << "() at " << quote(t->guard_where)
       << "\"}\n";
    os << "  " << id << " --> " << gid << "\n";
    for (const auto& [val, child] : t->children) {
      const std::string cid = walk(child.get());
      os << "  " << gid << " -->|\"" << quote(value_str(val)) << "\"| " << cid << "\n";
    }
    return id;
  };
  const std::string root = walk(v.root.get());
  os << "  " << p << "in --> " << root << "\n";
  std::string prev = root;
  for (size_t h = 0; h < v.healed.size(); ++h) {
    const std::string id = str_cat(p, "h", h);
    os << "  " << id << "s{\"Switch on " << quote(v.healed[h]) << "\"}\n";
    os << "  " << id << "m((\"Merge\"))\n";
    os << "  " << prev << " -.- " << id << "s\n";
    os << "  " << id << "s -->|\"true\"| " << id << "m\n";
    os << "  " << id << "s -->|\"false\"| " << id << "m\n";
    prev = id + "m";
  }
}

// One version in explain(): how it runs, its healed breaks and its tree of pieces (the guard at
// the end of each piece, the value each branch was traced for).
void explain_version(std::ostream& os, const Version& v) {
  os << "     compile time " << v.compile_ms << " ms";
  if (v.eager_only) os << "; runs eagerly (" << v.eager_reason << ")";
  if (v.lazy) {
    const LazyCache::Stats l = v.lazy->stats();
    os << "; host code reruns on every call (" << l.calls << " calls, " << l.pieces_run
       << " pieces run compiled, " << l.interpreted << " op by op, " << l.recomputed
       << " ops recomputed)\n";
    v.lazy->explain(os, "     ");
    return;
  }
  if (v.with_grad)
    os << (v.saved_ok ? "; compiled backward graph fed the saved activations"
                      : "; compiled backward graph (forward recomputed in it)");
  if (v.grad_tree) os << "; runs eagerly under autograd until its breaks heal";
  os << "\n";
  for (const auto& w : v.healed) os << "     healed: " << w << " -> Switch/Merge (no host read)\n";
  std::function<void(const TreeNode*, int, const std::string&)> walk =
      [&](const TreeNode* t, int depth, const std::string& via) {
        os << "     " << std::string(static_cast<size_t>(depth) * 2, ' ') << "piece" << via << ": "
           << t->nodes << " nodes";
        if (!t->leaf) os << ", then guard on " << t->guard_what << "() at " << t->guard_where;
        os << "\n";
        for (const auto& [val, child] : t->children)
          walk(child.get(), depth + 1, str_cat(" [if ", value_str(val), "]"));
      };
  if (v.root) walk(v.root.get(), 0, "");
}

// The captured tensors in explain(): their argument positions, and which fn writes in place.
void explain_captures(std::ostream& os, const HeldState& held,
                      const std::vector<std::unique_ptr<Version>>& versions) {
  std::vector<char> written(held.captures.size(), 0);
  for (const auto& v : versions)
    for (size_t j : v->capture_writes) written[j] = 1;
  os << "captured state: " << held.captures.size()
     << " tensors fn reads without taking them as arguments, fed after its "
     << held.user_arity + held.state_slots.size() << " arguments by identity (not by value):\n";
  for (size_t j = 0; j < held.captures.size(); ++j) {
    const Tensor& t = held.captures[j];
    os << "  capture " << j << " (arg " << held.user_arity + held.state_slots.size() + j
       << "): " << t.dtype() << t.shape();
    if (t.requires_grad()) os << ", requires grad (gets its gradient)";
    if (written[j]) os << ", written in place by fn (its new value is copied back every call)";
    os << "\n";
  }
}

}  // namespace

JitStats Engine::stats_now() const {
  std::lock_guard<std::recursive_mutex> lk(mu);
  JitStats s = stats;
  for (const auto& v : versions)
    if (v->lazy) {
      const LazyCache::Stats l = v->lazy->stats();
      s.reruns += l.calls;
      s.rerun_pieces += l.pieces_run;
      s.piece_compiles += l.compiles;
      s.max_piece_compiles = std::max(s.max_piece_compiles, v->lazy->max_compiles_per_piece());
    }
  return s;
}

std::string Engine::to_mermaid() const {
  std::lock_guard<std::recursive_mutex> lk(mu);
  std::ostringstream os;
  os << "flowchart TD\n";
  os << "  call([\"" << quote(opts.name) << "(...)\"])\n";
  os << "  result([\"result\"])\n";
  int vi = 0;
  for (const auto& v : versions) {
    const std::string p = str_cat("v", vi, "_");
    os << "  " << p << "in{{\"version " << vi << "<br/>" << quote(key_str(v->key)) << "\"}}\n";
    os << "  call --> " << p << "in\n";
    if (v->eager_only) {
      os << "  " << p << "eager[\"eager: " << quote(v->eager_reason) << "\"]\n";
      os << "  " << p << "in --> " << p << "eager --> result\n";
    } else if (v->lazy) {
      os << "  " << p << "in -.- " << p << "note>\"host code reruns on every call\"]\n";
      v->lazy->mermaid(os, p, p + "in", "result");
    } else if (v->root) {
      mermaid_tree(os, *v, p);
    }
    if (v->with_grad)
      os << "  " << p << "in -.- " << p << "bwd[/\"backward graph, "
         << (v->saved_ok ? "fed saved activations" : "recomputing the forward") << "\"/]\n";
    ++vi;
  }
  return os.str();
}

std::string Engine::explain() const {
  std::lock_guard<std::recursive_mutex> lk(mu);
  std::ostringstream os;
  os << "jit '" << opts.name << "': " << (stats.hits + stats.misses) << " calls, " << stats.hits
     << " hits, " << stats.misses << " misses, " << stats.compiles << " compiles, "
     << stats.graph_breaks << " graph breaks traced, " << stats.healed << " healed\n";
  if (stats.eager_fallback && fallback_unstable)
    os << "  running eagerly: " << fallback_reason << "\n";
  else if (stats.eager_fallback)
    os << "  running eagerly: recompile budget (" << opts.max_recompiles
       << ") exhausted; last reason: " << fallback_reason << "\n";
  os << "versions (newest first):\n";
  int vi = 0;
  for (const auto& v : versions) {
    os << "  #" << vi++ << " guards: " << key_str(v->key) << "\n";
    for (const auto& sg : v->shape_guards)
      os << "     shape guard: " << sg.text << "  (" << sg.what << " at " << sg.where << ")\n";
    explain_version(os, *v);
  }
  if (!held.captures.empty()) explain_captures(os, held, versions);
  if (!break_log.empty()) {
    os << "graph breaks:\n";
    for (const auto& b : break_log) os << "  " << b << "\n";
  }
  if (!recompile_log.empty()) {
    os << "recompiles:\n";
    for (const auto& r : recompile_log) os << "  " << r << "\n";
  }
  if (verify) os << "verify: " << stats.verify_mismatches << " mismatches\n";
  return os.str();
}

}  // namespace kiln::detail::jit_engine
