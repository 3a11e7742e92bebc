// Elementwise fusion and codegen: the pass groups what it should, fused results equal eager
// ones through both the tile interpreter and generated code (for every fusable registry op, from
// its samples), random graphs agree, and the disk cache is reused by a second process and
// rebuilt when corrupt.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "kiln/codegen/codegen.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/exec/session.h"
#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/ops/fused.h"
#include "random_graphs.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

extern char** environ;

namespace {
using namespace kiln;

double max_rel(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    double d = std::fabs(x[i] - y[i]) / std::max(1.0, std::fabs(y[i]));
    worst = std::max(worst, d);
  }
  return worst;
}

int count_op(const Program& p, const std::string& name) {
  int n = 0;
  for (const auto& node : p.graph->nodes) n += node->kind == NodeKind::Op && node->op->name == name;
  return n;
}

// A private cache directory per test process, so runs do not share state.
std::string fresh_cache() {
  std::string dir =
      std::filesystem::temp_directory_path().string() + "/kiln_cg_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  // Removed when the process ends (it holds a ~20 MB precompiled prelude).
  static const struct RemoveAtExit {
    std::string d;
    ~RemoveAtExit() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } remove_at_exit{dir};
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  // These tests check the generated code itself: it must be there on the first call.
  codegen::set_async(false);
  return dir;
}

TEST(Fusion, GeluOfAffineBecomesOneKernel) {
  fresh_cache();
  Graph g;
  Tensor x = g.placeholder("x", Float32, {64, 33});
  Tensor a = rand({33}), b = rand({1});
  Tensor y = gelu(add(mul(x, a), b));
  Program p = prune(*g.impl(), {g.value_of(y)});
  optimize(p);
  EXPECT_EQ(count_op(p, "fused"), 1);
  EXPECT_EQ(count_op(p, "gelu"), 0);
  Tensor xv = randn({64, 33});
  Tensor ref = gelu(add(mul(xv, a), b));
  for (bool cg : {false, true}) {
    fused::set_codegen(cg);
    Session s(g);
    Tensor out = s.run(y, {{x, xv}});
    EXPECT_LT(max_rel(out, ref), 1e-6) << "codegen " << cg;
    EXPECT_EQ(s.last_run().nodes_executed, 1);
  }
  fused::set_codegen(true);
}

TEST(Fusion, SharedValueUsedOutsideBecomesAnOutput) {
  // t = x * 2 is fetched as well as used by the group: the group computes it and writes it as
  // its second output, in the same pass.
  fresh_cache();
  Graph g;
  Tensor x = g.placeholder("x", Float32, {8, 8});
  Tensor t = mul(x, 2.0);
  Tensor y = tanh(add(t, 1.0));
  Program p = prune(*g.impl(), {g.value_of(t), g.value_of(y)});
  optimize(p);
  EXPECT_EQ(count_op(p, "mul"), 0);
  EXPECT_EQ(count_op(p, "fused"), 1);
  Tensor xv = randn({8, 8});
  for (bool cg : {false, true}) {
    fused::set_codegen(cg);
    Session s(g);
    auto out = s.run({t, y}, {{x, xv}});
    EXPECT_LT(max_rel(out[0], mul(xv, 2.0)), 1e-7) << "codegen " << cg;
    EXPECT_LT(max_rel(out[1], tanh(add(mul(xv, 2.0), 1.0))), 1e-6) << "codegen " << cg;
    EXPECT_EQ(s.last_run().nodes_executed, 1);
  }
  fused::set_codegen(true);
}

