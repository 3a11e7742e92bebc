// Tensor core: views share storage without copying, contiguous() copies only when needed, NumPy
// broadcasting, factories, PyTorch-style printing, host reads, clone/copy_/to, the caching
// allocator and dtype promotion.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::string str(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

Tensor iota(const Shape& s) {
  return arange(0, static_cast<double>(s.numel()), 1, Float32).reshape(s);
}

std::vector<float> fv(const Tensor& t) { return t.to_vector<float>(); }

std::vector<int64_t> strides_of(const Tensor& t) {
  return std::vector<int64_t>(t.strides().begin(), t.strides().end());
}

}  // namespace

// ---- views ---------------------------------------------------------------------------------

TEST(TensorViews, ReshapeOfContiguousSharesStorage) {
  Tensor a = iota({2, 3, 4});
  Tensor b = a.reshape({6, 4});
  EXPECT_TRUE(b.shares_storage(a));
  EXPECT_EQ(b.shape(), Shape({6, 4}));
  EXPECT_EQ(strides_of(b), std::vector<int64_t>({4, 1}));
  EXPECT_EQ(b.raw_data(), a.raw_data());
  Tensor c = a.reshape({-1});
  EXPECT_EQ(c.shape(), Shape({24}));
  EXPECT_TRUE(c.shares_storage(a));
  // Writes through the view are visible in the base.
  {
    NoGradGuard ng;
    b.select(0, 1).copy_(full({4}, -1.0));
  }
  EXPECT_EQ(a.at({0, 1, 0}), -1.0);
  EXPECT_EQ(a.at({0, 1, 3}), -1.0);
  EXPECT_EQ(a.at({0, 2, 0}), 8.0);
}

TEST(TensorViews, ReshapeOfNonViewableCopies) {
  Tensor a = iota({3, 4});
  Tensor t = a.t();
  Tensor r = t.reshape({12});
  EXPECT_FALSE(r.shares_storage(a));
  EXPECT_EQ(fv(r), std::vector<float>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // A reshape that only splits a dim of a transposed view stays a view.
  Tensor s = iota({4, 6}).t().reshape({2, 3, 4});
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.at({1, 2, 3}), iota({4, 6}).at({3, 5}));
}

// raw_contiguous_copy (what reshape of a non-viewable view and the dispatcher's contiguous
// inputs use) has three paths: contiguous runs, blocked transposes of the last two dims (4- and
// 8-byte elements), and element gathers. Each against to_vector, which walks offsets one by one.
TEST(TensorViews, StridedCopiesMatchElementOrder) {
  auto check = [](const Tensor& v) {
    Tensor c = raw_contiguous_copy(v);
    ASSERT_TRUE(c.is_contiguous());
    EXPECT_EQ(c.shape(), v.shape());
    EXPECT_EQ(c.to_vector<double>(), v.to_vector<double>()) << "shape " << v.shape();
  };
  for (DType dt : {Float32, Float64, Int64, Int32, Bool}) {
    Tensor a = cast(randint(0, 7, {3, 37, 45}), dt);
    check(a.transpose(1, 2));                     // blocked transpose (odd sizes, 2 blocks)
    check(a.permute({1, 0, 2}));                  // contiguous runs of 45
    check(a.permute({2, 0, 1}));                  // element gather
    check(a.slice(2, 1, 40, 3).transpose(0, 1));  // strided inner dim
    check(cast(randint(0, 7, {5}), dt).unsqueeze(0).expand({4, 5}).t());  // stride-0 runs
  }
}

