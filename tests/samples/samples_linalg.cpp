// Samples for the linear-algebra, convolution and pooling families (kiln/ops/linalg.cpp,
// kiln/ops/conv.cpp, pool.cpp): matmul in every torch.matmul rank combination, linear, conv2d with
// stride / padding / dilation / groups / bias, the pools, and the gradient ops called directly
// (so gradcheck also runs their own gradient rules). References are naive float64 loops.
#include <algorithm>
#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using Ints = std::vector<int64_t>;

// ---- references ------------------------------------------------------------------------------

// torch.matmul by definition: vectors promoted to matrices, batch dims broadcast, each output
// element a plain dot product.
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.shape(), bs = b.shape();
  bool va = as.rank() == 1, vb = bs.rank() == 1;
  if (va) as = Shape{1, as[0]};
  if (vb) bs = Shape{bs[0], 1};
  int64_t m = as[as.rank() - 2], k = as[as.rank() - 1], n = bs[bs.rank() - 1];
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  int64_t R = std::max(ba.rank(), bb.rank());
  Shape batch(static_cast<size_t>(R), 1);
  for (int64_t d = 0; d < R; ++d) {
    int64_t da = d - (R - ba.rank()) >= 0 ? ba[d - (R - ba.rank())] : 1;
    int64_t db = d - (R - bb.rank()) >= 0 ? bb[d - (R - bb.rank())] : 1;
    batch[d] = std::max(da, db);
  }
  auto av = vals(a), bv = vals(b);
  // Flat index of batch element i within an operand of batch shape `s` (broadcast dims: 0).
  auto bidx = [&](int64_t i, const Shape& s) {
    int64_t idx = 0, mul = 1;
    for (int64_t d = R - 1; d >= 0; --d) {
      int64_t c = i % batch[d];
      i /= batch[d];
      int64_t sd = d - (R - s.rank());
      if (sd >= 0) {
        idx += (s[sd] == 1 ? 0 : c) * mul;
        mul *= s[sd];
      }
    }
    return idx;
  };
  int64_t nb = batch.numel();
  std::vector<double> out(static_cast<size_t>(nb * m * n), 0.0);
  for (int64_t t = 0; t < nb; ++t) {
    int64_t oa = bidx(t, ba) * m * k, ob = bidx(t, bb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += av[static_cast<size_t>(oa + i * k + p)] * bv[static_cast<size_t>(ob + p * n + j)];
        out[static_cast<size_t>((t * m + i) * n + j)] = s;
      }
  }
  Shape os = batch;
  if (!va) os.push_back(m);
  if (!vb) os.push_back(n);
  return from_vals(out, os);
}

// Swaps the last two dims (per batch matrix).
Tensor ref_transpose2d(const Tensor& a) {
  int64_t r = a.size(-2), c = a.size(-1), nb = a.numel() / std::max<int64_t>(r * c, 1);
  auto v = vals(a);
  std::vector<double> o(v.size());
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        o[static_cast<size_t>((b * c + j) * r + i)] = v[static_cast<size_t>((b * r + i) * c + j)];
  Shape s = a.shape();
  std::swap(s[s.rank() - 2], s[s.rank() - 1]);
  return from_vals(o, s);
}

// Columns 0, step, 2*step, ... of a 2-D tensor.
Tensor ref_cols(const Tensor& a, int64_t step) {
  int64_t r = a.size(0), c = a.size(1), nc = (c + step - 1) / step;
  auto v = vals(a);
  std::vector<double> o;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; j += step) o.push_back(v[static_cast<size_t>(i * c + j)]);
  return from_vals(o, Shape{r, nc});
}

struct ConvCfg {
  Ints stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  Attrs attrs() const { return Attrs{stride, padding, dilation, groups}; }
};

// Visits every (output element, input element, weight element) triple of a convolution:
// f(y_index, x_index, w_index). All three gradient references are this one loop.
template <typename F>
void conv_triples(const Shape& xs, const Shape& ws, const ConvCfg& c, int64_t OH, int64_t OW,
                  F&& f) {
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  int64_t O = ws[0], Cg = ws[1], kH = ws[2], kW = ws[3], Og = O / c.groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < kH; ++i)
              for (int64_t j = 0; j < kW; ++j) {
                int64_t ih = oh * c.stride[0] - c.padding[0] + i * c.dilation[0];
                int64_t iw = ow * c.stride[1] - c.padding[1] + j * c.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t cin = (o / Og) * Cg + ci;
                f(((n * O + o) * OH + oh) * OW + ow, ((n * C + cin) * H + ih) * W + iw,
                  ((o * Cg + ci) * kH + i) * kW + j);
              }
}

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