TEST(Fusion, AdamStyleUpdateIsOnePassWithThreeOutputs) {
  // The functional Adam step of a JIT'd training loop: new m, new v and new p from p, g, m, v
  // (plus scalars). All three leave the group, so the group has three outputs and nothing else
  // runs. Large enough for the streaming-store path (outputs >= 1 MiB), with a broadcast row.
  fresh_cache();
  const Shape sh{512, 640};
  Graph g;
  Tensor p = g.placeholder("p", Float32, sh), gr = g.placeholder("g", Float32, sh);
  Tensor m = g.placeholder("m", Float32, sh), v = g.placeholder("v", Float32, sh);
  Tensor row = randn({640});
  auto step = [&](const Tensor& p_, const Tensor& g_, const Tensor& m_, const Tensor& v_) {
    Tensor nm = add(mul(m_, 0.9), mul(g_, 0.1));
    Tensor nv = add(mul(v_, 0.999), mul(mul(g_, g_), 0.001));
    Tensor np = sub(p_, mul(add(div(nm, add(sqrt(nv), 1e-8)), mul(p_, row)), 1e-3));
    return std::vector<Tensor>{np, nm, nv};
  };
  auto outs = step(p, gr, m, v);
  Program prog = prune(*g.impl(), {g.value_of(outs[0]), g.value_of(outs[1]), g.value_of(outs[2])});
  optimize(prog);
  EXPECT_EQ(count_op(prog, "fused"), 1);
  int ops = 0;
  for (const auto& n : prog.graph->nodes) ops += n->kind == NodeKind::Op;
  EXPECT_EQ(ops, 1);
  Tensor pv = randn(sh), gv = randn(sh), mv = randn(sh), vv = rand(sh);
  auto want = step(pv, gv, mv, vv);
  for (bool cg : {false, true}) {
    fused::set_codegen(cg);
    Session s(g);
    auto got = s.run(outs, {{p, pv}, {gr, gv}, {m, mv}, {v, vv}});
    for (int k = 0; k < 3; ++k) EXPECT_LT(max_rel(got[k], want[k]), 1e-6) << k << " cg " << cg;
    EXPECT_EQ(s.last_run().nodes_executed, 1);
  }
  fused::set_codegen(true);
}

TEST(Fusion, ValueNeededBeforeTheGroupEndsStaysOutside) {
  // e = exp(x) feeds a sum whose result feeds the group again: fusing e into the group would
  // need the sum before the group runs, so e stays a value of its own (softmax's shape).
  Graph g;
  Tensor x = g.placeholder("x", Float32, {16, 32});
  Tensor e = exp(x);
  Tensor y = mul(div(e, sum(e, {1}, true)), 3.0);
  Program p = prune(*g.impl(), {g.value_of(y)});
  optimize(p);
  EXPECT_EQ(count_op(p, "sum"), 1);
  Tensor xv = randn({16, 32});
  Session s(g);
  Tensor out = s.run(y, {{x, xv}});
  EXPECT_LT(max_rel(out, mul(softmax(xv, 1), 3.0)), 1e-6);
}

TEST(Fusion, SharedValueBesideADeadBranchStaysLive) {
  // r = 2 e + t, with t the true side of a switch (dead when p is false); e = exp(x) is also used
  // outside the branch (u = 3 e). Made an extra output of r's group, e would share r's deadness
  // and u would be dead too, so in a graph with control flow a shared value stays a node of its
  // own.
  Graph g;
  Tensor x = g.placeholder("x", Float32, {4});
  Tensor y = g.placeholder("y", Float32, {4});
  Tensor p = g.placeholder("p", Bool, {});
  Tensor e = exp(x);
  auto sw = switch_(y, p);
  Tensor r = add(mul(e, 2.0), sw[1]);
  Tensor m = merge({r, neg(sw[0])})[0];
  Tensor u = mul(e, 3.0);
  Tensor xv = randn({4}), yv = randn({4});
  Session s(g);
  for (bool pv : {true, false}) {
    auto out = s.run({u, m}, {{x, xv}, {y, yv}, {p, scalar_tensor(pv ? 1.0 : 0.0, Bool)}});
    EXPECT_LT(max_rel(out[0], mul(exp(xv), 3.0)), 1e-6) << "p = " << pv;
    EXPECT_LT(max_rel(out[1], pv ? add(mul(exp(xv), 2.0), yv) : neg(yv)), 1e-6) << "p = " << pv;
  }
}

TEST(Fusion, MalformedOutputListsAreRejected) {
  Tensor a = randn({4}), b = randn({4});
  for (const char* bad :
       {"add(i0,i1);mul(t0,i1);>t1", "add(i0,i1);mul(t0,i1);>t0,t0",
        "lt(i0,i1);where(t0,i0,i1);>t0", "add(i0,i1);mul(t0,i1);>x0", "add(i0,i1);mul(t0,i1);>"}) {
    try {
      fused::call(bad, {a, b});
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("[fused]"), std::string::npos) << err.what();
    }
  }
  auto r = fused::call("add(i0,i1);mul(t0,i1);>t0", {a, b});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_LT(max_rel(r[0], mul(add(a, b), b)), 1e-7);
  EXPECT_LT(max_rel(r[1], add(a, b)), 1e-7);
}

