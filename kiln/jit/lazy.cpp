// Lazy pieces (lazy.h): recording a call's tensor ops, cutting them into pieces at host reads,
// the cache of compiled pieces by structure (a piece's description and compile are
// lazy_piece.cpp's), fed constants, and the values a piece keeps for the pieces after it.
#include "kiln/jit/lazy.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/dispatch/grad_mode.h"
#include "kiln/exec/session.h"
#include "kiln/graph/node.h"
#include "kiln/jit/capture.h"
#include "kiln/jit/lazy_piece.h"
#include "kiln/nn/module.h"

namespace kiln::detail::jit_engine {

struct LazyCache::Impl {
  std::unordered_map<size_t, std::vector<std::unique_ptr<CompiledPiece>>> by_hash;
  Stats stats;
  std::vector<const CompiledPiece*> order;  // insertion order, for explain()
  // Piece to piece transitions seen (-1: the call's start, -2: its end), for the picture.
  std::set<std::pair<int, int>> edges;
};

namespace {

// Distinct piece structures one version compiles; past it new structures run op by op (a
// function whose host code makes a new structure on every call would otherwise compile forever).
constexpr size_t kMaxStructures = 256;

// One lazy call in progress on this thread (the host-read and buffer-write hooks consult it).
struct LazyRun {
  LazyCache::Impl* cache = nullptr;
  Graph g;
  int cut = 0;  // nodes before it have run
  int reads = 0;
  int last_piece = -1;           // the entry run last (-1: none yet), for LazyCache's transitions
  int recomputing = 0;           // depth of materialize() recomputing a value no piece kept
  std::vector<Tensor> fed;       // by node id: placeholders' argument values
  std::vector<TensorList> vals;  // by node id: op outputs computed so far
  TensorList& vals_of(const Node* n) {
    if (vals.size() <= static_cast<size_t>(n->id)) vals.resize(g.nodes().size());
    return vals[static_cast<size_t>(n->id)];
  }
  // Pieces run so far: node range and entry, to learn which values later pieces need.
  struct Ran {
    int lo, hi;
    CompiledPiece* entry;    // null for a piece run op by op without an entry
    std::vector<int> local;  // by node id - lo: the op's index in the piece (-1: not an op)
  };
  std::vector<Ran> ran;
  std::vector<std::pair<Tensor*, Tensor>> state_writes;
  std::vector<std::pair<Tensor*, Tensor>> concrete_writes;  // buffers assigned concrete values
};
thread_local LazyRun* t_lazy = nullptr;

Tensor materialize(LazyRun& r, ValueRef v);

// Runs one op node on computed inputs (a piece run op by op, or a value recomputed).
void interpret_node(LazyRun& r, const Node& n) {
  TensorList ins;
  bool dead = false;
  for (const auto& in : n.inputs) {
    ins.push_back(materialize(r, in));
    dead = dead || !ins.back().defined();
  }
  const bool merge = n.op->has(kMerge);
  TensorList o;
  if (!dead || merge) {
    std::span<const Tensor> s(ins.data(), ins.size());
    o = merge ? n.op->view(s, n.attrs) : run_node_kernel(*n.op, s, n.attrs, n.patches);
  }
  o.resize(n.outputs.size());
  r.vals_of(&n) = std::move(o);
}

// The concrete value of `v`: an argument, a constant, or an op output some piece computed. A
// value its piece did not keep is recomputed from its inputs, and that piece keeps it from the
// next run on (random draws are always kept, so recomputing never draws again).
Tensor materialize(LazyRun& r, ValueRef v) {
  const Node* n = v.node;
  if (n->kind == NodeKind::Placeholder) {
    if (static_cast<size_t>(n->id) >= r.fed.size() || !r.fed[static_cast<size_t>(n->id)].defined())
      fail("jit", "internal: a placeholder of a lazy call without a value");
    return r.fed[static_cast<size_t>(n->id)];
  }
  if (n->kind == NodeKind::Constant || n->kind == NodeKind::Variable) return n->value;
  TensorList& have = r.vals_of(n);
  if (static_cast<size_t>(v.index) < have.size() && have[static_cast<size_t>(v.index)].defined())
    return have[static_cast<size_t>(v.index)];
  // Only the value asked for is learned, not the values recomputing it reads.
  if (r.recomputing == 0)
    for (auto& p : r.ran)
      if (n->id >= p.lo && n->id < p.hi && p.entry) {
        const int loc = p.local[static_cast<size_t>(n->id - p.lo)];
        if (loc >= 0) p.entry->keep.insert({loc, v.index});
      }
  ++r.cache->stats.recomputed;
  ++r.recomputing;
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{r.recomputing};
  interpret_node(r, *n);
  return r.vals_of(n)[static_cast<size_t>(v.index)];
}

CompiledPiece* find_entry(LazyCache::Impl& c, const PieceDesc& d) {
  auto it = c.by_hash.find(d.hash);
  if (it == c.by_hash.end()) return nullptr;
  for (auto& e : it->second) {
    if (e->code != d.code || e->attrs.size() != d.ops.size()) continue;
    bool same = true;
    for (size_t i = 0; i < d.ops.size() && same; ++i) same = e->attrs[i] == d.ops[i]->attrs;
    if (same) return e.get();
  }
  return nullptr;
}

// The cached entry of a piece's structure, or a new one (fresh) while the cache has room; null
// past kMaxStructures (the piece then runs op by op).
CompiledPiece* entry_for(LazyCache::Impl& c, const PieceDesc& d, const std::string& where,
                         bool* fresh) {
  CompiledPiece* e = find_entry(c, d);
  *fresh = false;
  if (e || c.order.size() >= kMaxStructures) return e;
  auto ne = std::make_unique<CompiledPiece>();
  ne->code = d.code;
  for (const Node* n : d.ops) ne->attrs.push_back(n->attrs);
  ne->fed.assign(d.consts.size(), 0);
  for (const Node* k : d.consts) ne->baked.push_back(k->value);
  ne->where = where;
  ne->num_ops = static_cast<int64_t>(d.ops.size());
  ne->index = static_cast<int>(c.order.size());
  e = ne.get();
  c.order.push_back(e);
  c.by_hash[d.hash].push_back(std::move(ne));
  ++c.stats.structures;
  *fresh = true;
  return e;
}

// Compiles the entry when it is fresh or a constant baked into it changed since (that constant
// is fed from now on). False when the compile failed: the structure runs op by op from now on.
bool compile_if_changed(LazyCache::Impl& c, CompiledPiece& e, const PieceDesc& d, bool fresh) {
  bool changed = fresh;
  for (size_t k = 0; k < d.consts.size(); ++k)
    if (!e.fed[k] && !same_const(e.baked[k], d.consts[k]->value)) {
      e.fed[k] = 1;
      e.baked[k] = Tensor();
      changed = true;
    }
  if (!changed) return true;
  try {
    compile_piece(e, d);
    ++c.stats.compiles;
  } catch (const Error& err) {
    e.interpret = true;
    e.interpret_reason = err.what();
    e.sess.reset();
    return false;
  }
  return true;
}

// What a compiled piece fetches, as (op, output) in the piece: what the caller wants now, what
// later pieces were seen to need, random draws and side effects (run on every call).
std::set<std::pair<int, int>> fetch_set(const CompiledPiece& e, const PieceDesc& d,
                                        const std::vector<ValueRef>& want,
                                        const std::vector<int>& local, int lo, int hi) {
  std::set<std::pair<int, int>> fetch = e.keep;
  for (const auto& v : want)
    if (v.node->id >= lo && v.node->id < hi && local[static_cast<size_t>(v.node->id - lo)] >= 0)
      fetch.insert({local[static_cast<size_t>(v.node->id - lo)], v.index});
  for (size_t i = 0; i < d.ops.size(); ++i)
    if (d.ops[i]->op->has(kRandom) || d.ops[i]->op->has(kSideEffect))
      for (int o = 0; o < static_cast<int>(d.ops[i]->outputs.size()); ++o)
        fetch.insert({static_cast<int>(i), o});
  return fetch;
}

// Runs the ops recorded in [lo, hi) as one piece; `want` are values the caller needs now.
void run_piece(LazyRun& r, int lo, int hi, const std::vector<ValueRef>& want,
               const std::string& where) {
  LazyCache::Impl& c = *r.cache;
  CaptureScope::Pause pause;  // compiling and running a piece records nothing
  PieceDesc d = describe(r.g, lo, hi);
  r.cut = hi;
  if (d.ops.empty()) return;
  bool fresh = false;
  CompiledPiece* e = entry_for(c, d, where, &fresh);
  if (e) {
    c.edges.insert({r.last_piece, e->index});
    r.last_piece = e->index;
  }
  LazyRun::Ran ran{lo, hi, e, std::vector<int>(static_cast<size_t>(hi - lo), -1)};
  for (size_t i = 0; i < d.ops.size(); ++i)
    ran.local[static_cast<size_t>(d.ops[i]->id - lo)] = static_cast<int>(i);
  r.ran.push_back(std::move(ran));
  NoGradGuard ng;
  auto interpret_all = [&] {
    ++c.stats.interpreted;
    for (const Node* n : d.ops) interpret_node(r, *n);
  };
  if (!e || e->interpret || !compile_if_changed(c, *e, d, fresh)) return interpret_all();
  const std::set<std::pair<int, int>> fetch = fetch_set(*e, d, want, r.ran.back().local, lo, hi);
  std::vector<Tensor> fetches;
  for (auto [i, o] : fetch)
    fetches.push_back(e->outs[static_cast<size_t>(i)][static_cast<size_t>(o)]);
  FeedDict feeds;
  for (size_t k = 0; k < d.ext.size(); ++k)
    feeds.emplace_back(e->ext_ph[k], materialize(r, d.ext[k]));
  for (size_t k = 0; k < d.consts.size(); ++k)
    if (e->fed[k]) feeds.emplace_back(e->const_ph[k], d.consts[k]->value);
  std::vector<Tensor> got;
  try {
    got = e->sess->run(fetches, feeds);
  } catch (const Error& err) {
    // The compiled piece cannot run what the ops can (a kernel the plan refuses): this structure
    // runs op by op from now on; the ops themselves raise what eager would.
    e->interpret = true;
    e->interpret_reason = err.what();
    e->sess.reset();
    return interpret_all();
  }
  ++e->runs;
  ++c.stats.pieces_run;
  size_t j = 0;
  for (auto [i, o] : fetch) {
    TensorList& slot = r.vals_of(d.ops[static_cast<size_t>(i)]);
    slot.resize(d.ops[static_cast<size_t>(i)]->outputs.size());
    slot[static_cast<size_t>(o)] = got[j++];
  }
  for (const Node* n : d.ops) {
    TensorList& slot = r.vals_of(n);
    slot.resize(n->outputs.size());
  }
}

Tensor on_lazy_read(const Tensor& t, const char* what, const std::string& where) {
  LazyRun* r = t_lazy;
  if (!r || !t.is_symbolic() || !(Graph::of(t) == r->g))
    fail(what, "value is unknown while building a graph; fetch it with Session::run");
  ValueRef v = r->g.value_of(t);
  ++r->reads;
  const int hi = static_cast<int>(r->g.nodes().size());
  if (v.node->kind == NodeKind::Op && v.node->id >= r->cut)
    run_piece(*r, r->cut, hi, {v}, str_cat(where, ": ", what, "()"));
  return materialize(*r, v);
}

bool on_lazy_buffer_write(Tensor& slot, const Tensor& value) {
  LazyRun* r = t_lazy;
  if (!r) return false;
  if (value.is_concrete()) {
    // Done now (the call runs for real), undone with the others if the call is not kept.
    r->concrete_writes.push_back({&slot, slot});
    return false;
  }
  if (!(Graph::of(value) == r->g)) return false;
  for (auto& w : r->state_writes)
    if (w.first == &slot) {
      slot = value;
      return true;
    }
  if (slot.defined() && slot.is_symbolic()) return false;
  r->state_writes.push_back({&slot, slot});
  slot = value;
  return true;
}

}  // namespace

LazyCache::LazyCache() : impl_(std::make_unique<Impl>()) {}
LazyCache::~LazyCache() = default;

namespace {

// fn's arguments for a lazy call: a placeholder per tensor (per list element, per runtime scalar,
// which fn takes as a 0-d tensor), fed the call's value.
std::vector<Arg> lazy_args(LazyRun& r, LazyResult& res, const Key& key,
                           const std::vector<Arg>& args) {
  std::vector<Arg> sym = args;
  int pc = 0;
  auto make_ph = [&](const Tensor& t) {
    Tensor p = r.g.placeholder(str_cat("arg", pc++), t.dtype(), t.shape());
    const size_t id = static_cast<size_t>(r.g.node_of(p)->id);
    if (r.fed.size() <= id) r.fed.resize(id + 1);
    r.fed[id] = t;
    res.placeholders.push_back(p);
    res.feeds.push_back({p, t});
    return p;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == Arg::kTensor) {
      sym[i].t = make_ph(args[i].t);
    } else if (args[i].kind == Arg::kTensorList) {
      for (size_t t = 0; t < args[i].ts.size(); ++t) sym[i].ts[t] = make_ph(args[i].ts[t]);
    } else if (i < key.size() && key[i].runtime) {
      sym[i].kind = Arg::kTensor;
      sym[i].t = make_ph(scalar_tensor(args[i].v, Float32));
    }
  }
  return sym;
}

// The end of a call that ran: the last piece (what the outputs and the assigned buffers need),
// then the outputs and the buffers' new values made concrete.
void finish_run(LazyRun& r, std::vector<Tensor>& outs) {
  std::vector<ValueRef> want;
  for (const auto& o : outs)
    if (o.defined() && o.is_symbolic() && Graph::of(o) == r.g) want.push_back(r.g.value_of(o));
  for (auto& [slot, old] : r.state_writes) want.push_back(r.g.value_of(*slot));
  run_piece(r, r.cut, static_cast<int>(r.g.nodes().size()), want, "");
  for (auto& o : outs) {
    if (!o.defined()) fail("jit", "fn returned an undefined tensor");
    if (o.is_symbolic()) {
      if (!(Graph::of(o) == r.g))
        fail("jit", "fn returned a tensor of another graph (a graph it built itself)");
      o = materialize(r, r.g.value_of(o));
    }
  }
  for (auto& [slot, old] : r.state_writes) *slot = materialize(r, r.g.value_of(*slot)).detach();
  r.cache->edges.insert({r.last_piece, -2});
}

}  // namespace

