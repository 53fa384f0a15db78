// SPDX-License-Identifier: MIT
// The CPU GEMM's row panels (NOTE [GEMM row panels] in backend/cpu/gemm.hpp): a product taller
// than kPanelRows gives the same numbers as one sgemm call, matches a float64 reference in every
// transpose case with strides and beta, and does not grow the process by OpenBLAS's packing
// buffer in proportion to its height.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using remat::cpu::CpuGemm;

namespace {
// The process's resident bytes (VmRSS).
std::int64_t resident_now() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}
}  // namespace

TEST_CASE("GEMM row panels: same bits as one call, float64 reference, every transpose",
          "[cpu][gemm]") {
  const std::int64_t M = 2 * CpuGemm::kPanelRows + 37, N = 5, K = 9, ldc = N + 3;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta, tb);
      const std::int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1;
      std::vector<float> a(static_cast<std::size_t>((ta ? K : M) * lda)),
          b(static_cast<std::size_t>((tb ? N : K) * ldb)), c0(static_cast<std::size_t>(M * ldc));
      for (float& x : a) x = u(rng);
      for (float& x : b) x = u(rng);
      for (float& x : c0) x = u(rng);
      std::vector<float> paneled = c0, whole = c0;
      CpuGemm::gemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, paneled.data(), ldc);
      CpuGemm::panel(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, whole.data(), ldc);
      CHECK(std::memcmp(paneled.data(), whole.data(), paneled.size() * sizeof(float)) == 0);
      double worst = 0;
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < ldc; ++j) {
          const std::size_t at = static_cast<std::size_t>(i * ldc + j);
          if (j >= N) {  // C's padding is never written
            REQUIRE(paneled[at] == c0[at]);
            continue;
          }
          double ref = 2.0 * c0[at];
          for (std::int64_t k = 0; k < K; ++k) {
            const float x = ta ? a[static_cast<std::size_t>(k * lda + i)]
                               : a[static_cast<std::size_t>(i * lda + k)];
            const float y = tb ? b[static_cast<std::size_t>(j * ldb + k)]
                               : b[static_cast<std::size_t>(k * ldb + j)];
            ref += 0.5 * double(x) * double(y);
          }
          worst = std::max(worst, std::abs(ref - paneled[at]));
        }
      CHECK(worst < 1e-5);
    }
}

TEST_CASE("GEMM row panels: a vocabulary-tall product does not grow the process by its height",
          "[cpu][gemm]") {
  // An lm head's weight gradient: dW (V, d) = dlogits^T (V, T) x (T, d) at GPT-2's width. One
  // sgemm call grew the process by about 1 KiB per row of C (20 MiB here, 49 MiB at V = 50257;
  // NOTE [GEMM row panels]); in panels it is bounded by kPanelRows KiB.
  const std::int64_t V = 20000, T = 256, d = 768;
  std::vector<float> dlogits(static_cast<std::size_t>(T * V), 0.25f),
      x(static_cast<std::size_t>(T * d), 0.5f), dW(static_cast<std::size_t>(V * d), 1.0f);
  const std::int64_t before = resident_now();
  REQUIRE(before > 0);
  CpuGemm::gemm(true, false, V, d, T, 1.0f, dlogits.data(), V, x.data(), d, 0.0f, dW.data(), d);
  const std::int64_t grown = resident_now() - before;
  CHECK(dW[0] == 0.25f * 0.5f * T);
  CHECK(dW.back() == 0.25f * 0.5f * T);
  CHECK(grown < 8 * (std::int64_t{1} << 20));
}
