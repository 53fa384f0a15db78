// SPDX-License-Identifier: MIT
// attention_cuda: remat's attention alone on the CUDA backend, forward and backward (the op
// through the tape, loss = sum of the output), against PyTorch's in torch_attention.py: the
// issue 12 target is PyTorch eager's time at T 1024 and 4096. One JSON line per sequence length:
// the median step time over --steps after --warmup, the ledger's peak above the inputs, and
// the caching allocator's reserved bytes.
//
//   build/benchmarks/attention_cuda --batch 8 --heads 12 --seq 1024,4096 --d 64
//   REMAT_CUDA_ATTENTION=materialized build/benchmarks/attention_cuda ...   (P kept, cuBLAS)
//
// --tf32 on,off (the default) runs each length twice: with TF32 on, head sizes 64 and 128 take
// the tensor-core kernels (path "fused-tensor-cores", flash_mma.cuh), with it off the exact
// fp32 kernels on the CUDA cores ("fused-cuda-cores", flash.cuh).
//
// Compiled as host C++ against the CUDA emulation it is attention_cuda_emulated, which ctest
// runs at a tiny size (the benchmark's own logic; the emulation times nothing of a GPU).

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <remat/core/memory.hpp>
#include <remat/core/rng.hpp>
#include <remat/core/tape.hpp>
#include <remat/cuda.hpp>
#include <remat/ops/attention.hpp>
#include <remat/ops/reduce.hpp>

#include "harness.hpp"

using namespace remat;

int main(int argc, char** argv) {
  CLI::App app{"Time remat's attention (forward + backward) on the CUDA backend"};
  int batch = 8, heads = 12, d = 64, steps = 10, warmup = 3;
  std::string seqs = "1024,4096";
  bool full = false;
  std::string tf32 = "on,off";
  app.add_option("--batch", batch, "batch")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "heads")->check(CLI::PositiveNumber);
  app.add_option("--d", d, "head size")->check(CLI::PositiveNumber);
  app.add_option("--seq", seqs, "sequence lengths, a comma list");
  app.add_option("--steps", steps, "measured steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unmeasured steps first")->check(CLI::NonNegativeNumber);
  app.add_flag("--full", full, "no causal mask");
  app.add_option("--tf32", tf32, "on, off or both (a comma list): TF32 (tensor cores) or exact fp32");
  CLI11_PARSE(app, argc, argv);
  if (!cuda::device_available()) {
    std::fprintf(stderr, "attention_cuda: no CUDA device\n");
    return 77;
  }
  try {
    std::vector<bool> modes;
    std::stringstream tl(tf32);
    for (std::string m; std::getline(tl, m, ',');) {
      REMAT_CHECK(m == "on" || m == "off", "attention_cuda: --tf32 ", m, " (expected on, off or on,off)");
      modes.push_back(m == "on");
    }
    std::vector<std::int64_t> lengths;
    std::stringstream list(seqs);
    for (std::string item; std::getline(list, item, ',');) {
      lengths.push_back(std::stoll(item));
      REMAT_CHECK(lengths.back() > 0, "attention_cuda: --seq ", item, " (expected positive lengths)");
    }
    for (std::size_t run = 0; run < lengths.size() * modes.size(); ++run) {  // each length, each mode
      const std::int64_t T = lengths[run / modes.size()];
      cuda::Context::get().set_tf32(modes[run % modes.size()]);
      const char* path = !Cuda::flash(d) ? "materialized"
                         : cuda::Context::get().mma_attention() && (d == 64 || d == 128)
                             ? "fused-tensor-cores"
                             : "fused-cuda-cores";
      Tape<Cuda> tape(1);
      const Shape shape{batch, heads, T, d};
      const std::size_t n = static_cast<std::size_t>(shape.numel());
      std::vector<float> h(n);
      auto leaf = [&](std::uint64_t stream) {
        for (std::size_t i = 0; i < n; ++i) h[i] = 0.5f * rng::normal(stream, 0, i);
        return tape.parameter(shape, h);
      };
      const auto q = leaf(1), k = leaf(2), v = leaf(3);
      std::vector<double> times;
      std::int64_t peak = 0;
      for (int s = 0; s < warmup + steps; ++s) {
        Cuda::synchronize();
        reset_peak_memory<Cuda>();
        const std::int64_t live0 = memory_stats<Cuda>().live_total;
        const double t0 = remat_bench::now_s();
        tape.backward(sum(attention(q, k, v, !full)));
        Cuda::synchronize();  // a step ends when its kernels do
        const double dt = remat_bench::now_s() - t0;
        for (const auto* t : {&q, &k, &v}) t->clear_grad();
        if (s < warmup) continue;
        times.push_back(dt);
        peak = std::max(peak, memory_stats<Cuda>().peak_total - live0);
      }
      const auto t = remat_bench::summarize(times);
      std::printf("{\"impl\":\"remat\",\"path\":\"%s\",\"batch\":%d,\"heads\":%d,\"seq\":%lld,"
                  "\"d\":%d,\"causal\":%s,\"steps\":%d,\"fwd_bwd_s\":%.6f,\"fwd_bwd_s_min\":%.6f,"
                  "\"peak_bytes\":%lld,\"reserved_bytes\":%lld,\"device\":\"%s\"}\n",
                  path, batch, heads,
                  static_cast<long long>(T), d, full ? "false" : "true", steps, t.median, t.min,
                  static_cast<long long>(peak), static_cast<long long>(Cuda::peak_reserved_bytes()),
                  Cuda::describe().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
