#pragma once
// SPDX-License-Identifier: MIT
// The CPU backend: Eigen::Map over our buffers, GEMM through Eigen (or OpenBLAS under
// EIGEN_USE_BLAS), OpenMP for our own loops. A backend is a class of static functions over raw
// pointers and sizes; it knows nothing of tapes or gradients. The families live in cpu/.

#include "remat/backend/backend.hpp"
#include "remat/backend/cpu/gemm.hpp"
#include "remat/backend/cpu/linear.hpp"
#include "remat/backend/cpu/memory.hpp"
#include "remat/backend/cpu/nn.hpp"
#include "remat/backend/cpu/optim.hpp"
#include "remat/backend/cpu/pointwise.hpp"
#include "remat/backend/cpu/typed_gemm.hpp"

namespace remat {

/// The CPU backend. Tensor<Cpu>, Tape<Cpu>, memory_stats<Cpu>().
struct Cpu : cpu::CpuMemory, cpu::CpuGemm, cpu::CpuLinear, cpu::CpuPointwise, cpu::CpuNn,
             cpu::CpuTypedGemm, cpu::CpuOptim {
  using cpu::CpuMemory::name;
  using cpu::CpuNn::run;  // op kernels (NOTE [op kernels]) of two families
  using cpu::CpuNn::scratch;
  using cpu::CpuTypedGemm::run;
  using cpu::CpuTypedGemm::scratch;
};

static_assert(check_backend<Cpu>(), "remat: the CPU backend misses a backend function");

/// Sets the CPU threads of our kernels, Eigen and OpenBLAS together.
inline void set_num_threads(int n) { Cpu::set_num_threads(n); }

}  // namespace remat
