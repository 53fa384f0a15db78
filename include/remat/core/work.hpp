#pragma once
// SPDX-License-Identifier: MIT
// What a step asks of a device, by kind of kernel, as the estimator counts it from shapes
// (backend/meta.hpp): arithmetic in FLOPs (a multiply-add is 2) and compulsory memory traffic
// in bytes (what each kernel must read and write at least once; re-reads that caches serve,
// such as attention's K/V tiles, are not counted). plan/roofline.hpp turns it into a predicted
// time on a given device.

namespace remat {

enum class WorkKind : int {
  gemm,       // cuBLAS/cuBLASLt products (Linear, matmul, the materialized attention's)
  attention,  // the fused attention kernels
  norm,       // layer norm, softmax
  pointwise,  // elementwise, copies, fills, reductions over an axis, dropout
  loss,       // cross-entropy
  embedding,  // embedding lookup and its scatter
  optimizer,  // AdamW/SGD updates, the clipping norm and scale
};
inline constexpr int kWorkKinds = 7;
inline const char* work_kind_name(WorkKind k) {
  switch (k) {
    case WorkKind::gemm: return "gemm";
    case WorkKind::attention: return "attention";
    case WorkKind::norm: return "norm";
    case WorkKind::pointwise: return "pointwise";
    case WorkKind::loss: return "loss";
    case WorkKind::embedding: return "embedding";
    case WorkKind::optimizer: return "optimizer";
  }
  return "?";
}

struct Work {
  double flops[kWorkKinds] = {};
  double bytes[kWorkKinds] = {};

  void add(WorkKind k, double f, double b) {
    const int i = static_cast<int>(k);
    flops[i] += f;
    bytes[i] += b;
  }
  double total_flops() const {
    double s = 0;
    for (double f : flops) s += f;
    return s;
  }
  double total_bytes() const {
    double s = 0;
    for (double b : bytes) s += b;
    return s;
  }
};

}  // namespace remat
