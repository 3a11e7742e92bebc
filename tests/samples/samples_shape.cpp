// Samples for the shape family (kiln/ops/shape_ops.cpp): views (reshape, transpose, permute,
// slice, expand, squeeze, unsqueeze, detach, as_strided) and copies (clone, cast, cat, slice_grad
// through slice's gradient, as_strided_scatter). References index the row-major float64 data with
// naive loops.
#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/dispatch/dispatch.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using Idx = std::vector<int64_t>;
const std::vector<int> kNoNoncontig = {-1};

Idx unravel(int64_t i, const Shape& s) {
  Idx idx(static_cast<size_t>(s.rank()));
  for (int64_t d = s.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = i % s[d];
    i /= s[d];
  }
  return idx;
}
int64_t ravel(const Idx& idx, const Shape& s) {
  int64_t r = 0;
  for (int64_t d = 0; d < s.rank(); ++d) r = r * s[d] + idx[static_cast<size_t>(d)];
  return r;
}

// out[idx] = x[src(idx)] for every index of out_shape.
Tensor gather_ref(const Tensor& x, const Shape& out_shape,
                  const std::function<Idx(const Idx&)>& src) {
  auto xv = vals(x);
  std::vector<double> out(static_cast<size_t>(out_shape.numel()));
  for (int64_t i = 0; i < out_shape.numel(); ++i)
    out[static_cast<size_t>(i)] =
        xv[static_cast<size_t>(ravel(src(unravel(i, out_shape)), x.shape()))];
  return from_vals(out, out_shape);
}

