// Samples for the attention family (kiln/ops/attention.cpp): scaled_dot_product_attention
// (causal and not, Tq != Tk, Ev != E, ranks 2 to 4, an explicit scale, permuted head views as
// the GPT blocks pass them, and shapes large enough for the kernel's whole vectors, row blocks
// and scalar tails in both dtypes) and its gradient op, called through the registry. References
// are naive float64 loops.
#include <cmath>
#include <string>

#include "kiln/dispatch/dispatch.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

size_t z(int64_t i) { return static_cast<size_t>(i); }

struct Dims {
  int64_t bh, tq, tk, d, dv;
};
Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t r = q.dim();
  int64_t bh = 1;
  for (int64_t i = 0; i < r - 2; ++i) bh *= q.shape()[i];
  return {bh, q.shape()[r - 2], k.shape()[r - 2], q.shape()[r - 1], v.shape()[r - 1]};
}
double scale_of(double scale, int64_t d) {
  return scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(d));
}

// Row-major probabilities [bh, tq, tk] of softmax(scale q k^T) with keys j > i masked.
std::vector<double> ref_probs(const std::vector<double>& q, const std::vector<double>& k,
                              const Dims& s, bool causal, double scale) {
  std::vector<double> p(z(s.bh * s.tq * s.tk), 0.0);
  for (int64_t b = 0; b < s.bh; ++b)
    for (int64_t i = 0; i < s.tq; ++i) {
      const int64_t n = causal ? std::min(i + 1, s.tk) : s.tk;
      std::vector<double> sc(z(n));
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < s.d; ++c)
          acc += q[z((b * s.tq + i) * s.d + c)] * k[z((b * s.tk + j) * s.d + c)];
        sc[z(j)] = scale * acc;
        m = std::max(m, sc[z(j)]);
      }
      for (int64_t j = 0; j < n; ++j) sum += std::exp(sc[z(j)] - m);
      for (int64_t j = 0; j < n; ++j)
        p[z((b * s.tq + i) * s.tk + j)] = std::exp(sc[z(j)] - m) / sum;
    }
  return p;
}

Tensor ref_sdpa(const In& in, bool causal, double scale) {
  const Dims s = dims_of(in[0], in[1], in[2]);
  const auto q = vals(in[0]), k = vals(in[1]), v = vals(in[2]);
  const auto p = ref_probs(q, k, s, causal, scale_of(scale, s.d));
  std::vector<double> o(z(s.bh * s.tq * s.dv), 0.0);
  for (int64_t b = 0; b < s.bh; ++b)
    for (int64_t i = 0; i < s.tq; ++i)
      for (int64_t e = 0; e < s.dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < s.tk; ++j)
          acc += p[z((b * s.tq + i) * s.tk + j)] * v[z((b * s.tk + j) * s.dv + e)];
        o[z((b * s.tq + i) * s.dv + e)] = acc;
      }
  Shape os = in[0].shape();
  os[os.rank() - 1] = s.dv;
  return from_vals(o, os);
}

// batch + [a, b].
Shape with_matrix(Shape batch, int64_t a, int64_t b) {
  batch.push_back(a);
  batch.push_back(b);
  return batch;
}

// q [..., tq, d], k [..., tk, d], v [..., tk, dv] with the given batch dims.
OpSample sdpa_sample(Shape batch, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal,
                     double scale, std::string name) {
  OpSample o;
  o.ops = {"scaled_dot_product_attention", "scaled_dot_product_attention_grad"};
  o.name = std::move(name);
  auto shape = [batch](int64_t a, int64_t b) { return with_matrix(batch, a, b); };
  o.inputs = [=] {
    return In{rnd(shape(tq, d), 201), rnd(shape(tk, d), 202), rnd(shape(tk, dv), 203)};
  };
  o.run = [causal, scale](const In& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], causal, scale);
  };
  o.reference = [causal, scale](const In& in) { return ref_sdpa(in, causal, scale); };
  o.tol32 = 1e-4;
  return o;
}

