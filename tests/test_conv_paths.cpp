// Convolution paths: a kernel whose edge taps only ever meet padding (dilation larger than the
// map: ASPP's 3x3 with dilation 36 on a 33x33 map) runs as the smaller convolution without them
// (kernels/cpu/conv_taps.h), in the ops and, for constant weights, in the block_layout pass.
// Forward and both gradients are checked against direct float64 loops over the full kernel, for
// dilations 1..40 on maps smaller than the dilation, 1-D, 2-D and 3-D, groups and strides. Also
// the oversubscription guard every convolution runs under (kernels/cpu/parallel.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/kernels/cpu/conv_depthwise.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/conv_tap_gemm.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/silu_avx512.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

// One convolution over three spatial dims (depth, height, width); 2-D and 1-D use size-1 dims.
struct Cfg {
  int64_t N, C, O, G;
  int64_t in[3], k[3], s[3], p[3], d[3];
  int64_t out(int i) const { return (in[i] + 2 * p[i] - (d[i] * (k[i] - 1) + 1)) / s[i] + 1; }
};

struct Ref {
  std::vector<double> y, dx, dw;
};

// y = conv(x, w) and the gradients of sum(y * gy), every tap of the full kernel visited.
Ref reference(const Cfg& c, const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>& gy) {
  const int64_t OD = c.out(0), OH = c.out(1), OW = c.out(2), Cg = c.C / c.G, Og = c.O / c.G;
  const int64_t D = c.in[0], H = c.in[1], W = c.in[2];
  Ref r{std::vector<double>(static_cast<size_t>(c.N * c.O * OD * OH * OW)),
        std::vector<double>(x.size()), std::vector<double>(w.size())};
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t od = 0; od < OD; ++od)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const size_t yi = static_cast<size_t>((((n * c.O + o) * OD + od) * OH + oh) * OW + ow);
            double acc = 0;
            for (int64_t ci = 0; ci < Cg; ++ci)
              for (int64_t a = 0; a < c.k[0]; ++a)
                for (int64_t b = 0; b < c.k[1]; ++b)
                  for (int64_t e = 0; e < c.k[2]; ++e) {
                    const int64_t id = od * c.s[0] - c.p[0] + a * c.d[0];
                    const int64_t ih = oh * c.s[1] - c.p[1] + b * c.d[1];
                    const int64_t iw = ow * c.s[2] - c.p[2] + e * c.d[2];
                    if (id < 0 || id >= D || ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                    const int64_t cin = o / Og * Cg + ci;
                    const size_t xi =
                        static_cast<size_t>((((n * c.C + cin) * D + id) * H + ih) * W + iw);
                    const size_t wi = static_cast<size_t>(
                        (((o * Cg + ci) * c.k[0] + a) * c.k[1] + b) * c.k[2] + e);
                    acc += x[xi] * w[wi];
                    r.dx[xi] += gy[yi] * w[wi];
                    r.dw[wi] += gy[yi] * x[xi];
                  }
            r.y[yi] = acc;
          }
  return r;
}

// Within float rounding: tol relative to the largest reference value (sums of up to a few
// thousand products; a wrong or missing tap is off by a whole product, far more).
void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > tol * scale) {
      ADD_FAILURE() << what << " differs at " << i << ": " << got[i] << " vs " << want[i];
      return;
    }
}

std::vector<double> values(const Tensor& t) {
  return t.to(Float64).contiguous().to_vector<double>();
}