LazyResult LazyCache::run(const Key& key, const std::vector<Arg>& args, const TraceFn& fn,
                          bool stop_if_no_reads) {
  LazyRun r;
  r.cache = impl_.get();
  ++impl_->stats.calls;
  LazyResult res;
  std::vector<Arg> sym = lazy_args(r, res, key, args);
  std::vector<Tensor> outs;
  {
    LazyRun* prev = t_lazy;
    t_lazy = &r;
    HostReadHook prev_hook = set_thread_host_read_hook(&on_lazy_read);
    nn::BufferWriteHook prev_write = nn::set_buffer_write_hook(&on_lazy_buffer_write);
    bool ok = false;
    // Hooks come back whatever happens; a call that raised puts the buffers' old values back.
    struct Restore {
      LazyRun* prev;
      HostReadHook hook;
      nn::BufferWriteHook write;
      LazyRun& r;
      bool& ok;
      ~Restore() {
        t_lazy = prev;
        set_thread_host_read_hook(hook);
        nn::set_buffer_write_hook(write);
        if (!ok) {
          for (auto& [slot, old] : r.state_writes) *slot = old;
          for (auto it = r.concrete_writes.rbegin(); it != r.concrete_writes.rend(); ++it)
            *it->first = it->second;
        }
      }
    } restore{prev, prev_hook, prev_write, r, ok};
    CaptureScope scope(r.g, {}, /*lazy=*/true);
    outs = fn(sym);
    scope.drop_temporaries();
    res.captures = scope.found;
    res.need_trace = scope.need_trace;
    // The call is traced instead: nothing of this one is kept (buffers get their values back).
    if (res.need_trace) return res;
    res.host_reads = r.reads;
    res.wrote_buffers = !r.state_writes.empty();
    if (stop_if_no_reads && r.reads == 0 && r.state_writes.empty()) {
      for (auto& o : outs) {
        if (!o.defined()) fail("jit", "fn returned an undefined tensor");
        if (!o.is_symbolic() || !(Graph::of(o) == r.g)) o = r.g.constant(o);
      }
      res.graph = r.g;
      res.outs = std::move(outs);
      ok = true;
      return res;
    }
    finish_run(r, outs);
    ok = true;
  }
  res.complete = true;
  res.outs = std::move(outs);
  return res;
}