// Dynamic dims fuse; a member also fetched (an extra output) whose dims broadcast into the
// group's at some sizes keeps its own shape there, as eager.
TEST(Fusion, DynamicGroupWhoseMemberBroadcastsAtRunTime) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 8});
  Tensor y = g.placeholder("y", Float32, {Dim::any(), 8});
  Tensor z = g.placeholder("z", Float32, {Dim::any(), 8});
  Tensor m = exp(mul(add(x, y), 0.5));
  Tensor r = tanh(mul(m, z));
  Session s(g);
  for (int64_t a : {5, 1, 3}) {
    for (int64_t b : {5, 1}) {
      Tensor xv = randn({a, 8}), yv = randn({a, 8}), zv = randn({b, 8});
      if (a != b && a != 1 && b != 1) continue;
      auto got = s.run({r, m}, {{x, xv}, {y, yv}, {z, zv}});
      Tensor m_ref = exp(mul(add(xv, yv), 0.5));
      Tensor r_ref = tanh(mul(m_ref, zv));
      ASSERT_EQ(got[1].shape(), m_ref.shape()) << a << " " << b;
      ASSERT_EQ(got[0].shape(), r_ref.shape()) << a << " " << b;
      EXPECT_LT(max_rel(got[0], r_ref), 1e-6) << a << " " << b;
      EXPECT_LT(max_rel(got[1], m_ref), 1e-6) << a << " " << b;
      EXPECT_NE(s.last_run().passes.find("fuse_elementwise: 1"), std::string::npos)
          << s.last_run().passes;
    }
  }
}

TEST(Fusion, ThousandAddsFuseIntoOneKernel) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {16});
  Tensor y = g.placeholder("y", Float32, {16});
  Tensor z = x;
  for (int i = 0; i < 1000; ++i) z = add(z, y);
  Program p = prune(*g.impl(), {g.value_of(z)});
  optimize(p);
  EXPECT_EQ(count_op(p, "fused"), 1);
  EXPECT_EQ(count_op(p, "add"), 0);
  Tensor xv = randn({16}), yv = randn({16});
  Session s(g);
  Tensor out = s.run(z, {{x, xv}, {y, yv}});
  EXPECT_LT(max_rel(out, add(xv, mul(yv, 1000.0))), 1e-4);  // 1000 float roundings
  EXPECT_EQ(s.last_run().nodes_executed, 1);
}

TEST(Fusion, PassCanBeSwitchedOff) {
  ::setenv("KILN_DISABLE_PASSES", "fuse_elementwise", 1);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {4});
  Tensor y = relu(mul(x, 3.0));
  Program p = prune(*g.impl(), {g.value_of(y)});
  optimize(p);
  ::unsetenv("KILN_DISABLE_PASSES");
  EXPECT_EQ(count_op(p, "fused"), 0);
  EXPECT_EQ(count_op(p, "relu"), 1);
}

TEST(Fusion, WhereWithComparisonAndBoolInput) {
  Graph g;
  Tensor x = g.placeholder("x", Float64, {5, 7});
  Tensor m = g.placeholder("m", Bool, {7});
  Tensor y = where(logical_and(gt(x, 0.0), m), exp(x), mul(x, 0.5));
  Tensor xv = randn({5, 7}, Float64);
  Tensor mv = tensor(std::vector<bool>{true, false, true, true, false, true, false}, {7});
  Tensor ref = where(logical_and(gt(xv, 0.0), mv), exp(xv), mul(xv, 0.5));
  Program p = prune(*g.impl(), {g.value_of(y)});
  optimize(p);
  EXPECT_EQ(count_op(p, "fused"), 1);
  for (bool cg : {false, true}) {
    fused::set_codegen(cg);
    Session s(g);
    EXPECT_LT(max_rel(s.run(y, {{x, xv}, {m, mv}}), ref), 1e-12) << "codegen " << cg;
  }
  fused::set_codegen(true);
}

