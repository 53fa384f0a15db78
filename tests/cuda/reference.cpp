// SPDX-License-Identifier: MIT
// The CPU results the CUDA backend is compared with (tests/cuda/test_cuda_kernels.cu).
#include <remat/remat.hpp>

#include "cuda/reference.hpp"

namespace remat_cuda_test {
Result cpu_op(const std::string& name) { return run_op<remat::Cpu>(name); }
Result cpu_gpt(const std::string& strategy, float dropout, GptShape shape) {
  return run_gpt<remat::Cpu>(strategy, dropout, shape);
}
Result cpu_optim(const std::string& name) { return run_optim<remat::Cpu>(name); }
}  // namespace remat_cuda_test