// rank: 1, 2 or 3 spatial dims (the leading ones of Cfg's three are size 1 below it).
void check(const Cfg& c, int rank, DType dt) {
  const std::string what = "conv" + std::to_string(rank) + "d in " + std::to_string(c.in[0]) + "x" +
                           std::to_string(c.in[1]) + "x" + std::to_string(c.in[2]) + " k " +
                           std::to_string(c.k[1]) + "x" + std::to_string(c.k[2]) + " dilation " +
                           std::to_string(c.d[1]) + "," + std::to_string(c.d[2]) + " padding " +
                           std::to_string(c.p[1]) + "," + std::to_string(c.p[2]) + " stride " +
                           std::to_string(c.s[2]) + " groups " + std::to_string(c.G) +
                           (dt == Float32 ? " f32" : " f64");
  std::vector<int64_t> xs{c.N, c.C}, ws{c.O, c.C / c.G};
  for (int i = 3 - rank; i < 3; ++i) xs.push_back(c.in[i]), ws.push_back(c.k[i]);
  Tensor x = randn(Shape(xs), dt).requires_grad_();
  Tensor w = randn(Shape(ws), dt).requires_grad_();
  Tensor y;
  if (rank == 1)
    y = conv1d(x, w, Tensor(), c.s[2], c.p[2], c.d[2], c.G);
  else if (rank == 2)
    y = conv2d(x, w, Tensor(), {c.s[1], c.s[2]}, {c.p[1], c.p[2]}, {c.d[1], c.d[2]}, c.G);
  else
    y = conv3d(x, w, Tensor(), {c.s[0], c.s[1], c.s[2]}, {c.p[0], c.p[1], c.p[2]},
               {c.d[0], c.d[1], c.d[2]}, c.G);
  Tensor gy = randn(y.shape(), dt);
  sum(mul(y, gy)).backward();
  const Ref r = reference(c, values(x), values(w), values(gy));
  const double tol = dt == Float32 ? 3e-5 : 1e-12;
  expect_near_all(values(y), r.y, tol, what + ": y");
  expect_near_all(values(x.grad()), r.dx, tol, what + ": dx");
  expect_near_all(values(w.grad()), r.dw, tol, what + ": dw");
}

Cfg cfg2(int64_t H, int64_t W, int64_t k, int64_t d, int64_t p, int64_t s = 1, int64_t G = 1) {
  return Cfg{2, 4, 4, G, {1, H, W}, {1, k, k}, {1, s, s}, {0, p, p}, {1, d, d}};
}

}  // namespace

// ASPP's shape: 3x3, padding = dilation, on maps from 1x1 up to larger than the dilation (the
// taps are cropped to 1x1, 1x3, 3x1 or kept as the map grows), float32 and float64.
TEST(ConvPaths, DilatedPaddedKernelsMatchTheFullKernel2d) {
  manual_seed(1);
  for (int64_t d = 1; d <= 40; ++d) {
    const int64_t H = 1 + d % 6, W = 2 + (d * 5) % 9;
    for (DType dt : {Float32, Float64}) check(cfg2(H, W, 3, d, d), 2, dt);
  }
  // The map just smaller and just larger than the dilation (edge taps reach 1 row or none).
  for (int64_t d : {2, 5, 12, 24, 36})
    for (int64_t H : {d - 1, d, d + 1}) check(cfg2(H, H, 3, d, d), 2, Float32);
}

// Padding other than the dilation, strides (the last output's taps shift), groups, depthwise,
// a 5-tap kernel (two taps cropped on each side) and a 1-D kernel along one dim.
TEST(ConvPaths, CroppedKernelsWithStridesGroupsAndOtherPaddings) {
  manual_seed(2);
  for (int64_t d : {1, 3, 7, 12, 24, 36, 40}) {
    check(cfg2(3, 4, 3, d, d + 1), 2, Float32);
    check(cfg2(3, 4, 3, d, std::max<int64_t>(0, d - 1)), 2, Float32);
    check(cfg2(5, 5, 3, d, d, 2), 2, Float32);
    check(cfg2(4, 3, 3, d, d, 1, 2), 2, Float32);
    check(cfg2(4, 3, 3, d, d, 1, 4), 2, Float32);  // depthwise: groups = channels
    check(cfg2(4, 4, 5, d, 2 * d), 2, Float32);
    check(cfg2(4, 4, 5, d, 2 * d, 3), 2, Float64);
    Cfg a{1, 3, 2, 1, {1, 2, 6}, {1, 3, 1}, {1, 1, 1}, {0, d, 0}, {1, d, 1}};
    check(a, 2, Float32);
  }
}