Tensor ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCfg& c) {
  int64_t OH = conv_out(x.size(2), w.size(2), c.stride[0], c.padding[0], c.dilation[0]);
  int64_t OW = conv_out(x.size(3), w.size(3), c.stride[1], c.padding[1], c.dilation[1]);
  Shape ys{x.size(0), w.size(0), OH, OW};
  auto xv = vals(x), wv = vals(w);
  std::vector<double> y(static_cast<size_t>(ys.numel()), 0.0);
  conv_triples(x.shape(), w.shape(), c, OH, OW, [&](int64_t yi, int64_t xi, int64_t wi) {
    y[static_cast<size_t>(yi)] += xv[static_cast<size_t>(xi)] * wv[static_cast<size_t>(wi)];
  });
  if (b.defined()) {
    auto bv = vals(b);
    for (int64_t i = 0; i < ys.numel(); ++i)
      y[static_cast<size_t>(i)] += bv[static_cast<size_t>((i / (OH * OW)) % ys[1])];
  }
  return from_vals(y, ys);
}

Tensor ref_conv2d_grad_input(const Tensor& g, const Tensor& w, int64_t H, int64_t W,
                             const ConvCfg& c) {
  Shape xs{g.size(0), w.size(1) * c.groups, H, W};
  auto gv = vals(g), wv = vals(w);
  std::vector<double> dx(static_cast<size_t>(xs.numel()), 0.0);
  conv_triples(xs, w.shape(), c, g.size(2), g.size(3), [&](int64_t yi, int64_t xi, int64_t wi) {
    dx[static_cast<size_t>(xi)] += gv[static_cast<size_t>(yi)] * wv[static_cast<size_t>(wi)];
  });
  return from_vals(dx, xs);
}

Tensor ref_conv2d_grad_weight(const Tensor& x, const Tensor& g, int64_t kH, int64_t kW,
                              const ConvCfg& c) {
  Shape ws{g.size(1), x.size(1) / c.groups, kH, kW};
  auto xv = vals(x), gv = vals(g);
  std::vector<double> dw(static_cast<size_t>(ws.numel()), 0.0);
  conv_triples(x.shape(), ws, c, g.size(2), g.size(3), [&](int64_t yi, int64_t xi, int64_t wi) {
    dw[static_cast<size_t>(wi)] += gv[static_cast<size_t>(yi)] * xv[static_cast<size_t>(xi)];
  });
  return from_vals(dw, ws);
}

struct PoolCfg {
  Ints kernel, stride, padding{0, 0};
  Ints eff_stride() const { return stride.empty() ? kernel : stride; }
};

// Visits every (output index, valid input index) pair of a pooling window sweep over a 4-D
// shape; padding positions are skipped (they count toward avg's divisor, never toward max).
template <typename F>
void pool_pairs(const Shape& xs, const PoolCfg& c, F&& f) {
  Ints s = c.eff_stride();
  int64_t H = xs[2], W = xs[3];
  int64_t OH = (H + 2 * c.padding[0] - c.kernel[0]) / s[0] + 1;
  int64_t OW = (W + 2 * c.padding[1] - c.kernel[1]) / s[1] + 1;
  for (int64_t pl = 0; pl < xs[0] * xs[1]; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t i = 0; i < c.kernel[0]; ++i)
          for (int64_t j = 0; j < c.kernel[1]; ++j) {
            int64_t ih = oh * s[0] - c.padding[0] + i, iw = ow * s[1] - c.padding[1] + j;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            f((pl * OH + oh) * OW + ow, (pl * H + ih) * W + iw);
          }
}

Shape pool_shape(const Shape& xs, const PoolCfg& c) {
  Ints s = c.eff_stride();
  return Shape{xs[0], xs[1], (xs[2] + 2 * c.padding[0] - c.kernel[0]) / s[0] + 1,
               (xs[3] + 2 * c.padding[1] - c.kernel[1]) / s[1] + 1};
}

