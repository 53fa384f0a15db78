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
template <> std::string backend_json<Cpu>() {
  return "\"cpu_cache_bytes\":" + std::to_string(Cpu::cached_bytes());
}

int main(int argc, char** argv) { return gpt_step_main<Cpu>(argc, argv); }