TEST(TensorViews, TransposeAndPermute) {
  Tensor a = iota({2, 3, 4});
  Tensor t = a.transpose(0, 2);
  EXPECT_TRUE(t.shares_storage(a));
  EXPECT_EQ(t.shape(), Shape({4, 3, 2}));
  EXPECT_EQ(strides_of(t), std::vector<int64_t>({1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.at({3, 1, 1}), a.at({1, 1, 3}));
  Tensor p = a.permute({1, 2, 0});
  EXPECT_TRUE(p.shares_storage(a));
  EXPECT_EQ(p.shape(), Shape({3, 4, 2}));
  EXPECT_EQ(strides_of(p), std::vector<int64_t>({4, 1, 12}));
  EXPECT_EQ(p.at({2, 3, 1}), a.at({1, 2, 3}));
  Tensor m = iota({2, 3}).t();
  EXPECT_EQ(m.shape(), Shape({3, 2}));
  EXPECT_EQ(fv(m), std::vector<float>({0, 3, 1, 4, 2, 5}));
}

TEST(TensorViews, SliceWithStep) {
  Tensor a = iota({4, 6});
  Tensor s = a.slice(1, 1, 6, 2);
  EXPECT_TRUE(s.shares_storage(a));
  EXPECT_EQ(s.shape(), Shape({4, 3}));
  EXPECT_EQ(strides_of(s), std::vector<int64_t>({6, 2}));
  EXPECT_EQ(s.offset(), a.offset() + 1);
  EXPECT_EQ(fv(s.select(0, 0)), std::vector<float>({1, 3, 5}));
  // Negative start and an end past the size are clamped (Python slicing).
  Tensor n = a.slice(0, -2, 100);
  EXPECT_EQ(n.shape(), Shape({2, 6}));
  EXPECT_EQ(n.at({0, 0}), 12.0);
  // Empty slice.
  EXPECT_EQ(a.slice(0, 3, 1).shape(), Shape({0, 6}));
}

TEST(TensorViews, ExpandHasStrideZero) {
  Tensor a = tensor({1.f, 2.f, 3.f}, {3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_TRUE(e.shares_storage(a));
  EXPECT_EQ(e.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(2), 0);
  EXPECT_EQ(e.stride(1), 1);
  EXPECT_EQ(e.at({1, 2, 3}), 3.0);
  EXPECT_EQ(e.sum().item<float>(), 8 * (1 + 2 + 3));
  Tensor m = tensor({5.f, 6.f}).expand({3, -1});
  EXPECT_EQ(m.shape(), Shape({3, 2}));
  EXPECT_EQ(fv(m), std::vector<float>({5, 6, 5, 6, 5, 6}));
}

TEST(TensorViews, SqueezeUnsqueezeFlatten) {
  Tensor a = iota({2, 1, 3, 1});
  Tensor s = a.squeeze();
  EXPECT_TRUE(s.shares_storage(a));
  EXPECT_EQ(s.shape(), Shape({2, 3}));
  EXPECT_EQ(a.squeeze(1).shape(), Shape({2, 3, 1}));
  EXPECT_EQ(a.squeeze(0).shape(), Shape({2, 1, 3, 1}));  // non-unit dims are kept
  EXPECT_EQ(a.squeeze(-1).shape(), Shape({2, 1, 3}));
  Tensor u = s.unsqueeze(0);
  EXPECT_TRUE(u.shares_storage(a));
  EXPECT_EQ(u.shape(), Shape({1, 2, 3}));
  EXPECT_EQ(s.unsqueeze(-1).shape(), Shape({2, 3, 1}));
  EXPECT_EQ(s.unsqueeze(1).shape(), Shape({2, 1, 3}));
  EXPECT_TRUE(s.unsqueeze(1).is_contiguous());
  Tensor f = iota({2, 3, 4}).flatten();
  EXPECT_EQ(f.shape(), Shape({24}));
  EXPECT_EQ(iota({2, 3, 4}).flatten(1).shape(), Shape({2, 12}));
  EXPECT_EQ(iota({2, 3, 4}).flatten(0, 1).shape(), Shape({6, 4}));
  EXPECT_EQ(scalar_tensor(3).flatten().shape(), Shape({1}));
  Tensor b = iota({2, 3, 4});
  EXPECT_TRUE(b.flatten(1).shares_storage(b));
}

TEST(TensorViews, NarrowAndSelect) {
  Tensor a = iota({4, 5});
  Tensor n = a.narrow(1, 1, 3);
  EXPECT_TRUE(n.shares_storage(a));
  EXPECT_EQ(n.shape(), Shape({4, 3}));
  EXPECT_EQ(n.at({2, 0}), 11.0);
  Tensor r = a.select(0, 2);
  EXPECT_TRUE(r.shares_storage(a));
  EXPECT_EQ(r.shape(), Shape({5}));
  EXPECT_EQ(fv(r), std::vector<float>({10, 11, 12, 13, 14}));
  Tensor c = a.select(1, -1);
  EXPECT_EQ(fv(c), std::vector<float>({4, 9, 14, 19}));
  EXPECT_EQ(c.stride(0), 5);
  EXPECT_EQ(a.narrow(0, -2, 2).at({0, 0}), 10.0);
}

TEST(TensorViews, ContiguousCopiesOnlyWhenNeeded) {
  Tensor a = iota({3, 4});
  Tensor c = a.contiguous();
  EXPECT_TRUE(c.is_same(a));  // no copy, same tensor
  Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  Tensor tc = t.contiguous();
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_FALSE(tc.shares_storage(a));
  EXPECT_EQ(fv(tc), fv(t));
  // A size-1 dim with an odd stride is still contiguous.
  Tensor one_row = a.slice(0, 1, 2);
  EXPECT_TRUE(one_row.is_contiguous());
  EXPECT_TRUE(one_row.contiguous().is_same(one_row));
  // An expanded tensor is not.
  Tensor e = tensor({1.f, 2.f}).expand({3, 2});
  EXPECT_FALSE(e.is_contiguous());
  EXPECT_EQ(fv(e.contiguous()), std::vector<float>({1, 2, 1, 2, 1, 2}));
}

TEST(TensorViews, ViewRequiresCompatibleStrides) {
  Tensor a = iota({4, 6});
  EXPECT_TRUE(a.view({2, 12}).shares_storage(a));
  EXPECT_TRUE(a.t().view({3, 2, 4}).shares_storage(a));  // splitting a dim works
  EXPECT_THROW(a.t().view({24}), Error);
}

TEST(TensorViews, StackSplitChunk) {
  Tensor a = iota({2, 3});
  Tensor b = add(iota({2, 3}), 10.0);
  Tensor s = stack({a, b}, 0);
  EXPECT_EQ(s.shape(), Shape({2, 2, 3}));
  EXPECT_EQ(s.at({1, 1, 2}), 15.0);
  auto parts = split(iota({7, 2}), 3, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), Shape({3, 2}));
  EXPECT_EQ(parts[2].shape(), Shape({1, 2}));
  EXPECT_EQ(parts[2].at({0, 1}), 13.0);
  auto ch = chunk(iota({2, 6}), 3, 1);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[1].shape(), Shape({2, 2}));
  EXPECT_EQ(ch[1].at({1, 0}), 8.0);
}

// ---- broadcasting ---------------------------------------------------------------------------

TEST(TensorBroadcast, NumPyRules) {
  EXPECT_EQ(broadcast_shapes({3, 1}, {1, 4}, "t"), Shape({3, 4}));
  EXPECT_EQ(broadcast_shapes({2, 3, 4}, {4}, "t"), Shape({2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 3}, "t"), Shape({2, 3}));
  EXPECT_EQ(broadcast_shapes({5, 1, 3}, {4, 1}, "t"), Shape({5, 4, 3}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}, "t"), Shape({0, 3}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4, 3}, "t"), Error);
  EXPECT_THROW(broadcast_shapes({3}, {4}, "t"), Error);
  EXPECT_TRUE(broadcastable_to({3, 1}, {2, 3, 4}));
  EXPECT_FALSE(broadcastable_to({2, 3, 4}, {3, 4}));
  EXPECT_FALSE(broadcastable_to({3}, {3, 4}));
}