// Taps that mostly read padding (dilation 12 with padding 12 on a 14x14 map: 18% of the
// output-tap pairs read the input) run as a GEMM per tap even where oneDNN has a direct kernel;
// with enough work the output channels split across two threads, and a corner tap reaching 4
// outputs takes the transposed product.
TEST(ConvPaths, SparseTapsRunAsPerTapGemmsOnThreads) {
  manual_seed(6);
  const int prev = get_num_threads();
  set_num_threads(2);
  Cfg c{2, 160, 160, 1, {1, 14, 14}, {1, 3, 3}, {1, 1, 1}, {0, 12, 12}, {1, 12, 12}};
  check(c, 2, Float32);
  Cfg s = c;  // strided: the corner rectangles shrink to one output
  s.s[1] = s.s[2] = 2;
  check(s, 2, Float32);
  set_num_threads(prev);
}

// The per-tap weight layout [taps, O, C] from [O, C, taps]: 16-channel transposes where the taps
// fit 16 lanes, the channels past the last 16 and wider kernels element by element.
TEST(ConvPaths, TapWeightsPackAsTheirDefinition) {
  for (int64_t taps : {1, 2, 9, 16, 25})
    for (int64_t C : {1, 15, 16, 33, 160})
      for (int64_t O : {1, 3, 17}) {
        std::vector<float> w(size_t(O * C * taps)), wt(w.size(), -1.f);
        for (size_t i = 0; i < w.size(); ++i) w[i] = float(i);
        cpu::pack_tap_weights(w.data(), wt.data(), O, C, taps);
        for (int64_t t = 0; t < taps; ++t)
          for (int64_t o = 0; o < O; ++o)
            for (int64_t c = 0; c < C; ++c)
              ASSERT_EQ(wt[size_t((t * O + o) * C + c)], w[size_t((o * C + c) * taps + t)])
                  << "taps " << taps << " C " << C << " O " << O << " at " << t << ", " << o << ", "
                  << c;
      }
}

