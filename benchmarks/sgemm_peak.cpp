// SPDX-License-Identifier: MIT
// sgemm_peak: the GFLOP/s that this machine's fp32 GEMM reaches through remat's CPU GEMM
// (OpenBLAS where it is linked), at large square sizes and at GPT-2 124M's step shapes, so a
// step's achieved GFLOP/s can be read against the core's real peak (benchmarks/compare_torch.py
// prints both). Pin it as the step is pinned: `taskset -c 0 build/benchmarks/sgemm_peak --threads 1`.
// Prints one JSON line: the best of --repeats runs per shape, in GFLOP/s. With --bf16, each GPT
// shape also through the bf16 product (GemmKernel: bf16 A and B widened tile by tile for the
// same sgemm, NOTE [bf16 GEMM tiles]; bf16 C, or fp32 C for the weight gradient), and the ratio
// of its time to fp32's.

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <remat/remat.hpp>

#include "harness.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fp32 GEMM GFLOP/s through remat's CPU GEMM"};
  int threads = 1, repeats = 5;
  bool bf16 = false;
  app.add_option("--threads", threads, "threads (OpenBLAS, OpenMP)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "runs per shape; the best counts")->check(CLI::PositiveNumber);
  app.add_flag("--bf16", bf16, "also the GPT shapes with bf16 operands (GemmKernel)");
  CLI11_PARSE(app, argc, argv);
  remat::set_num_threads(threads);
  struct Shape {
    const char* name;
    std::int64_t m, n, k;
    bool ta, tb;
  };
  // 2048^3 and 4096x4096x1024: square enough for the kernel's peak; the rest are a GPT-2 124M
  // step's products at T1024 B1 (qkv, MLP up, MLP down's weight gradient, the LM head).
  const std::vector<Shape> shapes = {{"square_2048", 2048, 2048, 2048, false, false},
                                     {"square_4096x1024", 4096, 4096, 1024, false, false},
                                     {"qkv_1024x2304x768", 1024, 2304, 768, false, false},
                                     {"mlp_1024x3072x768", 1024, 3072, 768, false, false},
                                     {"dw_768x3072x1024", 768, 3072, 1024, true, false},
                                     {"head_1024x50257x768", 1024, 50257, 768, false, true}};
  std::string out = "{\"threads\":" + std::to_string(threads);
  double best_square = 0.0;
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k), 0.5f);
    std::vector<float> b(static_cast<std::size_t>(s.k * s.n), 0.25f);
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n), 0.0f);
    const std::int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    double best = 0.0;
    for (int r = 0; r < repeats + 1; ++r) {  // the first run warms the caches and the threads
      const double t0 = remat_bench::now_s();
      remat::cpu::CpuGemm::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb,
                                0.0f, c.data(), s.n);
      const double dt = remat_bench::now_s() - t0;
      if (r > 0) best = std::max(best, 2.0 * s.m * s.n * s.k / dt / 1e9);
    }
    const bool square = std::string(s.name).rfind("square", 0) == 0;
    if (square) best_square = std::max(best_square, best);
    out += std::string(",\"") + s.name + "_gflops\":" + std::to_string(best);
    if (!bf16 || square) continue;
    const std::vector<remat::bf16> ab(a.size(), remat::math::to_bf16(0.5f)), bb(b.size(), remat::math::to_bf16(0.25f));
    std::vector<remat::bf16> cb(c.size());
    const bool fp32_out = s.ta;  // a weight gradient: fp32 C
    double best16 = 0.0;
    for (int r = 0; r < repeats + 1; ++r) {
      const double t0 = remat_bench::now_s();
      remat::run_kernel<remat::Cpu>(remat::GemmKernel{
          fp32_out ? static_cast<void*>(c.data()) : static_cast<void*>(cb.data()),
          fp32_out ? remat::DType::f32 : remat::DType::bf16, s.n, 0, ab.data(), lda, 0, bb.data(),
          ldb, 0, remat::DType::bf16, nullptr, nullptr, s.ta, s.tb, false, s.m, s.n, s.k, 1});
      const double dt = remat_bench::now_s() - t0;
      if (r > 0) best16 = std::max(best16, 2.0 * s.m * s.n * s.k / dt / 1e9);
    }
    out += std::string(",\"") + s.name + "_bf16_gflops\":" + std::to_string(best16) + ",\"" +
           s.name + "_bf16_time_ratio\":" + std::to_string(best / best16);
  }
  out += ",\"peak_gflops\":" + std::to_string(best_square) + ",\"libs\":" +
         remat_bench::loaded_libs_json() + "}";
  std::puts(out.c_str());
  return 0;
}
