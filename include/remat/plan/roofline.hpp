#pragma once
// SPDX-License-Identifier: MIT
// A step's predicted time on a GPU from the estimator's work counts (core/work.hpp): each
// kind of kernel takes the longer of its arithmetic at the roof it runs on and its compulsory
// traffic at the memory's bandwidth, each scaled by the fraction of that roof such kernels
// reach; every launch adds a fixed cost (its ramp-up and tail on the device, and the host's
// issue when kernels are short). A model, not a measurement: it says what a change should buy
// before a GPU is lent; the per-kernel profile on the GPU checks it.

#include <algorithm>
#include <cstdint>
#include <string>

#include "remat/core/work.hpp"

namespace remat {

struct DeviceRoofline {
  std::string name;
  double tensor_flops = 0;  // dense TF32 tensor-core FLOP/s (GEMMs; attention on mma.sync)
  double simt_flops = 0;    // fp32 FLOP/s on the CUDA cores
  double bytes_per_s = 0;   // DRAM bandwidth
  double launch_s = 0;      // per launch
  // the fraction of each roof that kernels of a kind reach (assumptions, stated with the model)
  double gemm_eff = 1, attention_eff = 1, memory_eff = 1;

  /// NVIDIA H200 SXM: HBM3e 4.8 TB/s; the H100's arithmetic (TF32 tensor cores about 495
  /// TFLOP/s dense, fp32 about 67 TFLOP/s; the vendor's datasheet). Efficiencies: cuBLAS TF32
  /// GEMMs at 60% (what the H200 run of 2026-11-30 implies: block - selective = the recomputed
  /// forward GEMMs at about 290 TFLOP/s), tensor-core attention at 25% (FlashAttention-2 reaches
  /// about 23% of the fp16 roof on an H100 for causal T 1k, D 64; remat's kernel is simpler),
  /// streaming kernels at 80% of the bandwidth; 4 us a launch (no CUDA graph).
  static DeviceRoofline h200() {
    DeviceRoofline d;
    d.name = "H200 SXM (model)";
    d.tensor_flops = 495e12;
    d.simt_flops = 67e12;
    d.bytes_per_s = 4.8e12;
    d.launch_s = 4e-6;
    d.gemm_eff = 0.60;
    d.attention_eff = 0.25;
    d.memory_eff = 0.80;
    return d;
  }
};

struct StepPrediction {
  double seconds[kWorkKinds] = {};  // per kind: max(arithmetic, traffic)
  bool memory_bound[kWorkKinds] = {};
  double launch_s = 0;  // launches x launch_s
  double total_s = 0;
  double roofline_s = 0;  // the same at 100% of every roof and no launch cost: the floor
};

/// The predicted step time of `w` with `launches` kernel launches (and cuBLAS calls) on `d`.
/// Attention's arithmetic runs on the tensor cores when `attention_on_tensor_cores`, else on
/// the CUDA cores (fp32, at the CUDA cores' roof).
inline StepPrediction predict_step(const Work& w, std::int64_t launches, const DeviceRoofline& d,
                                   bool attention_on_tensor_cores = true) {
  StepPrediction p;
  for (int i = 0; i < kWorkKinds; ++i) {
    const auto k = static_cast<WorkKind>(i);
    double roof = d.simt_flops, eff = 1.0;
    if (k == WorkKind::gemm) {
      roof = d.tensor_flops;
      eff = d.gemm_eff;
    } else if (k == WorkKind::attention && attention_on_tensor_cores) {
      roof = d.tensor_flops;
      eff = d.attention_eff;
    }
    const double arithmetic = w.flops[i] / (roof * eff);
    const double traffic = w.bytes[i] / (d.bytes_per_s * d.memory_eff);
    p.seconds[i] = std::max(arithmetic, traffic);
    p.memory_bound[i] = traffic >= arithmetic;
    p.total_s += p.seconds[i];
    p.roofline_s += std::max(w.flops[i] / roof, w.bytes[i] / d.bytes_per_s);
  }
  p.launch_s = static_cast<double>(launches) * d.launch_s;
  p.total_s += p.launch_s;
  return p;
}

}  // namespace remat
