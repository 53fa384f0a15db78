#pragma once
// SPDX-License-Identifier: MIT
// The cuBLASLt subset remat calls, for the emulation build: fp32 matmul descriptors, column-major
// layouts, a workspace preference, one heuristic answer, and cublasLtMatmul with the epilogues
// remat uses (DEFAULT, BIAS, BGRADA, BGRADB, GELU_AUX_BIAS, DGELU, DGELU_BGRAD). The checks are
// cuBLASLt's: layouts that match the op flags and m, n, k, leading dimensions at least the
// stored rows, a workspace at least what the chosen algorithm asked for, matrices as aligned as
// the preference promised the heuristic (256 bytes unless told), device pointers, the GELU
// matrix's leading dimension a multiple of 8. C is D, or a matrix of D's layout that does not
// overlap it (a residual the GEMM adds: read, not written).
// With Faults::lt_no_epilogue the heuristic finds nothing for an epilogue, as a real cuBLASLt
// may for a layout it does not support, so the caller's fallback is tested too.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "remat/backend/cuda/emulation/cublas.hpp"
#include "remat/backend/cuda/emulation/runtime.hpp"
#include "remat/core/math.hpp"

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
};
enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,  // bias, then GELU; the GELU input to aux
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,              // times GELU'(aux)
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,   // and the bias gradient of that result
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  void* aux = nullptr;
  std::int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  std::size_t max_workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: what the algorithm may assume
};
typedef cublasLtContext* cublasLtHandle_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t {
  std::uint64_t data[8] = {};  // [0]: the workspace bytes it needs; [1..4]: the A, B, C, D
};                             // alignments it assumes (cuBLASLt's default: 256 bytes)
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize = 0;
  cublasStatus_t state = CUBLAS_STATUS_SUCCESS;
  float wavesCount = 0;
  int reserved[4] = {};
};

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (remat::cuda::emu::device().faults().device_count == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = new cublasLtContext{};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t c,
                                               cudaDataType_t scale) {
  if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new cublasLtMatmulDescOpaque_t{};
  (*d)->compute = c;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                     cublasLtMatmulDescAttributes_t a,
                                                     const void* buf, std::size_t size) {
  if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (size != sizeof(std::int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      (a == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) =
          static_cast<cublasOperation_t>(*static_cast<const std::int32_t*>(buf));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (size != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      d->epilogue = static_cast<cublasLtEpilogue_t>(*static_cast<const std::uint32_t*>(buf));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      (a == CUBLASLT_MATMUL_DESC_BIAS_POINTER ? d->bias : d->aux) = *static_cast<void* const*>(buf);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (size != sizeof(std::int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      d->aux_ld = *static_cast<const std::int64_t*>(buf);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t,
                                                 std::uint64_t rows, std::uint64_t cols,
                                                 std::int64_t ld) {
  if (t != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ld < static_cast<std::int64_t>(rows > 1 ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t{rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a,
                                                           const void* buf, std::size_t size) {
  if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(std::uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    p->max_workspace = static_cast<std::size_t>(*static_cast<const std::uint64_t*>(buf));
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
    if (size != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *static_cast<const std::uint32_t*>(buf);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

namespace remat {
namespace cuda {
namespace emu {

/// The (m, n, k) a descriptor and its A, B, C, D layouts describe, or false when they disagree.
inline bool lt_shape(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& A,
                     const cublasLtMatrixLayoutOpaque_t& B, const cublasLtMatrixLayoutOpaque_t& C,
                     const cublasLtMatrixLayoutOpaque_t& D, int& m, int& n, int& k) {
  const bool tA = d.ta != CUBLAS_OP_N, tB = d.tb != CUBLAS_OP_N;
  m = static_cast<int>(tA ? A.cols : A.rows);
  k = static_cast<int>(tA ? A.rows : A.cols);
  n = static_cast<int>(tB ? B.rows : B.cols);
  const auto kb = static_cast<int>(tB ? B.cols : B.rows);
  return kb == k && static_cast<int>(C.rows) == m && static_cast<int>(C.cols) == n &&
         D.rows == C.rows && D.cols == C.cols && D.ld == C.ld;
}

/// Whether the epilogue reads or writes the GELU input matrix (aux).
inline bool lt_gelu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
/// cuBLASLt's rule for the GELU input matrix: its leading dimension divisible by 8 and at least
/// the output's rows.
inline bool lt_aux_ld_ok(const cublasLtMatmulDescOpaque_t& d, int m) {
  return !lt_gelu(d.epilogue) || (d.aux_ld % 8 == 0 && d.aux_ld >= m);
}

/// What the emulated heuristic asks for: room for a split over k of up to 4 parts of the output.
inline std::size_t lt_workspace_wanted(int m, int n) {
  return static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * 4 * sizeof(float);
}

// cuBLASLt's GELU epilogue is the library's own approximation, not core/math.hpp's: on an H200
// (2026-12-04) a GELU rebuilt by remat's kernel differed from the epilogue's in the last bits.
// The emulation's evaluates in double (then rounds), so it too differs from math::gelu in the
// last bit for some inputs, and code that mixes the two (a bitwise claim resting on them being
// equal) fails under the emulation as it would on a GPU.
inline float library_gelu(float x) {
  const double v = x;
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}

}  // namespace emu
}  // namespace cuda
}  // namespace remat

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
    cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p,
    int requested, cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || !A || !B || !C || !D || !p || requested < 1 || !results || !returned)
    return CUBLAS_STATUS_INVALID_VALUE;
  int m = 0, n = 0, k = 0;
  if (!remat::cuda::emu::lt_shape(*d, *A, *B, *C, *D, m, n, k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!remat::cuda::emu::lt_aux_ld_ok(*d, m)) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      remat::cuda::emu::device().faults().lt_no_epilogue)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const std::size_t wanted = remat::cuda::emu::lt_workspace_wanted(m, n);
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].workspaceSize = wanted < p->max_workspace ? wanted : p->max_workspace;
  results[0].algo.data[0] = results[0].workspaceSize;
  for (int i = 0; i < 4; ++i) results[0].algo.data[1 + i] = p->align[i];
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/// D = alpha op(A) op(B) + beta C with the epilogue, column-major (the cuBLAS reference GEMM
/// of cublas.hpp does the product; the epilogue is applied here, in the order cuBLASLt
/// documents: the bias added to the result; a bias gradient summed over k of A's rows (BGRADA)
/// or of B's columns (BGRADB), stored, never accumulated).
namespace remat {
namespace cuda {
namespace emu {
/// cublasLtMatmul's checks and work (`run` false: the checks only).
inline cublasStatus_t lt_matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                                const void* A, cublasLtMatrixLayout_t Ad, const void* B,
                                cublasLtMatrixLayout_t Bd, const void* beta, const void* C,
                                cublasLtMatrixLayout_t Cd, void* D, cublasLtMatrixLayout_t Dd,
                                const cublasLtMatmulAlgo_t* algo, void* workspace,
                                std::size_t workspace_bytes, bool run) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || !Ad || !Bd || !Cd || !Dd || !algo || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  int m = 0, n = 0, k = 0;
  if (!lt_shape(*d, *Ad, *Bd, *Cd, *Dd, m, n, k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace_bytes < algo->data[0]) return CUBLAS_STATUS_INVALID_VALUE;
  // an algorithm chosen for aligned matrices cannot take a less aligned one
  const void* mats[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if (reinterpret_cast<std::uintptr_t>(mats[i]) % algo->data[1 + i] != 0)
      return CUBLAS_STATUS_NOT_SUPPORTED;
  auto& dev = device();
  if (workspace_bytes > 0 && !dev.is_device(workspace, workspace_bytes))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const auto ep = d->epilogue;
  const bool gelu_fwd = ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = ep == CUBLASLT_EPILOGUE_DGELU || ep == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  const bool bias_in = ep == CUBLASLT_EPILOGUE_BIAS || gelu_fwd;
  const bool bias_out = ep == CUBLASLT_EPILOGUE_BGRADA || ep == CUBLASLT_EPILOGUE_BGRADB ||
                        ep == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  if (ep != CUBLASLT_EPILOGUE_DEFAULT && !bias_in && !bias_out && !dgelu)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!lt_aux_ld_ok(*d, m)) return CUBLAS_STATUS_INVALID_VALUE;
  if ((gelu_fwd || dgelu) &&
      (!dev.is_device(d->aux, sizeof(float) * static_cast<std::size_t>(d->aux_ld * (n - 1) + m)) ||
       reinterpret_cast<std::uintptr_t>(d->aux) % algo->data[4] != 0))
    return CUBLAS_STATUS_EXECUTION_FAILED;  // (the plan assumed D's alignment for it)
  const int bias_len = ep == CUBLASLT_EPILOGUE_BGRADB ? n : m;
  if ((bias_in || bias_out) && !dev.is_device(d->bias, sizeof(float) * static_cast<std::size_t>(bias_len)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (m == 0 || n == 0 || !run) return CUBLAS_STATUS_SUCCESS;
  float* Dp = static_cast<float*>(D);
  if (C != D) {  // out of place: D starts as C (same layout), then the GEMM runs in place
    const std::size_t span = sizeof(float) * (static_cast<std::size_t>(Dd->ld) * (n - 1) + m);
    const auto c0 = reinterpret_cast<std::uintptr_t>(C), d0 = reinterpret_cast<std::uintptr_t>(D);
    if (!dev.is_device(C, span) || !dev.is_device(D, span)) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (c0 < d0 + span && d0 < c0 + span) return CUBLAS_STATUS_INVALID_VALUE;  // overlapping
    const float* Cp = static_cast<const float*>(C);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i)
        Dp[i + static_cast<long long>(j) * Dd->ld] = Cp[i + static_cast<long long>(j) * Dd->ld];
  }
  // The product, through the reference GEMM (its checks, TF32 rounding when asked for).
  cublasContext ctx;
  ctx.math = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  const float* Ap = static_cast<const float*>(A);
  const float* Bp = static_cast<const float*>(B);
  const cublasStatus_t st = gemm_reference(
      &ctx, d->ta, d->tb, m, n, k, static_cast<const float*>(alpha), Ap, static_cast<int>(Ad->ld),
      0, Bp, static_cast<int>(Bd->ld), 0, static_cast<const float*>(beta), Dp,
      static_cast<int>(Dd->ld), 0, 1);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  float* bias = static_cast<float*>(d->bias);
  float* aux = static_cast<float*>(d->aux);
  auto at = [](float* M, long long ld, int i, int j) -> float& { return M[i + j * ld]; };
  if (bias_in) {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float& v = at(Dp, Dd->ld, i, j);
        v += bias[i];
        if (gelu_fwd) {  // aux = the GELU input, D = GELU(it)
          at(aux, d->aux_ld, i, j) = v;
          v = library_gelu(v);
        }
      }
  } else if (dgelu) {  // D = product x GELU'(aux); the bias gradient sums that over the columns
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) at(Dp, Dd->ld, i, j) *= remat::math::gelu_grad(at(aux, d->aux_ld, i, j));
    if (bias_out)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int j = 0; j < n; ++j) s += at(Dp, Dd->ld, i, j);
        bias[i] = static_cast<float>(s);
      }
  } else if (bias_out) {  // sum over k, in order, in double
    const bool on_a = d->epilogue == CUBLASLT_EPILOGUE_BGRADA;
    const bool t = on_a ? d->ta != CUBLAS_OP_N : d->tb != CUBLAS_OP_N;
    const float* X = on_a ? Ap : Bp;
    const long long ld = on_a ? Ad->ld : Bd->ld;
    for (int i = 0; i < bias_len; ++i) {
      double s = 0;
      for (int l = 0; l < k; ++l) {
        // op(A)(i, l) or op(B)(l, i), in the stored column-major matrix
        const long long r = on_a ? (t ? l : i) : (t ? i : l);
        const long long c = on_a ? (t ? i : l) : (t ? l : i);
        s += X[r + c * ld];
      }
      bias[i] = static_cast<float>(s);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace emu
}  // namespace cuda
}  // namespace remat

/// On a capturing stream: checked now and recorded with copies of the descriptors, the
/// algorithm and alpha, beta (cuBLASLt reads them when the call is made).
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                     const void* alpha, const void* A, cublasLtMatrixLayout_t Ad,
                                     const void* B, cublasLtMatrixLayout_t Bd, const void* beta,
                                     const void* C, cublasLtMatrixLayout_t Cd, void* D,
                                     cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t* algo,
                                     void* workspace, std::size_t workspace_bytes, cudaStream_t s) {
  using namespace remat::cuda::emu;
  if (!s || !s->capture)
    return lt_matmul(h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, workspace, workspace_bytes, true);
  const cublasStatus_t st =
      lt_matmul(h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, workspace, workspace_bytes, false);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  struct Call {
    cublasLtMatmulDescOpaque_t d;
    cublasLtMatrixLayoutOpaque_t Ad, Bd, Cd, Dd;
    cublasLtMatmulAlgo_t algo;
    float alpha, beta;
  };
  const auto c = std::make_shared<Call>(Call{*d, *Ad, *Bd, *Cd, *Dd, *algo,
                                             *static_cast<const float*>(alpha),
                                             *static_cast<const float*>(beta)});
  device().defer(s, [=] {
    if (lt_matmul(h, &c->d, &c->alpha, A, &c->Ad, B, &c->Bd, &c->beta, C, &c->Cd, D, &c->Dd,
                  &c->algo, workspace, workspace_bytes, true) != CUBLAS_STATUS_SUCCESS)
      node_failed("cuBLASLt matmul");
  });
  return CUBLAS_STATUS_SUCCESS;
}
