// Memory planning (see memory_plan.h): in-place chains become one buffer, then greedy by size
// places buffers in one arena; program_lifetimes derives lifetimes from a Program.
#include "kiln/passes/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <unordered_map>

#include "kiln/graph/node.h"

namespace kiln::detail {
namespace {

int64_t align_up(int64_t b, int64_t a) { return (b + a - 1) / a * a; }

std::string fmt_bytes(int64_t b) {
  char buf[64];
  if (b >= (int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
  else if (b >= (int64_t{1} << 10))
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

// Values sharing one buffer: an in-place chain (a -> b -> c, each taking the previous one's
// buffer at its death), live from the first def to the last use.
struct Buffer {
  int64_t size = 0;  // aligned
  int start = 0, end = 0;
  std::vector<int> members;
  int64_t offset = -1;
  int parent = -1;     // the buffer this one lies inside (a concatenation's piece), or -1
  int64_t delta = 0;   // bytes into the parent
  bool holds = false;  // some piece lies inside this buffer
};

bool overlap_time(int s0, int e0, int s1, int e1) { return s0 <= e1 && s1 <= e0; }
bool overlap_space(int64_t o0, int64_t n0, int64_t o1, int64_t n1) {
  return n0 > 0 && n1 > 0 && o0 < o1 + n1 && o1 < o0 + n0;
}

// plan_memory refuses what it cannot plan (see memory_plan.h).
void check_lifetimes(const std::vector<ValueLife>& values, int64_t alignment) {
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0)
    fail("plan_memory", "alignment must be a positive power of two, got ", alignment);
  const int n = static_cast<int>(values.size());
  for (int i = 0; i < n; ++i) {
    const ValueLife& v = values[static_cast<size_t>(i)];
    if (!v.plannable) continue;
    if (v.bytes < 0 || v.def < 0 || v.last_use < v.def)
      fail("plan_memory", "value ", i, " has bytes ", v.bytes, ", def ", v.def, ", last_use ",
           v.last_use, "; expected bytes >= 0 and 0 <= def <= last_use");
    if (v.inplace_from < -1 || v.inplace_from >= n || v.inplace_from == i)
      fail("plan_memory", "value ", i, " has inplace_from ", v.inplace_from, "; expected -1 or ",
           "another value's index in [0, ", n, ")");
    if (v.within < -1 || v.within >= n || v.within == i)
      fail("plan_memory", "value ", i, " has within ", v.within, "; expected -1 or ",
           "another value's index in [0, ", n, ")");
    if (v.within < 0) continue;
    const ValueLife& c = values[static_cast<size_t>(v.within)];
    if (v.within_offset < 0 || v.within_offset % alignment != 0 ||
        v.within_offset + v.bytes > c.bytes)
      fail("plan_memory", "value ", i, " (", v.bytes, " bytes) lies ", v.within_offset,
           " bytes into value ", v.within, " (", c.bytes, " bytes); expected a piece inside it ",
           "at a multiple of ", alignment);
  }
}

// The plannable values as buffers: in-place chains first, in def order so a producer's buffer
// exists before its consumer. Counts planned, not planned, in place and the unplanned sum.
std::vector<Buffer> chain_buffers(const std::vector<ValueLife>& values, int64_t alignment,
                                  MemoryPlan& plan) {
  const int n = static_cast<int>(values.size());
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (values[static_cast<size_t>(i)].plannable)
      order.push_back(i);
    else
      ++plan.not_planned;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return values[static_cast<size_t>(a)].def < values[static_cast<size_t>(b)].def;
  });
  std::vector<int> buffer_of(values.size(), -1);
  std::vector<char> taken(values.size(), 0);
  std::vector<Buffer> bufs;
  for (int i : order) {
    const ValueLife& v = values[static_cast<size_t>(i)];
    plan.unplanned_bytes += v.bytes;
    int a = v.inplace_from;
    if (a >= 0) {
      const ValueLife& src = values[static_cast<size_t>(a)];
      int b = buffer_of[static_cast<size_t>(a)];
      if (src.plannable && b >= 0 && !taken[static_cast<size_t>(a)] && src.last_use == v.def &&
          src.def < v.def && src.bytes == v.bytes) {
        taken[static_cast<size_t>(a)] = 1;
        bufs[static_cast<size_t>(b)].end = std::max(bufs[static_cast<size_t>(b)].end, v.last_use);
        bufs[static_cast<size_t>(b)].members.push_back(i);
        buffer_of[static_cast<size_t>(i)] = b;
        ++plan.inplace;
        continue;
      }
    }
    buffer_of[static_cast<size_t>(i)] = static_cast<int>(bufs.size());
    bufs.push_back(Buffer{align_up(v.bytes, alignment), v.def, v.last_use, {i}, -1});
  }
  plan.planned = static_cast<int64_t>(order.size());
  return bufs;
}

// Pieces placed inside the value they are concatenated into: a piece's buffer (the piece ends
// its chain, and everything in it dies by the time the container is made) goes inside the
// container's buffer, which then lives from the piece's start. No piece inside a piece: a
// buffer that holds pieces stays where it is, and its value is copied into an outer container;
// a piece overlapping one already inside stays out too.
void nest_pieces(const std::vector<ValueLife>& values, std::vector<Buffer>& bufs,
                 MemoryPlan& plan) {
  std::vector<int> buffer_of(values.size(), -1);
  for (size_t b = 0; b < bufs.size(); ++b)
    for (int m : bufs[b].members) buffer_of[static_cast<size_t>(m)] = static_cast<int>(b);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> taken(bufs.size());  // [lo, hi) inside
  std::vector<int> pieces;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].within >= 0) pieces.push_back(static_cast<int>(i));
  // Inner containers first: an inner concatenation holds its pieces before an outer one asks.
  std::stable_sort(pieces.begin(), pieces.end(), [&](int a, int b) {
    return values[static_cast<size_t>(values[static_cast<size_t>(a)].within)].def <
           values[static_cast<size_t>(values[static_cast<size_t>(b)].within)].def;
  });
  for (int i : pieces) {
    const ValueLife& v = values[static_cast<size_t>(i)];
    const ValueLife& c = values[static_cast<size_t>(v.within)];
    const int pb = buffer_of[static_cast<size_t>(i)];
    const int cb = buffer_of[static_cast<size_t>(v.within)];
    if (pb < 0 || cb < 0 || pb == cb) continue;
    Buffer& p = bufs[static_cast<size_t>(pb)];
    Buffer& k = bufs[static_cast<size_t>(cb)];
    // The container's buffer must begin with it (an in-place chain into it would still hold
    // the earlier value there while the pieces are written).
    if (p.members.back() != i || p.end > c.def || p.holds || p.parent >= 0 || k.parent >= 0 ||
        k.members.front() != v.within)
      continue;
    const int64_t lo = v.within_offset, hi = v.within_offset + p.size;
    auto& in_k = taken[static_cast<size_t>(cb)];
    if (std::any_of(in_k.begin(), in_k.end(),
                    [&](auto r) { return lo < r.second && r.first < hi; }))
      continue;
    in_k.push_back({lo, hi});
    p.parent = cb;
    p.delta = v.within_offset;
    k.holds = true;
    k.start = std::min(k.start, p.start);
    plan.nested += static_cast<int64_t>(p.members.size());
  }
}