// The GPT block's layout: q, k, v are [B, T, H, E] (here separate tensors; the block's are
// chunks of one projection) permuted to [B, H, T, E] views, row stride H E.
OpSample sdpa_heads_sample(bool causal, std::string name) {
  OpSample o;
  o.ops = {"scaled_dot_product_attention", "scaled_dot_product_attention_grad"};
  o.name = std::move(name);
  o.inputs = [] {
    return In{rnd({2, 5, 3, 4}, 211), rnd({2, 5, 3, 4}, 212), rnd({2, 5, 3, 4}, 213)};
  };
  auto heads = [](const In& in) {
    return In{permute(in[0], {0, 2, 1, 3}), permute(in[1], {0, 2, 1, 3}),
              permute(in[2], {0, 2, 1, 3})};
  };
  o.run = [causal, heads](const In& in) {
    In h = heads(in);
    // Back to [B, T, H*E], as the block feeds its output projection.
    Tensor out = scaled_dot_product_attention(h[0], h[1], h[2], causal);
    return reshape(permute(out, {0, 2, 1, 3}), {2, 5, 12});
  };
  o.reference = [causal, heads](const In& in) {
    In h = heads(in);
    Tensor r = ref_sdpa({h[0].contiguous(), h[1].contiguous(), h[2].contiguous()}, causal, 0);
    return from_vals(vals(permute(r, {0, 2, 1, 3})), Shape{2, 5, 12});
  };
  o.tol32 = 1e-4;
  return o;
}

