// SPDX-License-Identifier: MIT
// gpt_step: times GPT training steps (forward, backward, optimizer) and reports the allocator's
// exact memory. Prints one JSON line per checkpoint strategy (rss_* fields are the whole
// process's). Compare with PyTorch: benchmarks/compare_torch.py. The body: gpt_step.hpp.
//
//   build/benchmarks/gpt_step --layers 8 --d 256 --heads 4 --seq 256 --batch 4 --vocab 256
//                             --steps 10 --warmup 3 --threads 1

#include <remat/remat.hpp>

#include "gpt_step.hpp"

template <> void set_threads<Cpu>(int threads) { set_num_threads(threads); }
template <> DeviceWork device_work<Cpu>() { return {}; }  // no device
template <> void profile_begin<Cpu>() {}
template <> std::vector<KernelTime> profile_end<Cpu>() { return {}; }
template <> std::unique_ptr<StepGraph> make_step_graph<Cpu>() { return nullptr; }  // no graphs
template <> std::string backend_json<Cpu>() {
  // The arena (NOTE [CPU arena allocator]): cached and touched bytes now, the process-wide peak
  // of touched bytes, and the bytes its cap gave back and faulted in again; the step plan's
  // block and the planned buffers' own peak (NOTE [Planned step layout]).
  auto& arena = cpu::CpuArena::instance();
  return "\"cpu_cache_bytes\":" + std::to_string(Cpu::cached_bytes()) +
         ",\"cpu_step_block_bytes\":" + std::to_string(arena.step_block_bytes()) +
         ",\"cpu_step_planned_peak_bytes\":" + std::to_string(arena.step_planned_peak()) +
         ",\"reserved_bytes\":" + std::to_string(Cpu::reserved_bytes()) +
         ",\"reserved_peak_bytes\":" + std::to_string(Cpu::peak_reserved_bytes()) +
         ",\"cpu_refaulted_bytes\":" + std::to_string(Cpu::refaulted_bytes());
}

int main(int argc, char** argv) { return gpt_step_main<Cpu>(argc, argv); }