OpSample one_in(const std::vector<std::string>& ops, const std::string& name,
                std::function<Tensor()> make, std::function<Tensor(const Tensor&)> run,
                std::function<Tensor(const Tensor&)> ref) {
  OpSample s;
  s.ops = ops;
  s.name = name;
  s.inputs = [make] { return In{make()}; };
  s.run = [run](const In& in) { return run(in[0]); };
  s.reference = [ref](const In& in) { return ref(in[0]); };
  return s;
}

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;

  // ---- reshape ----------------------------------------------------------------------------
  v.push_back(one_in(
      {"reshape"}, "merge_dims",
      [] {
        return rnd({2, 3, 4}, 1);
      },
      [](const Tensor& x) {
        return reshape(x, {6, 4});
      },
      [](const Tensor& x) {
        return from_vals(vals(x), {6, 4});
      }));
  v.push_back(one_in(
      {"reshape"}, "infer_minus_one",
      [] {
        return rnd({2, 3, 4}, 2);
      },
      [](const Tensor& x) {
        return reshape(x, {4, -1, 2});
      },
      [](const Tensor& x) {
        return from_vals(vals(x), {4, 3, 2});
      }));
  v.push_back(one_in(
      {"reshape"}, "to_scalar",
      [] {
        return rnd({1, 1}, 3);
      },
      [](const Tensor& x) { return reshape(x, {}); },
      [](const Tensor& x) { return from_vals(vals(x), {}); }));
  v.back().noncontig_inputs = kNoNoncontig;
  v.push_back(one_in(
      {"reshape"}, "flatten",
      [] {
        return rnd({2, 3, 4}, 4);
      },
      [](const Tensor& x) { return x.flatten(1); },
      [](const Tensor& x) {
        return from_vals(vals(x), {2, 12});
      }));

  // ---- transpose / permute --------------------------------------------------------------
  v.push_back(one_in(
      {"transpose"}, "outer_dims",
      [] {
        return rnd({2, 3, 4}, 5);
      },
      [](const Tensor& x) { return transpose(x, 0, 2); },
      [](const Tensor& x) {
        return gather_ref(x, {4, 3, 2}, [](const Idx& i) { return Idx{i[2], i[1], i[0]}; });
      }));
  v.push_back(one_in(
      {"transpose"}, "negative_dims_t",
      [] {
        return rnd({3, 5}, 6);
      },
      [](const Tensor& x) { return x.transpose(-1, -2); },
      [](const Tensor& x) {
        return gather_ref(x, {5, 3}, [](const Idx& i) { return Idx{i[1], i[0]}; });
      }));
  v.push_back(one_in(
      {"permute"}, "rotate",
      [] {
        return rnd({2, 3, 4}, 7);
      },
      [](const Tensor& x) {
        return permute(x, {2, 0, 1});
      },
      [](const Tensor& x) {
        // out[a][b][c] = x[b][c][a]
        return gather_ref(x, {4, 2, 3}, [](const Idx& i) { return Idx{i[1], i[2], i[0]}; });
      }));
  v.push_back(one_in(
      {"permute"}, "negative_dims",
      [] {
        return rnd({2, 3, 4}, 8);
      },
      [](const Tensor& x) {
        return x.permute({-1, 1, 0});
      },
      [](const Tensor& x) {
        return gather_ref(x, {4, 3, 2}, [](const Idx& i) { return Idx{i[2], i[1], i[0]}; });
      }));

  // ---- split (its gradient is one cat; a piece nobody reads gets zeros) ---------------------
  v.push_back(one_in(
      {"split", "cat"}, "pieces_reordered",
      [] {
        return rnd({3, 5}, 31);
      },
      [](const Tensor& x) {
        auto p = split(x, std::vector<int64_t>{1, 2, 2}, 1);
        return cat({p[2], p[0], p[1]}, 1);
      },
      [](const Tensor& x) {
        return gather_ref(x, {3, 5}, [](const Idx& i) {
          int64_t c = i[1] < 2 ? 3 + i[1] : (i[1] == 2 ? 0 : i[1] - 2);
          return Idx{i[0], c};
        });
      }));
  v.push_back(one_in(
      {"split", "cat"}, "unused_piece_dim0",
      [] {
        return rnd({4, 2, 3}, 32);
      },
      [](const Tensor& x) {
        auto p = split(x, 1, 0);  // four [1, 2, 3] views; the second is never read
        return cat({p[3], p[0], p[2]}, 0);
      },
      [](const Tensor& x) {
        return gather_ref(x, {3, 2, 3}, [](const Idx& i) {
          const int64_t src[3] = {3, 0, 2};
          return Idx{src[i[0]], i[1], i[2]};
        });
      }));

  // ---- as_strided / as_strided_scatter (each the other's gradient) --------------------------
  struct Geo {
    const char* name;
    Shape base;
    Idx sizes, strides;
    int64_t offset;
  };
  const Geo geos[] = {
      {"column", {3, 4}, {3}, {4}, 1},
      {"block_transposed", {4, 5}, {2, 3}, {1, 5}, 6},
      {"every_other", {10}, {2, 2}, {2, 4}, 1},
      {"empty", {3, 4}, {0, 2}, {4, 1}, 0},
  };
  // Element positions of a geometry, in the row-major order of its sizes.
  auto positions = [](const Geo& g) {
    const Shape sz(g.sizes);
    std::vector<int64_t> p;
    for (int64_t i = 0; i < sz.numel(); ++i) {
      Idx id = unravel(i, sz);
      int64_t at = g.offset;
      for (size_t d = 0; d < id.size(); ++d) at += id[d] * g.strides[d];
      p.push_back(at);
    }
    return p;
  };
  uint64_t gseed = 60;
  for (const Geo& g : geos) {
    const uint64_t sd = gseed++;
    OpSample a;
    a.ops = {"as_strided", "as_strided_scatter"};
    a.name = g.name;
    a.inputs = [g, sd] { return In{rnd(g.base, sd)}; };
    a.run = [g](const In& in) { return as_strided(in[0], g.sizes, g.strides, g.offset); };
    a.reference = [g, positions](const In& in) {
      auto xv = vals(in[0]);
      std::vector<double> out;
      for (int64_t p : positions(g)) out.push_back(xv[static_cast<size_t>(p)]);
      return from_vals(out, Shape(g.sizes));
    };
    a.noncontig_inputs = kNoNoncontig;  // the base must be contiguous
    v.push_back(std::move(a));
    OpSample b;
    b.ops = {"as_strided_scatter", "as_strided"};
    b.name = g.name;
    b.inputs = [g, sd] { return In{rnd(g.base, sd + 100), rnd(Shape(g.sizes), sd + 200)}; };
    b.run = [g](const In& in) {
      return as_strided_scatter(in[0], in[1], g.sizes, g.strides, g.offset);
    };
    b.reference = [g, positions](const In& in) {
      auto xv = vals(in[0]), sv = vals(in[1]);
      const auto pos = positions(g);
      for (size_t i = 0; i < pos.size(); ++i) xv[static_cast<size_t>(pos[i])] = sv[i];
      return from_vals(xv, g.base);
    };
    v.push_back(std::move(b));
  }

  // ---- slice (its gradient is slice_grad) -------------------------------------------------
  v.push_back(one_in(
      {"slice", "slice_grad"}, "step_two",
      [] {
        return rnd({5, 6}, 9);
      },
      [](const Tensor& x) { return slice(x, 1, 1, 6, 2); },
      [](const Tensor& x) {
        return gather_ref(x, {5, 3}, [](const Idx& i) { return Idx{i[0], 1 + 2 * i[1]}; });
      }));
  v.push_back(one_in(
      {"slice", "slice_grad"}, "negative_start_clamped_end",
      [] {
        return rnd({5, 4}, 10);
      },
      [](const Tensor& x) { return x.slice(0, -3, 100); },
      [](const Tensor& x) {
        return gather_ref(x, {3, 4}, [](const Idx& i) { return Idx{i[0] + 2, i[1]}; });
      }));
  v.push_back(one_in(
      {"slice", "slice_grad"}, "step_three_3d",
      [] {
        return rnd({7, 2, 3}, 11);
      },
      [](const Tensor& x) { return slice(x, 0, 0, 7, 3); },
      [](const Tensor& x) {
        return gather_ref(x, {3, 2, 3}, [](const Idx& i) { return Idx{3 * i[0], i[1], i[2]}; });
      }));
  v.push_back(one_in(
      {"slice", "slice_grad"}, "narrow_select",
      [] {
        return rnd({4, 5}, 12);
      },
      [](const Tensor& x) { return x.narrow(1, 1, 3).select(0, -1); },
      [](const Tensor& x) {
        return gather_ref(x, {3}, [](const Idx& i) { return Idx{3, i[0] + 1}; });
      }));
  v.push_back(one_in(
      {"slice", "slice_grad"}, "split_piece",
      [] {
        return rnd({5, 3}, 13);
      },
      [](const Tensor& x) {
        return split(x, {2, 3}, 0)[1];
      },
      [](const Tensor& x) {
        return gather_ref(x, {3, 3}, [](const Idx& i) { return Idx{i[0] + 2, i[1]}; });
      }));
  v.push_back(one_in(
      {"slice", "slice_grad"}, "chunk_piece",
      [] {
        return rnd({2, 7}, 14);
      },
      [](const Tensor& x) { return chunk(x, 3, 1)[2]; },
      [](const Tensor& x) {
        // 7 in 3 chunks: sizes 3, 3, 1
        return gather_ref(x, {2, 1}, [](const Idx& i) { return Idx{i[0], 6}; });
      }));

  // ---- expand -----------------------------------------------------------------------------
  v.push_back(one_in(
      {"expand"}, "broadcast_new_dims",
      [] {
        return rnd({3, 1}, 15);
      },
      [](const Tensor& x) {
        return expand(x, {2, 3, 4});
      },
      [](const Tensor& x) {
        return gather_ref(x, {2, 3, 4}, [](const Idx& i) { return Idx{i[1], 0}; });
      }));
  v.back().noncontig_inputs = kNoNoncontig;
  v.push_back(one_in(
      {"expand"}, "minus_one_keeps_dim",
      [] {
        return rnd({1, 3}, 16);
      },
      [](const Tensor& x) {
        return x.expand({4, -1});
      },
      [](const Tensor& x) {
        return gather_ref(x, {4, 3}, [](const Idx& i) { return Idx{0, i[1]}; });
      }));
  v.back().noncontig_inputs = kNoNoncontig;
  v.push_back(one_in(
      {"expand"}, "scalar", [] { return rnd({}, 17); },
      [](const Tensor& x) {
        return expand(x, {2, 2});
      },
      [](const Tensor& x) {
        return gather_ref(x, {2, 2}, [](const Idx&) { return Idx{}; });
      }));

  {
    OpSample s;
    s.ops = {"expand_as"};
    s.name = "to_shape_of_other";
    s.inputs = [] { return In{rnd({3, 1}, 29), rnd({2, 3, 4}, 39)}; };
    s.run = [](const In& in) { return expand_as(in[0], in[1]); };
    s.reference = [](const In& in) {
      return gather_ref(in[0], {2, 3, 4}, [](const Idx& i) { return Idx{i[1], 0}; });
    };
    s.noncontig_inputs = {1};
    v.push_back(std::move(s));
  }

  // ---- squeeze / unsqueeze ------------------------------------------------------------------
  v.push_back(one_in(
      {"squeeze"}, "all",
      [] {
        return rnd({2, 1, 3, 4}, 18);
      },
      [](const Tensor& x) { return squeeze(x); },
      [](const Tensor& x) {
        return from_vals(vals(x), {2, 3, 4});
      }));
  v.push_back(one_in(
      {"squeeze"}, "one_dim",
      [] {
        return rnd({1, 2, 1, 3, 4}, 19);
      },
      [](const Tensor& x) { return x.squeeze(0); },
      [](const Tensor& x) {
        return from_vals(vals(x), {2, 1, 3, 4});
      }));
  v.push_back(one_in(
      {"squeeze"}, "non_unit_dim_is_kept",
      [] {
        return rnd({2, 3}, 20);
      },
      [](const Tensor& x) { return x.squeeze(1); },
      [](const Tensor& x) {
        return from_vals(vals(x), {2, 3});
      }));
  v.push_back(one_in(
      {"unsqueeze"}, "middle",
      [] {
        return rnd({2, 3}, 21);
      },
      [](const Tensor& x) { return unsqueeze(x, 1); },
      [](const Tensor& x) {
        return from_vals(vals(x), {2, 1, 3});
      }));
  v.push_back(one_in(
      {"unsqueeze"}, "last_negative",
      [] {
        return rnd({2, 3}, 22);
      },
      [](const Tensor& x) { return x.unsqueeze(-1); },
      [](const Tensor& x) {
        return from_vals(vals(x), {2, 3, 1});
      }));

  // ---- detach / clone / cast ----------------------------------------------------------------
  v.push_back(one_in(
      {"detach"}, "basic",
      [] {
        return rnd({2, 3}, 23);
      },
      [](const Tensor& x) { return detach(x); },
      [](const Tensor& x) { return from_vals(vals(x), x.shape()); }));
  v.back().differentiable = false;  // no gradient flows through detach
  v.push_back(one_in(
      {"clone"}, "basic",
      [] {
        return rnd({2, 3}, 24);
      },
      [](const Tensor& x) { return clone(x); },
      [](const Tensor& x) { return from_vals(vals(x), x.shape()); }));
  v.push_back(one_in(
      {"clone"}, "contiguous_of_transpose",
      [] {
        return rnd({3, 4}, 25);
      },
      [](const Tensor& x) { return x.t().contiguous(); },
      [](const Tensor& x) {
        return gather_ref(x, {4, 3}, [](const Idx& i) { return Idx{i[1], i[0]}; });
      }));
  v.back().ops = {"clone", "transpose"};
  auto to_f32_ref = [](const Tensor& x) {
    auto xv = vals(x);
    for (auto& e : xv) e = static_cast<double>(static_cast<float>(e));
    return from_vals(xv, x.shape());
  };
  v.push_back(one_in(
      {"cast"}, "f64_to_f32",
      [] {
        return rnd({2, 3}, 26);
      },
      [](const Tensor& x) { return cast(x, Float32); }, to_f32_ref));
  v.back().differentiable = false;  // rounding to float32 swamps central differences
  // Small magnitudes: float32 rounding error stays far below the finite-difference step.
  v.push_back(one_in(
      {"cast"}, "f64_to_f32_small_values",
      [] {
        return uni({2, 3}, 27, 1e-3, 2e-3);
      },
      [](const Tensor& x) { return x.to(Float32); }, to_f32_ref));
  v.back().gc_atol = 1e-3;
  v.back().gc_rtol = 1e-2;
  v.push_back(one_in(
      {"cast"}, "to_int64_truncates",
      [] {
        return uni({2, 3}, 28, -5, 5);
      },
      [](const Tensor& x) { return cast(x, Int64); },
      [](const Tensor& x) {
        auto xv = vals(x);
        for (auto& e : xv) e = std::trunc(e);
        return from_vals(xv, x.shape());
      }));
  v.back().differentiable = false;
  v.push_back(one_in(
      {"cast"}, "to_bool",
      [] {
        return from_vals({0, 1.5, -2, 0, 0.25, 0}, {2, 3});
      },
      [](const Tensor& x) { return cast(x, Bool); },
      [](const Tensor& x) {
        auto xv = vals(x);
        for (auto& e : xv) e = e != 0 ? 1.0 : 0.0;
        return from_vals(xv, x.shape());
      }));
  v.back().differentiable = false;

  // ---- cat / stack ----------------------------------------------------------------------------
  {
    OpSample s;
    s.ops = {"cat"};
    s.name = "three_inputs_dim0";
    s.inputs = [] { return In{rnd({2, 3}, 30), rnd({4, 3}, 31), rnd({1, 3}, 32)}; };
    s.run = [](const In& in) { return cat(in, 0); };
    s.reference = [](const In& in) {
      std::vector<double> out;
      for (const auto& t : in)
        for (double e : vals(t)) out.push_back(e);
      return from_vals(out, {7, 3});
    };
    s.noncontig_inputs = {0, 1};
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"cat"};
    s.name = "three_inputs_last_dim";
    s.inputs = [] { return In{rnd({2, 3}, 33), rnd({2, 1}, 34), rnd({2, 2}, 35)}; };
    s.run = [](const In& in) { return cat(in, -1); };
    s.reference = [](const In& in) {
      std::vector<double> out;
      for (int64_t r = 0; r < 2; ++r)
        for (const auto& t : in) {
          auto tv = vals(t);
          int64_t w = t.shape()[1];
          for (int64_t c = 0; c < w; ++c) out.push_back(tv[static_cast<size_t>(r * w + c)]);
        }
      return from_vals(out, {2, 6});
    };
    s.noncontig_inputs = {0, 2};
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"cat", "unsqueeze"};
    s.name = "stack_dim1";
    s.inputs = [] { return In{rnd({2, 3}, 36), rnd({2, 3}, 37)}; };
    s.run = [](const In& in) { return stack(in, 1); };
    s.reference = [](const In& in) {
      auto a = vals(in[0]), b = vals(in[1]);
      std::vector<double> out;
      for (size_t r = 0; r < 2; ++r) {
        for (size_t c = 0; c < 3; ++c) out.push_back(a[r * 3 + c]);
        for (size_t c = 0; c < 3; ++c) out.push_back(b[r * 3 + c]);
      }
      return from_vals(out, {2, 2, 3});
    };
    v.push_back(std::move(s));
  }
  // slice_grad with its shape from a second input (the slice of a dynamic dim): g into rows 1
  // and 3 of zeros shaped like input 1.
  {
    OpSample s;
    s.ops = {"slice_grad"};
    s.name = "shape_from_like_rows_1_3";
    s.inputs = [] { return In{rnd({2, 3}, 44), rnd({5, 3}, 45)}; };
    s.run = [](const In& in) {
      return call(OpRegistry::get().at("slice_grad"), {in[0], in[1]},
                  {std::vector<int64_t>{}, int64_t(0), int64_t(1), int64_t(5), int64_t(2)})[0];
    };
    s.reference = [](const In& in) {
      auto g = vals(in[0]);
      std::vector<double> out(15, 0.0);
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c)
          out[static_cast<size_t>((1 + 2 * r) * 3 + c)] = g[static_cast<size_t>(r * 3 + c)];
      return from_vals(out, {5, 3});
    };
    v.push_back(std::move(s));
  }
  // split_like: cat's gradient when a size along dim is only known at run time. Rows 2..4 of g,
  // sized like input 2 (its values are not read).
  {
    OpSample s;
    s.ops = {"split_like"};
    s.name = "middle_piece_dim0";
    s.inputs = [] { return In{rnd({5, 3}, 41), rnd({2, 3}, 42), rnd({3, 3}, 43)}; };
    s.run = [](const In& in) {
      return call(OpRegistry::get().at("split_like"), {in[0], in[1], in[2]}, {int64_t(0)})[1];
    };
    s.reference = [](const In& in) {
      auto g = vals(in[0]);
      return from_vals(std::vector<double>(g.begin() + 6, g.end()), {3, 3});
    };
    v.push_back(std::move(s));
  }
  return v;
}