// 3-D inputs ([C, H, W]) are pooled as one batch.
Shape as4d(const Shape& s) { return s.rank() == 3 ? Shape{1, s[0], s[1], s[2]} : s; }
Shape drop_batch(const Shape& s4, const Shape& orig) {
  return orig.rank() == 3 ? Shape{s4[1], s4[2], s4[3]} : s4;
}

Tensor ref_max_pool(const Tensor& x, const PoolCfg& c) {
  Shape xs = as4d(x.shape()), ys = pool_shape(xs, c);
  auto xv = vals(x);
  std::vector<double> y(static_cast<size_t>(ys.numel()), -INFINITY);
  pool_pairs(xs, c, [&](int64_t yi, int64_t xi) {
    y[static_cast<size_t>(yi)] = std::max(y[static_cast<size_t>(yi)], xv[static_cast<size_t>(xi)]);
  });
  return from_vals(y, drop_batch(ys, x.shape()));
}

Tensor ref_avg_pool(const Tensor& x, const PoolCfg& c) {
  Shape xs = as4d(x.shape()), ys = pool_shape(xs, c);
  auto xv = vals(x);
  double inv = 1.0 / static_cast<double>(c.kernel[0] * c.kernel[1]);
  std::vector<double> y(static_cast<size_t>(ys.numel()), 0.0);
  pool_pairs(xs, c, [&](int64_t yi, int64_t xi) {
    y[static_cast<size_t>(yi)] += xv[static_cast<size_t>(xi)] * inv;
  });
  return from_vals(y, drop_batch(ys, x.shape()));
}

Tensor ref_avg_pool_grad(const Tensor& g, const PoolCfg& c, int64_t H, int64_t W) {
  Shape xs{g.size(0), g.size(1), H, W};
  auto gv = vals(g);
  double inv = 1.0 / static_cast<double>(c.kernel[0] * c.kernel[1]);
  std::vector<double> dx(static_cast<size_t>(xs.numel()), 0.0);
  pool_pairs(xs, c, [&](int64_t yi, int64_t xi) {
    dx[static_cast<size_t>(xi)] += gv[static_cast<size_t>(yi)] * inv;
  });
  return from_vals(dx, xs);
}

// ---- direct calls of the gradient ops (not public functions) -------------------------------

Tensor op1(const char* name, std::initializer_list<Tensor> in, const Attrs& a) {
  return call1(OpRegistry::get().at(name), in, a);
}

const std::vector<std::string> kConvOps = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

OpSample conv_sample(std::string name, Shape xs, Shape ws, ConvCfg c, bool bias, uint64_t seed) {
  return OpSample{
      .ops = kConvOps,
      .name = std::move(name),
      .inputs =
          [=] {
            In in{rnd(xs, seed), rnd(ws, seed + 1, 0.5)};
            if (bias) in.push_back(rnd(Shape{ws[0]}, seed + 2));
            return in;
          },
      .run =
          [=](const In& in) {
            return conv2d(in[0], in[1], bias ? in[2] : Tensor(), c.stride, c.padding, c.dilation,
                          c.groups);
          },
      .reference =
          [=](const In& in) { return ref_conv2d(in[0], in[1], bias ? in[2] : Tensor(), c); },
      .tol32 = 5e-5};
}

