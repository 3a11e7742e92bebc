// Samples for unique_rows (kiln/ops/unique_rows.cpp): the distinct elements or slices of a
// tensor with duplicates, sorted or in first-occurrence order, against a plain reference that
// scans the rows in order.
#include <algorithm>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

struct RefUnique {
  std::vector<std::vector<double>> rows;  // distinct rows, in output order
  std::vector<double> inverse, counts;
};

// Rows of x along dim (every element when dim < 0), distinct ones kept in first-occurrence
// order, then sorted lexicographically when asked.
RefUnique ref_unique(const Tensor& x, int64_t dim, bool sorted) {
  const auto v = vals(x);
  std::vector<std::vector<double>> rows;
  if (dim < 0) {
    for (double e : v) rows.push_back({e});
  } else {
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < dim; ++k) outer *= x.size(k);
    for (int64_t k = dim + 1; k < x.dim(); ++k) inner *= x.size(k);
    for (int64_t r = 0; r < x.size(dim); ++r) {
      std::vector<double> row;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i)
          row.push_back(v[static_cast<size_t>((o * x.size(dim) + r) * inner + i)]);
      rows.push_back(row);
    }
  }
  RefUnique u;
  for (const auto& r : rows)
    if (std::find(u.rows.begin(), u.rows.end(), r) == u.rows.end()) u.rows.push_back(r);
  if (sorted) std::sort(u.rows.begin(), u.rows.end());
  u.counts.assign(u.rows.size(), 0);
  for (const auto& r : rows) {
    const auto at = std::find(u.rows.begin(), u.rows.end(), r) - u.rows.begin();
    u.inverse.push_back(static_cast<double>(at));
    u.counts[static_cast<size_t>(at)] += 1;
  }
  return u;
}

// A [3, 4, 2] tensor whose dim-1 slices 0 and 2 are equal and whose elements repeat.
Tensor with_duplicates() {
  return from_vals({1, 2, 0, 5, 1, 2, 3, 3, 4, 0, 2, 2, 4, 0, 1, 1, 9, 9, 1, 0, 9, 9, 0, 2},
                   Shape{3, 4, 2});
}

const SampleRegistrar reg([] {
  std::vector<OpSample> v;
  for (int64_t dim : {-1, 1, 0})
    for (bool sorted : {true, false}) {
      OpSample o;
      o.ops = {"unique_rows"};
      o.name = str_cat("unique_rows_values_dim", dim, sorted ? "_sorted" : "_first_seen");
      o.inputs = [] { return In{with_duplicates()}; };
      o.run = [dim, sorted](const In& in) {
        return unique_rows(in[0], dim < 0 ? std::nullopt : std::optional<int64_t>(dim), sorted)
            .values;
      };
      o.reference = [dim, sorted](const In& in) {
        RefUnique u = ref_unique(in[0], dim, sorted);
        std::vector<double> flat;
        for (const auto& r : u.rows) flat.insert(flat.end(), r.begin(), r.end());
        if (dim < 0) return from_vals(flat, Shape{static_cast<int64_t>(u.rows.size())});
        // The distinct slices back in x's layout: [.., U, ..] with the rows along dim.
        Shape s = in[0].shape();
        s[dim] = static_cast<int64_t>(u.rows.size());
        int64_t outer = 1, inner = 1;
        for (int64_t k = 0; k < dim; ++k) outer *= s[k];
        for (int64_t k = dim + 1; k < s.rank(); ++k) inner *= s[k];
        std::vector<double> out(flat.size());
        for (int64_t r = 0; r < s[dim]; ++r)
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i)
              out[static_cast<size_t>((o * s[dim] + r) * inner + i)] =
                  u.rows[static_cast<size_t>(r)][static_cast<size_t>(o * inner + i)];
        return from_vals(out, s);
      };
      o.differentiable = false;
      v.push_back(std::move(o));
    }
  {
    OpSample o;  // inverse indices then counts, in the input's float type
    o.ops = {"unique_rows"};
    o.name = "unique_rows_inverse_and_counts";
    o.inputs = [] { return In{with_duplicates()}; };
    o.run = [](const In& in) {
      UniqueRows u = unique_rows(in[0], 1, false);
      return cast(cat({u.inverse, u.counts}, 0), in[0].dtype());
    };
    o.reference = [](const In& in) {
      RefUnique u = ref_unique(in[0], 1, false);
      std::vector<double> out = u.inverse;
      out.insert(out.end(), u.counts.begin(), u.counts.end());
      return from_vals(out, Shape{static_cast<int64_t>(out.size())});
    };
    o.differentiable = false;
    v.push_back(std::move(o));
  }
  return v;
}());

}  // namespace
}  // namespace kiln::testing
