#pragma once
// SPDX-License-Identifier: MIT
// The dense layer's GEMMs with their bias fused in (issue 25, item 2), through cuBLASLt:
//   forward   y (rows, out) = x w + bias      one GEMM, epilogue BIAS (no broadcast kernel);
//             [+ residual]                    the residual as the GEMM's C with beta 1
//   backward  dw (in, out) = x^T dy (+ dw),   one GEMM, epilogue BGRADA: db = column sums of dy
// Row-major to cuBLASLt's column-major: y^T (out, rows) = w^T x^T, so A = w (out x in, ld out),
// B = x (in x rows, ld in), bias along D's rows; dw^T (out, in) = dy^T x, so A = dy (out x rows,
// ld out) summed over k = rows for the bias gradient (BGRADA), B = x transposed.
// A two-layer MLP (ops/mlp.hpp):
//   forward   pre = x w1 + b1                   one GEMM, epilogue BIAS;
//             act = GELU(pre)                   remat's GELU kernel (core/math.hpp), not the
//                                               GELU_AUX_BIAS epilogue: see below
//   backward  dpre = (dy w2^T) GELU'(pre)       one GEMM, epilogue DGELU_BGRAD: db1 = column
//                                               sums of dpre (DGELU where db1 is not wanted)
// Why the forward's GELU is ours: a checkpoint policy may drop act and have backward rebuild it
// from pre (MlpOp::slim), with remat's GELU. cuBLASLt's GELU epilogue is its own approximation:
// on an H200 (2026-12-04) save_linear's gradients then differed from the plain run's (1e-6
// relative), where every other strategy matched bit for bit. One GELU for both keeps the
// checkpointed step bitwise the plain one, for one more read of pre (about 0.7% of a GPT-2 124M
// step). The backward's DGELU is the same epilogue in every run, so it may stay.
// cuBLASLt wants the GELU matrix's leading dimension (hidden) divisible by 8; other widths take
// the fallback.
// Where cuBLASLt has no algorithm for a shape with its epilogue, the same results come from
// broadcast_rows + cuBLAS, or cuBLAS + a deterministic column sum; the Scratch is the same size
// either way (CudaSizes::linear_*_scratch), so the ledger and the estimator do not depend on it.

#include <cstdint>

#include "remat/backend/cuda/colsum.cuh"
#include "remat/backend/cuda/gemm.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/pointwise.cuh"
#include "remat/backend/cuda/sizes.hpp"

namespace remat {
namespace cuda {

struct CudaLinear {
  /// y (rows, out) = x (rows, in) w (in, out) + bias (out) [+ residual (rows, out), unless
  /// null]; y's old values are not read.
  static void linear_forward(float* y, const float* x, const float* w, const float* bias,
                             const float* residual, std::int64_t rows, std::int64_t in,
                             std::int64_t out) {
    if (rows * out == 0) return;
    const std::size_t ws = CudaSizes::linear_forward_scratch(rows, in, out);
    const Scratch scratch(ws);
    if (in > 0 && CudaGemm::gemm_epilogue(false, false, out, rows, in, w, out, x, in,
                                          residual ? 1.0f : 0.0f, y, out, CUBLASLT_EPILOGUE_BIAS,
                                          const_cast<float*>(bias), scratch.as<void>(), ws,
                                          residual))
      return;
    if (residual)
      CudaPointwise::binary_forward(math::BinaryKind::add, y, residual, bias, rows, out, false, true);
    else
      CudaPointwise::broadcast_rows(y, bias, rows, out);
    CudaGemm::gemm(false, false, rows, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
  }
  /// pre (rows, hidden) = x (rows, in) w (in, hidden) + bias; act = GELU(pre); both written.
  static void linear_gelu_forward(float* act, float* pre, const float* x, const float* w,
                                  const float* bias, std::int64_t rows, std::int64_t in,
                                  std::int64_t hidden) {
    if (rows * hidden == 0) return;
    linear_forward(pre, x, w, bias, nullptr, rows, in, hidden);
    CudaPointwise::gelu_forward(act, pre, rows * hidden);
  }
  /// dpre (rows, hidden) = (dy (rows, out) w (hidden, out)^T) GELU'(pre), written; db (hidden),
  /// unless null, = the column sums of dpre, written.
  static void linear_dgelu_backward(float* dpre, float* db, const float* dy, const float* w,
                                    const float* pre, std::int64_t rows, std::int64_t hidden,
                                    std::int64_t out) {
    if (rows * hidden == 0) return;
    const std::size_t bytes = CudaSizes::linear_dgelu_backward_scratch(rows, hidden, out);
    const Scratch scratch(bytes);
    // dpre^T (hidden x rows) = w (stored out x hidden, transposed) dy^T (out x rows)
    if (out > 0 && hidden % 8 == 0 &&
        CudaGemm::gemm_epilogue(true, false, hidden, rows, out, w, out, dy, out, 0.0f, dpre, hidden,
                                db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU, db,
                                scratch.as<void>(), bytes, nullptr, const_cast<float*>(pre)))
      return;
    CudaGemm::gemm(false, true, rows, hidden, out, 1.0f, dy, out, w, out, 0.0f, dpre, hidden);
    CudaPointwise::gelu_backward(dpre, pre, dpre, rows * hidden, true);
    if (!db) return;
    const ColumnOf t{dpre};
    column_sum(db, t, rows, hidden, scratch.as<float>(), false);
  }
  /// dw (in, out) = x^T dy + beta_w dw; db (out) = column sums of dy (rows, out), written.
  static void linear_backward_weight(float* dw, float* db, const float* x, const float* dy,
                                     std::int64_t rows, std::int64_t in, std::int64_t out,
                                     float beta_w) {
    if (out == 0) return;
    const std::size_t bytes = CudaSizes::linear_backward_weight_scratch(rows, in, out);
    const Scratch scratch(bytes);
    if (rows > 0 && in > 0 &&
        CudaGemm::gemm_epilogue(false, true, out, in, rows, dy, out, x, in, beta_w, dw, out,
                                CUBLASLT_EPILOGUE_BGRADA, db, scratch.as<void>(), bytes))
      return;
    CudaGemm::gemm(true, false, in, out, rows, 1.0f, x, in, dy, out, beta_w, dw, out);
    const ColumnOf t{dy};
    column_sum(db, t, rows, out, scratch.as<float>(), false);
  }
};

}  // namespace cuda
}  // namespace remat