// Greedy by size: largest first (earlier start breaks ties, then creation order), each at the
// lowest offset clear of the buffers placed so far that live at the same time. Returns the
// arena's size.
int64_t place_by_size(std::vector<Buffer>& bufs) {
  std::vector<int> by_size(bufs.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
    const Buffer& x = bufs[static_cast<size_t>(a)];
    const Buffer& y = bufs[static_cast<size_t>(b)];
    return x.size != y.size ? x.size > y.size : x.start < y.start;
  });
  int64_t arena = 0;
  std::vector<int> placed;
  std::vector<const Buffer*> live;
  for (int bi : by_size) {
    Buffer& b = bufs[static_cast<size_t>(bi)];
    if (b.parent >= 0) continue;  // placed with its container
    live.clear();
    for (int pi : placed) {
      const Buffer& o = bufs[static_cast<size_t>(pi)];
      if (o.size > 0 && overlap_time(b.start, b.end, o.start, o.end)) live.push_back(&o);
    }
    std::sort(live.begin(), live.end(),
              [](const Buffer* x, const Buffer* y) { return x->offset < y->offset; });
    int64_t off = 0;
    for (const Buffer* o : live) {
      if (off + b.size <= o->offset) break;  // fits in the gap below o
      off = std::max(off, o->offset + o->size);
    }
    b.offset = off;
    arena = std::max(arena, off + b.size);
    placed.push_back(bi);
  }
  for (Buffer& b : bufs)
    if (b.parent >= 0) b.offset = bufs[static_cast<size_t>(b.parent)].offset + b.delta;
  return arena;
}

// Values whose buffer reuses memory: its space overlaps a buffer that died before it started.
int64_t reusing_values(const std::vector<Buffer>& bufs) {
  int64_t reused = 0;
  for (const Buffer& b : bufs)
    for (const Buffer& o : bufs)
      if (&o != &b && o.end < b.start && b.parent < 0 && o.parent < 0 &&
          overlap_space(b.offset, b.size, o.offset, o.size)) {
        reused += static_cast<int64_t>(b.members.size());
        break;
      }
  return reused;
}
// program_lifetimes' walk over a Program. roots: per value, the buffers it reads through
// (itself, or for a view or forwarded value the buffers of what it aliases).
class LifetimeWalk {
 public:
  explicit LifetimeWalk(const Program& p) : nodes_(p.graph->nodes) {
    int count = 0, steps = 0;
    for (const auto& n : nodes_) {
      base_[n.get()] = count;
      count += static_cast<int>(n->outputs.size());
      if (n->kind == NodeKind::Op) step_[n.get()] = steps++;
    }
    lives.resize(static_cast<size_t>(count));
    roots_.resize(static_cast<size_t>(count));
  }

