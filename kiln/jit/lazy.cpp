// Lazy pieces (lazy.h): recording a call's tensor ops, cutting them into pieces at host reads,
// the cache of compiled pieces by structure, fed constants, and the values a piece keeps for
// the pieces after it.
#include "kiln/jit/lazy.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/dispatch/grad_mode.h"
#include "kiln/exec/session.h"
#include "kiln/graph/node.h"
#include "kiln/jit/capture.h"
#include "kiln/nn/module.h"

namespace kiln::detail::jit_engine {
namespace {

// Constants up to this many elements compare by value; larger ones (weights, tensors the host
// made) by identity, as comparing them would cost what the piece costs.
constexpr int64_t kSmallConst = 64;
// Distinct piece structures one version compiles; past it new structures run op by op (a
// function whose host code makes a new structure on every call would otherwise compile forever).
constexpr size_t kMaxStructures = 256;

// One piece as recorded in a call's graph: its ops in order, what they read from outside the
// piece (arguments, values of earlier pieces) and the constants they use.
struct PieceDesc {
  std::vector<int64_t> code;  // op identities, input wiring, input and constant metas
  std::vector<const Node*> ops;
  std::vector<ValueRef> ext;
  std::vector<const Node*> consts;
  size_t hash = 0;
};

size_t mix(size_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

void push_meta(std::vector<int64_t>& code, const TensorMeta& m) {
  code.push_back(static_cast<int64_t>(m.dtype));
  code.push_back(static_cast<int64_t>(m.shape.size()));
  for (size_t d = 0; d < m.shape.size(); ++d) code.push_back(m.shape[d]);
}

PieceDesc describe(const Graph& g, int lo, int hi) {
  PieceDesc d;
  const auto& nodes = g.nodes();
  std::vector<int> local(static_cast<size_t>(hi - lo), -1);  // by node id - lo
  std::vector<std::pair<const Node*, int>> ext_keys;
  for (int id = lo; id < hi; ++id) {
    const Node* n = nodes[static_cast<size_t>(id)].get();
    if (n->kind != NodeKind::Op) continue;
    local[static_cast<size_t>(id - lo)] = static_cast<int>(d.ops.size());
    d.ops.push_back(n);
    d.code.push_back(reinterpret_cast<int64_t>(n->op));
    d.code.push_back(static_cast<int64_t>(n->inputs.size()));
    for (const auto& in : n->inputs) {
      const int id_in = in.node->id;
      if (in.node->kind == NodeKind::Constant) {
        auto pos = std::find(d.consts.begin(), d.consts.end(), in.node);
        d.code.push_back(-2);
        d.code.push_back(pos - d.consts.begin());
        if (pos == d.consts.end()) d.consts.push_back(in.node);
      } else if (id_in >= lo && id_in < hi && local[static_cast<size_t>(id_in - lo)] >= 0) {
        d.code.push_back(-1);
        d.code.push_back(local[static_cast<size_t>(id_in - lo)]);
        d.code.push_back(in.index);
      } else {
        auto key = std::make_pair(static_cast<const Node*>(in.node), in.index);
        auto pos = std::find(ext_keys.begin(), ext_keys.end(), key);
        int k = static_cast<int>(pos - ext_keys.begin());
        if (pos == ext_keys.end()) {
          ext_keys.push_back(key);
          d.ext.push_back(in);
        }
        d.code.push_back(-3);
        d.code.push_back(k);
      }
    }
  }
  d.code.push_back(-4);
  for (const auto& e : d.ext) push_meta(d.code, e.node->outputs[static_cast<size_t>(e.index)]);
  d.code.push_back(-5);
  for (const Node* c : d.consts) push_meta(d.code, TensorMeta{c->value.dtype(), c->value.shape()});
  size_t h = 14695981039346656037ull;
  for (int64_t v : d.code) h = mix(h, static_cast<uint64_t>(v));
  for (const Node* n : d.ops) h = mix(h, n->attrs.hash());
  d.hash = h;
  return d;
}

bool same_const(const Tensor& a, const Tensor& b) {
  if (a.impl() == b.impl()) return true;
  if (a.numel() > kSmallConst) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i]) && !(std::isnan(x[i]) && std::isnan(y[i]))) return false;
  return true;
}

// A compiled piece structure.
struct Entry {
  std::vector<int64_t> code;
  std::vector<Attrs> attrs;
  // Per constant: the value compiled in, or whether it is fed (seen to change).
  std::vector<Tensor> baked;
  std::vector<char> fed;
  // (op, output) values later pieces or the outputs read: fetched on every run.
  std::set<std::pair<int, int>> keep;
  std::string where;  // the host read that ends the piece ("" when it ends the function)
  int index = 0;      // in LazyCache::Impl::order
  int compiles = 0;
  int64_t runs = 0;
  bool interpret = false;
  std::string interpret_reason;
  int64_t num_ops = 0;
  // The compiled form: a graph of its own with placeholders for the outside values and the fed
  // constants, run by a Session (optimizer, fusion, memory plan as any static graph).
  Graph pg;
  std::unique_ptr<Session> sess;
  std::vector<Tensor> ext_ph, const_ph;
  std::vector<TensorList> outs;  // per op, its symbolic outputs in pg
};

}  // namespace

struct LazyCache::Impl {
  std::unordered_map<size_t, std::vector<std::unique_ptr<Entry>>> by_hash;
  Stats stats;
  std::vector<const Entry*> order;  // insertion order, for explain()
  // Piece to piece transitions seen (-1: the call's start, -2: its end), for the picture.
  std::set<std::pair<int, int>> edges;
};