// Every op fusion accepts, from the registry: its first sample (float32) followed by a multiply,
// as a graph. The op must land inside a fused node, and both the tile interpreter and the
// generated code must give eager's numbers. Ops without an interpreter loop of their own run
// their kernel on each tile; their `expr` is what the generated code computes.
TEST(Codegen, EveryFusableRegistryOpMatchesEagerInBothPaths) {
  fresh_cache();
  int checked = 0;
  for (const OpDef* d : OpRegistry::get().all()) {
    if (!fused::supported(*d)) continue;
    const kiln::testing::OpSample* sample = nullptr;
    for (const auto& s : kiln::testing::sample_registry())
      if (s.ops[0] == d->name && s.reference) {
        sample = &s;
        break;
      }
    ASSERT_NE(sample, nullptr) << d->name << " has no sample";
    std::vector<Tensor> xs = sample->inputs();
    for (auto& x : xs)
      if (x.dtype() == Float64) x = x.to(Float32);
    const Tensor eager_out = sample->run(xs);
    if (!is_floating(eager_out.dtype())) continue;  // comparisons: tested inside float groups
    const Tensor want = mul(eager_out, 1.5);
    Graph g;
    std::vector<Tensor> ph;
    FeedDict feeds;
    for (size_t k = 0; k < xs.size(); ++k) {
      ph.push_back(g.placeholder("x" + std::to_string(k), xs[k].dtype(), xs[k].shape()));
      feeds.push_back({ph.back(), xs[k]});
    }
    const Tensor y = mul(sample->run(ph), 1.5);
    Program p = prune(*g.impl(), {g.value_of(y)});
    optimize(p);
    // (cast of float32 to float32 after the inputs' conversion: simplified away, nothing to fuse)
    if (count_op(p, d->name) == 0 && count_op(p, "fused") == 0) continue;
    EXPECT_EQ(count_op(p, d->name), 0) << d->name << " (" << sample->name << ") was not fused";
    EXPECT_GE(count_op(p, "fused"), 1) << d->name;
    Tensor interpreted;
    for (bool cg : {false, true}) {
      fused::set_codegen(cg);
      Session s(g);
      const Tensor got = s.run(y, feeds);
      EXPECT_LT(max_rel(got, want), 1e-5)
          << d->name << " (" << sample->name << "), " << (cg ? "generated code" : "interpreter");
      if (!cg) interpreted = got;
      if (cg && codegen::enabled()) {
        EXPECT_TRUE(kiln::testing::same_bits(got, interpreted))
            << d->name << " (" << sample->name << "): generated code differs from the interpreter";
      }
    }
    fused::set_codegen(true);
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST(Fusion, RandomGraphsInterpreterMatchesEager) { kiln::testing::run_random_graphs(200, false); }

TEST(Codegen, RandomGraphsGeneratedCodeMatchesEager) {
  fresh_cache();
  if (!codegen::enabled()) GTEST_SKIP() << "no compiler: " << codegen::stats().last_error;
  kiln::testing::run_random_graphs(40, true);  // all 200: test_slow_codegen_random
  EXPECT_GT(codegen::stats().compiles, 0);
}

// Runs one fused graph in this process; KILN_CG_CHILD tells the child half of the cache test.
Tensor run_probe() {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3, 5});
  Tensor y = sigmoid(sub(mul(x, 1.75), 0.125));
  Session s(g);
  return s.run(y, {{x, arange(0, 15, 1, Float32).reshape({3, 5})}});
}

TEST(Codegen, ChildProbe) {
  if (!std::getenv("KILN_CG_CHILD")) GTEST_SKIP() << "runs as the child of SecondProcessReuses";
  codegen::set_async(false);
  Tensor out = run_probe();
  auto st = codegen::stats();
  // The parent checks the exit code: 0 = loaded from disk without compiling.
  std::exit(st.compiles == 0 && st.disk_hits >= 1 ? 0 : 3);
}