  std::vector<ValueLife> lives;
  int64_t dynamic = 0;  // op outputs left out for their dynamic dims

  // Defs and last uses in node order; fed, constant and variable values are never planned.
  void walk() {
    for (const auto& up : nodes_) {
      const Node* n = up.get();
      const int b = base_[n];
      if (n->kind != NodeKind::Op) {
        for (size_t k = 0; k < n->outputs.size(); ++k) {
          lives[static_cast<size_t>(b) + k].plannable = false;
          roots_[static_cast<size_t>(b) + k] = {b + static_cast<int>(k)};
        }
        continue;
      }
      const int s = step_[n];
      for (const auto& in : n->inputs)
        for (int r : roots_[static_cast<size_t>(value(in))])
          lives[static_cast<size_t>(r)].last_use =
              std::max(lives[static_cast<size_t>(r)].last_use, s);
      for (size_t k = 0; k < n->outputs.size(); ++k) define(*n, k, s);
    }
  }

  // A fetched value, and every buffer it aliases, outlives the run.
  void keep_fetched(const std::vector<ValueRef>& fetches) {
    for (const auto& f : fetches) {
      const int fi = value(f);
      lives[static_cast<size_t>(fi)].plannable = false;
      for (int r : roots_[static_cast<size_t>(fi)]) lives[static_cast<size_t>(r)].plannable = false;
    }
  }

  // In place: an elementwise op may write over an input buffer of its own size and dtype that
  // it reads last (not through a view: the kernel would read and write different layouts).
  // An accumulating op (addmm, conv2d_fused_add: each element of input 0 is read before that
  // element of the output is written) may write over input 0 alone.
  void find_in_place() {
    for (const auto& up : nodes_) {
      const Node* n = up.get();
      if (n->kind != NodeKind::Op || n->outputs.size() != 1) continue;
      const bool accumulates = n->op->has(kAccumulates) && !n->inputs.empty();
      if (!accumulates && (!n->op->has(kInplaceable) || !n->op->has(kElementwise))) continue;
      ValueLife& out = lives[static_cast<size_t>(base_[n])];
      if (!out.plannable) continue;
      for (size_t k = 0; k < (accumulates ? 1 : n->inputs.size()); ++k) {
        const ValueRef& in = n->inputs[k];
        const int iv = value(in);
        const ValueLife& src = lives[static_cast<size_t>(iv)];
        if (in.node->kind != NodeKind::Op || !src.plannable || src.last_use != out.def ||
            src.bytes != out.bytes ||
            in.node->outputs[static_cast<size_t>(in.index)].dtype != n->outputs[0].dtype ||
            read_elsewhere(*n, k, accumulates))
          continue;
        out.inplace_from = iv;
        break;
      }
    }
  }

 private:
  int value(ValueRef v) const { return base_.at(v.node) + v.index; }

  // Output k of op node n, made at step s: a view aliases its inputs' buffers (input 0 alone
  // for a kView op); any other output is a buffer of its own, planned when its size is known
  // and its op has no side effect.
  void define(const Node& n, size_t k, int s) {
    const size_t vi = static_cast<size_t>(base_.at(&n)) + k;
    ValueLife& v = lives[vi];
    v.def = v.last_use = s;
    const TensorMeta& m = n.outputs[k];
    if (n.op->view != nullptr) {
      v.plannable = false;
      const size_t k_end =
          n.op->has(kView) ? std::min<size_t>(1, n.inputs.size()) : n.inputs.size();
      for (size_t j = 0; j < k_end; ++j)
        for (int r : roots_[static_cast<size_t>(value(n.inputs[j]))]) roots_[vi].push_back(r);
      return;
    }
    roots_[vi] = {static_cast<int>(vi)};
    if (!m.shape.is_static()) {
      v.plannable = false;
      ++dynamic;
      return;
    }
    v.bytes = m.shape.numel() * static_cast<int64_t>(dtype_size(m.dtype));
    v.plannable = !n.op->has(kSideEffect);
  }

  // Whether another input of n reads input k's buffer: add(x, transpose(x)) must not write over
  // x, since the view reads it in another order. An accumulating op reads its other inputs out
  // of order: none may be input 0 at all.
  bool read_elsewhere(const Node& n, size_t k, bool accumulates) const {
    const int iv = value(n.inputs[k]);
    for (size_t q = 0; q < n.inputs.size(); ++q) {
      if (q == k) continue;
      const int ov = value(n.inputs[q]);
      if (ov == iv && !accumulates) continue;
      if (ov == iv) return true;
      for (int r : roots_[static_cast<size_t>(ov)])
        if (r == iv) return true;
    }
    return false;
  }