LazyCache::Stats LazyCache::stats() const { return impl_->stats; }

int LazyCache::max_compiles_per_piece() const {
  int m = 0;
  for (const CompiledPiece* e : impl_->order) m = std::max(m, e->compiles);
  return m;
}

void LazyCache::explain(std::ostream& os, const std::string& indent) const {
  int i = 0;
  for (const CompiledPiece* e : impl_->order) {
    int fed = 0;
    for (char f : e->fed) fed += f;
    os << indent << "piece " << i++ << ": " << e->num_ops << " ops, "
       << (e->where.empty() ? std::string("ends the function") : "ends at " + e->where) << "; "
       << e->compiles << (e->compiles == 1 ? " compile, " : " compiles, ") << e->runs << " runs";
    if (fed) os << "; " << fed << " host value" << (fed == 1 ? "" : "s") << " fed as inputs";
    if (e->interpret) os << "; runs op by op (" << e->interpret_reason << ")";
    os << "\n";
  }
}

void LazyCache::mermaid(std::ostream& os, const std::string& prefix, const std::string& entry,
                        const std::string& exit) const {
  auto q = [](std::string t) {
    for (size_t i = 0; (i = t.find('"', i)) != std::string::npos; i += 6) t.replace(i, 1, "#quot;");
    return t;
  };
  for (const CompiledPiece* e : impl_->order) {
    int fed = 0;
    for (char f : e->fed) fed += f;
    os << "  " << prefix << "p" << e->index << "[\"piece " << e->index << ": " << e->num_ops
       << " ops, compiled " << e->compiles << "x";
    if (fed) os << "<br/>" << fed << " host value" << (fed == 1 ? "" : "s") << " fed";
    if (e->interpret) os << "<br/>runs op by op";
    os << "\"]\n";
  }
  for (auto [a, b] : impl_->edges) {
    const std::string from = a < 0 ? entry : str_cat(prefix, "p", a);
    const std::string to = b == -2 ? exit : str_cat(prefix, "p", b);
    os << "  " << from << " --> ";
    if (a >= 0 && !impl_->order[static_cast<size_t>(a)]->where.empty())
      os << "|\"host code after " << q(impl_->order[static_cast<size_t>(a)]->where) << "\"| ";
    os << to << "\n";
  }
}

}  // namespace kiln::detail::jit_engine