// scaled_dot_product_attention_grad(g, q, k, v, p) -> dq, dk, dv, checked as one flat tensor
// against loops over the formulas; p are the forward's probabilities. Gradcheck covers the
// op's own gradient rule (second derivatives of attention).
OpSample sdpa_grad_sample(Shape batch, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal,
                          std::string name) {
  OpSample o;
  o.ops = {"scaled_dot_product_attention_grad"};
  o.name = std::move(name);
  auto shape = [batch](int64_t a, int64_t b) { return with_matrix(batch, a, b); };
  o.inputs = [=] {
    In in{rnd(shape(tq, dv), 221), rnd(shape(tq, d), 222), rnd(shape(tk, d), 223),
          rnd(shape(tk, dv), 224)};
    const Dims s = dims_of(in[1], in[2], in[3]);
    in.push_back(
        from_vals(ref_probs(vals(in[1]), vals(in[2]), s, causal, scale_of(0, d)), shape(tq, tk)));
    return in;
  };
  o.run = [causal, d, tq, tk](const In& in) {
    // The op takes p as the forward writes it, zero past the diagonal (its kernel reads whole
    // blocks): masking here keeps that true while gradcheck perturbs p.
    In a = in;
    if (causal) {
      std::vector<double> m(z(tq * tk), 0.0);
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t j = 0; j <= i && j < tk; ++j) m[z(i * tk + j)] = 1.0;
      a[4] = mul(in[4], from_vals(m, Shape{tq, tk}).to(in[4].dtype()));
    }
    TensorList r = call(OpRegistry::get().at("scaled_dot_product_attention_grad"),
                        std::span<const Tensor>(a.data(), a.size()), {causal, scale_of(0, d)});
    std::vector<Tensor> parts;
    for (const Tensor& t : r) parts.push_back(flatten(t.dim() >= 3 ? transpose(t, -3, -2) : t));
    return cat(parts, 0);
  };
  o.reference = [causal, d](const In& in) {
    const Dims s = dims_of(in[1], in[2], in[3]);
    const double sc = scale_of(0, d);
    const auto g = vals(in[0]), q = vals(in[1]), k = vals(in[2]), v = vals(in[3]), p = vals(in[4]);
    std::vector<double> dq(z(s.bh * s.tq * s.d), 0.0), dk(z(s.bh * s.tk * s.d), 0.0),
        dv(z(s.bh * s.tk * s.dv), 0.0);
    for (int64_t b = 0; b < s.bh; ++b)
      for (int64_t i = 0; i < s.tq; ++i) {
        const int64_t n = causal ? std::min(i + 1, s.tk) : s.tk;
        std::vector<double> dp(z(n));
        double rs = 0;
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t e = 0; e < s.dv; ++e)
            dp[z(j)] += g[z((b * s.tq + i) * s.dv + e)] * v[z((b * s.tk + j) * s.dv + e)];
          rs += p[z((b * s.tq + i) * s.tk + j)] * dp[z(j)];
        }
        for (int64_t j = 0; j < n; ++j) {
          const double pij = p[z((b * s.tq + i) * s.tk + j)];
          const double ds = sc * pij * (dp[z(j)] - rs);
          for (int64_t e = 0; e < s.dv; ++e)
            dv[z((b * s.tk + j) * s.dv + e)] += pij * g[z((b * s.tq + i) * s.dv + e)];
          for (int64_t c = 0; c < s.d; ++c) {
            dq[z((b * s.tq + i) * s.d + c)] += ds * k[z((b * s.tk + j) * s.d + c)];
            dk[z((b * s.tk + j) * s.d + c)] += ds * q[z((b * s.tq + i) * s.d + c)];
          }
        }
      }
    dq.insert(dq.end(), dk.begin(), dk.end());
    dq.insert(dq.end(), dv.begin(), dv.end());
    return from_vals(dq, Shape{static_cast<int64_t>(dq.size())});
  };
  // Differentiable in all five inputs: gradcheck checks the op's rule (second derivatives).
  o.tol32 = 1e-4;
  return o;
}

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  v.push_back(sdpa_sample({2, 3}, 5, 5, 4, 4, true, 0, "causal_4d"));
  v.push_back(sdpa_sample({2, 2}, 5, 5, 4, 4, false, 0, "full_4d"));
  v.push_back(sdpa_sample({2}, 3, 6, 4, 5, false, 0, "cross_lengths_value_dim_3d"));
  v.push_back(sdpa_sample({2}, 6, 4, 3, 2, true, 0, "causal_more_queries"));
  v.push_back(sdpa_sample({1, 2}, 3, 5, 4, 3, true, 0, "causal_more_keys"));
  v.push_back(sdpa_sample({}, 5, 5, 4, 4, true, 0.3, "rank2_explicit_scale"));
  v.push_back(sdpa_sample({2, 1}, 1, 1, 3, 2, true, 0, "size1"));
  v.back().noncontig_inputs = {-1};  // a [.., 1, E] input stays contiguous when transposed
  // Whole vectors (16 floats, 8 doubles), 8-row blocks, the two-vector column block and the
  // scalar tails: 19 = 16 + 3 and 40 = 32 + 8 columns, 20 = 16 + 4 head dims.
  v.push_back(sdpa_sample({1, 2}, 19, 19, 20, 20, true, 0, "blocks_causal"));
  v.push_back(sdpa_sample({1, 1}, 40, 40, 16, 24, true, 0, "blocks_causal_wide"));
  v.push_back(sdpa_sample({2}, 17, 40, 20, 16, false, 0, "blocks_full_cross"));
  // Causal with Tq != Tk at vector sizes: the score columns capped at Tk, the transposed
  // products starting at the diagonal block.
  v.push_back(sdpa_sample({1}, 40, 19, 20, 16, true, 0, "blocks_causal_more_queries"));
  v.push_back(sdpa_sample({1}, 19, 40, 20, 16, true, 0, "blocks_causal_more_keys"));
  v.push_back(sdpa_heads_sample(true, "permuted_heads_causal"));
  v.push_back(sdpa_heads_sample(false, "permuted_heads_full"));
  v.push_back(sdpa_grad_sample({2, 2}, 5, 5, 4, 3, true, "causal"));
  v.push_back(sdpa_grad_sample({2}, 4, 6, 3, 5, false, "full_cross"));
  v.push_back(sdpa_grad_sample({1, 1}, 19, 19, 20, 24, true, "blocks_causal"));
  v.push_back(sdpa_grad_sample({1}, 40, 19, 20, 16, true, "blocks_causal_more_queries"));
  v.push_back(sdpa_grad_sample({1}, 19, 40, 20, 16, true, "blocks_causal_more_keys"));
  return v;
}

const SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
