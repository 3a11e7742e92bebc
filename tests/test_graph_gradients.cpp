// Registry-driven symbolic gradients: for every differentiable OpSample, the sample's run is
// built into a Graph on placeholders standing for its floating inputs, gradients() of
// sum(out * v) (v fixed and random) is taken w.r.t. each of them, and a Session run with the
// sample's inputs fed must match eager backward of the same scalar (relative 1e-5, float64).
// Integer inputs become int64/int32 placeholders; where the wrapper needs their values at build
// time they become constants instead. Samples that cannot be built symbolically at all are
// skipped with their reason, and a summary test fails if more than a few percent are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "samples/op_samples.h"

using namespace kiln::detail;

using namespace kiln;
using namespace kiln::testing;

namespace {

using In = std::vector<Tensor>;

// Samples seed the global generator inside run (dropout); the graph's random kernels draw at
// run time, so the same seed is set just before the Session runs.
constexpr uint64_t kSampleSeed = 1234;

struct Built {
  Graph g;
  In sym;                    // what sample.run received
  std::vector<size_t> fl;    // indices of floating inputs (placeholders to differentiate)
  std::vector<size_t> ints;  // indices of integer inputs fed as placeholders
  Tensor out;
  bool int_constants = false;
};

// Placeholder shape: the input's shape, with dim 0 dynamic when `dynamic` (batch-style `?`).
Shape ph_shape(const Tensor& t, bool dynamic) {
  Shape s = t.shape();
  if (dynamic && s.rank() >= 1) s[0] = Dim::any();
  return s;
}

// Builds sample.run on symbolic inputs. Returns "" or the error that stopped the build.
std::string try_build(const OpSample& s, const In& in, bool int_placeholders, bool dynamic,
                      Built& b) {
  b = Built{};
  b.int_constants = !int_placeholders;
  try {
    for (size_t k = 0; k < in.size(); ++k) {
      const Tensor& t = in[k];
      if (is_floating(t.dtype())) {
        b.sym.push_back(b.g.placeholder("in" + std::to_string(k), t.dtype(), ph_shape(t, dynamic)));
        b.fl.push_back(k);
      } else if (int_placeholders) {
        b.sym.push_back(b.g.placeholder("in" + std::to_string(k), t.dtype(), ph_shape(t, dynamic)));
        b.ints.push_back(k);
      } else {
        b.sym.push_back(b.g.constant(t, "in" + std::to_string(k)));
      }
    }
    b.out = s.run(b.sym);
    if (!b.out.defined()) return "run returned an undefined tensor";
    if (!b.out.is_symbolic()) return "run returned a concrete tensor for symbolic inputs";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Placeholders for integer inputs first; constants if the wrapper needs their values.
std::string build(const OpSample& s, const In& in, Built& b, bool dynamic = false) {
  std::string first = try_build(s, in, true, dynamic, b);
  if (first.empty()) return "";
  bool has_int =
      std::any_of(in.begin(), in.end(), [](const Tensor& t) { return !is_floating(t.dtype()); });
  if (!has_int) return first;
  std::string second = try_build(s, in, false, dynamic, b);
  return second.empty() ? "" : second;
}

std::vector<size_t> differentiable_samples() {
  std::vector<size_t> v;
  for (size_t i = 0; i < sample_registry().size(); ++i)
    if (sample_registry()[i].differentiable) v.push_back(i);
  return v;
}

// |got - want| <= 1e-5 * (|want| + 1e-2 * max|want| + 1e-12), element by element.
std::string compare(const Tensor& got, const Tensor& want, double rel = 1e-5) {
  if (got.shape() != want.shape())
    return "shape " + got.shape().str() + " vs eager " + want.shape().str();
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double x : w) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::fabs(g[i] - w[i]);
    if (!(err <= rel * (std::fabs(w[i]) + 1e-2 * scale + 1e-12))) {
      std::ostringstream o;
      o.precision(17);
      o << "element " << i << ": graph " << g[i] << ", eager " << w[i];
      return o.str();
    }
  }
  return "";
}

class GraphGradientsTest : public ::testing::TestWithParam<size_t> {};

// Static dims must match; a dynamic dim (-1) in the graph matches anything.
bool shape_fits(const Shape& sym, const Shape& concrete) {
  if (sym.rank() != concrete.rank()) return false;
  for (int64_t d = 0; d < sym.rank(); ++d)
    if (sym[d] >= 0 && sym[d] != concrete[d]) return false;
  return true;
}

void check_sample(size_t param, bool dynamic) {
  const OpSample& s = sample_registry()[param];
  ASSERT_TRUE(s.differentiable);
  In in = s.inputs();

  // ---- graph ----
  Built b;
  std::string why = build(s, in, b, dynamic);
  if (!why.empty()) GTEST_SKIP() << "cannot be built symbolically: " << why;

  // ---- eager ----
  In xs;
  for (const Tensor& t : in) xs.push_back(is_floating(t.dtype()) ? t.clone().requires_grad_() : t);
  Tensor eout = s.run(xs);
  ASSERT_TRUE(is_floating(eout.dtype())) << eout.dtype();
  Tensor v = rnd(eout.shape(), 9000 + param);
  if (eout.dtype() != Float64) v = v.to(eout.dtype());
  Tensor eloss = sum(mul(eout, v));
  if (eloss.requires_grad()) eloss.backward();

  if (dynamic) {
    ASSERT_TRUE(shape_fits(b.out.shape(), eout.shape()))
        << "graph output shape " << b.out.shape() << " does not fit eager " << eout.shape();
  } else {
    ASSERT_EQ(b.out.shape(), eout.shape()) << "graph output shape differs from eager";
  }
  ASSERT_EQ(b.out.dtype(), eout.dtype());
  Tensor gloss = sum(mul(b.out, v));
  In wrt;
  for (size_t k : b.fl) wrt.push_back(b.sym[k]);
  std::vector<Tensor> grads;
  try {
    grads = gradients({gloss}, wrt);
  } catch (const Error& e) {
    FAIL() << "gradients() failed: " << e.what() << "\n" << b.g.to_text();
  }
  ASSERT_EQ(grads.size(), wrt.size());

  // Fetch the loss and every defined symbolic gradient.
  std::vector<Tensor> fetches{gloss};
  std::vector<int> slot(grads.size(), -1);
  for (size_t j = 0; j < grads.size(); ++j)
    if (grads[j].defined() && grads[j].is_symbolic()) {
      slot[j] = static_cast<int>(fetches.size());
      fetches.push_back(grads[j]);
    }
  FeedDict feeds;
  for (size_t k : b.fl) feeds.push_back({b.sym[k], in[k]});
  for (size_t k : b.ints) feeds.push_back({b.sym[k], in[k]});
  std::vector<Tensor> got;
  try {
    Session sess(b.g);
    manual_seed(kSampleSeed);
    got = sess.run(fetches, feeds);
  } catch (const Error& e) {
    FAIL() << "Session::run failed: " << e.what() << "\n" << b.g.to_text();
  }
  ASSERT_EQ(got.size(), fetches.size());

  EXPECT_EQ(compare(got[0], eloss.detach()), "") << "loss";
  for (size_t j = 0; j < grads.size(); ++j) {
    size_t k = b.fl[j];
    Tensor eg = xs[k].grad();
    if (!eg.defined()) eg = zeros(in[k].shape(), in[k].dtype());
    Tensor gg;
    if (slot[j] >= 0) {
      gg = got[static_cast<size_t>(slot[j])];
    } else if (grads[j].defined()) {
      gg = grads[j];  // concrete: a constant gradient
    } else {
      gg = zeros(in[k].shape(), in[k].dtype());  // undefined = does not influence the loss
    }
    EXPECT_EQ(gg.dtype(), in[k].dtype()) << "gradient of input " << k;
    EXPECT_EQ(compare(gg, eg), "") << "gradient of input " << k << "\n" << b.g.to_text();
  }
}

TEST_P(GraphGradientsTest, MatchesEagerBackward) { check_sample(GetParam(), false); }

// The same with dim 0 of every placeholder dynamic (`?`), contraction dims included: shape
// inference and the gradient rules must work on unknown dims (the batch-style case, fed two
// sizes, runs in every mode in test_jit_mode_agreement.cpp).
TEST_P(GraphGradientsTest, MatchesEagerBackwardDynamicDim0) { check_sample(GetParam(), true); }

std::string sample_name(const ::testing::TestParamInfo<size_t>& info) {
  const OpSample& s = sample_registry()[info.param];
  std::string n = s.ops[0] + "_" + s.name + "_" + std::to_string(info.param);
  for (auto& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Samples, GraphGradientsTest, ::testing::ValuesIn(differentiable_samples()),
                         sample_name);

// At most a few percent of the differentiable samples may be impossible to build symbolically;
// the list is printed so it can be reviewed.
TEST(GraphGradients, FewSamplesAreSkipped) {
  auto all = differentiable_samples();
  ASSERT_FALSE(all.empty());
  std::vector<std::string> skipped;
  int int_constants = 0;
  for (size_t i : all) {
    const OpSample& s = sample_registry()[i];
    Built b;
    std::string why = build(s, s.inputs(), b);
    if (!why.empty())
      skipped.push_back(sample_name(::testing::TestParamInfo<size_t>(i, i)) + ": " + why);
    else if (b.int_constants)
      ++int_constants;
  }
  std::string list;
  for (auto& x : skipped) list += "  " + x + "\n";
  std::cout << "[graph gradients] " << all.size() << " differentiable samples, " << skipped.size()
            << " skipped, " << int_constants << " with integer inputs as constants\n"
            << list;
  EXPECT_LE(static_cast<double>(skipped.size()), 0.03 * static_cast<double>(all.size()))
      << "too many samples cannot be built symbolically:\n"
      << list;
}

}  // namespace
