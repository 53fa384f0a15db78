// SPDX-License-Identifier: MIT
// gpt_step_cuda: gpt_step on the CUDA backend (same flags, same JSON; --threads is ignored).
// Peak bytes are the ledger's exact live bytes (comparable to torch.cuda.max_memory_allocated);
// reserved bytes are what the caching allocator holds from cudaMalloc.
//
//   build/benchmarks/gpt_step_cuda --layers 12 --d 768 --heads 12 --seq 1024 --batch 8
//                                  --vocab 50257 --checkpoint none,block,selective
//
// The forward and backward of each strategy are captured once as a CUDA graph and replayed
// (graph.cuh; --no-graph sends every launch from the host, as --profile does); the optimizer's
// update runs after each replay. Each line also gives launches_per_step (what the host sends
// in one measured step: kernels, cuBLAS calls and device copies, a graph's replay counted as
// one), gemms_per_step and host_waits_per_step. Built
// against the CUDA emulation it is gpt_step_emulated: the same program on the CPU, which times
// nothing of a GPU but counts the same launches (--launch-table lists them per kernel).
// --profile times every kernel and cuBLAS call with CUDA events (profile.cuh) and prints the
// table by kernel and by kind (achieved TFLOP/s and GB/s against the estimator's counts).

#include <remat/cuda.hpp>
#include <remat/nn/gpt.hpp>
#include <remat/optim/adamw.hpp>
#include <remat/optim/sgd.hpp>

#include "gpt_step.hpp"

template <> void set_threads<Cuda>(int) {}
template <> std::string backend_json<Cuda>() {
  return "\"reserved_bytes\":" + std::to_string(Cuda::reserved_bytes()) +
         ",\"peak_reserved_bytes\":" + std::to_string(Cuda::peak_reserved_bytes());
}

template <> DeviceWork device_work<Cuda>() {
  const cuda::DeviceCounts c = cuda::device_counters().now();
  DeviceWork w{c.launches + c.gemms, c.gemms, c.host_waits, {}};
#if defined(REMAT_CUDA_EMULATION)
  w.by_kernel = cuda::emu::device().launches_by_kernel();  // kernels by name (cuBLAS apart)
#endif
  return w;
}

template <> void profile_begin<Cuda>() {
  cuda::Profiler::get().clear();
  cuda::Profiler::get().set_enabled(true);
}
template <> std::vector<KernelTime> profile_end<Cuda>() {
  cuda::Profiler::get().set_enabled(false);
  std::vector<KernelTime> out;
  for (const cuda::ProfileEntry& e : cuda::Profiler::get().collect()) out.push_back({e.name, e.calls, e.seconds});
  return out;
}

namespace {
struct CudaStepGraph final : StepGraph {
  cuda::Graph g;
  void capture(const std::function<void()>& fn) override { g.capture(fn); }
  void replay() override { g.replay(); }
};
}  // namespace
template <> std::unique_ptr<StepGraph> make_step_graph<Cuda>() { return std::make_unique<CudaStepGraph>(); }

int main(int argc, char** argv) {
  if (!cuda::device_available()) {
    std::fprintf(stderr, "gpt_step_cuda: no CUDA device\n");
    return 77;
  }
  return gpt_step_main<Cuda>(argc, argv);
}
