// Parameter initializers (torch.nn.init): uniform, normal, zeros, Kaiming and Xavier, drawn from
// Kiln's seeded global generator so that manual_seed() makes every model reproducible.
#pragma once
#include <string>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Conv, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };

/// PyTorch's calculate_gain: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for ReLU,
/// sqrt(2 / (1 + a^2)) for leaky ReLU with slope `param`, 3/4 for SELU.
double calculate_gain(Nonlinearity nl, double param = 0.01);

/// {fan_in, fan_out} of a weight of rank >= 2: [out, in, k...] gives in * prod(k) and
/// out * prod(k) (Linear [out, in], Conv [out, in/groups, kH, kW]).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

// Each fills a concrete floating tensor in place (without recording autograd) and returns it.
/// Uniform on [a, b).
Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0);
/// Normal with the given mean and standard deviation.
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& constant_(Tensor& t, double value);
/// U(-bound, bound), bound = gain * sqrt(3 / fan); the default (a = 0, leaky ReLU) is He init.
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                         Nonlinearity nl = Nonlinearity::LeakyReLU);
/// N(0, std^2), std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nl = Nonlinearity::LeakyReLU);
/// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0);
/// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0);

}  // namespace kiln::nn::init