int spawn_child(const std::string& filter) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string f = "--gtest_filter=" + filter;
  char* argv[] = {self.data(), f.data(), nullptr};
  ::setenv("KILN_CG_CHILD", "1", 1);
  pid_t pid;
  int rc = posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ);
  ::unsetenv("KILN_CG_CHILD");
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Codegen, SecondProcessReusesCacheAndCorruptEntryIsRebuilt) {
  std::string dir = fresh_cache();
  if (!codegen::enabled()) GTEST_SKIP() << "no compiler: " << codegen::stats().last_error;
  auto before = codegen::stats();
  Tensor first = run_probe();
  EXPECT_EQ(codegen::stats().compiles, before.compiles + 1);
  // The directory is private.
  struct stat sb {};
  ASSERT_EQ(::stat(dir.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
  // A second process loads the kernel from disk and compiles nothing.
  EXPECT_EQ(spawn_child("Codegen.ChildProbe"), 0);
  // Corrupt the entry: the next process must detect it and rebuild (so it compiles: exit 3).
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".so") {
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(200);
      f.write("garbage!", 8);
    }
  EXPECT_EQ(spawn_child("Codegen.ChildProbe"), 3);
  // ... and the rebuilt entry is good again for the one after.
  EXPECT_EQ(spawn_child("Codegen.ChildProbe"), 0);
  std::filesystem::remove_all(dir);
}

// Child half of the prelude test: compiles one kernel not in the cache and checks its values.
TEST(Codegen, PreludeChild) {
  if (!std::getenv("KILN_CG_CHILD")) GTEST_SKIP() << "runs as the child of PreludeIsPrecompiled";
  codegen::set_async(false);
  bool same = true;
  for (int k = 0; k < 5; ++k) {  // (the fourth kernel remakes the .gch, the fifth uses it)
    Graph g;
    Tensor x = g.placeholder("x", Float32, {4, 6});
    Tensor xv = randn({4, 6});
    Tensor y = x, ref = xv;
    for (int j = 0; j <= k; ++j) {
      y = tanh(add(mul(y, 2.5), 1.0));
      ref = tanh(add(mul(ref, 2.5), 1.0));
    }
    Session s(g);
    auto a = s.run(y, {{x, xv}}).to_vector<double>();
    auto b = ref.to_vector<double>();
    same = same && a.size() == b.size();
    for (size_t i = 0; same && i < a.size(); ++i) same = std::fabs(a[i] - b[i]) <= 1e-6;
  }
  const auto st = codegen::stats();
  std::exit(same && st.compiles == 5 && st.failures == 0 ? 0 : 4);
}

// The prelude is compiled once per cache directory into a header and its .gch (by a process's
// fourth kernel); later kernels include it. A .gch cut short (a crash mid-write) is noticed by
// the next process and rebuilt.
TEST(Codegen, PreludeIsPrecompiledAndACorruptOneIsRebuilt) {
  std::string dir = fresh_cache();
  if (!codegen::enabled()) GTEST_SKIP() << "no compiler: " << codegen::stats().last_error;
  for (int k = 0; k < 5; ++k) {  // kernels of its own, compiled here whatever ran before
    Graph g;  // (a chain of its own length: constants alone do not make another kernel)
    Tensor x = g.placeholder("x", Float32, {5, 3});
    Tensor y = mul(x, 3.125);
    for (int j = 0; j <= k; ++j) y = exp(sub(y, 0.0625));
    Session s(g);
    s.run(y, {{x, randn({5, 3})}});
  }
  ASSERT_TRUE(std::filesystem::exists(dir));
  std::filesystem::path gch;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".gch") gch = e.path();
  if (gch.empty()) GTEST_SKIP() << "the compiler made no precompiled header";
  const auto size = std::filesystem::file_size(gch);
  EXPECT_GT(size, 100000u);
  int including = 0;  // kernels that include the precompiled prelude (the fourth and fifth)
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".cpp") {
      std::ifstream f(e.path());
      const std::string src(std::istreambuf_iterator<char>(f), {});
      including += src.find("#include \"" + dir + "/prelude-") != std::string::npos;
    }
  EXPECT_GE(including, 2);
  std::filesystem::resize_file(gch, 4096);
  EXPECT_EQ(spawn_child("Codegen.PreludeChild"), 0);
  // Rebuilt whole (its size varies by a few bytes: GCC records the temporary file's name).
  EXPECT_GT(std::filesystem::file_size(gch), size - 1000);
  std::filesystem::remove_all(dir);
}

// A cold compile does not stall: the first runs interpret while the kernel compiles in the
// background, and later runs switch to it. Every run equals eager, and every run gives the
// first run's bits: the switch must not change a session's answers (x * 0.37 + sigmoid(x) is
// a multiply-add the compiler could contract into one rounding).
TEST(Codegen, BackgroundCompileSwitchesOverWithEqualResults) {
  std::string dir = fresh_cache();
  if (!codegen::enabled()) GTEST_SKIP() << "no compiler: " << codegen::stats().last_error;
  codegen::set_async(true);
  auto before = codegen::stats();
  Graph g;
  Tensor x = g.placeholder("x", Float32, {7, 9});
  Tensor y = tanh(add(mul(x, 0.37), sigmoid(x)));
  Session s(g);
  Tensor xv = randn({7, 9});
  Tensor ref = tanh(add(mul(xv, 0.37), sigmoid(xv)));
  auto close = [&](const Tensor& got) {
    auto a = got.to_vector<double>(), b = ref.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > 1e-6) return false;
    return true;
  };
  const Tensor first = s.run(y, {{x, xv}});  // interpreted: the compile was only queued
  EXPECT_TRUE(close(first));
  EXPECT_EQ(codegen::stats().background, before.background + 1);
  for (int i = 0; i < 50; ++i) {
    const Tensor again = s.run(y, {{x, xv}});
    EXPECT_TRUE(close(again)) << "run " << i;
    EXPECT_TRUE(kiln::testing::same_bits(again, first)) << "run " << i;
  }
  codegen::wait_idle();
  EXPECT_EQ(codegen::stats().compiles, before.compiles + 1);
  EXPECT_EQ(codegen::stats().failures, before.failures);
  const Tensor compiled = s.run(y, {{x, xv}});  // generated code now
  EXPECT_TRUE(close(compiled));
  EXPECT_TRUE(kiln::testing::same_bits(compiled, first));
  codegen::set_async(false);
  std::filesystem::remove_all(dir);
}