static SampleRegistrar reg(make_samples());

// ---- indexing primitives with torch names: scatter (overwrite and reductions), index_put,
// searchsorted. Overwrite samples use indices without repeats per destination (a repeated
// write keeps one value, whose gradient finite differences cannot see).

using I64 = std::vector<int64_t>;

Tensor ref_scatter(const Tensor& a, int64_t dim, const Tensor& ix, const Tensor& src,
                   const std::string& red, bool self) {
  auto out = vals(a);
  auto iv = ix.to_vector<int64_t>();
  auto sv = vals(src);
  std::vector<int64_t> cnt(out.size(), self || red == "none" ? 1 : 0);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    Idx c = unravel(i, ix.shape());
    const double val = sv[static_cast<size_t>(ravel(c, src.shape()))];
    c[static_cast<size_t>(dim)] = iv[static_cast<size_t>(i)];
    const size_t p = static_cast<size_t>(ravel(c, a.shape()));
    double& o = out[p];
    if (cnt[p] == 0 || red == "none")
      o = val;
    else if (red == "sum" || red == "mean")
      o += val;
    else if (red == "prod")
      o *= val;
    else if (red == "amax")
      o = std::max(o, val);
    else
      o = std::min(o, val);
    ++cnt[p];
  }
  if (red == "mean")
    for (size_t p = 0; p < out.size(); ++p)
      if (cnt[p] > 1) out[p] /= static_cast<double>(cnt[p]);
  return from_vals(out, a.shape());
}