// The convolution epilogues' SiLU (kernels/cpu/silu_avx512.h) against double x / (1 + exp(-x)):
// a sweep over [-100, 100] (both signs of the exp's range reduction, results that underflow),
// lengths off the 16-lane vectors, and the edges: zeros keep their sign, NaN stays NaN, inf
// stays inf, -inf gives NaN as the formula does.
TEST(ConvPaths, EpilogueSiluMatchesItsFormula) {
  std::vector<float> x;
  for (int i = -100000; i <= 100000; ++i) x.push_back(float(i) / 1000.f);
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 88.f, -88.f, 89.f, -89.f, 150.f, -150.f})
    x.push_back(v);
  for (size_t n : {x.size(), size_t{1}, size_t{17}}) {
    std::vector<float> y(x.begin(), x.begin() + static_cast<long>(n));
    cpu::silu_inplace(y.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const double want = double(x[i]) / (1 + std::exp(-double(x[i])));
      ASSERT_NEAR(y[i], want, 1e-6 * std::abs(want) + 1e-37) << "silu(" << x[i] << ")";
      if (x[i] == 0) {
        EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> e{std::nanf(""), inf, -inf};
  cpu::silu_inplace(e.data(), 3);
  EXPECT_TRUE(std::isnan(e[0]));
  EXPECT_EQ(e[1], inf);
  EXPECT_TRUE(std::isnan(e[2]));
}

// The NCHW depthwise kernel (kernels/cpu/conv_depthwise.h: 3x3, stride 1 or 2, dilation 2 at
// stride 1) against float64 loops: widths around its 16-lane vectors and 4-vector blocks,
// heights around its 4-row blocks, paddings 0 to 2, with bias, each activation and a residual.
TEST(ConvPaths, NchwDepthwiseKernelMatchesLoops) {
  cpu::DepthwiseConv probe{1, 1, 8, 8, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1};
  if (!cpu::conv_depthwise_suits(probe)) GTEST_SKIP() << "no AVX-512: oneDNN runs them";
  manual_seed(31);
  int cases = 0;
  for (int64_t sd : {1, 2, 3})  // stride 1, stride 2, dilation 2
    for (int64_t W : {1, 5, 16, 17, 33, 56, 64, 71, 130})
      for (int64_t H : {1, 3, 4, 6, 9})
        for (int64_t pad : {0, 1, 2}) {
          const int64_t st = sd == 2 ? 2 : 1, dl = sd == 3 ? 2 : 1;
          const int64_t OH = (H + 2 * pad - 2 * dl - 1) / st + 1,
                        OW = (W + 2 * pad - 2 * dl - 1) / st + 1;
          if (OH <= 0 || OW <= 0) continue;
          const int64_t N = 2, C = 3;
          const int act = cases % 4, acc = cases % 3 == 0;
          ++cases;
          cpu::DepthwiseConv s{N, C, H, W, 3, 3, OH, OW, st, st, pad, pad, dl, dl};
          ASSERT_TRUE(cpu::conv_depthwise_suits(s));
          std::vector<float> x(size_t(N * C * H * W)), w(size_t(C * 9)), b(static_cast<size_t>(C)),
              y(size_t(N * C * OH * OW));
          for (auto* v : {&x, &w, &b, &y})
            for (float& f : *v) f = float(std::rand() % 2001 - 1000) / 500.f;
          std::vector<double> want(y.size());
          for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c)
              for (int64_t oy = 0; oy < OH; ++oy)
                for (int64_t ox = 0; ox < OW; ++ox) {
                  double a = b[size_t(c)];
                  for (int64_t ky = 0; ky < 3; ++ky)
                    for (int64_t kx = 0; kx < 3; ++kx) {
                      const int64_t iy = oy * st - pad + ky * dl, ix = ox * st - pad + kx * dl;
                      if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                        a += double(x[size_t(((n * C + c) * H + iy) * W + ix)]) *
                             w[size_t(c * 9 + ky * 3 + kx)];
                    }
                  const size_t yi = size_t(((n * C + c) * OH + oy) * OW + ox);
                  if (acc) a += y[yi];
                  if (act == cpu::kConvActRelu) a = std::max(a, 0.0);
                  if (act == cpu::kConvActSwish) a = a / (1 + std::exp(-a));
                  if (act == cpu::kConvActHardswish) a = a * std::clamp(a + 3, 0.0, 6.0) / 6;
                  want[yi] = a;
                }
          cpu::conv_depthwise_fwd(s, x.data(), w.data(), b.data(), act, acc, y.data());
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], want[i], 1e-5 * (1 + std::abs(want[i])))
                << "stride " << st << " dilation " << dl << " " << H << "x" << W << " pad " << pad
                << " act " << act << " residual " << acc << " at " << i;
        }
  EXPECT_GT(cases, 300);
}

// The same kernel behind the ops: eager depthwise conv2d (its gradients on oneDNN) against the
// float64 loops, and a Session's conv + bias + relu on an NCHW input (conv2d_fused's epilogue).
TEST(ConvPaths, NchwDepthwiseThroughTheOps) {
  manual_seed(32);
  for (int64_t st : {1, 2})
    for (int64_t hw : {7, 20, 56}) {
      Cfg c{2, 16, 16, 16, {1, hw, hw + 3}, {1, 3, 3}, {1, st, st}, {0, 1, 1}, {1, 1, 1}};
      check(c, 2, Float32);
      Tensor w = randn({16, 1, 3, 3}), b = randn({16}), xv = randn({2, 16, hw, hw + 3});
      Graph g;
      Tensor x = g.placeholder("x", Float32, {2, 16, hw, hw + 3});
      Tensor y = relu(conv2d(x, g.constant(w), g.constant(b), {st, st}, {1, 1}, {1, 1}, 16));
      Session s(g);
      Tensor got = s.run({y}, {{x, xv}})[0];
      Tensor want =
          relu(conv2d(xv.to(Float64), w.to(Float64), b.to(Float64), {st, st}, {1, 1}, {1, 1}, 16));
      const auto a = values(got), e = values(want);
      ASSERT_EQ(a.size(), e.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], e[i], 1e-5 * (1 + std::abs(e[i]))) << "stride " << st << " at " << i;
    }
}

