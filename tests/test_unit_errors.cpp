// Bad input across the core and the elementwise / shape / reduce families: every case raises
// kiln::Error whose message starts with "[op]" and names the shapes involved, and the library
// keeps working afterwards. Also: NaN passes through elementwise ops and reductions unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

Tensor f32(const Shape& s) { return ones(s); }

}  // namespace

// ---- broadcasting and elementwise ------------------------------------------------------------

TEST(Errors, AddBroadcastMismatch) {
  expect_error([] { add(f32({2, 3}), f32({4, 3})); }, "add", {"[2, 3]", "[4, 3]"});
}

TEST(Errors, MulBroadcastMismatchTrailing) {
  expect_error([] { mul(f32({3}), f32({4})); }, "mul", {"[3]", "[4]"});
}

TEST(Errors, WhereConditionNotBool) {
  expect_error([] { where(f32({2, 2}), f32({2, 2}), f32({2, 2})); }, "where", {"bool", "[2, 2]"});
}

TEST(Errors, WhereBroadcastMismatch) {
  expect_error([] { where(full({3}, 1, Bool), f32({2}), f32({2})); }, "where", {"[3]", "[2]"});
}

// Logical ops take any dtype, nonzero being true (torch.logical_and & co.).
TEST(Errors, LogicalOpsTakeAnyDtype) {
  const Tensor x = tensor(std::vector<float>{0, 2, -1}), i = tensor(std::vector<int64_t>{0, 0, 3});
  EXPECT_EQ(logical_and(x, i).to_vector<bool>(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(logical_not(i).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  expect_error([] { logical_and(f32({2, 3}), f32({3, 2})); }, "logical_and", {"[2, 3]", "[3, 2]"});
}

TEST(Errors, ClampMinAboveMax) {
  expect_error([] { clamp(f32({2, 3}), 2.0, 1.0); }, "clamp", {"2", "1", "[2, 3]"});
}

TEST(Errors, ArithmeticOnBool) {
  Tensor b = full({2}, 1, Bool);
  expect_error([&] { neg(b); }, "neg", {"bool", "[2]"});
}

TEST(Errors, IntegerDivisionByZero) {
  Tensor a = tensor(std::vector<int64_t>{1, 2, 3});
  const Tensor z = tensor(std::vector<int64_t>{1, 0, 2});
  expect_error([&] { div(a, z, "trunc"); }, "div", {"zero", "[3]"});
  expect_error([&] { floor_divide(a, z); }, "div", {"zero", "[3]"});
  // True division (of integers too) by zero is IEEE (inf), not an error, as torch.
  EXPECT_TRUE(std::isinf(div(f32({1}), 0.0).item<float>()));
  EXPECT_TRUE(std::isinf(div(a, z).to_vector<float>()[1]));
}

// ---- reshape / view ---------------------------------------------------------------------------

// INT64_MIN / -1 overflows; the hardware division traps (SIGFPE) where it is not avoided.
TEST(Errors, IntegerDivisionOverflowWrapsInsteadOfTrapping) {
  const int64_t lo = std::numeric_limits<int64_t>::min();
  Tensor a = tensor(std::vector<int64_t>{lo, 7});
  EXPECT_EQ(div(a, tensor(std::vector<int64_t>{-1, -1}), "trunc").to_vector<int64_t>(),
            (std::vector<int64_t>{lo, -7}));
  EXPECT_EQ(div(a, tensor(std::vector<int64_t>{-1, -1}), "floor").to_vector<int64_t>(),
            (std::vector<int64_t>{lo, -7}));
  Tensor b = tensor(std::vector<int32_t>{std::numeric_limits<int32_t>::min()});
  EXPECT_EQ(div(b, tensor(std::vector<int32_t>{-1}), "trunc").item<int64_t>(),
            std::numeric_limits<int32_t>::min());
}

TEST(Errors, ReshapeWrongNumel) {
  expect_error([] { f32({2, 3}).reshape({4, 2}); }, "reshape", {"[2, 3]", "[4, 2]"});
}

TEST(Errors, ReshapeMinusOneTwice) {
  expect_error([] { f32({2, 3}).reshape({-1, -1}); }, "reshape", {"[-1, -1]", "[2, 3]"});
}

TEST(Errors, ReshapeMinusOneIndivisible) {
  expect_error([] { f32({2, 3}).reshape({4, -1}); }, "reshape", {"[2, 3]", "[4, -1]"});
}

TEST(Errors, ReshapeNegativeSize) {
  expect_error([] { f32({2, 3}).reshape({-2, -3}); }, "reshape", {"-2", "[2, 3]"});
}

TEST(Errors, ViewOfNonViewableStrides) {
  Tensor t = f32({4, 6}).t();
  expect_error([&] { t.view({24}); }, "view", {"[6, 4]", "[24]"});
}

TEST(Errors, FlattenStartAfterEnd) {
  expect_error([] { f32({2, 3, 4}).flatten(2, 0); }, "flatten", {"[2, 3, 4]"});
}

TEST(Errors, TransposeOf3dWithT) {
  expect_error([] { f32({2, 3, 4}).t(); }, "t", {"[2, 3, 4]"});
}

// ---- expand / permute ---------------------------------------------------------------------

TEST(Errors, ExpandToSmallerRank) {
  expect_error([] { f32({2, 3}).expand({3}); }, "expand", {"[2, 3]", "[3]"});
}

TEST(Errors, ExpandIncompatible) {
  expect_error([] { f32({2, 3}).expand({4, 3}); }, "expand", {"[2, 3]", "[4, 3]"});
}

TEST(Errors, ExpandAsIncompatible) {
  expect_error([] { expand_as(f32({2, 3}), f32({2, 4})); }, "expand_as", {"[2, 3]", "[2, 4]"});
}

TEST(Errors, PermuteWrongLength) {
  expect_error([] { f32({2, 3, 4}).permute({0, 1}); }, "permute", {"[0, 1]", "[2, 3, 4]"});
}

TEST(Errors, PermuteRepeatedDim) {
  expect_error([] { f32({2, 3, 4}).permute({0, 1, 0}); }, "permute", {"[0, 1, 0]", "[2, 3, 4]"});
}

// ---- dims out of range --------------------------------------------------------------------

TEST(Errors, SumDimOutOfRange) {
  expect_error([] { sum(f32({2, 3}), {2}); }, "sum", {"dim 2", "[2, 3]"});
}

TEST(Errors, SumRepeatedDim) {
  expect_error([] { sum(f32({2, 3}), {1, -1}); }, "sum", {"more than once", "[2, 3]"});
}

TEST(Errors, TransposeDimOutOfRange) {
  expect_error([] { f32({2, 3}).transpose(0, -3); }, "transpose", {"-3", "[2, 3]"});
}

TEST(Errors, SqueezeDimOutOfRange) {
  expect_error([] { f32({2, 1}).squeeze(2); }, "squeeze", {"dim 2", "[2, 1]"});
}

TEST(Errors, UnsqueezeDimOutOfRange) {
  expect_error([] { f32({2, 3}).unsqueeze(4); }, "unsqueeze", {"dim 4", "[2, 3]"});
}

TEST(Errors, SliceDimOutOfRange) {
  expect_error([] { f32({2, 3}).slice(3, 0, 1); }, "slice", {"dim 3", "[2, 3]"});
}

TEST(Errors, SliceStepZero) {
  expect_error([] { f32({2, 3}).slice(1, 0, 3, 0); }, "slice", {"step", "[2, 3]"});
}

TEST(Errors, MeanDimOutOfRange) {
  expect_error([] { mean(f32({4}), {-2}); }, "mean", {"-2", "[4]"});
}

// ---- cat / stack / split / chunk ------------------------------------------------------------

// Mixed dtypes promote (torch.cat); a 0-d input is still refused.
TEST(Errors, CatPromotesMixedDtypes) {
  EXPECT_EQ(cat({f32({2, 3}), ones({2, 3}, Int64)}).dtype(), Float32);
  EXPECT_EQ(cat({ones({2}, Bool), ones({1}, Int32)}).dtype(), Int32);
  expect_error([] { cat({f32({2}), scalar_tensor(1.0)}); }, "cat", {"[]"});
}

TEST(Errors, CatRankMismatch) {
  expect_error([] { cat({f32({2, 3}), f32({3})}); }, "cat", {"[2, 3]", "[3]"});
}

TEST(Errors, CatShapeMismatch) {
  expect_error([] { cat({f32({2, 3}), f32({2, 4})}, 0); }, "cat", {"[2, 3]", "[2, 4]"});
}

TEST(Errors, CatEmptyList) {
  expect_error([] { cat({}); }, "cat", {"at least one"});
}

TEST(Errors, CatScalar) {
  expect_error(
      [] {
        cat({scalar_tensor(1), scalar_tensor(2)});
      },
      "cat", {"zero-dimensional", "[]"});
}

TEST(Errors, StackShapeMismatch) {
  expect_error([] { stack({f32({2, 3}), f32({3, 2})}); }, "stack", {"[2, 3]", "[3, 2]"});
}

TEST(Errors, SplitSizesDoNotSum) {
  expect_error([] { split(f32({5, 2}), std::vector<int64_t>{2, 2}, 0); }, "split", {"4", "[5, 2]"});
}

TEST(Errors, ChunkZero) {
  expect_error([] { chunk(f32({4}), 0); }, "chunk", {"0", "[4]"});
}

// ---- host reads and indexing ----------------------------------------------------------------

TEST(Errors, ItemOnMultiElement) {
  expect_error([] { f32({2, 2}).item<float>(); }, "item", {"[2, 2]"});
}

TEST(Errors, BoolOnMultiElement) {
  expect_error([] { (void)static_cast<bool>(f32({3})); }, "bool", {"[3]"});
}

TEST(Errors, DataPtrWrongDtype) {
  expect_error([] { f32({2}).data_ptr<int64_t>(); }, "data_ptr", {"float32", "int64", "[2]"});
}

TEST(Errors, AtIndexOutOfRange) {
  expect_error([] { f32({2, 3}).at({1, 3}); }, "at", {"3", "[2, 3]"});
  expect_error([] { f32({2, 3}).at({1}); }, "at", {"[2, 3]"});
}

TEST(Errors, NarrowOutOfRange) {
  expect_error([] { f32({4, 5}).narrow(1, 3, 3); }, "narrow", {"[4, 5]"});
}

TEST(Errors, SelectOutOfRange) {
  expect_error([] { f32({4, 5}).select(0, 4); }, "select", {"4", "[4, 5]"});
  expect_error([] { f32({4, 5}).select(1, -6); }, "select", {"-6", "[4, 5]"});
}

// ---- factories -----------------------------------------------------------------------------

TEST(Errors, TensorValueCountMismatch) {
  expect_error([] { tensor({1.f, 2.f, 3.f}, {2, 2}); }, "tensor", {"[2, 2]", "3"});
}

TEST(Errors, RandintLowNotBelowHigh) {
  expect_error([] { randint(5, 5, {3}); }, "randint", {"low=5", "high=5", "[3]"});
}

TEST(Errors, LinspaceNegativeSteps) {
  expect_error([] { linspace(0, 1, -1); }, "linspace", {"-1"});
}

TEST(Errors, ArangeZeroStep) {
  expect_error([] { arange(0, 1, 0); }, "arange", {"step"});
}

TEST(Errors, EmptyNegativeDim) {
  expect_error([] { zeros({2, -3}); }, "empty", {"[2, ?]"});
}

// ---- reductions -----------------------------------------------------------------------------

TEST(Errors, ArgmaxOfEmpty) {
  expect_error([] { argmax(f32({0, 3})); }, "argmax", {"[0, 3]"});
  expect_error([] { argmin(f32({3, 0}), 1); }, "argmin", {"[3, 0]"});
  expect_error([] { argmax(f32({0, 3}), 0); }, "argmax", {"[0, 3]", "empty"});
  // Along a non-empty dim of an empty tensor: an empty result, as PyTorch (accuracy of an empty
  // batch).
  EXPECT_EQ(argmax(f32({0, 3}), 1).shape(), (Shape{0}));
  EXPECT_EQ(argmin(f32({0, 3}), 1, true).shape(), (Shape{0, 1}));
}

// An exception thrown inside a parallel_for chunk (another thread's, here) reaches the caller
// instead of terminating the process (exceptions may not leave an OpenMP region).
TEST(Errors, ParallelForRethrowsFromWorkerChunks) {
  const int before = get_num_threads();
  set_num_threads(2);
  int64_t seen = 0;
  EXPECT_THROW(parallel_for(1 << 16, 1,
                            [&](int64_t b, int64_t) {
                              if (b > 0) fail("parallel_test", "chunk at ", b);
                            }),
               Error);
  parallel_for(1 << 16, 1 << 20, [&](int64_t b, int64_t e) { seen += e - b; });  // still works
  EXPECT_EQ(seen, 1 << 16);
  set_num_threads(before);
}

// One chunk runs on the caller outside any OpenMP region: a one-thread region around it made
// an OpenMP region inside the chunk (oneDNN's sgemm under a batch-1 convolution) a nested team
// that libgomp started afresh each call (15x slower at two threads).
TEST(Errors, ParallelForRunsOneChunkOutsideAnyRegion) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "a bare OpenMP region: TSan does not see libgomp's fork and join (parallel.h "
                  "annotates its own)";
#endif
  const int before = get_num_threads();
  set_num_threads(2);
  int level = -1, inner = 0;
  parallel_for(64, 64, [&](int64_t, int64_t) {
    level = omp_get_level();
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      inner = omp_get_num_threads();
    }
  });
  EXPECT_EQ(level, 0);
  EXPECT_EQ(inner, 2);
  set_num_threads(before);
}

TEST(Errors, MaxOverEmptyDim) {
  expect_error([] { max(f32({0, 3}), {0}); }, "max", {"[0, 3]"});
  expect_error([] { min(f32({2, 0})); }, "min", {"[2, 0]"});
  // sum over an empty dim is fine: zeros.
  EXPECT_EQ(sum(f32({0, 3}), {0}).to_vector<float>(), std::vector<float>(3, 0.f));
}

TEST(Errors, MeanOfIntegers) {
  expect_error([] { mean(ones({3}, Int64)); }, "mean", {"int64", "[3]"});
}

// ---- autograd and in-place ----------------------------------------------------------------

TEST(Errors, RequiresGradOnInt) {
  expect_error([] { ones({2, 2}, Int64).requires_grad_(); }, "requires_grad_", {"int64", "[2, 2]"});
}

TEST(Errors, BackwardWithoutGrad) {
  expect_error([] { f32({2}).sum().backward(); }, "backward", {"[]", "does not require grad"});
}

TEST(Errors, BackwardGradientShapeMismatch) {
  Tensor x = f32({3}).requires_grad_();
  Tensor y = x * 2.0;
  expect_error([&] { y.backward(ones({2})); }, "backward", {"[2]", "[3]"});
}

TEST(Errors, GradOfInputNotRequiringGrad) {
  Tensor x = f32({3}).requires_grad_();
  Tensor c = f32({2});
  expect_error([&] { grad({(x * 2.0).sum()}, {c}); }, "grad", {"[2]"});
}

TEST(Errors, CopyNonBroadcastable) {
  Tensor d = f32({2, 3});
  expect_error([&] { d.copy_(f32({3, 2})); }, "copy_", {"[3, 2]", "[2, 3]"});
}

TEST(Errors, CopyIntoLeafRequiringGrad) {
  Tensor p = f32({2, 3}).requires_grad_();
  expect_error([&] { p.copy_(zeros({2, 3})); }, "copy_", {"[2, 3]"});
  {
    NoGradGuard ng;  // allowed without grad mode (optimizer updates)
    p.copy_(zeros({2, 3}));
  }
  EXPECT_EQ(p.sum().item<float>(), 0.f);
}

TEST(Errors, FailedOpDoesNotLeakGradMode) {
  // An error inside functional grad() leaves grad mode as it was.
  {
    NoGradGuard ng;
    EXPECT_THROW(grad([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {f32({3})}),
                 Error);
    EXPECT_FALSE(grad_mode_enabled());
  }
  EXPECT_TRUE(grad_mode_enabled());
}

// ---- NaN propagation ------------------------------------------------------------------------

namespace {
void expect_nan_at(const Tensor& t, const std::vector<size_t>& nan_idx, const char* what) {
  auto v = t.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    bool want_nan = std::find(nan_idx.begin(), nan_idx.end(), i) != nan_idx.end();
    EXPECT_EQ(std::isnan(v[i]), want_nan) << what << " element " << i << " = " << v[i];
  }
}
}  // namespace

TEST(NaN, PassesThroughElementwise) {
  for (DType dt : {Float32, Float64}) {
    Tensor x = tensor(std::vector<double>{1.0, NAN, -2.0, 0.5}).to(dt);
    Tensor y = tensor(std::vector<double>{NAN, 1.0, 3.0, 2.0}).to(dt);
    expect_nan_at(add(x, y), {0, 1}, "add");
    expect_nan_at(mul(x, y), {0, 1}, "mul");
    expect_nan_at(relu(x), {1}, "relu");
    expect_nan_at(exp(x), {1}, "exp");
    expect_nan_at(tanh(x), {1}, "tanh");
    expect_nan_at(sigmoid(x), {1}, "sigmoid");
    expect_nan_at(abs(x), {1}, "abs");
    expect_nan_at(clamp(x, -1, 1), {1}, "clamp");
    expect_nan_at(maximum(x, y), {0, 1}, "maximum");
    expect_nan_at(minimum(x, y), {0, 1}, "minimum");
    expect_nan_at(gelu(x), {1}, "gelu");
    // Comparisons with NaN are false (ne true), like IEEE / PyTorch.
    EXPECT_EQ(eq(x, x).to_vector<bool>(), std::vector<bool>({true, false, true, true}));
    EXPECT_EQ(ne(x, x).to_vector<bool>(), std::vector<bool>({false, true, false, false}));
  }
}

TEST(NaN, PropagatesThroughReductions) {
  for (DType dt : {Float32, Float64}) {
    Tensor m = tensor(std::vector<double>{1, NAN, 3, 4, 5, 6}, {2, 3}).to(dt);
    EXPECT_TRUE(std::isnan(sum(m).item<double>()));
    EXPECT_TRUE(std::isnan(mean(m).item<double>()));
    EXPECT_TRUE(std::isnan(max(m).item<double>()));
    EXPECT_TRUE(std::isnan(min(m).item<double>()));
    EXPECT_TRUE(std::isnan(var(m).item<double>()));
    // Per-row and per-column (both reduction layouts): only the slices holding the NaN.
    expect_nan_at(max(m, {1}), {0}, "max rows");
    expect_nan_at(min(m, {1}), {0}, "min rows");
    expect_nan_at(max(m, {0}), {1}, "max cols");
    expect_nan_at(min(m, {0}), {1}, "min cols");
    expect_nan_at(sum(m, {0}), {1}, "sum cols");
    expect_nan_at(max(m.t(), {0}), {0}, "max of transposed");
    // NaN is the extremum for argmax/argmin, as in PyTorch.
    EXPECT_EQ(argmax(m).item<int64_t>(), 1);
    EXPECT_EQ(argmin(m, 1).to_vector<int64_t>(), std::vector<int64_t>({1, 0}));
  }
}