// conv2d_fused(_add): relu?(conv + bias + residual); `block` > 0 runs it on channel blocks
// (input, residual and output through to/from_channel_blocks, weights conv_weight_to_blocks
// when the input is blocked too), `block_in` whether the input is blocked.
OpSample conv_fused_sample(std::string name, Shape xs, Shape ws, ConvCfg c, bool bias,
                           bool residual, bool relu, int64_t block, bool block_in, uint64_t seed) {
  int64_t OH = conv_out(xs[2], ws[2], c.stride[0], c.padding[0], c.dilation[0]);
  int64_t OW = conv_out(xs[3], ws[3], c.stride[1], c.padding[1], c.dilation[1]);
  Shape ys{xs[0], ws[0], OH, OW};
  return OpSample{.ops = {residual ? "conv2d_fused_add" : "conv2d_fused"},
                  .name = std::move(name),
                  .inputs =
                      [=] {
                        In in{rnd(xs, seed), rnd(ws, seed + 1, 0.5)};
                        in.push_back(bias ? rnd(Shape{ws[0]}, seed + 2) : Tensor());
                        in.push_back(residual ? rnd(ys, seed + 3) : Tensor());
                        // Undefined slots are dropped: the sample's inputs are x, w[, bias][,
                        // residual].
                        In out;
                        for (auto& t : in)
                          if (t.defined()) out.push_back(t);
                        return out;
                      },
                  .run =
                      [=](const In& in) {
                        Tensor x = in[0], w = in[1], b = bias ? in[2] : Tensor(),
                               r = residual ? in[bias ? 3 : 2] : Tensor();
                        const int64_t bi = block_in ? block : 0;
                        if (bi) {
                          x = to_channel_blocks(x, bi);
                          w = conv_weight_to_blocks(w, bi);
                        }
                        if (block && r.defined()) r = to_channel_blocks(r, block);
                        Tensor y = conv2d_fused(x, w, b, r, c.stride, c.padding, c.dilation,
                                                c.groups, relu, bi, block, bi != 0);
                        return block ? from_channel_blocks(y) : y;
                      },
                  .reference =
                      [=](const In& in) {
                        Tensor y = ref_conv2d(in[0], in[1], bias ? in[2] : Tensor(), c);
                        std::vector<double> v = vals(y);
                        if (residual) {
                          std::vector<double> rv = vals(in[bias ? 3 : 2]);
                          for (size_t i = 0; i < v.size(); ++i) v[i] += rv[i];
                        }
                        if (relu)
                          for (auto& e : v) e = e > 0 ? e : 0;
                        return from_vals(v, y.shape());
                      },
                  .differentiable = false,
                  .tol32 = 5e-5};
}

OpSample matmul_sample(std::string name, Shape as, Shape bs, uint64_t seed) {
  return OpSample{.ops = {"matmul"},
                  .name = std::move(name),
                  .inputs =
                      [=] {
                        return In{rnd(as, seed), rnd(bs, seed + 1)};
                      },
                  .run = [](const In& in) { return matmul(in[0], in[1]); },
                  .reference = [](const In& in) { return ref_matmul(in[0], in[1]); }};
}

// addmm: beta * input + alpha * (a @ b), input broadcast to [m, n]; `tr` stores a and b
// transposed so the GEMM reads them through its flags.
OpSample addmm_sample(std::string name, Shape is, int64_t m, int64_t k, int64_t n, double beta,
                      double alpha, bool tr, uint64_t seed) {
  return OpSample{.ops = {"addmm"},
                  .name = "addmm_" + name,
                  .inputs =
                      [=] {
                        return In{rnd(is, seed), rnd(tr ? Shape{k, m} : Shape{m, k}, seed + 1),
                                  rnd(tr ? Shape{n, k} : Shape{k, n}, seed + 2)};
                      },
                  .run =
                      [=](const In& in) {
                        return tr ? addmm(in[0], in[1].t(), in[2].t(), beta, alpha)
                                  : addmm(in[0], in[1], in[2], beta, alpha);
                      },
                  .reference =
                      [=](const In& in) {
                        Tensor p = tr ? ref_matmul(ref_transpose2d(in[1]), ref_transpose2d(in[2]))
                                      : ref_matmul(in[1], in[2]);
                        return ref_elementwise({p, in[0]}, [=](const std::vector<double>& v) {
                          return alpha * v[0] + (beta == 0 ? 0.0 : beta * v[1]);
                        });
                      }};
}

// max_pool2d_blocked on channel blocks of b, checked against max pooling of the NCHW input.
OpSample max_pool_blocked_sample(std::string name, Shape xs, PoolCfg c, int64_t b, uint64_t seed) {
  return OpSample{.ops = {"max_pool2d_blocked"},
                  .name = std::move(name),
                  .inputs = [=] { return In{rnd(xs, seed)}; },
                  .run =
                      [=](const In& in) {
                        return from_channel_blocks(max_pool2d_blocked(
                            to_channel_blocks(in[0], b), c.kernel, c.stride, c.padding));
                      },
                  .reference = [=](const In& in) { return ref_max_pool(in[0], c); },
                  .differentiable = false};
}

// A sample for both pools on one configuration.
std::vector<OpSample> pool_samples(std::string name, Shape xs, PoolCfg c, uint64_t seed) {
  return {
      OpSample{
          .ops = {"max_pool2d", "max_pool2d_grad"},
          .name = name,
          .inputs = [=] { return In{rnd(xs, seed)}; },
          .run = [=](const In& in) { return max_pool2d(in[0], c.kernel, c.stride, c.padding); },
          .reference = [=](const In& in) { return ref_max_pool(in[0], c); }},
      OpSample{
          .ops = {"avg_pool2d", "avg_pool2d_grad"},
          .name = name,
          .inputs = [=] { return In{rnd(xs, seed)}; },
          .run = [=](const In& in) { return avg_pool2d(in[0], c.kernel, c.stride, c.padding); },
          .reference = [=](const In& in) { return ref_avg_pool(in[0], c); }},
  };
}