// Eager inference puts the bias in the convolution's epilogue (conv2d_fused): the values of the
// convolution and a separate add (what runs with autograd or in a trace) within float rounding
// (oneDNN adds the bias where it chooses in its sums), on the dense, grouped, depthwise,
// per-tap and first-layer direct paths.
TEST(ConvPaths, EagerInferenceBiasInTheEpilogueMatchesTheAdd) {
  manual_seed(33);
  struct C {
    int64_t Cin, O, G, hw, k, s, p, d;
  };
  for (const C& c :
       {C{16, 32, 1, 12, 3, 1, 1, 1}, C{16, 16, 4, 9, 3, 2, 1, 1}, C{32, 32, 32, 20, 3, 1, 1, 1},
        C{32, 32, 32, 21, 3, 2, 1, 1}, C{64, 64, 1, 14, 3, 1, 12, 12}, C{8, 8, 1, 7, 1, 1, 0, 1},
        C{1, 6, 1, 28, 5, 1, 2, 1}, C{3, 16, 1, 32, 3, 1, 1, 1}}) {
    Tensor x = randn({2, c.Cin, c.hw, c.hw}), w = randn({c.O, c.Cin / c.G, c.k, c.k}),
           b = randn({c.O});
    Tensor want = add(conv2d(x, w, Tensor(), {c.s, c.s}, {c.p, c.p}, {c.d, c.d}, c.G),
                      reshape(b, {1, c.O, 1, 1}));
    Tensor got;
    {
      NoGradGuard ng;
      got = conv2d(x, w, b, {c.s, c.s}, {c.p, c.p}, {c.d, c.d}, c.G);
    }
    ASSERT_EQ(got.shape(), want.shape());
    const auto a = got.to_vector<float>(), e = want.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], e[i], 2e-6 * (1 + std::abs(e[i])))
          << "groups " << c.G << " stride " << c.s << " at " << i;
  }
}

// Wide maps with width padding past oneDNN's direct kernels' reach (dilation 12 and 24, 33 and
// more columns): the float32 forward runs as a GEMM per tap (one group; strides, ASPP's whole
// 33x33 map) or as column spans, each an unpadded-width convolution (groups); float64 is the
// im2col reference path beside them.
TEST(ConvPaths, WidePaddedMapsRunAsColumnSpans) {
  manual_seed(5);
  for (int64_t d : {12, 24})
    for (int64_t W : {33, 40}) {
      // (128 channels: with fewer, oneDNN's direct kernels take the padding themselves)
      Cfg c{1, 128, 128, 1, {1, 4, W}, {1, 3, 3}, {1, 1, 1}, {0, d, d}, {1, d, d}};
      check(c, 2, Float32);
      check(c, 2, Float64);
      Cfg s = c;
      s.s[1] = 2, s.s[2] = 3;
      check(s, 2, Float32);
      if (d == 24 && W == 33) {  // ASPP's whole map (taps meeting the input on 9-33 rows)
        Cfg m = c;
        m.in[1] = 33;
        check(m, 2, Float32);
      }
      Cfg g = c;
      g.G = 2;
      g.s[2] = 2;
      check(g, 2, Float32);
    }
}

TEST(ConvPaths, DilatedPaddedKernelsMatchTheFullKernel1dAnd3d) {
  manual_seed(3);
  for (int64_t d = 1; d <= 40; ++d) {
    const int64_t L = 1 + (d * 3) % 11;
    Cfg c1{2, 4, 6, d % 2 ? 2 : 1, {1, 1, L}, {1, 1, 3}, {1, 1, 1 + d % 2}, {0, 0, d}, {1, 1, d}};
    check(c1, 1, Float32);
    check(c1, 1, Float64);
  }
  for (int64_t d : {1, 2, 5, 12, 24, 36}) {
    const int64_t m = 1 + d % 4;
    Cfg c3{1, 2, 4, 1, {m + 1, m, m + 2}, {3, 3, 3}, {1, 1, 1}, {d, d, d}, {d, d, d}};
    check(c3, 3, Float32);
    check(c3, 3, Float64);
  }
}

