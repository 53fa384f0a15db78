#pragma once
// SPDX-License-Identifier: MIT
// cuBLASLt GEMM plans, one per shape: the operation and layout descriptors and the algorithm
// cuBLASLt's heuristic picked, made at the first GEMM of that shape and kept for the process
// (the Context owns them). A shape cuBLASLt has no algorithm for is kept too, marked so, and
// the caller falls back to cuBLAS plus our kernels (asked once, not at every call).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "remat/backend/cuda/error.cuh"

namespace remat {
namespace cuda {

/// What a plan is for: column-major D (m, n) = op(A) op(B) + beta D with an epilogue.
struct LtKey {
  bool ta = false, tb = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool tf32 = true;
  std::size_t workspace = 0;  // the most the algorithm may use
  std::uint32_t align = 256;  // bytes every matrix pointer is aligned to (what it may assume)
  std::int64_t aux_ld = 0;    // the GELU input matrix's leading dimension (GELU epilogues)
  auto tie() const {
    return std::tie(ta, tb, m, n, k, lda, ldb, ldd, epilogue, tf32, workspace, align, aux_ld);
  }
  bool operator==(const LtKey& o) const { return tie() == o.tie(); }
};

struct LtPlan {
  LtKey key;
  bool found = false;  // false: cuBLASLt has no algorithm for this shape and epilogue
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

class LtPlans {
 public:
  /// The plan for `key`, made (descriptors, one heuristic query) on first use.
  LtPlan& get(cublasLtHandle_t h, const LtKey& key) {
    for (auto& p : plans_)
      if (p->key == key) return *p;
    auto p = std::make_unique<LtPlan>();
    p->key = key;
    const cublasComputeType_t compute = key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    REMAT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
    const std::int32_t ta = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const std::uint32_t ep = key.epilogue;
    REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    if (key.aux_ld > 0) {
      // The heuristic reads the aux pointer's value for its alignment only: give it an address
      // exactly as aligned as the key promises (the real one is set at each call).
      void* aligned = reinterpret_cast<void*>(static_cast<std::uintptr_t>(key.align));
      REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                        &key.aux_ld, sizeof key.aux_ld));
      REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                        &aligned, sizeof aligned));
    }
    // stored shapes: op(A) is (m, k), op(B) is (k, n)
    REMAT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, key.ta ? key.k : key.m,
                                                  key.ta ? key.m : key.k, key.lda));
    REMAT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, key.tb ? key.n : key.k,
                                                  key.tb ? key.k : key.n, key.ldb));
    REMAT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, key.m, key.n, key.ldd));
    cublasLtMatmulPreference_t pref = nullptr;
    REMAT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = key.workspace;
    cublasLtMatmulHeuristicResult_t r{};
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, a, &key.align, sizeof key.align);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->a, p->b, p->d, p->d, pref, 1, &r, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    // no algorithm (NOT_SUPPORTED, or none returned): the caller falls back; anything else throws
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      REMAT_CUBLAS_CHECK(st);
    p->found = st == CUBLAS_STATUS_SUCCESS && returned > 0 && r.workspaceSize <= key.workspace;
    p->algo = r.algo;
    plans_.push_back(std::move(p));
    return *plans_.back();
  }
  std::size_t size() const noexcept { return plans_.size(); }
  void clear() noexcept { plans_.clear(); }

 private:
  std::vector<std::unique_ptr<LtPlan>> plans_;
};

}  // namespace cuda
}  // namespace remat
