// Evaluation of a plan's layout at new sizes: shapes by inference over stand-ins, offsets along
// the placement made once at the recorded sizes (kiln/exec/sym_layout.h).
#include "kiln/exec/sym_layout.h"

#include <algorithm>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/ops/handles.h"

namespace kiln::detail {
namespace {

constexpr int64_t kAlign = 64;

bool overlap(const ValueLife& a, const ValueLife& b) {
  return a.def <= b.last_use && b.def <= a.last_use;
}

bool is_size_scalar(DType d, const Shape& s) {
  return s.rank() == 0 && (is_integral(d) || d == Bool);
}

}  // namespace

SymbolicLayout::SymbolicLayout(std::vector<LayoutStep> steps, std::vector<DType> dtypes,
                               const std::vector<std::pair<int, Tensor>>& constants,
                               const std::vector<std::pair<int, Tensor>>& variables,
                               std::vector<int> fed, const std::vector<ValueLife>& life,
                               const MemoryPlan& plan)
    : steps_(std::move(steps)),
      dtypes_(std::move(dtypes)),
      fixed_(dtypes_.size()),
      constant_(dtypes_.size(), 0),
      fed_(std::move(fed)),
      scratch_(std::make_shared<GraphImpl>()) {
  for (const auto& [s, t] : constants) {
    fixed_[static_cast<size_t>(s)] = t;
    constant_[static_cast<size_t>(s)] = 1;
  }
  for (const auto& [s, t] : variables) fixed_[static_cast<size_t>(s)] = t;
  for (size_t s = 0; s < plan.offset.size(); ++s)
    if (plan.offset[s] >= 0) order_.push_back(static_cast<int>(s));
  // Ties (empty buffers at the recorded sizes) keep slot order, so "below" is a strict order.
  std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) {
    return plan.offset[static_cast<size_t>(a)] < plan.offset[static_cast<size_t>(b)];
  });
  below_.resize(plan.offset.size());
  for (size_t i = 0; i < order_.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (overlap(life[static_cast<size_t>(order_[i])], life[static_cast<size_t>(order_[j])]))
        below_[static_cast<size_t>(order_[i])].push_back(order_[j]);
  stand_.resize(dtypes_.size());
  for (size_t s = 0; s < dtypes_.size(); ++s) {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::Placeholder;
    n->outputs.push_back(TensorMeta{dtypes_[s], Shape{}});
    auto impl = make_tensor_impl();
    impl->dtype = dtypes_[s];
    impl->sym = std::make_shared<SymbolicValue>(SymbolicValue{scratch_, n.get(), 0});
    scratch_->add_node(std::move(n));
    stand_[s] = Tensor(std::move(impl));
  }
}

SymbolicLayout::~SymbolicLayout() = default;

bool SymbolicLayout::shapes(const std::vector<Shape>& feeds, std::vector<Shape>& out) {
  const size_t N = dtypes_.size();
  out.assign(N, Shape{});
  std::vector<char> known(N, 0);
  std::vector<Tensor> host(N);  // values of 0-d integer slots computed from sizes alone
  auto set_shape = [&](int s, const Shape& sh) {
    out[static_cast<size_t>(s)] = sh;
    known[static_cast<size_t>(s)] = 1;
    TensorImpl* impl = stand_[static_cast<size_t>(s)].impl();
    impl->shape = sh;
    impl->strides = contiguous_strides(sh);
    impl->sym->node->outputs[0].shape = sh;
  };
  for (size_t k = 0; k < fed_.size(); ++k) set_shape(fed_[k], feeds[k]);
  for (size_t s = 0; s < N; ++s) {
    const Tensor& t = fixed_[s];
    if (!t.defined()) continue;
    set_shape(static_cast<int>(s), t.shape());
    if (constant_[s] && is_size_scalar(t.dtype(), t.shape())) host[s] = t;
  }
  TensorList ins;
  try {
    for (const auto& st : steps_) {
      const auto& in = *st.in;
      const auto& outs = *st.out;
      ins.clear();
      bool all_host = true;
      for (int x : in) {
        if (!known[static_cast<size_t>(x)]) return false;
        const Tensor& h = host[static_cast<size_t>(x)];
        const Tensor& f = fixed_[static_cast<size_t>(x)];
        all_host = all_host && h.defined();
        ins.push_back(h.defined() ? h : f.defined() ? f : stand_[static_cast<size_t>(x)]);
      }
      if (st.op == ops::sym_size) {
        const Shape& x = out[static_cast<size_t>(in[0])];
        const int64_t d = wrap_dim(st.attrs->i(0), x, "sym_size");
        host[static_cast<size_t>(outs[0])] = scalar_tensor(static_cast<double>(x[d]), Int64);
        set_shape(outs[0], Shape{});
        continue;
      }
      const size_t P = st.patches->size();
      // Size arithmetic (0-d integers from sizes and constants) runs on the host, so the sizes
      // it feeds to later steps are known before the run.
      if (P == 0 && all_host && !in.empty() && st.op->kernel && !st.op->has(kRandom) &&
          !st.op->has(kSideEffect)) {
        TensorList r =
            run_kernel(*st.op, std::span<const Tensor>(ins.data(), ins.size()), *st.attrs);
        for (size_t o = 0; o < outs.size(); ++o) {
          if (is_size_scalar(r[o].dtype(), r[o].shape())) host[static_cast<size_t>(outs[o])] = r[o];
          set_shape(outs[o], r[o].shape());
        }
        continue;
      }
      MetaList metas;
      if (P == 0) {
        metas = st.op->infer(std::span<const Tensor>(ins.data(), ins.size()), *st.attrs);
      } else {  // symbolic sizes: their values must be known from the sizes alone
        Attrs a = *st.attrs;
        for (size_t k = 0; k < P; ++k) {
          const Tensor& v = host[static_cast<size_t>(in[in.size() - P + k])];
          if (!v.defined()) return false;
          const SizePatch& p = (*st.patches)[k];
          a.set_int(static_cast<size_t>(p.attr), p.elem, v.item<int64_t>());
        }
        metas = st.op->infer(std::span<const Tensor>(ins.data(), ins.size() - P), a);
      }
      if (metas.size() != outs.size()) return false;
      for (size_t o = 0; o < outs.size(); ++o) {
        if (!metas[o].shape.is_static() || metas[o].dtype != dtypes_[static_cast<size_t>(outs[o])])
          return false;
        set_shape(outs[o], metas[o].shape);
      }
    }
  } catch (const std::exception&) {
    return false;  // inference refused these sizes: the executor's generic path will say why
  }
  return true;
}

int64_t SymbolicLayout::offsets(const std::vector<int64_t>& bytes,
                                std::vector<int64_t>& offset) const {
  offset.assign(bytes.size(), -1);
  int64_t arena = 0;
  for (int s : order_) {
    int64_t at = 0;
    for (int u : below_[static_cast<size_t>(s)])
      at = std::max(at, offset[static_cast<size_t>(u)] + bytes[static_cast<size_t>(u)]);
    at = (at + kAlign - 1) / kAlign * kAlign;
    offset[static_cast<size_t>(s)] = at;
    arena = std::max(arena, at + bytes[static_cast<size_t>(s)]);
  }
  return arena;
}

}  // namespace kiln::detail