// values[b..., rest...] broadcast from v's shape (right-aligned, size-1 dims repeat).
double bcast_at(const std::vector<double>& v, const Shape& vs, const Idx& c) {
  int64_t r = 0;
  const size_t off = c.size() - static_cast<size_t>(vs.rank());
  for (int64_t d = 0; d < vs.rank(); ++d)
    r = r * vs[d] + (vs[d] == 1 ? 0 : c[off + static_cast<size_t>(d)]);
  return v[static_cast<size_t>(r)];
}

Tensor ref_index_put(const Tensor& a, const std::vector<Tensor>& ix, const Tensor& values,
                     bool acc) {
  auto out = vals(a);
  auto vv = vals(values);
  const Shape& as = a.shape();
  const int64_t k = static_cast<int64_t>(ix.size());
  Shape B = ix[0].shape();
  std::vector<I64> iv;
  for (const auto& t : ix) iv.push_back(t.to_vector<int64_t>());
  Shape rest, full = B;
  for (int64_t d = k; d < as.rank(); ++d) {
    rest.push_back(as[d]);
    full.push_back(as[d]);
  }
  for (int64_t q = 0; q < full.numel(); ++q) {
    const Idx c = unravel(q, full);
    Idx dst;
    const int64_t p = q / rest.numel();
    for (int64_t i = 0; i < k; ++i) {
      int64_t x = iv[static_cast<size_t>(i)][static_cast<size_t>(p)];
      dst.push_back(x < 0 ? x + as[i] : x);
    }
    for (int64_t d = B.rank(); d < full.rank(); ++d) dst.push_back(c[static_cast<size_t>(d)]);
    double& o = out[static_cast<size_t>(ravel(dst, as))];
    const double val = bcast_at(vv, values.shape(), c);
    o = acc ? o + val : val;
  }
  return from_vals(out, as);
}

