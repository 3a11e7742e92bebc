// unique_rows: the distinct rows of a tensor (its elements, or its slices along a dim) with
// static output shapes, so a graph can hold it: the first-occurrence index of each distinct row
// compacted first (-1 after), each row's group, the counts (0 after) and how many there are.
// Its public form slices to that count, a size the graph reads at run (ONNX's Unique; torch's
// unique reads the values on the host instead, kiln/ops/mask_ops.cpp).
#include <algorithm>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"
#include "kiln/ops/sym_int.h"

using namespace kiln::detail;

namespace kiln {
namespace {

// attrs: dim, flatten (then dim is ignored), sorted. Rows: the elements (flatten) or the slices
// along dim.
int64_t row_count(const Tensor& x, const Attrs& a, const char* op) {
  if (a.b(1)) return x.numel();
  if (x.dim() == 0) fail(op, "a 0-d input has no dim ", a.i(0), "; flatten it");
  return x.size(wrap_dim(a.i(0), x.shape(), op));
}

MetaList infer_unique_rows(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "unique_rows";
  const Tensor& x = in[0];
  if (!x.shape().is_static())
    fail(op, "needs a static size: the outputs are sized by the row count, got ", x.shape());
  (void)a.b(2);
  const int64_t R = row_count(x, a, op);
  MetaList m;
  for (int k = 0; k < 3; ++k) m.push_back(TensorMeta{Int64, Shape{R}});
  m.push_back(TensorMeta{Int64, Shape{}});
  return m;
}

template <typename T>
void unique_kernel_typed(const Tensor& x, std::span<Tensor> out, const Attrs& a) {
  const int64_t R = row_count(x, a, "unique_rows");
  // Rows as runs of W values, in the order of x with the dim moved first (x is contiguous).
  const std::vector<T> flat = x.to_vector<T>();
  std::vector<T> v = flat;
  if (!a.b(1) && R > 0) {
    const int64_t d = wrap_dim(a.i(0), x.shape(), "unique_rows");
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
    for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
    for (int64_t r = 0, at = 0; r < R; ++r)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) v[at++] = flat[(o * R + r) * inner + i];
  }
  const int64_t W = R ? static_cast<int64_t>(v.size()) / R : 0;
  auto less = [&](int64_t p, int64_t q) {
    return std::lexicographical_compare(v.begin() + p * W, v.begin() + (p + 1) * W,
                                        v.begin() + q * W, v.begin() + (q + 1) * W);
  };
  auto same = [&](int64_t p, int64_t q) {
    return std::equal(v.begin() + p * W, v.begin() + (p + 1) * W, v.begin() + q * W);
  };
  std::vector<int64_t> order(static_cast<size_t>(R));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), less);  // equal rows: the first one first
  std::vector<int64_t> first, group(static_cast<size_t>(R));
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || !same(order[k - 1], order[k])) first.push_back(order[k]);
    group[static_cast<size_t>(order[k])] = static_cast<int64_t>(first.size()) - 1;
  }
  const size_t U = first.size();
  std::vector<int64_t> rank(U);
  std::iota(rank.begin(), rank.end(), int64_t{0});
  if (!a.b(2)) {  // in the order they first occur
    std::vector<int64_t> by_pos(U);
    std::iota(by_pos.begin(), by_pos.end(), int64_t{0});
    std::sort(by_pos.begin(), by_pos.end(),
              [&](int64_t p, int64_t q) { return first[p] < first[q]; });
    std::vector<int64_t> reordered(U);
    for (size_t k = 0; k < U; ++k) {
      rank[static_cast<size_t>(by_pos[k])] = static_cast<int64_t>(k);
      reordered[k] = first[static_cast<size_t>(by_pos[k])];
    }
    first = reordered;
  }
  int64_t* fo = out[0].data_ptr<int64_t>();
  int64_t* inv = out[1].data_ptr<int64_t>();
  int64_t* cnt = out[2].data_ptr<int64_t>();
  std::fill(fo, fo + R, int64_t{-1});
  std::fill(cnt, cnt + R, int64_t{0});
  for (size_t u = 0; u < U; ++u) fo[u] = first[u];
  for (int64_t r = 0; r < R; ++r) {
    inv[r] = rank[static_cast<size_t>(group[static_cast<size_t>(r)])];
    ++cnt[inv[r]];
  }
  *out[3].data_ptr<int64_t>() = static_cast<int64_t>(U);
}

void unique_rows_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (is_floating(in[0].dtype()))
    unique_kernel_typed<double>(in[0], out, a);
  else
    unique_kernel_typed<int64_t>(in[0], out, a);
}

const OpDef& kUniqueRows =
    def_op({.name = "unique_rows",
            .num_outputs = 4,
            .attr_names = {"dim", "flatten", "sorted"},
            .traits = kStaticShapes,
            .infer = infer_unique_rows,
            .kernel = unique_rows_kernel,
            .contiguous_inputs = true,
            .doc = "distinct rows (elements or slices along dim): first-occurrence indices "
                   "compacted first, each row's group, counts, and how many. Static shapes: the "
                   "outputs are sized by the row count, which a dynamic dim does not give",
            .native_dtypes = kAllDTypes});

}  // namespace

UniqueRows unique_rows(const Tensor& x, std::optional<int64_t> dim, bool sorted) {
  if (!x.defined()) fail("unique_rows", "input is undefined");
  TensorList r = call(kUniqueRows, {x}, {dim.value_or(0), !dim.has_value(), sorted});
  const SymInt n =
      r[3].is_concrete() ? SymInt(r[3].to_vector<int64_t>()[0]) : SymInt(r[3], SymInt::kNoHint);
  UniqueRows u;
  u.indices = slice(r[0], 0, 0, n);
  u.inverse = r[1];
  u.counts = slice(r[2], 0, 0, n);
  u.values = dim ? index_select(x, *dim, u.indices)
                 : index_select(reshape(x, Shape{x.numel()}), 0, u.indices);
  return u;
}

}  // namespace kiln
