// Inference ops on channel-blocked activations [N, C/b, H, W, b] (oneDNN's nChw{b}c, which the
// block_layout pass keeps between convolutions): the global average pool and the per-channel
// scale of a squeeze-excite block. The generic mean and broadcast mul read these layouts with
// strided inner loops (efficientnet_b0, batch 1: 62 and 49 us a call against 5-10 here), so a
// network's SE blocks cost more in blocks than the copies back to NCHW they saved.
#include <cstring>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;

void require_blocked(const char* op, const Tensor& x, const char* what) {
  const Shape& s = x.shape();
  if (s.rank() != 5 || (s[4] != 8 && s[4] != 16))
    fail(op, what, " must be 5-D [N, C/b, H, W, b] with b = 8 or 16, got shape ", s);
  op_util::require_float(op, x);
}

// mean over H and W: [N, C/b, H, W, b] -> [N, C/b, 1, 1, b] (the bytes of [N, C, 1, 1]).
template <typename T>
void mean_hw(const Tensor& x, Tensor& y) {
  const int64_t planes = x.size(0) * x.size(1), HW = x.size(2) * x.size(3), B = x.size(4);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const T inv = HW > 0 ? T(1) / static_cast<T>(HW) : std::numeric_limits<T>::quiet_NaN();
  parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, HW * B)),
               [&](int64_t b, int64_t e) {
                 for (int64_t pl = b; pl < e; ++pl) {
                   T acc[16] = {};
                   const T* p = px + pl * HW * B;
                   for (int64_t q = 0; q < HW; ++q)
                     for (int64_t i = 0; i < B; ++i) acc[i] += p[q * B + i];
                   for (int64_t i = 0; i < B; ++i) py[pl * B + i] = acc[i] * inv;
                 }
               });
}

const OpDef& kMeanHwBlocked =
    def_op({.name = "mean_hw_blocked",
            .num_inputs = 1,
            .infer =
                [](std::span<const Tensor> in, const Attrs&) {
                  require_blocked("mean_hw_blocked", in[0], "input");
                  const Shape& s = in[0].shape();
                  return one(in[0].dtype(), Shape{s[0], s[1], 1, 1, s[4]});
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "mean_hw_blocked",
                                      [&] { mean_hw<scalar_t>(in[0], out[0]); });
                },
            .contiguous_inputs = true,
            .doc = "inference mean over H and W of channel-blocked [N, C/b, H, W, b] activations "
                   "-> [N, C/b, 1, 1, b] (a global average pool; what block_layout makes of "
                   "mean(x, {2, 3}, keepdim))"});

// x [N, C/b, H, W, b] times s [N or 1, C/b, 1, 1, b]: each b-lane vector of a plane by the
// plane's scale vector.
template <typename T>
void scale_channels(const Tensor& x, const Tensor& s, Tensor& y) {
  const int64_t N = x.size(0), CB = x.size(1), HW = x.size(2) * x.size(3), B = x.size(4);
  const bool per_sample = s.size(0) == N && N > 1;
  const T *px = x.data_ptr<T>(), *ps = s.data_ptr<T>();
  T* py = y.data_ptr<T>();
  parallel_for(N * CB, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, HW * B)),
               [&](int64_t b, int64_t e) {
                 for (int64_t pl = b; pl < e; ++pl) {
                   const T* sv = ps + (per_sample ? pl : pl % CB) * B;
                   const T* p = px + pl * HW * B;
                   T* o = py + pl * HW * B;
                   for (int64_t q = 0; q < HW; ++q)
                     for (int64_t i = 0; i < B; ++i) o[q * B + i] = p[q * B + i] * sv[i];
                 }
               });
}

const OpDef& kScaleChannelsBlocked = def_op(
    {.name = "scale_channels_blocked",
     .num_inputs = 2,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           const char* op = "scale_channels_blocked";
           require_blocked(op, in[0], "input");
           require_blocked(op, in[1], "scale");
           const Shape &x = in[0].shape(), &s = in[1].shape();
           if (s[1] != x[1] || s[4] != x[4] || s[2] != 1 || s[3] != 1 ||
               (s[0] != 1 && s[0] != x[0]) || in[0].dtype() != in[1].dtype())
             fail(op, "scale must be [", x[0], " or 1, ", x[1], ", 1, 1, ", x[4],
                  "] of the input's dtype for input ", in[0].dtype(), x, ", got ", in[1].dtype(),
                  s);
           return one(in[0].dtype(), x);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           KILN_DISPATCH_FLOAT(in[0].dtype(), "scale_channels_blocked",
                               [&] { scale_channels<scalar_t>(in[0], in[1], out[0]); });
         },
     .contiguous_inputs = true,
     .doc =
         "inference x * s of channel-blocked x [N, C/b, H, W, b] and a per-channel s "
         "[N or 1, C/b, 1, 1, b] (a squeeze-excite scale; what block_layout makes of that mul)"});

}  // namespace
}  // namespace kiln