// Three fused groups, kept apart by matmuls: their kernels are requested together on the first
// run. Returns the graph's result and eager's.
std::pair<Tensor, Tensor> run_three_groups() {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {6, 8}), w = g.placeholder("w", Float32, {8, 8});
  auto f = [](const Tensor& x, const Tensor& w) {
    Tensor a = sigmoid(add(mul(x, 0.7), 0.1));
    Tensor b = tanh(sub(mul(matmul(a, w), 0.3), 0.2));
    return exp(mul(sub(matmul(b, w), 0.25), 1.5));
  };
  Tensor y = f(x, w);
  Session s(g);
  Tensor xv = mul(arange(0, 48, 1, Float32).reshape({6, 8}), 0.05),
         wv = mul(arange(0, 64, 1, Float32).reshape({8, 8}), -0.01);
  return {s.run(y, {{x, xv}, {w, wv}}), f(xv, wv)};
}

// Child half of the batch test: the three kernels load from disk, each from the shared object
// under its own name, and give eager's values.
TEST(Codegen, BatchChild) {
  if (!std::getenv("KILN_CG_CHILD")) GTEST_SKIP() << "runs as the child of BackgroundCompiles";
  codegen::set_async(false);
  auto [got, ref] = run_three_groups();
  auto st = codegen::stats();
  std::exit(st.compiles == 0 && st.disk_hits == 3 && max_rel(got, ref) < 1e-6 ? 0 : 3);
}

// Kernels queued together compile in one compiler process (the prelude is parsed once), each
// one its own cache entry; wait_idle() compiles what is still queued at the caller's priority.
TEST(Codegen, BackgroundCompilesQueuedKernelsInOneProcess) {
  std::string dir = fresh_cache();
  if (!codegen::enabled()) GTEST_SKIP() << "no compiler: " << codegen::stats().last_error;
  codegen::set_async(true);
  auto before = codegen::stats();
  auto [first, ref] = run_three_groups();  // interpreted: three compiles queued
  EXPECT_LT(max_rel(first, ref), 1e-6);
  EXPECT_EQ(codegen::stats().background, before.background + 3);
  codegen::wait_idle();
  auto after = codegen::stats();
  EXPECT_EQ(after.compiles, before.compiles + 1);
  EXPECT_EQ(after.failures, before.failures);
  const Tensor compiled = run_three_groups().first;  // generated code now, same bits
  EXPECT_TRUE(kiln::testing::same_bits(compiled, first));
  EXPECT_EQ(spawn_child("Codegen.BatchChild"), 0);
  codegen::set_async(false);
  std::filesystem::remove_all(dir);
}

TEST(Codegen, RefusesWorldWritableCacheDir) {
  std::string dir =
      std::filesystem::temp_directory_path().string() + "/kiln_cg_ww_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0777);
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  try {
    codegen::cache_dir();
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("writable by others"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Codegen, EmittedSourceUsesOpExpressions) {
  fused::Program p = fused::parse("mul(i0,i1);gelu(t0|1)");
  std::string src = codegen::emit(p, Float32, {Float32, Float32}, 0b01);
  EXPECT_NE(src.find("(in0[j] * s1)"), std::string::npos) << src.substr(src.size() - 600);
  EXPECT_NE(src.find("gelu(t0, (1.0))"), std::string::npos);
  EXPECT_THROW(fused::parse("mul(i0"), Error);
  EXPECT_THROW(fused::parse("nosuchop(i0)"), Error);
  EXPECT_THROW(fused::parse("add(i0,t3)"), Error);
}

}  // namespace