namespace {

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
    Entry* entry;            // null for a piece run op by op without an entry
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

Entry* find_entry(LazyCache::Impl& c, const PieceDesc& d) {
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

void compile(Entry& e, const PieceDesc& d) {
  e.pg = Graph();
  e.ext_ph.clear();
  e.const_ph.assign(d.consts.size(), Tensor());
  e.outs.assign(d.ops.size(), TensorList());
  std::vector<Tensor> ext_sym, const_sym(d.consts.size());
  for (size_t k = 0; k < d.ext.size(); ++k) {
    const TensorMeta& m = d.ext[k].node->outputs[static_cast<size_t>(d.ext[k].index)];
    e.ext_ph.push_back(e.pg.placeholder(str_cat("in", k), m.dtype, m.shape));
  }
  for (size_t k = 0; k < d.consts.size(); ++k) {
    const Tensor& c = d.consts[k]->value;
    if (e.fed[k]) {
      e.const_ph[k] = e.pg.placeholder(str_cat("fed", k), c.dtype(), c.shape());
      const_sym[k] = e.const_ph[k];
    } else {
      const_sym[k] = e.pg.constant(c);
    }
  }
  std::unordered_map<const Node*, int> local;
  for (size_t i = 0; i < d.ops.size(); ++i) local[d.ops[i]] = static_cast<int>(i);
  std::unordered_map<const Node*, int> cidx;
  for (size_t k = 0; k < d.consts.size(); ++k) cidx[d.consts[k]] = static_cast<int>(k);
  for (size_t i = 0; i < d.ops.size(); ++i) {
    const Node& n = *d.ops[i];
    TensorList ins;
    for (const auto& in : n.inputs) {
      if (in.node->kind == NodeKind::Constant) {
        ins.push_back(const_sym[static_cast<size_t>(cidx.at(in.node))]);
      } else if (auto it = local.find(in.node); it != local.end()) {
        ins.push_back(e.outs[static_cast<size_t>(it->second)][static_cast<size_t>(in.index)]);
      } else {
        size_t k = 0;
        while (!(d.ext[k] == in)) ++k;
        ins.push_back(e.ext_ph[k]);
      }
    }
    e.outs[i] =
        call_node(*n.op, std::span<const Tensor>(ins.data(), ins.size()), n.attrs, n.patches);
  }
  e.sess = std::make_unique<Session>(e.pg);
  ++e.compiles;
}

// Runs the ops recorded in [lo, hi) as one piece; `want` are values the caller needs now.
void run_piece(LazyRun& r, int lo, int hi, const std::vector<ValueRef>& want,
               const std::string& where) {
  LazyCache::Impl& c = *r.cache;
  CaptureScope::Pause pause;  // compiling and running a piece records nothing
  PieceDesc d = describe(r.g, lo, hi);
  r.cut = hi;
  if (d.ops.empty()) return;
  Entry* e = find_entry(c, d);
  bool fresh = false;
  if (!e && c.order.size() < kMaxStructures) {
    auto ne = std::make_unique<Entry>();
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
    fresh = true;
  }
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
  if (!e || e->interpret) return interpret_all();
  // A constant that changed since the compile becomes an input: compile once more.
  bool changed = fresh;
  for (size_t k = 0; k < d.consts.size(); ++k)
    if (!e->fed[k] && !same_const(e->baked[k], d.consts[k]->value)) {
      e->fed[k] = 1;
      e->baked[k] = Tensor();
      changed = true;
    }
  if (changed) {
    try {
      compile(*e, d);
      ++c.stats.compiles;
    } catch (const Error& err) {
      e->interpret = true;
      e->interpret_reason = err.what();
      e->sess.reset();
      return interpret_all();
    }
  }
  // What to fetch: what the caller wants, what later pieces were seen to need, random draws and
  // side effects (run on every call).
  std::set<std::pair<int, int>> fetch = e->keep;
  auto& local = r.ran.back().local;
  for (const auto& v : want)
    if (v.node->id >= lo && v.node->id < hi && local[static_cast<size_t>(v.node->id - lo)] >= 0)
      fetch.insert({local[static_cast<size_t>(v.node->id - lo)], v.index});
  for (size_t i = 0; i < d.ops.size(); ++i)
    if (d.ops[i]->op->has(kRandom) || d.ops[i]->op->has(kSideEffect))
      for (int o = 0; o < static_cast<int>(d.ops[i]->outputs.size()); ++o)
        fetch.insert({static_cast<int>(i), o});
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

LazyResult LazyCache::run(const Key& key, const std::vector<Arg>& args, const TraceFn& fn,
                          bool stop_if_no_reads) {
  LazyRun r;
  r.cache = impl_.get();
  ++impl_->stats.calls;
  LazyResult res;
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
    // The last piece: what the outputs and the assigned buffers need.
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
    impl_->edges.insert({r.last_piece, -2});
    ok = true;
  }
  res.complete = true;
  res.outs = std::move(outs);
  return res;
}

LazyCache::Stats LazyCache::stats() const { return impl_->stats; }

int LazyCache::max_compiles_per_piece() const {
  int m = 0;
  for (const Entry* e : impl_->order) m = std::max(m, e->compiles);
  return m;
}

void LazyCache::explain(std::ostream& os, const std::string& indent) const {
  int i = 0;
  for (const Entry* e : impl_->order) {
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
  for (const Entry* e : impl_->order) {
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
