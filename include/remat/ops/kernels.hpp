#pragma once
// SPDX-License-Identifier: MIT
// Every op kernel of the library, one list per op family joined (NOTE [op kernels] in
// core/kernel.hpp): what check_backend<B>() asks a backend for, beside the primitives of
// backend/backend.hpp. A family header of its own adds its list here.

#include "remat/core/kernel.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/matmul.hpp"
#include "remat/ops/rotary.hpp"

namespace remat {

using OpKernels =
    JoinKernels<CastKernels, BinaryKernels, NormKernels, MatmulKernels, LossKernels, RopeKernels, ActivationKernels>;

}  // namespace remat