// A Session over constant weights on a 9x33 map: dilation 24 and 12 run as column spans, 36
// is cropped by the block_layout pass (to 1x1 in height, 1x1 or 1x3 in width... as the map
// allows) and every weight laid out once; numbers as the full kernel's, run after run.
TEST(ConvPaths, SessionWithConstantDilatedWeightsMatchesTheFullKernel) {
  manual_seed(4);
  Graph g;
  const int64_t C = 128, O = 128, H = 9, Wd = 33;
  Tensor wv[3] = {randn({O, C, 3, 3}), randn({O, C, 3, 3}), randn({O, C, 3, 3})};
  Tensor bv = randn({O});
  Tensor x = g.placeholder("x", Float32, {1, C, H, Wd});
  Tensor h = x;
  const int64_t dil[3] = {24, 12, 36};
  for (int i = 0; i < 3; ++i)
    h = relu(
        conv2d(h, g.constant(wv[i]), g.constant(bv), {1, 1}, {dil[i], dil[i]}, {dil[i], dil[i]}));
  Tensor xv = randn({1, C, H, Wd});
  Tensor want;
  {
    NoGradGuard ng;
    want = xv.to(Float64);
    for (int i = 0; i < 3; ++i)
      want = relu(conv2d(want, wv[i].to(Float64), bv.to(Float64), {1, 1}, {dil[i], dil[i]},
                         {dil[i], dil[i]}));
  }
  Session s(g);
  for (int run = 0; run < 3; ++run) {
    Tensor got = s.run({h}, {{x, xv}})[0];
    const auto a = values(got), b = values(want);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-3 * (1 + std::abs(b[i]))) << "run " << run << " at " << i;
  }
}

// Grouped, depthwise and odd-channel convolutions with constant weights (conv2d_fused, NCHW,
// weights laid out by oneDNN once): right on every run, and a second Session of the same shapes
// with other weights (built after the first is gone, so its buffers may reuse the addresses)
// gets its own numbers, not the first one's laid-out weights.
TEST(ConvPaths, SessionsLayOutTheirOwnConstantWeightsOnce) {
  const int64_t C = 32, H = 12;
  Tensor xv = randn({2, C, H, H});
  for (int model = 0; model < 3; ++model) {
    manual_seed(10 + model);
    Tensor w1 = randn({C, C / 4, 3, 3}), w2 = randn({C, 1, 3, 3}), w3 = randn({20, C, 1, 1});
    Graph g;
    Tensor x = g.placeholder("x", Float32, {2, C, H, H});
    auto net = [](const Tensor& in, const Tensor& a, const Tensor& b, const Tensor& c) {
      Tensor h = relu(conv2d(in, a, Tensor(), {1, 1}, {1, 1}, {1, 1}, 4));
      h = conv2d(h, b, Tensor(), {2, 2}, {2, 2}, {2, 2}, C);
      return conv2d(h, c, Tensor());
    };
    Tensor y = net(x, g.constant(w1), g.constant(w2), g.constant(w3));
    Tensor want;
    {
      NoGradGuard ng;
      want = net(xv.to(Float64), w1.to(Float64), w2.to(Float64), w3.to(Float64));
    }
    Session s(g);
    for (int run = 0; run < 2; ++run) {
      const auto a = values(s.run({y}, {{x, xv}})[0]), b = values(want);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-3 * (1 + std::abs(b[i])))
            << "model " << model << " run " << run << " at " << i;
    }
  }
}

