#pragma once
// SPDX-License-Identifier: MIT
// The CPU side of the CUDA parity test, compiled by the host compiler (Eigen never meets nvcc).
#include <string>

#include "cuda/op_cases.hpp"

namespace remat_cuda_test {
Result cpu_op(const std::string& name);
Result cpu_gpt(const std::string& strategy, float dropout, GptShape shape = {});
Result cpu_optim(const std::string& name);
}  // namespace remat_cuda_test
