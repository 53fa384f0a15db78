#pragma once
// SPDX-License-Identifier: MIT
// The dense layer's two GEMMs with their bias, as one backend call each (the CUDA backend fuses
// the bias into the GEMM, cuda/linear.cuh). On the CPU: the bias rows (plus the residual, when
// there is one), then a GEMM that adds into them; the weight's GEMM, then the bias gradient's
// serial column sums.

#include <cstdint>

#include "remat/backend/cpu/gemm.hpp"
#include "remat/backend/cpu/pointwise.hpp"

namespace remat {
namespace cpu {

struct CpuLinear {
  /// y (rows, out) = x (rows, in) w (in, out) + bias (out) [+ residual (rows, out), unless
  /// null]; y's old values are not read.
  static void linear_forward(float* y, const float* x, const float* w, const float* bias,
                             const float* residual, std::int64_t rows, std::int64_t in,
                             std::int64_t out) {
    if (residual)
      CpuPointwise::binary_forward(math::BinaryKind::add, y, residual, bias, rows, out, false, true);
    else
      CpuPointwise::broadcast_rows(y, bias, rows, out);
    CpuGemm::gemm(false, false, rows, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
  }
  /// pre (rows, hidden) = x (rows, in) w (in, hidden) + bias; act = GELU(pre); both written.
  static void linear_gelu_forward(float* act, float* pre, const float* x, const float* w,
                                  const float* bias, std::int64_t rows, std::int64_t in,
                                  std::int64_t hidden) {
    linear_forward(pre, x, w, bias, nullptr, rows, in, hidden);
    CpuPointwise::gelu_forward(act, pre, rows * hidden);
  }
  /// dpre (rows, hidden) = (dy (rows, out) w (hidden, out)^T) GELU'(pre), written; db (hidden),
  /// unless null, = the column sums of dpre, written.
  static void linear_dgelu_backward(float* dpre, float* db, const float* dy, const float* w,
                                    const float* pre, std::int64_t rows, std::int64_t hidden,
                                    std::int64_t out) {
    CpuGemm::gemm(false, true, rows, hidden, out, 1.0f, dy, out, w, out, 0.0f, dpre, hidden);
    CpuPointwise::gelu_backward(dpre, pre, dpre, rows * hidden, true);
    if (db)
      CpuPointwise::binary_backward(math::BinaryKind::add, nullptr, db, dpre, dpre, dpre, rows,
                                    hidden, false, true, false, true);
  }
  /// dw (in, out) = x^T dy + beta_w dw; db (out) = column sums of dy (rows, out), written.
  static void linear_backward_weight(float* dw, float* db, const float* x, const float* dy,
                                     std::int64_t rows, std::int64_t in, std::int64_t out,
                                     float beta_w) {
    CpuGemm::gemm(true, false, in, out, rows, 1.0f, x, in, dy, out, beta_w, dw, out);
    CpuPointwise::binary_backward(math::BinaryKind::add, nullptr, db, dy, dy, dy, rows, out,
                                  false, true, false, true);
  }
};

}  // namespace cpu
}  // namespace remat