std::vector<OpSample> all() {
  std::vector<OpSample> s = {
      matmul_sample("2d", {3, 4}, {4, 5}, 1),
      matmul_sample("vec_mat", {4}, {4, 5}, 3),
      matmul_sample("mat_vec", {3, 4}, {4}, 5),
      matmul_sample("dot", {4}, {4}, 7),
      matmul_sample("batched_broadcast", {2, 1, 3, 4}, {3, 4, 2}, 9),
      matmul_sample("batched_shared_matrix", {2, 3, 4}, {4, 5}, 11),
      matmul_sample("matrix_batched_broadcast", {3, 4}, {2, 4, 5}, 13),
      matmul_sample("vec_batched", {4}, {2, 4, 3}, 15),
      matmul_sample("batched_vec", {2, 3, 4}, {4}, 17),
      [] {
        OpSample s = matmul_sample("inner_dim_1", {3, 1}, {1, 4}, 19);
        // A transpose of a matrix with a size-1 dim is still contiguous: no layout variant.
        s.noncontig_inputs = {-1};
        return s;
      }(),
      OpSample{.ops = {"matmul"},
               .name = "transposed_operands",
               // a and b are stored [k, m] and [n, k]; the op sees transposed views.
               .inputs =
                   [] {
                     return In{rnd({4, 3}, 21), rnd({5, 4}, 22)};
                   },
               .run = [](const In& in) { return matmul(in[0].t(), in[1].t()); },
               .reference =
                   [](const In& in) {
                     return ref_matmul(ref_transpose2d(in[0]), ref_transpose2d(in[1]));
                   }},
      OpSample{.ops = {"matmul"},
               .name = "batched_transposed",
               .inputs =
                   [] {
                     return In{rnd({2, 4, 3}, 23), rnd({2, 4, 5}, 24)};
                   },
               .run = [](const In& in) { return matmul(in[0].transpose(-1, -2), in[1]); },
               .reference = [](const In& in) { return ref_matmul(ref_transpose2d(in[0]), in[1]); }},
      OpSample{.ops = {"matmul"},
               .name = "strided_copy",
               // Every other column: neither row- nor column-major, so the kernel copies.
               .inputs =
                   [] {
                     return In{rnd({3, 8}, 25), rnd({4, 2}, 26)};
                   },
               .run = [](const In& in) { return matmul(in[0].slice(1, 0, 8, 2), in[1]); },
               .reference = [](const In& in) { return ref_matmul(ref_cols(in[0], 2), in[1]); }},
      OpSample{.ops = {"matmul"},
               .name = "linear_bias_3d",
               .inputs =
                   [] {
                     return In{rnd({2, 3, 4}, 27), rnd({5, 4}, 28), rnd({5}, 29)};
                   },
               .run = [](const In& in) { return linear(in[0], in[1], in[2]); },
               .reference =
                   [](const In& in) {
                     Tensor y = ref_matmul(in[0], ref_transpose2d(in[1]));
                     return ref_elementwise(
                         {y, in[2]}, [](const std::vector<double>& v) { return v[0] + v[1]; });
                   }},
      OpSample{.ops = {"matmul"},
               .name = "linear_no_bias",
               .inputs =
                   [] {
                     return In{rnd({3, 4}, 30), rnd({2, 4}, 31)};
                   },
               .run = [](const In& in) { return linear(in[0], in[1]); },
               .reference = [](const In& in) { return ref_matmul(in[0], ref_transpose2d(in[1])); }},

      addmm_sample("full", {3, 5}, 3, 4, 5, 0.5, -2.0, false, 32),
      addmm_sample("row_bias", {5}, 3, 4, 5, 1.0, 1.0, false, 35),
      [] {
        OpSample s = addmm_sample("column", {3, 1}, 3, 4, 5, 1.0, 0.25, false, 58);
        s.noncontig_inputs = {1, 2};  // a transposed [3, 1] is still contiguous
        return s;
      }(),
      addmm_sample("scalar_input", {}, 2, 3, 4, -1.0, 1.0, false, 61),
      addmm_sample("transposed_operands", {3, 5}, 3, 4, 5, 1.0, -0.01, true, 64),
      addmm_sample("beta0", {3, 5}, 3, 4, 5, 0.0, 1.5, false, 67),
      addmm_sample("inner_dim_0", {2, 3}, 2, 0, 3, 2.0, 1.0, false, 70),

      conv_sample("basic", {2, 2, 5, 5}, {3, 2, 3, 3}, {}, false, 40),
      conv_sample("stride2_pad1", {2, 2, 6, 5}, {3, 2, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, false,
                  43),
      conv_sample("dilation2_pad1", {1, 2, 7, 7}, {2, 2, 3, 3}, {{1, 1}, {1, 1}, {2, 2}, 1}, false,
                  46),
      conv_sample("groups2_bias", {2, 4, 5, 5}, {4, 2, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 2}, true,
                  49),
      [] {
        OpSample s = conv_sample("pointwise_1x1", {2, 3, 4, 4}, {5, 3, 1, 1}, {}, true, 52);
        s.noncontig_inputs = {0};  // a [5, 3, 1, 1] weight stays contiguous when transposed
        return s;
      }(),
      conv_sample("asymmetric", {1, 2, 5, 6}, {2, 2, 2, 3}, {{2, 1}, {1, 0}, {1, 2}, 1}, false, 55),
      conv_sample("all_options", {2, 4, 7, 6}, {6, 2, 3, 2}, {{2, 2}, {1, 1}, {2, 1}, 2}, true, 58),
      conv_fused_sample("bias_relu", {2, 3, 6, 6}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true,
                        false, true, 0, false, 140),
      conv_fused_sample("groups2_no_epilogue", {2, 4, 5, 5}, {6, 2, 3, 3},
                        {{1, 1}, {0, 0}, {1, 1}, 2}, false, false, false, 0, false, 143),
      conv_fused_sample("residual_stride2", {2, 3, 7, 6}, {5, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1},
                        true, true, true, 0, false, 146),
      conv_fused_sample("residual_no_relu_no_bias", {2, 2, 5, 5}, {3, 2, 1, 1}, {}, false, true,
                        false, 0, false, 149),
      conv_fused_sample("plain_in_blocked_out", {2, 3, 7, 7}, {16, 3, 3, 3},
                        {{2, 2}, {1, 1}, {1, 1}, 1}, true, false, true, 8, false, 152),
      conv_fused_sample("blocked_residual_relu", {2, 8, 6, 5}, {16, 8, 3, 3},
                        {{1, 1}, {1, 1}, {1, 1}, 1}, true, true, true, 8, true, 155),
      conv_fused_sample("blocked16_stride2_1x1", {2, 16, 7, 7}, {16, 16, 1, 1},
                        {{2, 2}, {0, 0}, {1, 1}, 1}, false, true, false, 16, true, 158),
      // 3x3 stride 1 on blocks of 16: oneDNN's Winograd kernel where the CPU has AVX-512.
      conv_fused_sample("blocked16_3x3_winograd", {2, 32, 9, 10}, {32, 32, 3, 3},
                        {{1, 1}, {1, 1}, {1, 1}, 1}, true, true, true, 16, true, 161),

      OpSample{.ops = {"conv2d_grad_input", "conv2d", "conv2d_grad_weight"},
               .name = "direct_stride2_pad1_groups2",
               .inputs =
                   [] {
                     return In{rnd({2, 4, 3, 3}, 61), rnd({4, 2, 3, 3}, 62, 0.5)};
                   },
               .run =
                   [](const In& in) {
                     ConvCfg c{{2, 2}, {1, 1}, {1, 1}, 2};
                     Attrs a = c.attrs();
                     a.push(Ints{6, 5});  // input_size: row 5 is never read (stride 2)
                     return op1("conv2d_grad_input", {in[0], in[1]}, a);
                   },
               .reference =
                   [](const In& in) {
                     return ref_conv2d_grad_input(in[0], in[1], 6, 5, {{2, 2}, {1, 1}, {1, 1}, 2});
                   },
               .tol32 = 5e-5},
      OpSample{.ops = {"conv2d_grad_weight", "conv2d", "conv2d_grad_input"},
               .name = "direct_stride2_pad1_groups2",
               .inputs =
                   [] {
                     return In{rnd({2, 4, 6, 5}, 64), rnd({2, 4, 3, 3}, 65)};
                   },
               .run =
                   [](const In& in) {
                     ConvCfg c{{2, 2}, {1, 1}, {1, 1}, 2};
                     Attrs a = c.attrs();
                     a.push(Ints{3, 3});  // kernel_size
                     return op1("conv2d_grad_weight", {in[0], in[1]}, a);
                   },
               .reference =
                   [](const In& in) {
                     return ref_conv2d_grad_weight(in[0], in[1], 3, 3, {{2, 2}, {1, 1}, {1, 1}, 2});
                   },
               .tol32 = 5e-5},

      // Gradient ops of max pooling with arbitrary (also repeated) indices into a 4x5 plane.
      OpSample{.ops = {"max_pool2d_grad", "max_pool2d_gather"},
               .name = "direct_repeated_indices",
               .inputs =
                   [] {
                     manual_seed(70);
                     return In{rnd({2, 2, 3, 3}, 71), randint(0, 20, {2, 2, 3, 3})};
                   },
               .run =
                   [](const In& in) {
                     return op1("max_pool2d_grad", {in[0], in[1]}, Attrs{Ints{4, 5}});
                   },
               .reference =
                   [](const In& in) {
                     auto g = vals(in[0]);
                     auto idx = in[1].to_vector<int64_t>();
                     std::vector<double> dx(2 * 2 * 20, 0.0);
                     for (size_t q = 0; q < g.size(); ++q)
                       dx[q / 9 * 20 + static_cast<size_t>(idx[q])] += g[q];
                     return from_vals(dx, Shape{2, 2, 4, 5});
                   }},
      OpSample{.ops = {"max_pool2d_gather", "max_pool2d_grad"},
               .name = "direct",
               .inputs =
                   [] {
                     manual_seed(72);
                     Tensor idx = randint(0, 20, {2, 2, 3, 3});
                     return In{rnd({2, 2, 4, 5}, 73), idx};
                   },
               .run =
                   [](const In& in) {
                     return op1("max_pool2d_gather", {in[0], in[1]}, Attrs{});
                   },
               .reference =
                   [](const In& in) {
                     auto src = vals(in[0]);
                     auto idx = in[1].to_vector<int64_t>();
                     std::vector<double> o(idx.size());
                     for (size_t q = 0; q < idx.size(); ++q)
                       o[q] = src[q / 9 * 20 + static_cast<size_t>(idx[q])];
                     return from_vals(o, Shape{2, 2, 3, 3});
                   }},
      OpSample{.ops = {"avg_pool2d_grad", "avg_pool2d"},
               .name = "direct_k3_s2_pad1",
               .inputs =
                   [] {
                     return In{rnd({2, 2, 3, 3}, 75)};
                   },
               .run =
                   [](const In& in) {
                     return op1("avg_pool2d_grad", {in[0]},
                                Attrs{Ints{3, 3}, Ints{2, 2}, Ints{1, 1}, Ints{6, 5}});
                   },
               .reference =
                   [](const In& in) {
                     return ref_avg_pool_grad(in[0], PoolCfg{{3, 3}, {2, 2}, {1, 1}}, 6, 5);
                   }},
  };
  for (auto& p : pool_samples("k3_s2_pad1", {2, 2, 5, 6}, {{3, 3}, {2, 2}, {1, 1}}, 80))
    s.push_back(std::move(p));
  for (auto& p : pool_samples("k2_default_stride", {1, 3, 4, 4}, {{2, 2}, {}, {0, 0}}, 81))
    s.push_back(std::move(p));
  for (auto& p : pool_samples("k2x3_s1_pad_0x1", {2, 1, 4, 5}, {{2, 3}, {1, 1}, {0, 1}}, 82))
    s.push_back(std::move(p));
  for (auto& p : pool_samples("3d_input", {2, 5, 5}, {{3, 3}, {2, 2}, {1, 1}}, 83))
    s.push_back(std::move(p));
  s.push_back(
      max_pool_blocked_sample("k3_s2_pad1", {2, 16, 7, 6}, {{3, 3}, {2, 2}, {1, 1}}, 16, 84));
  s.push_back(max_pool_blocked_sample("k2_b8", {3, 8, 5, 4}, {{2, 2}, {}, {0, 0}}, 8, 85));
  return s;
}

SampleRegistrar reg(all());

}  // namespace
}  // namespace kiln::testing