// An inverted-residual block with squeeze-excite, as efficientnet and mobilenet_v3 have it,
// run by a Session whose passes fuse the activations (relu, SiLU as x * sigmoid(x), hardswish)
// into the convolutions and keep the block in channel blocks: the depthwise
// convolutions (strides 1 and 2) on blocked activations, the squeeze (mean over H and W) and
// the per-channel scale on blocks (mean_hw_blocked, scale_channels_blocked, either operand
// order), the small 1x1 convolutions in NCHW between them. Against float64 eager, every run.
TEST(ConvPaths, BlockedDepthwiseAndSqueezeExcite) {
  manual_seed(21);
  const int64_t N = 2, C = 32, H = 14, R = 8;
  Tensor w_in = randn({C, C, 1, 1}), b_in = randn({C}), w_dw1 = randn({C, 1, 3, 3}),
         w_dw2 = randn({C, 1, 3, 3}), w_r = randn({R, C, 1, 1}), b_r = randn({R}),
         w_e = randn({C, R, 1, 1}), b_e = randn({C}), w_out = randn({48, C, 1, 1});
  auto net = [&](const Tensor& x, auto k) {
    Tensor h = conv2d(x, k(w_in), k(b_in));
    h = mul(h, sigmoid(h));  // SiLU as ONNX exports it: the conv's swish epilogue
    auto se = [&](const Tensor& v, bool scale_first) {
      Tensor m = mean(v, {2, 3}, true);
      Tensor s = sigmoid(conv2d(relu(conv2d(m, k(w_r), k(b_r))), k(w_e), k(b_e)));
      return scale_first ? mul(s, v) : mul(v, s);
    };
    h = se(relu(conv2d(h, k(w_dw1), Tensor(), {1, 1}, {1, 1}, {1, 1}, C)), false);
    h = se(hardswish(conv2d(h, k(w_dw2), Tensor(), {2, 2}, {1, 1}, {1, 1}, C)), true);
    return mean(conv2d(h, k(w_out)), {2, 3}, true);
  };
  Graph g;
  Tensor x = g.placeholder("x", Float32, {N, C, H, H});
  Tensor y = net(x, [&](const Tensor& t) { return g.constant(t); });
  Tensor xv = randn({N, C, H, H});
  Tensor want;
  {
    NoGradGuard ng;
    want = net(xv.to(Float64), [](const Tensor& t) { return t.to(Float64); });
  }
  Session s(g);
  for (int run = 0; run < 3; ++run) {
    Tensor got = s.run({y}, {{x, xv}})[0];
    ASSERT_EQ(got.shape(), (Shape{N, 48, 1, 1}));
    const auto a = values(got), b = values(want);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-3 * (1 + std::abs(b[i]))) << "run " << run << " at " << i;
  }
  EXPECT_NE(s.last_run().passes.find("block_layout"), std::string::npos) << s.last_run().passes;
}

// A Session's 3x3 convolutions with constant weights (blocked by block_layout) in each Winograd
// mode: off, always the inference form (weights transformed once, through OIHW from their
// blocks), and timed on the first call, which runs both forms on the call's own buffers: the
// residual the second convolution adds must survive those runs. Against float64 loops, three
// runs each (the first chooses, the others reuse the transformed weights).
TEST(ConvPaths, SessionWinogradFormsMatchDirect) {
  manual_seed(23);
  const int64_t N = 1, C = 32, O = 48, H = 14;
  Tensor w1 = mul(randn({O, C, 3, 3}), 0.2), b1 = randn({O}), w2 = mul(randn({O, O, 3, 3}), 0.1),
         b2 = randn({O});
  auto net = [&](const Tensor& x, auto k) {
    Tensor h = relu(conv2d(x, k(w1), k(b1), {1, 1}, {1, 1}));
    return relu(add(conv2d(h, k(w2), k(b2), {1, 1}, {1, 1}), h));
  };
  Tensor xv = randn({N, C, H, H}), want;
  {
    NoGradGuard ng;
    want = net(xv.to(Float64), [](const Tensor& t) { return t.to(Float64); });
  }
  for (int mode : {cpu::kWinogradOff, cpu::kWinogradAlways, cpu::kWinogradTimed}) {
    cpu::set_winograd_mode(mode);
    Graph g;
    Tensor x = g.placeholder("x", Float32, {N, C, H, H});
    Tensor y = net(x, [&](const Tensor& t) { return g.constant(t); });
    Session s(g);
    for (int run = 0; run < 3; ++run) {
      const auto a = values(s.run({y}, {{x, xv}})[0]), b = values(want);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i])))
            << "mode " << mode << " run " << run << " at " << i;
    }
    EXPECT_NE(s.last_run().passes.find("block_layout"), std::string::npos) << s.last_run().passes;
  }
  cpu::set_winograd_mode(cpu::kWinogradTimed);
}