TEST(TensorBroadcast, ArithmeticBroadcasts) {
  Tensor col = tensor({1.f, 2.f, 3.f}, {3, 1});
  Tensor row = tensor({10.f, 20.f}, {1, 2});
  Tensor s = col + row;
  EXPECT_EQ(s.shape(), Shape({3, 2}));
  EXPECT_EQ(fv(s), std::vector<float>({11, 21, 12, 22, 13, 23}));
  Tensor z = scalar_tensor(2.0) * iota({2, 2});
  EXPECT_EQ(fv(z), std::vector<float>({0, 2, 4, 6}));
  Tensor e = zeros({0, 3}) + ones({3});
  EXPECT_EQ(e.shape(), Shape({0, 3}));
}

// ---- factories --------------------------------------------------------------------------------

TEST(TensorFactories, ZerosOnesFull) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dtype(), Float32);
  EXPECT_EQ(z.shape(), Shape({2, 3}));
  EXPECT_EQ(fv(z), std::vector<float>(6, 0.f));
  Tensor o = ones({4}, Int64);
  EXPECT_EQ(o.dtype(), Int64);
  EXPECT_EQ(o.to_vector<int64_t>(), std::vector<int64_t>(4, 1));
  Tensor f = full({2, 2}, 2.5, Float64);
  EXPECT_EQ(f.dtype(), Float64);
  EXPECT_EQ(f.to_vector<double>(), std::vector<double>(4, 2.5));
  EXPECT_EQ(full({3}, 1.0, Bool).to_vector<bool>(), std::vector<bool>(3, true));
  EXPECT_EQ(zeros_like(f).dtype(), Float64);
  EXPECT_EQ(ones_like(o).shape(), Shape({4}));
  EXPECT_EQ(full_like(z, 7).to_vector<float>()[5], 7.f);
  Tensor s = scalar_tensor(4.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
}

