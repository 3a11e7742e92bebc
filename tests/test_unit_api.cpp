// The public API as a user meets it: only kiln/kiln.h, the spellings PyTorch and TF1 users write
// (positional learning rates, braced fetch and argument lists, designated options without
// -Wextra warnings, torch.nn.functional names), and host reads of symbolic values that say where.
#pragma GCC diagnostic error "-Wmissing-field-initializers"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Options structs take designated initializers with members left out, with no
// -Wmissing-field-initializers warning (made an error in this file).
TEST(PublicApi, DesignatedOptionsCompileWithoutMissingInitializerWarnings) {
  JitOptions jo{.name = "f"};
  optim::SGDOptions so{.lr = 0.5};
  optim::AdamOptions ao{.lr = 0.01};
  optim::RMSpropOptions ro{.lr = 0.01};
  EXPECT_EQ(jo.name, "f");
  EXPECT_EQ(jo.max_recompiles, 8);
  EXPECT_DOUBLE_EQ(so.lr, 0.5);
  EXPECT_FALSE(ao.weight_decay.has_value());
  EXPECT_DOUBLE_EQ(ro.alpha, 0.99);
}

// torch.optim.SGD(params, 0.5): one step on loss = w^2 from w = 1 gives w = 1 - 0.5 * 2 = 0.
TEST(PublicApi, OptimizersTakeTheLearningRatePositionally) {
  Tensor w = tensor(std::vector<double>{1.0}).requires_grad_();
  optim::SGD sgd({w}, 0.5);
  sum(w * w).backward();
  sgd.step();
  EXPECT_DOUBLE_EQ(w.item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(sgd.lr(), 0.5);

  Tensor a = tensor(std::vector<double>{1.0}).requires_grad_();
  optim::Adam adam({a}, 0.1);
  sum(a * a).backward();
  adam.step();
  // Adam's first step moves by lr against the gradient's sign.
  EXPECT_NEAR(a.item<double>(), 0.9, 1e-6);
  optim::AdamW adamw({a}, 0.1);
  EXPECT_DOUBLE_EQ(adamw.lr(), 0.1);
  optim::RMSprop rms({a}, 0.01);
  EXPECT_DOUBLE_EQ(rms.lr(), 0.01);
  EXPECT_NE(error_of([&] { optim::SGD bad({w}, -1.0); }).find("[SGD]"), std::string::npos);
}

// sess.run({y}, feeds) is a list of one fetch, as in TF1 (and out[0] compiles).
TEST(PublicApi, SessionRunWithABracedListReturnsAList) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any()});
  Tensor y = x * 2.0;
  Session sess(g);
  std::vector<Tensor> out = sess.run({y}, {{x, tensor({1.f, 2.f})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FLOAT_EQ(out[0].to_vector<float>()[1], 4.f);
  auto two = sess.run({y, y + 1.0}, {{x, tensor({3.f})}});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_FLOAT_EQ(two[1].item<float>(), 7.f);
  Tensor one = sess.run(y, {{x, tensor({5.f})}});
  EXPECT_FLOAT_EQ(one.item<float>(), 10.f);
}

// A jitted function's list parameter takes a braced list: f({a, b}, c).
TEST(PublicApi, JitArgumentsTakeBracedLists) {
  auto f = jit([](const std::vector<Tensor>& xs, const Tensor& y) { return (xs[0] + xs[1]) * y; },
               JitOptions{.name = "lists"});
  Tensor a = tensor({1.f, 2.f}), b = tensor({3.f, 4.f}), c = tensor({2.f, 2.f});
  Tensor r1 = f({a, b}, c);
  Tensor r2 = f({b, a}, c);  // the same shapes: replayed
  EXPECT_EQ(r1.to_vector<float>(), (std::vector<float>{8.f, 12.f}));
  EXPECT_EQ(r2.to_vector<float>(), (std::vector<float>{8.f, 12.f}));
  EXPECT_EQ(f.stats().compiles, 1);
  // The template call operator still takes a number for a double parameter.
  auto g = jit([](const Tensor& x, double k) { return x * k; });
  EXPECT_FLOAT_EQ(g(a, 3).to_vector<float>()[1], 6.f);
}

// Printing a symbolic tensor is a host read (docs/design.md section 3): in a graph it raises and
// says how to get the value; under jit it is a graph break and prints the value.
TEST(PublicApi, PrintingASymbolicTensorIsAHostRead) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  std::string msg = error_of([&] {
    std::ostringstream os;
    os << x * 2.0;
  });
  EXPECT_NE(msg.find("[print]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Session::run"), std::string::npos) << msg;

  std::string printed;
  auto f = jit([&](const Tensor& t) {
    Tensor y = t * 2.0;
    std::ostringstream os;
    os << y;
    printed = os.str();
    return y + 1.0;
  });
  Tensor r = f(tensor({1.f, 2.f}));
  EXPECT_EQ(printed, "tensor([2., 4.])");
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(f.stats().graph_breaks, 1);
  EXPECT_NE(f.explain().find("print"), std::string::npos) << f.explain();
}

// bool() cannot take a source_location (a conversion has no parameters): the graph break names
// the function that converted, in this test binary, not a line inside the library.
bool positive(const Tensor& t) { return static_cast<bool>(t.sum() > 0); }

TEST(PublicApi, BoolOfATracedValueNamesTheCaller) {
  auto f = jit([](const Tensor& t) { return positive(t) ? t + 1.0 : t - 1.0; });
  EXPECT_EQ(f(tensor({1.f})).item<float>(), 2.f);
  const std::string ex = f.explain();
  EXPECT_EQ(ex.find("tensor.cpp"), std::string::npos) << ex;
  EXPECT_NE(ex.find("test_unit_api"), std::string::npos) << ex;

  Graph g;
  Tensor x = g.placeholder("x", Float32, {1});
  std::string msg = error_of([&] { (void)positive(x); });
  EXPECT_NE(msg.find("[bool]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_unit_api"), std::string::npos) << msg;
}

// torch.nn.functional's names, and the data loaders, from kiln.h alone.
TEST(PublicApi, FunctionalNamesAndLoadersAreReachable) {
  namespace F = kiln::nn::functional;
  Tensor x = tensor({-1.f, 2.f});
  EXPECT_EQ(F::relu(x).to_vector<float>(), (std::vector<float>{0.f, 2.f}));
  Tensor logits = tensor({2.f, 1.f, 0.f, 3.f}, {2, 2});
  Tensor labels = tensor(std::vector<int64_t>{0, 1});
  EXPECT_FLOAT_EQ(F::accuracy(logits, labels).item<float>(), 1.f);
  EXPECT_FLOAT_EQ(F::cross_entropy(logits, labels).item<float>(),
                  cross_entropy(logits, labels).item<float>());
  // io (idx files, safetensors, text) comes with kiln.h.
  std::string err = error_of([] { (void)io::read_idx("/nonexistent/file.idx"); });
  EXPECT_NE(err.find("/nonexistent/file.idx"), std::string::npos) << err;
}

// KILN_DISABLE_PASSES takes the passes' function names; a name that is no pass raises instead of
// leaving the pass on without a word.
TEST(PublicApi, DisablingAnUnknownPassRaises) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  Tensor y = relu(x) + 1.0;
  ::setenv("KILN_DISABLE_PASSES", "fusion", 1);
  std::string msg = error_of([&] {
    Session s(g);
    s.run(y, {{x, tensor({1.f, 2.f})}});
  });
  ::setenv("KILN_DISABLE_PASSES", "fuse_elementwise,cse", 1);
  Session ok(g);
  Tensor r = ok.run(y, {{x, tensor({-1.f, 2.f})}});
  ::unsetenv("KILN_DISABLE_PASSES");
  EXPECT_NE(msg.find("'fusion'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fuse_elementwise"), std::string::npos) << msg;
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1.f, 3.f}));
}

}  // namespace