// ONNX's ceil_mode and asymmetric max pools (googlenet's) run as max_pool2d_values, which skips
// padded positions: equal to max_pool2d over an input padded with -inf, NCHW and, after a
// convolution in a Session, in channel blocks; a NaN wins its window as in max_pool2d.
// A plane of 13 x 13 blocks takes whole windows, one of 70 x 70 (over 256 KiB) row by row.
TEST(ConvPaths, PaddedMaxPoolOnBlocks) {
  manual_seed(31);
  const auto& pool = detail::OpRegistry::get().at("max_pool2d_values");
  for (const int64_t H : {13, 70}) {
    const int64_t N = 2, C = 32;
    Tensor xv = randn({N, C, H, H});
    xv.data_ptr<float>()[5] = NAN;
    const std::vector<int64_t> k{3, 3}, s{2, 2}, pb{0, 1}, pe{1, 2};
    auto reference = [&](const Tensor& x) {
      return max_pool2d(pad(x, {pb[1], pe[1], pb[0], pe[0]}, -INFINITY), k, s);
    };
    detail::Attrs a{k, s, pb, pe, int64_t{0}};
    Tensor got = detail::call1(pool, {xv}, a), want = reference(xv);
    ASSERT_EQ(got.shape(), want.shape());
    auto g = values(got), w = values(want);
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_TRUE(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) << "NCHW at " << i;
    // After a convolution the pool reads and writes channel blocks.
    Tensor wv = randn({C, C, 1, 1});
    Graph gr;
    Tensor x = gr.placeholder("x", Float32, {N, C, H, H});
    Tensor y = detail::call1(pool, {conv2d(x, gr.constant(wv))}, a);
    Tensor yb = conv2d(y, gr.constant(wv));
    Session sess(gr);
    Tensor sv = sess.run({yb}, {{x, xv}})[0];
    Tensor ref = conv2d(reference(conv2d(xv, wv)), wv);
    auto p = values(sv), q = values(ref);
    ASSERT_EQ(p.size(), q.size());
    for (size_t i = 0; i < p.size(); ++i)
      ASSERT_TRUE(std::fabs(p[i] - q[i]) <= 1e-4 * (1 + std::fabs(q[i])) ||
                  (std::isnan(p[i]) && std::isnan(q[i])))
          << "blocked at " << i << ", H " << H;
  }
}

// With busy processes on every core, the guard (opt-in: KILN_LOAD_GUARD=1, set here unless the
// environment says otherwise) notices the starved threads and runs convolutions on one thread,
// giving the caller's thread count back after each call, with the same results.
TEST(ConvPaths, LoadGuardRunsOnOneThreadWhileOtherProcessesHoldTheCores) {
  setenv("KILN_LOAD_GUARD", "1", /*overwrite=*/0);
  if (!load_guard_enabled())
    GTEST_SKIP() << "the guard is off (KILN_LOAD_GUARD=0, OMP_WAIT_POLICY or GOMP_SPINCOUNT set, "
                    "or an earlier test in this process used it before this one set it)";
  manual_seed(41);
  const int prev = get_num_threads();
  set_num_threads(2);
  Tensor x = randn({8, 32, 28, 28}), w = randn({32, 32, 3, 3}), b = randn({32});
  const auto want = values(conv2d(x, w, b, {1, 1}, {1, 1}));
  std::vector<pid_t> hogs;
  const unsigned n_hogs = 2 * std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n_hogs; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // gone even if the test dies before it kills them
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
    if (pid > 0) hogs.push_back(pid);
  }
  bool active = false;
  std::vector<double> got = want;
  const auto start = std::chrono::steady_clock::now();
  // Back-to-back convolutions, as in a model: the guard judges windows without idle gaps.
  while (!active && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
    active = load_guard_active();
    EXPECT_EQ(get_num_threads(), 2);
    if (get_num_threads() != 2) break;
  }
  if (active) got = values(conv2d(x, w, b, {1, 1}, {1, 1}));  // on one thread
  for (pid_t pid : hogs) kill(pid, SIGKILL);
  for (pid_t pid : hogs) waitpid(pid, nullptr, 0);
  set_num_threads(prev);
  EXPECT_TRUE(active) << "starved for 10 s and still on every thread";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
}