  const std::vector<std::unique_ptr<Node>>& nodes_;
  std::unordered_map<const Node*, int> base_;  // first value index of each node
  std::unordered_map<const Node*, int> step_;  // op nodes only
  std::vector<std::vector<int>> roots_;
};
}  // namespace

std::string MemoryPlan::summary() const {
  std::string s = "arena " + fmt_bytes(arena_bytes) + " (planned peak) vs " +
                  fmt_bytes(unplanned_bytes) + " unplanned sum";
  if (unplanned_bytes > 0) {
    char pct[32];
    std::snprintf(pct, sizeof pct, " (%.1f%%)",
                  100.0 * static_cast<double>(arena_bytes) / static_cast<double>(unplanned_bytes));
    s += pct;
  }
  s += ", " + std::to_string(planned) + " values planned, " + std::to_string(inplace) +
       " in place, " + std::to_string(reused) + " reusing memory, " + std::to_string(not_planned) +
       " not planned";
  if (nested > 0) s += ", " + std::to_string(nested) + " inside a concatenation";
  if (dynamic > 0) s += " (" + std::to_string(dynamic) + " with dynamic dims)";
  return s;
}

MemoryPlan plan_memory(const std::vector<ValueLife>& values, int64_t alignment) {
  check_lifetimes(values, alignment);
  MemoryPlan plan;
  plan.offset.assign(values.size(), -1);
  std::vector<Buffer> bufs = chain_buffers(values, alignment, plan);
  nest_pieces(values, bufs, plan);
  plan.arena_bytes = place_by_size(bufs);
  for (const Buffer& b : bufs)
    for (int m : b.members) plan.offset[static_cast<size_t>(m)] = b.offset;
  plan.reused = reusing_values(bufs);
  return plan;
}

bool validate_plan(const std::vector<ValueLife>& values, const MemoryPlan& plan, std::string* why,
                   int64_t alignment) {
  auto bad = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  if (plan.offset.size() != values.size())
    return bad(str_cat("plan has ", plan.offset.size(), " offsets for ", values.size(), " values"));
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t o = plan.offset[i];
    if (!values[i].plannable) {
      if (o != -1) return bad(str_cat("value ", i, " is not plannable but has offset ", o));
      continue;
    }
    if (o < 0 || o % alignment != 0 || o + values[i].bytes > plan.arena_bytes)
      return bad(str_cat("value ", i, " (", values[i].bytes, " bytes) has offset ", o,
                         " outside the arena of ", plan.arena_bytes, " bytes or unaligned"));
  }
  auto in_place = [&](size_t a, size_t b) {  // b took a's buffer as a dies
    return values[b].inplace_from == static_cast<int>(a) && values[a].last_use == values[b].def &&
           plan.offset[a] == plan.offset[b];
  };
  auto inside = [&](size_t a, size_t b) {  // b is a piece placed inside a, read last there
    return values[b].within == static_cast<int>(a) && values[b].last_use <= values[a].def &&
           plan.offset[b] == plan.offset[a] + values[b].within_offset;
  };
  for (size_t i = 0; i < n; ++i) {
    if (!values[i].plannable) continue;
    for (size_t j = i + 1; j < n; ++j) {
      if (!values[j].plannable) continue;
      const ValueLife &a = values[i], &b = values[j];
      if (!overlap_time(a.def, a.last_use, b.def, b.last_use) ||
          !overlap_space(plan.offset[i], a.bytes, plan.offset[j], b.bytes))
        continue;
      if (in_place(i, j) || in_place(j, i) || inside(i, j) || inside(j, i)) continue;
      return bad(str_cat("values ", i, " [", a.def, ", ", a.last_use, "] at ", plan.offset[i], "+",
                         a.bytes, " and ", j, " [", b.def, ", ", b.last_use, "] at ",
                         plan.offset[j], "+", b.bytes, " overlap in time and space"));
    }
  }
  return true;
}

std::vector<ValueLife> program_lifetimes(const Program& p, int64_t* dynamic) {
  LifetimeWalk w(p);
  w.walk();
  w.keep_fetched(p.fetches);
  w.find_in_place();
  if (dynamic) *dynamic = w.dynamic;
  return std::move(w.lives);
}

MemoryPlan plan_program_memory(const Program& p) {
  int64_t dyn = 0;
  std::vector<ValueLife> lives = program_lifetimes(p, &dyn);
  MemoryPlan plan = plan_memory(lives);
  plan.dynamic = dyn;
  return plan;
}

}  // namespace kiln::detail
