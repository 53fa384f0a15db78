// SPDX-License-Identifier: MIT
// The estimator's count of what a step asks of the device (core/work.hpp, counted by Meta)
// against closed forms of a GPT step, and the roofline prediction (plan/roofline.hpp) against
// hand arithmetic. FLOPs: the Linear layers' and the tied head's products, 2 rows x in x out
// each, once forward and twice backward (dx, dW); attention's T x T x D products over the
// causal pairs, 2 forward and 7 backward (dq's kernel recomputes S and dP, dk/dv's S and dP).

#include <cmath>
#include <cstdint>

#include <remat/backend/cuda/model.hpp>
#include <remat/nn/gpt_estimate.hpp>
#include <remat/plan/roofline.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {

nn::GPTConfig work_config(const char* strategy) {
  nn::GPTConfig c;
  c.vocab_size = 500;
  c.block_size = 64;
  c.n_layer = 3;
  c.n_embd = 64;
  c.n_head = 2;
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  return c;
}

}  // namespace

TEST_CASE("estimator work: GEMM and attention FLOPs of a GPT step match closed forms", "[plan][work]") {
  const std::int64_t B = 2, T = 64;
  const nn::GPTConfig c = work_config("none");
  const double BT = double(B) * T, C = double(c.n_embd), V = double(c.vocab_size), L = double(c.n_layer);
  const double D = C / c.n_head, pairs = 0.5 * T * (T + 1.0);
  // per block: c_attn C x 3C, attn.c_proj C x C, c_fc C x 4C, mlp.c_proj 4C x C = 12 C^2 weights
  const double block_gemm = 2 * BT * 12 * C * C;
  const double gemm = 3 * (L * block_gemm + 2 * BT * C * V);
  const double attention = L * 9 * 2 * B * c.n_head * pairs * D;
  for (const bool gpu : {false, true}) {
    const StepEstimate e = gpu ? estimate_gpt_step<CudaModel>(c, B, T) : estimate_gpt_step<Cpu>(c, B, T);
    INFO((gpu ? "CudaModel" : "Cpu"));
    CHECK(e.work.flops[static_cast<int>(WorkKind::gemm)] == gemm);
    CHECK(e.work.flops[static_cast<int>(WorkKind::attention)] == attention);
    // AdamW reads p, g, m, v and writes p, m, v: 28 bytes a parameter, at least
    const double params = L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C;
    CHECK(e.work.bytes[static_cast<int>(WorkKind::optimizer)] >= 28 * params);
    CHECK(e.work.bytes[static_cast<int>(WorkKind::loss)] == 4 * (3 * BT * V + 4 * BT));
    CHECK(e.work.total_bytes() > 0);
  }
  // Checkpointing each block adds whole recomputed block forwards, nothing else of the GEMMs.
  const StepEstimate none = estimate_gpt_step<CudaModel>(c, B, T);
  const StepEstimate block = estimate_gpt_step<CudaModel>(work_config("block"), B, T);
  const double extra = block.work.flops[0] - none.work.flops[0];
  const double blocks = extra / block_gemm;
  INFO("recomputed blocks " << blocks);
  CHECK(blocks == std::floor(blocks));
  CHECK(blocks >= 1);
  CHECK(blocks <= L);
  CHECK(block.work.flops[static_cast<int>(WorkKind::attention)] ==
        attention + blocks * 2 * 2 * B * c.n_head * pairs * D);
}

TEST_CASE("roofline: each kind takes the longer of arithmetic and traffic, plus the launches", "[plan][work]") {
  DeviceRoofline d;
  d.tensor_flops = 100e12;
  d.simt_flops = 10e12;
  d.bytes_per_s = 1e12;
  d.launch_s = 5e-6;
  d.gemm_eff = 0.5;
  d.attention_eff = 0.25;
  d.memory_eff = 0.5;
  Work w;
  w.add(WorkKind::gemm, 1e12, 1e9);       // 1e12 / 50e12 = 20 ms; 1e9 / 0.5e12 = 2 ms
  w.add(WorkKind::attention, 1e11, 1e8);  // tensor: 1e11 / 25e12 = 4 ms; CUDA cores: 10 ms
  w.add(WorkKind::pointwise, 1e9, 4e9);   // 0.1 ms of arithmetic; 8 ms of traffic
  const StepPrediction p = predict_step(w, 100, d);
  CHECK(p.seconds[static_cast<int>(WorkKind::gemm)] == Approx(0.020));
  CHECK_FALSE(p.memory_bound[static_cast<int>(WorkKind::gemm)]);
  CHECK(p.seconds[static_cast<int>(WorkKind::attention)] == Approx(0.004));
  CHECK(p.seconds[static_cast<int>(WorkKind::pointwise)] == Approx(0.008));
  CHECK(p.memory_bound[static_cast<int>(WorkKind::pointwise)]);
  CHECK(p.launch_s == Approx(5e-4));
  CHECK(p.total_s == Approx(0.020 + 0.004 + 0.008 + 5e-4));
  CHECK(p.roofline_s == Approx(0.010 + 0.001 + 0.004));
  const StepPrediction simt = predict_step(w, 100, d, /*attention_on_tensor_cores=*/false);
  CHECK(simt.seconds[static_cast<int>(WorkKind::attention)] == Approx(0.010));
}