TEST(TensorFactories, ArangeLinspaceEye) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), std::vector<int64_t>({0, 1, 2, 3, 4}));
  Tensor b = arange(1, 2, 0.25, Float32);
  EXPECT_EQ(fv(b), std::vector<float>({1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(5, 0, -2).to_vector<int64_t>(), std::vector<int64_t>({5, 3, 1}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  Tensor l = linspace(0, 1, 5);
  EXPECT_EQ(l.dtype(), Float32);
  EXPECT_EQ(fv(l), std::vector<float>({0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(linspace(2, 3, 1).to_vector<float>(), std::vector<float>({2}));
  EXPECT_EQ(linspace(2, 3, 0).numel(), 0);
  Tensor e = eye(3);
  EXPECT_EQ(fv(e), std::vector<float>({1, 0, 0, 0, 1, 0, 0, 0, 1}));
  Tensor r = eye(2, 3, Int64);
  EXPECT_EQ(r.shape(), Shape({2, 3}));
  EXPECT_EQ(r.to_vector<int64_t>(), std::vector<int64_t>({1, 0, 0, 0, 1, 0}));
}

TEST(TensorFactories, RandomIsSeededAndInRange) {
  manual_seed(42);
  Tensor a = rand({1000});
  Tensor n = randn({1000});
  Tensor i = randint(-3, 4, {1000});
  manual_seed(42);
  Tensor a2 = rand({1000});
  Tensor n2 = randn({1000});
  Tensor i2 = randint(-3, 4, {1000});
  EXPECT_EQ(fv(a), fv(a2));
  EXPECT_EQ(fv(n), fv(n2));
  EXPECT_EQ(i.to_vector<int64_t>(), i2.to_vector<int64_t>());
  manual_seed(43);
  EXPECT_NE(fv(rand({1000})), fv(a));
  for (float v : fv(a)) {
    EXPECT_GE(v, 0.f);
    EXPECT_LT(v, 1.f);
  }
  std::vector<int> seen(7, 0);
  for (int64_t v : i.to_vector<int64_t>()) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
    seen[static_cast<size_t>(v + 3)]++;
  }
  for (int c : seen) EXPECT_GT(c, 0);
  EXPECT_EQ(i.dtype(), Int64);
  // Loose moment checks (1000 samples).
  double m = mean(n).item<double>(), v = var(n).item<double>();
  EXPECT_NEAR(m, 0.0, 0.2);
  EXPECT_NEAR(v, 1.0, 0.2);
  EXPECT_NEAR(mean(a).item<double>(), 0.5, 0.05);
  EXPECT_EQ(randn({2, 3}, Float64).dtype(), Float64);
}

TEST(TensorFactories, FromHostData) {
  Tensor a = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_EQ(a.shape(), Shape({2, 3}));
  EXPECT_EQ(a.at({1, 0}), 4.0);
  Tensor d = tensor(std::vector<double>{1.5, 2.5});
  EXPECT_EQ(d.dtype(), Float64);
  EXPECT_EQ(d.shape(), Shape({2}));
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(i.dtype(), Int64);
  EXPECT_EQ(i.at({1, 1}), 4.0);
  Tensor i32 = tensor(std::vector<int32_t>{7, 8});
  EXPECT_EQ(i32.dtype(), Int32);
  Tensor b = tensor(std::vector<bool>{true, false, true});
  EXPECT_EQ(b.dtype(), Bool);
  EXPECT_EQ(b.to_vector<bool>(), std::vector<bool>({true, false, true}));
}

// ---- printing ------------------------------------------------------------------------------

TEST(TensorPrint, FloatIntegerValued) {
  EXPECT_EQ(str(tensor({1.f, 2.f, 3.f, 4.f}, {2, 2})), "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT_EQ(str(tensor({-1.f, 2.f})), "tensor([-1.,  2.])");
  EXPECT_EQ(str(zeros({3})), "tensor([0., 0., 0.])");
  EXPECT_EQ(str(scalar_tensor(2)), "tensor(2.)");
}

TEST(TensorPrint, FloatFractional) {
  EXPECT_EQ(str(tensor({1.5f, -2.25f, 3.f})), "tensor([ 1.5000, -2.2500,  3.0000])");
  EXPECT_EQ(str(scalar_tensor(3.5)), "tensor(3.5000)");
  EXPECT_EQ(str(tensor({0.f, 0.5f})), "tensor([0.0000, 0.5000])");
}

TEST(TensorPrint, ScientificNotationIsTensorWide) {
  // PyTorch switches the whole tensor to scientific notation when the ratio of the largest to
  // the smallest nonzero magnitude exceeds 1000, or a value is >= 1e8 or < 1e-4.
  EXPECT_EQ(str(tensor(std::vector<double>{1e-5, 1.0}).to(Float32)),
            "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(str(tensor({1.f, 2000.f})), "tensor([1.0000e+00, 2.0000e+03])");
  EXPECT_EQ(str(tensor({1e10f, 1.f})), "tensor([1.0000e+10, 1.0000e+00])");
}

TEST(TensorPrint, NonFinite) {
  EXPECT_EQ(str(tensor({1.f, NAN})), "tensor([1., nan])");
  EXPECT_EQ(str(tensor({1.5f, INFINITY})), "tensor([1.5000,    inf])");
  EXPECT_EQ(str(tensor({-INFINITY, 2.f})), "tensor([-inf, 2.])");
}

TEST(TensorPrint, IntAndBool) {
  EXPECT_EQ(str(tensor(std::vector<int64_t>{1, -20, 300})), "tensor([  1, -20, 300])");
  EXPECT_EQ(str(tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2})),
            "tensor([[1, 2],\n        [3, 4]])");
  EXPECT_EQ(str(tensor(std::vector<bool>{true, false})), "tensor([ True, False])");
  EXPECT_EQ(str(scalar_tensor(7, Int64)), "tensor(7)");
  EXPECT_EQ(str(scalar_tensor(1, Bool)), "tensor(True)");
  EXPECT_EQ(str(tensor(std::vector<int32_t>{1, 2})), "tensor([1, 2], dtype=int32)");
}

TEST(TensorPrint, DtypeAndRequiresGradSuffixes) {
  EXPECT_EQ(str(tensor(std::vector<double>{1, 2})), "tensor([1., 2.], dtype=float64)");
  Tensor g = tensor({1.f, 2.f}).requires_grad_();
  EXPECT_EQ(str(g), "tensor([1., 2.], requires_grad=True)");
}

TEST(TensorPrint, ThreeDims) {
  EXPECT_EQ(str(iota({2, 2, 2})),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
}

TEST(TensorPrint, Empty) {
  EXPECT_EQ(str(zeros({0})), "tensor([])");
  EXPECT_EQ(str(zeros({0, 3})), "tensor([], size=(0, 3))");
  EXPECT_EQ(str(zeros({0}, Int64)), "tensor([], dtype=int64)");
}

TEST(TensorPrint, SummarizesLargeTensors) {
  EXPECT_EQ(str(arange(2000)), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  std::string s = str(add(iota({100, 20}), 1000.0));
  EXPECT_EQ(s.substr(0, 58), "tensor([[1000., 1001., 1002.,  ..., 1017., 1018., 1019.],\n");
  EXPECT_NE(s.find(",\n        ...,\n        [2940., "), std::string::npos) << s;
  EXPECT_NE(s.find("[2980., 2981., 2982.,  ..., 2997., 2998., 2999.]])"), std::string::npos) << s;
  // Shown values 0..1999 span more than a factor of 1000: scientific notation, as PyTorch.
  EXPECT_EQ(str(iota({100, 20})).substr(0, 45), "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00, ");
}

TEST(TensorPrint, WrapsLongRowsAt80Columns) {
  // torch.arange(30.): width 3 + 2 per element, (80 - 7) / 5 = 14 per line.
  std::string s = str(arange(0, 30, 1, Float32));
  EXPECT_EQ(s,
            "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
            "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
            "        28., 29.])");
}

TEST(TensorPrint, NonContiguousPrintsLogicalOrder) {
  EXPECT_EQ(str(iota({2, 3}).t()), "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])");
}

// ---- host reads ---------------------------------------------------------------------------

TEST(TensorHostReads, ItemToVectorBoolAt) {
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(s.item<float>(), 2.5f);
  EXPECT_EQ(s.item<double>(), 2.5);
  EXPECT_EQ(s.item<int64_t>(), 2);
  EXPECT_EQ(tensor({3.f}, {1, 1}).item<float>(), 3.f);  // any one-element shape
  Tensor a = iota({2, 3}).t();
  EXPECT_EQ(a.to_vector<int64_t>(), std::vector<int64_t>({0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(a.to_vector<double>(), std::vector<double>({0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(static_cast<bool>(scalar_tensor(1, Bool)));
  EXPECT_FALSE(static_cast<bool>(scalar_tensor(0.0)));
  EXPECT_TRUE(static_cast<bool>(gt(scalar_tensor(3.0), 2.0)));
  EXPECT_EQ(a.at({2, 1}), 5.0);
  EXPECT_EQ(a.at({-1, -1}), 5.0);
  EXPECT_EQ(*iota({2, 3}).data_ptr<float>(), 0.f);
  EXPECT_EQ(zeros({0}).to_vector<float>().size(), 0u);
}

// ---- clone, copy_, to ---------------------------------------------------------------------

// A default-constructed tensor (or an absent gradient) raises kiln::Error from its metadata
// and from ops, naming what was asked, instead of dereferencing null.
TEST(TensorUndefined, MetadataAndOpsRaise) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  auto raises = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << what << " did not raise";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[" + what + "]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("undefined"), std::string::npos) << e.what();
    }
  };
  raises([&] { (void)u.dtype(); }, "dtype");
  raises([&] { (void)u.shape(); }, "shape");
  raises([&] { (void)u.dim(); }, "dim");
  raises([&] { (void)u.numel(); }, "numel");
  raises([&] { (void)u.size(0); }, "size");
  raises([&] { (void)u.strides(); }, "strides");
  raises([&] { (void)u.stride(0); }, "stride");
  raises([&] { (void)u.is_contiguous(); }, "is_contiguous");
  raises([&] { (void)u.element_size(); }, "element_size");
  Tensor x = randn({2, 3}).requires_grad_();
  raises([&] { (void)x.grad().shape(); }, "shape");  // no backward yet
  EXPECT_THROW(add(x, u), Error);
  EXPECT_THROW(matmul(u, x), Error);
  EXPECT_THROW(relu(u), Error);
}

// Sizes and values that do not fit raise kiln::Error instead of wrapping around (a wrapped
// element count allocated a small block for a huge shape, or let a reshape of 64 elements claim
// 2^64) or converting NaN to an integer (undefined behaviour).
TEST(TensorLimits, OverflowAndNonFiniteRaise) {
  auto raises = [](const std::function<void()>& f, const std::string& op, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << op << ": no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("[" + op + "]", 0), 0u) << m;
      EXPECT_NE(m.find(part), std::string::npos) << m;
    }
  };
  const int64_t big = int64_t(1) << 40;
  raises([&] { zeros({big, big}); }, "empty", "too large");
  raises([&] { randn({int64_t(1) << 62}); }, "empty", "too large");
  raises([&] { reshape(zeros({64}), {(int64_t(1) << 62) + 16, 4}); }, "reshape", "2^63");
  raises([&] { zeros({64}).view({(int64_t(1) << 62) + 16, 4}); }, "view", "2^63");
  raises([&] { (void)zeros({1, 1}).expand({big, big}).numel(); }, "shape", "2^63");
  // 2^48 bytes is past the 47-bit user address space: the system refuses it.
  raises([&] { empty({int64_t(1) << 46}); }, "alloc", "out of memory");
  raises([&] { arange(0, std::nan(""), 1, Float32); }, "arange", "finite");
  raises([&] { arange(0, INFINITY, 1, Float32); }, "arange", "finite");
  raises([&] { arange(0, 1e30, 1, Float32); }, "arange", "too many");
  raises([&] { full({2}, std::nan(""), Int64); }, "full", "int64");
  raises([&] { zeros({2}, Int32).fill_(3e9); }, "full", "int32");
  EXPECT_EQ(full({2}, -9.2e18, Int64).to_vector<int64_t>()[0], int64_t(-9.2e18));
  EXPECT_EQ(arange(0, 5, 2, Int64).to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4}));
}

TEST(TensorCopies, CloneIsDeep) {
  Tensor a = iota({2, 3});
  Tensor c = a.clone();
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(fv(c), fv(a));
  c.fill_(9);
  EXPECT_EQ(a.at({0, 0}), 0.0);
  EXPECT_EQ(c.at({0, 0}), 9.0);
  Tensor t = a.t().clone();
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(fv(t), fv(a.t()));
}

TEST(TensorCopies, CopyBroadcastsAndCasts) {
  Tensor dst = zeros({2, 3});
  dst.copy_(tensor({1.f, 2.f, 3.f}));
  EXPECT_EQ(fv(dst), std::vector<float>({1, 2, 3, 1, 2, 3}));
  dst.copy_(tensor(std::vector<int64_t>{7}, {1, 1}));
  EXPECT_EQ(fv(dst), std::vector<float>(6, 7.f));
  Tensor id = zeros({3}, Int64);
  id.copy_(tensor({1.9f, -2.7f, 3.f}));
  EXPECT_EQ(id.to_vector<int64_t>(), std::vector<int64_t>({1, -2, 3}));
  // Into a strided view.
  Tensor m = zeros({3, 3});
  m.select(1, 1).copy_(tensor({1.f, 2.f, 3.f}));
  EXPECT_EQ(fv(m), std::vector<float>({0, 1, 0, 0, 2, 0, 0, 3, 0}));
  EXPECT_EQ(fv(m.t().contiguous()), std::vector<float>({0, 0, 0, 1, 2, 3, 0, 0, 0}));
}

TEST(TensorCopies, CopyFromOverlappingSource) {
  // x[1:] = x[:-1] must read the old values (memmove semantics), not smear x[0].
  Tensor x = tensor({1.f, 2.f, 3.f, 4.f, 5.f});
  x.slice(0, 1, 5).copy_(x.slice(0, 0, 4));
  EXPECT_EQ(fv(x), std::vector<float>({1, 1, 2, 3, 4}));
  // In-place transpose of a square matrix through copy_ from its own transpose.
  Tensor m = iota({3, 3});
  m.copy_(m.t());
  EXPECT_EQ(fv(m), std::vector<float>({0, 3, 6, 1, 4, 7, 2, 5, 8}));
}

TEST(TensorCopies, ToDtype) {
  Tensor a = tensor({1.5f, -2.5f});
  Tensor d = a.to(Float64);
  EXPECT_EQ(d.dtype(), Float64);
  EXPECT_EQ(d.to_vector<double>(), std::vector<double>({1.5, -2.5}));
  EXPECT_TRUE(a.to(Float32).is_same(a));  // same dtype: no copy
  Tensor i = a.to(Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), std::vector<int64_t>({1, -2}));
  Tensor b = a.to(Bool);
  EXPECT_EQ(b.to_vector<bool>(), std::vector<bool>({true, true}));
  EXPECT_EQ(tensor(std::vector<bool>{true, false}).to(Float32).to_vector<float>(),
            std::vector<float>({1, 0}));
  EXPECT_EQ(iota({2, 3}).t().to(Int32).to_vector<int32_t>(),
            std::vector<int32_t>({0, 3, 1, 4, 2, 5}));
}

// ---- caching allocator --------------------------------------------------------------------

TEST(TensorAllocator, ReusesFreedBlocks) {
  { Tensor warm = empty({1000}); }
  AllocatorStats before = allocator_stats();
  for (int i = 0; i < 20; ++i) {
    Tensor t = empty({1000});
    EXPECT_EQ(t.numel(), 1000);
  }
  AllocatorStats after = allocator_stats();
  EXPECT_GE(after.hits - before.hits, 20u);
  EXPECT_EQ(after.misses, before.misses);
  // A large (huge-page class) block is reused too.
  { Tensor warm = empty({1 << 20}); }
  AllocatorStats b2 = allocator_stats();
  for (int i = 0; i < 3; ++i) Tensor t = empty({1 << 20});
  AllocatorStats a2 = allocator_stats();
  EXPECT_GE(a2.hits - b2.hits, 3u);
  EXPECT_EQ(a2.misses, b2.misses);
  EXPECT_GE(a2.cached_bytes, size_t(4) << 20);
}

TEST(TensorAllocator, InUseAndPeak) {
  AllocatorStats s0 = allocator_stats();
  Tensor t = empty({1 << 18});  // 1 MiB
  AllocatorStats s1 = allocator_stats();
  EXPECT_GE(s1.in_use_bytes, s0.in_use_bytes + (size_t(1) << 20));
  EXPECT_GE(s1.peak_in_use_bytes, s1.in_use_bytes);
  t = Tensor();
  EXPECT_LT(allocator_stats().in_use_bytes, s1.in_use_bytes);
}

// ---- dtype promotion ------------------------------------------------------------------------

TEST(TensorPromotion, Rules) {
  EXPECT_EQ(promote(Int64, Float32), Float32);
  EXPECT_EQ(promote(Float32, Float64), Float64);
  EXPECT_EQ(promote(Bool, Int32), Int32);
  EXPECT_EQ(promote(Int32, Int64), Int64);
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  Tensor f = tensor({0.5f, 0.25f});
  Tensor s = i + f;
  EXPECT_EQ(s.dtype(), Float32);
  EXPECT_EQ(fv(s), std::vector<float>({1.5, 2.25}));
  Tensor h = i + 2.5;
  EXPECT_EQ(h.dtype(), Float32);
  EXPECT_EQ(fv(h), std::vector<float>({3.5, 4.5}));
  Tensor k = i * 3;  // an integer host scalar keeps the tensor's dtype, a float one does not
  EXPECT_EQ(k.dtype(), Int64);
  EXPECT_EQ(k.to_vector<int64_t>(), std::vector<int64_t>({3, 6}));
  EXPECT_EQ((i * 3.0).dtype(), Float32);
  EXPECT_EQ((f + 1.0).dtype(), Float32);
  EXPECT_EQ((f + tensor(std::vector<double>{1, 1})).dtype(), Float64);
  EXPECT_EQ(exp(i).dtype(), Float32);  // math on integers goes to float32
  // Comparisons against a fractional host scalar do not truncate it.
  EXPECT_EQ(lt(i, 1.5).to_vector<bool>(), std::vector<bool>({true, false}));
  EXPECT_EQ(eq(tensor(std::vector<bool>{true, false}), 2.0).to_vector<bool>(),
            std::vector<bool>({false, false}));
}

// The device in the core: every tensor is on the CPU today; names parse as torch.device's, and a
// device without a backend (CUDA) is refused naming the op.
TEST(TensorDevice, CpuTodayAndCudaRefused) {
  const Tensor t = ones({2, 3});
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(t.device().str(), "cpu");
  EXPECT_TRUE(t.to(Device::cpu()).is_same(t));
  EXPECT_EQ(parse_device("cuda:1").str(), "cuda:1");
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_FALSE(device_available(parse_device("cuda")));
  EXPECT_THROW(t.to(parse_device("cuda")), Error);
  EXPECT_THROW(parse_device("tpu"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
}