std::vector<OpSample> make_index_samples() {
  std::vector<OpSample> v;
  auto sc = [](std::string name, std::string red, bool self, Shape as, int64_t dim, I64 iv,
               Shape is, Shape ss, bool i32 = false) {
    OpSample o;
    o.ops = {"scatter", "gather"};
    o.name = std::move(name);
    o.inputs = [as, iv, is, ss, i32] {
      Tensor ix = tensor(iv, is);
      return In{rnd(as, 151), i32 ? cast(ix, Int32) : ix, rnd(ss, 152)};
    };
    o.run = [dim, red, self](const In& in) {
      if (red == "none") return scatter(in[0], dim, in[1], in[2]);
      return scatter_reduce(in[0], dim, in[1], in[2], red, self);
    };
    o.reference = [dim, red, self](const In& in) {
      return ref_scatter(in[0], dim < 0 ? dim + in[0].dim() : dim, in[1], in[2], red, self);
    };
    o.differentiable = red != "prod";
    o.noncontig_inputs = {0, 2};
    return o;
  };
  // Distinct destinations per column for the overwrite; repeats for the reductions.
  v.push_back(sc("none_dim0", "none", true, {3, 4}, 0, {2, 0, 1, 2, 0, 1, 2, 0}, {2, 4}, {2, 4}));
  v.push_back(sc("none_dim1_src_larger_int32", "none", true, {3, 4}, -1, {3, 0, 1, 2, 0, 3}, {3, 2},
                 {3, 3}, true));
  v.push_back(sc("sum_repeats", "sum", true, {3, 4}, 1, {0, 0, 3, 1, 2, 2}, {3, 2}, {3, 2}));
  v.push_back(sc("sum_exclude_self", "sum", false, {3, 4}, 1, {0, 0, 3, 1, 2, 2}, {3, 2}, {3, 2}));
  v.push_back(sc("mean_repeats", "mean", true, {4, 3}, 0, {0, 0, 2, 3, 0, 2}, {2, 3}, {2, 3}));
  v.push_back(
      sc("mean_exclude_self", "mean", false, {4, 3}, 0, {0, 0, 2, 3, 0, 2}, {2, 3}, {2, 3}));
  v.push_back(sc("amax", "amax", true, {3, 4}, 1, {0, 0, 3, 1, 2, 2}, {3, 2}, {3, 2}));
  v.push_back(sc("amin_exclude_self", "amin", false, {2, 3, 2}, 1,
                 {0, 2, 0, 0, 1, 1, 2, 0, 2, 1, 0, 0}, {2, 3, 2}, {2, 3, 2}));
  v.push_back(sc("prod_forward", "prod", true, {3, 4}, 1, {0, 0, 3, 1, 2, 2}, {3, 2}, {3, 2}));

  auto ip = [](std::string name, bool acc, Shape as, std::vector<I64> ivs, Shape is, Shape vs,
               bool i32 = false) {
    OpSample o;
    o.ops = {"index_put", "index_select"};
    o.name = std::move(name);
    o.inputs = [as, ivs, is, vs, i32] {
      In in{rnd(as, 161), rnd(vs, 162)};
      for (const auto& iv : ivs) {
        Tensor t = tensor(iv, is);
        in.push_back(i32 ? cast(t, Int32) : t);
      }
      return in;
    };
    o.run = [acc](const In& in) {
      return index_put(in[0], std::vector<Tensor>(in.begin() + 2, in.end()), in[1], acc);
    };
    o.reference = [acc](const In& in) {
      return ref_index_put(in[0], std::vector<Tensor>(in.begin() + 2, in.end()), in[1], acc);
    };
    o.noncontig_inputs = {0};
    return o;
  };
  v.push_back(ip("rows", false, {4, 3}, {{2, 0}}, {2}, {2, 3}));
  v.push_back(ip("rows_accumulate_repeats", true, {4, 3}, {{2, 0, 2, -1}}, {4}, {4, 3}));
  v.push_back(
      ip("two_dims_negative_int32", false, {3, 4, 2}, {{0, -1, 1}, {3, 0, -4}}, {3}, {3, 2}, true));
  v.push_back(ip("broadcast_values", true, {3, 4}, {{1, 1, 0}, {2, 2, 3}}, {3}, {1}));
  v.push_back(ip("matrix_index", false, {5, 2}, {{4, 0, 1, 3}}, {2, 2}, {2, 2, 2}));

  auto ss = [](std::string name, Shape seq, Shape vals_shape, bool right, bool i32) {
    OpSample o;
    o.ops = {"searchsorted"};
    o.name = std::move(name);
    o.inputs = [seq, vals_shape] {
      // Rows sorted ascending, with a repeat so `right` matters; values hit entries exactly too.
      std::vector<double> s = vals(rnd(seq, 171));
      const int64_t m = seq[seq.rank() - 1];
      for (size_t r = 0; r < s.size(); r += static_cast<size_t>(m)) {
        std::sort(s.begin() + static_cast<int64_t>(r), s.begin() + static_cast<int64_t>(r) + m);
        s[r + 1] = s[r];
      }
      std::vector<double> q = vals(rnd(vals_shape, 172));
      q[0] = s[0];
      return In{from_vals(s, seq), from_vals(q, vals_shape)};
    };
    o.run = [right, i32](const In& in) { return searchsorted(in[0], in[1], i32, right); };
    o.reference = [right](const In& in) {
      auto s = vals(in[0]);
      auto q = vals(in[1]);
      const int64_t m = in[0].shape()[in[0].dim() - 1];
      const int64_t per = in[0].dim() == 1 ? in[1].numel() : in[1].shape()[in[1].dim() - 1];
      std::vector<double> out;
      for (size_t i = 0; i < q.size(); ++i) {
        const size_t row = in[0].dim() == 1 ? 0 : (i / static_cast<size_t>(per)) * m;
        int64_t c = 0;
        for (int64_t j = 0; j < m; ++j) {
          const double x = s[row + static_cast<size_t>(j)];
          c += right ? (x <= q[i]) : (x < q[i]);
        }
        out.push_back(static_cast<double>(c));
      }
      return from_vals(out, in[1].shape());
    };
    o.check = [i32](const In&, const Tensor& out) {
      return out.dtype() == (i32 ? Int32 : Int64) ? std::string() : std::string("wrong dtype");
    };
    o.differentiable = false;
    return o;
  };
  v.push_back(ss("seq_1d_left", {6}, {2, 5}, false, false));
  v.push_back(ss("seq_1d_right_int32", {6}, {7}, true, true));
  v.push_back(ss("batched_rows", {3, 5}, {3, 4}, false, false));
  v.push_back(ss("batched_rows_right", {2, 4}, {2, 3}, true, false));
  return v;
}

static SampleRegistrar reg_index(make_index_samples());

}  // namespace
}  // namespace kiln::testing
