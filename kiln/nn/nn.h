// Umbrella header for kiln::nn: modules, initializers, layers, helpers, and the sequence and
// attention modules where they are built.
#pragma once
#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"
#if __has_include("kiln/nn/rnn.h")
#include "kiln/nn/rnn.h"
#endif
#if __has_include("kiln/nn/attention.h")
#include "kiln/nn/attention.h"
#endif
#if __has_include("kiln/nn/moe.h")
#include "kiln/nn/moe.h"
#endif
