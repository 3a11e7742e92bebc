// The convolution sweep (bench/run CONV): every configuration the conv ops take (dilation 1 to
// 36 with padding = dilation on small maps, groups, depthwise, stride 2, asymmetric padding,
// 1-D/2-D/3-D), eager and in a Session (constant weights, bias and relu: the block_layout path
// kiln-run takes), beside the best path for its FLOPs measured in the same process: the dense
// convolution of the same channels, groups and map (dilation 1, stride 1, "same" padding).
// FLOPs count only multiply-adds whose tap lands on the input (a tap in the padding is no
// work), so a cropped convolution is not credited for the zeros it skips. A row whose eager or
// Session run is below half the best dense path (the faster of its eager and Session runs) is a
// cliff, printed "< half". All of it with Winograd off (it skips multiplications the count
// credits); the dense counterparts' Winograd rate is printed after the table.
// kiln_conv_bench THREADS [NAME_PART].
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::bench;

namespace {

using Ints = std::vector<int64_t>;

struct Conv {
  std::string name;
  int64_t N, C, O, G;
  Ints in, k, s, p, d;  // one value per spatial dim (1, 2 or 3 of them)
  Ints pad_end = {};    // asymmetric: extra padding after (explicit pad, as the ONNX importer)

  int64_t out(size_t i) const {
    const int64_t e = pad_end.empty() ? p[i] : pad_end[i];
    return (in[i] + p[i] + e - (d[i] * (k[i] - 1) + 1)) / s[i] + 1;
  }
  // Multiply-adds whose tap lands on the input, times 2.
  double flops() const {
    double f = 2.0 * double(N) * double(O) * double(C / G);
    for (size_t i = 0; i < in.size(); ++i) {
      int64_t u = 0;
      for (int64_t o = 0; o < out(i); ++o)
        for (int64_t t = 0; t < k[i]; ++t) {
          const int64_t at = o * s[i] - p[i] + t * d[i];
          u += at >= 0 && at < in[i];
        }
      f *= double(u);
    }
    return f;
  }
  // The best path for these channels: dense, stride 1, "same" padding, same map.
  Conv dense() const {
    Conv c = *this;
    c.name += "_dense";
    for (size_t i = 0; i < in.size(); ++i) c.s[i] = 1, c.d[i] = 1, c.p[i] = (k[i] - 1) / 2;
    c.pad_end.clear();
    return c;
  }
  std::string params() const {
    auto list = [](const Ints& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    return "{\"N\": " + std::to_string(N) + ", \"C\": " + std::to_string(C) +
           ", \"O\": " + std::to_string(O) + ", \"groups\": " + std::to_string(G) +
           ", \"in\": " + list(in) + ", \"kernel\": " + list(k) + ", \"stride\": " + list(s) +
           ", \"padding\": " + list(p) +
           (pad_end.empty() ? "" : ", \"pad_end\": " + list(pad_end)) +
           ", \"dilation\": " + list(d) + "}";
  }

  Tensor apply(Tensor x, const Tensor& w, const Tensor& b) const {
    Ints pp = p;
    if (!pad_end.empty()) {  // [left, right] per dim, last dim first
      Ints pads;
      for (size_t i = in.size(); i-- > 0;) pads.push_back(p[i]), pads.push_back(pad_end[i]);
      x = pad(x, pads);
      std::fill(pp.begin(), pp.end(), 0);
    }
    if (in.size() == 1) return conv1d(x, w, b, s[0], pp[0], d[0], G);
    if (in.size() == 2) return conv2d(x, w, b, s, pp, d, G);
    return conv3d(x, w, b, s, pp, d, G);
  }
  Ints x_shape() const {
    Ints v{N, C};
    v.insert(v.end(), in.begin(), in.end());
    return v;
  }
  Ints w_shape() const {
    Ints v{O, C / G};
    v.insert(v.end(), k.begin(), k.end());
    return v;
  }
};

// One configuration, eager (conv, bias add, relu) and as a Session (constant weight and bias:
// one conv2d_fused node after the passes, the path kiln-run takes).
struct Runner {
  Tensor xv, wv, bv;
  Graph g;
  Tensor x, y;
  std::unique_ptr<Session> s;
  const Conv& c;
  explicit Runner(const Conv& conv) : c(conv) {
    manual_seed(7);
    xv = randn(Shape(c.x_shape()));
    wv = mul(randn(Shape(c.w_shape())), 0.1);
    bv = randn({c.O});
    x = g.placeholder("x", Float32, Shape(c.x_shape()));
    y = relu(c.apply(x, g.constant(wv), g.constant(bv)));
    s = std::make_unique<Session>(g);
  }
  void eager() { Tensor r = relu(c.apply(xv, wv, bv)); }
  void session() { s->run({y}, {{x, xv}}); }
};

// GFLOP/s of the configuration's eager and Session runs and of its dense counterpart's best,
// timed interleaved (one batch of each per round, 7 rounds, medians): the shared machine's load
// drifts by tens of percent within seconds.
struct Result {
  double eager, session, dense_eager, dense_session;
};

Result measure(const Conv& c) {
  NoGradGuard ng;
  const Conv dc = c.dense();
  Runner r(c), d(dc);
  std::vector<std::function<void()>> f = {[&] { r.eager(); }, [&] { r.session(); },
                                          [&] { d.eager(); }, [&] { d.session(); }};
  std::vector<int> inner;
  for (auto& g : f) inner.push_back(calibrate(g, 0.02));
  std::vector<std::vector<double>> t(f.size());
  for (int round = 0; round < 7; ++round)
    for (size_t i = 0; i < f.size(); ++i) {
      const double t0 = now_s();
      for (int k = 0; k < inner[i]; ++k) f[i]();
      t[i].push_back((now_s() - t0) / inner[i]);
    }
  auto med = [&](size_t i) {
    std::sort(t[i].begin(), t[i].end());
    return t[i][t[i].size() / 2];
  };
  const double fc = c.flops(), fd = dc.flops();
  return {fc / med(0) / 1e9, fc / med(1) / 1e9, fd / med(2) / 1e9, fd / med(3) / 1e9};
}

std::vector<Conv> sweep() {
  std::vector<Conv> v;
  // 2-D, 3x3, padding = dilation (ASPP's rates) on a 14x14 map (smaller than 24 and 36) and
  // on DeepLab's 33x33.
  for (int64_t d : {1, 2, 12, 24, 36})
    v.push_back({"2d_14x14_d" + std::to_string(d),
                 1,
                 256,
                 256,
                 1,
                 {14, 14},
                 {3, 3},
                 {1, 1},
                 {d, d},
                 {d, d}});
  for (int64_t d : {12, 24, 36})
    v.push_back({"aspp_33x33_d" + std::to_string(d),
                 1,
                 256,
                 256,
                 1,
                 {33, 33},
                 {3, 3},
                 {1, 1},
                 {d, d},
                 {d, d}});
  v.push_back({"2d_groups4", 1, 256, 256, 4, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}});
  v.push_back({"2d_depthwise", 1, 256, 256, 256, {56, 56}, {3, 3}, {1, 1}, {1, 1}, {1, 1}});
  v.push_back({"2d_depthwise_d2", 1, 256, 256, 256, {56, 56}, {3, 3}, {1, 1}, {2, 2}, {2, 2}});
  v.push_back({"2d_depthwise_s2", 1, 256, 256, 256, {56, 56}, {3, 3}, {2, 2}, {1, 1}, {1, 1}});
  v.push_back({"2d_stride2", 1, 128, 256, 1, {28, 28}, {3, 3}, {2, 2}, {1, 1}, {1, 1}});
  // TensorFlow-style "same" padding for stride 2: 0 before, 1 after.
  v.push_back({"2d_asym_pad_s2", 1, 128, 256, 1, {28, 28}, {3, 3}, {2, 2}, {0, 0}, {1, 1}, {1, 1}});
  for (int64_t d : {1, 12})
    v.push_back({"1d_L256_d" + std::to_string(d), 1, 256, 256, 1, {256}, {3}, {1}, {d}, {d}});
  for (int64_t d : {1, 2})
    v.push_back({"3d_8x14x14_d" + std::to_string(d),
                 1,
                 64,
                 64,
                 1,
                 {8, 14, 14},
                 {3, 3, 3},
                 {1, 1, 1},
                 {d, d, d},
                 {d, d, d}});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: kiln_conv_bench THREADS [NAME_PART]\n";
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  set_num_threads(threads);
  {  // the first half second of a process on the shared VM runs slow (see kiln_bench.cpp)
    Tensor a = randn({512, 512});
    const double t0 = now_s();
    while (now_s() - t0 < 0.7) Tensor c = matmul(a, a);
  }
  // Every path in the table does the multiplications its GFLOP/s count: Winograd, which a
  // Session takes for a constant 3x3 at stride 1 (the dense counterparts of most rows) and
  // which does 2.25x fewer, would be credited with ones it skips, as a kernel multiplying
  // padding would be with ones it wastes. It is off for the table and measured after it.
  cpu::set_winograd_mode(cpu::kWinogradOff);
  std::fprintf(stderr,
               "GFLOP/s (multiply-adds on the input only), %d thread(s); dense: the same "
               "channels and map at dilation 1, stride 1 (best: the faster of its two paths); "
               "direct convolutions (Winograd below)\n"
               "%-18s %8s %8s %6s %8s %8s %6s %8s\n",
               threads, "config", "eager", "dense", "ratio", "session", "dense", "ratio",
               "vs best");
  const std::string only = argc > 2 ? argv[2] : "";
  std::vector<Conv> winograd;  // the dense counterparts a Session would run as Winograd
  for (const Conv& c : sweep()) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    const Conv dc = c.dense();
    if (dc.G == 1 && dc.in.size() == 2 && dc.k == Ints{3, 3} &&
        std::none_of(winograd.begin(), winograd.end(),
                     [&](const Conv& w) { return w.params() == dc.params(); }))
      winograd.push_back(dc);
    const Result t = measure(c);
    const double best = std::max(t.dense_eager, t.dense_session);
    emit("CONV", c.name, "kiln", "eager", threads, c.params(), "GFLOP/s", t.eager);
    emit("CONV", c.name, "kiln", "session", threads, c.params(), "GFLOP/s", t.session);
    emit("CONV", c.name, "kiln", "best", threads, c.params(), "GFLOP/s", best);
    const double re = t.eager / t.dense_eager, rs = t.session / t.dense_session;
    // The cliff test is against the best dense path: an eager row beside a fused Session too.
    const double worst = std::min(t.eager, t.session) / best;
    std::fprintf(stderr, "%-18s %8.1f %8.1f %6.2f %8.1f %8.1f %6.2f %8.2f%s\n", c.name.c_str(),
                 t.eager, t.dense_eager, re, t.session, t.dense_session, rs, worst,
                 worst < 0.5 ? "  < half" : "");
  }
  // Winograd on the dense counterparts (its first call times it against direct and keeps the
  // faster): GFLOP/s counting the direct multiply-adds it stands for.
  cpu::set_winograd_mode(cpu::kWinogradTimed);
  for (const Conv& dc : winograd) {
    NoGradGuard ng;
    Runner r(dc);
    r.session();  // the choice
    const int inner = calibrate([&] { r.session(); }, 0.02);
    std::vector<double> t;
    for (int round = 0; round < 7; ++round) {
      const double t0 = now_s();
      for (int k = 0; k < inner; ++k) r.session();
      t.push_back((now_s() - t0) / inner);
    }
    std::sort(t.begin(), t.end());
    const double g = dc.flops() / t[t.size() / 2] / 1e9;
    emit("CONV", dc.name, "kiln", "session_winograd", threads, dc.params(), "GFLOP/s", g);
    std::fprintf(stderr, "%-18s Session with Winograd: %.1f direct-equivalent GFLOP/s\n",
                 dc.name.c_str(), g);
  }
  return 0;
}
