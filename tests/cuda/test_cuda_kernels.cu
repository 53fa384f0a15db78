// SPDX-License-Identifier: MIT
// The CUDA backend against host references: GEMM (every transpose, batched, shared C), the
// pointwise kernels (same formulas and dropout masks as the CPU), the caching allocator
// (no cudaMalloc on reuse, exact ledger), out-of-memory as a catchable error; then every op's
// forward and backward against the CPU backend (tests/cuda/op_cases.hpp, tolerance stated per
// op), and a GPT step: against the CPU, and with each checkpoint strategy against none. First,
// on a fresh allocator, the estimator: two GPT steps on the device keep exactly the ledger and
// reserve exactly the bytes that Meta<Cuda> and the host-only Meta<CudaModel> predict.
// Without a device it says so and exits 77, which ctest counts as skipped, never as passed.

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <remat/backend/cuda/model.hpp>
#include <remat/core/memory.hpp>
#include <remat/core/storage.hpp>
#include <remat/cuda.hpp>
#include <remat/nn/gpt_estimate.hpp>

#include "cuda/reference.hpp"

using namespace remat;

namespace {
int passed = 0, failed = 0;
void check(bool ok, const char* what, double detail = 0.0) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAILED: %s (%g)\n", what, detail);
  }
}

struct DeviceBuf {
  explicit DeviceBuf(const std::vector<float>& h) : n(h.size()) {
    p = static_cast<float*>(Cuda::allocate(n * 4));
    Cuda::copy_from_host(p, h.data(), n * 4);
  }
  ~DeviceBuf() { Cuda::deallocate(p, n * 4); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    Cuda::copy_to_host(h.data(), p, n * 4);
    return h;
  }
  std::size_t n;
  float* p;
};

std::vector<float> seq(std::size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * rng::normal(5, n, i) + shift;
  return v;
}
// max |a - b|; NaN anywhere (poisoned memory read in the emulation) is infinitely far
double maxdiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return HUGE_VAL;
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? HUGE_VAL : d;
  }
  return m;
}

void test_gemm() {
  cuda::Context::get().set_tf32(false);  // exact fp32 for the comparison
  const int M = 37, N = 29, K = 41, batch = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      auto a = seq(static_cast<std::size_t>(M * K * batch), 1, 0), b = seq(static_cast<std::size_t>(K * N * batch), 1, 0.5f);
      auto c = seq(static_cast<std::size_t>(M * N * batch), 1, 0);
      std::vector<float> ref = c;
      const int lda = ta ? M : K, ldb = tb ? K : N;
      for (int z = 0; z < batch; ++z)
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k)
              s += double(a[z * M * K + (ta ? k * lda + i : i * lda + k)]) * b[z * K * N + (tb ? j * ldb + k : k * ldb + j)];
            float& r = ref[static_cast<std::size_t>(z * M * N + i * N + j)];
            r = static_cast<float>(0.5 * s + 2.0 * r);
          }
      DeviceBuf da(a), db(b), dc(c);
      Cuda::gemm_batched(ta, tb, M, N, K, 0.5f, da.p, lda, M * K, db.p, ldb, K * N, 2.0f, dc.p, N, M * N, batch);
      check(maxdiff(dc.host(), ref) < 1e-3, "gemm_batched matches the host", maxdiff(dc.host(), ref));
    }
  // a shared C accumulates over the batch (the gradient of a weight shared by the batch)
  auto a = seq(2 * 4 * 3, 1, 0), b = seq(2 * 3 * 5, 1, 0);
  std::vector<float> ref(4 * 5, 0.0f);
  for (int z = 0; z < 2; ++z)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 3; ++k) ref[static_cast<std::size_t>(i * 5 + j)] += a[static_cast<std::size_t>(z * 12 + i * 3 + k)] * b[static_cast<std::size_t>(z * 15 + k * 5 + j)];
  DeviceBuf da(a), db(b), dc(std::vector<float>(20, 0.0f));
  Cuda::gemm_batched(false, false, 4, 5, 3, 1.0f, da.p, 3, 12, db.p, 5, 15, 1.0f, dc.p, 5, 0, 2);
  check(maxdiff(dc.host(), ref) < 1e-4, "gemm_batched with a shared C sums the batch", maxdiff(dc.host(), ref));
  cuda::Context::get().set_tf32(true);
}

// The dense layer's fused GEMMs (linear.cuh) against a host reference in double: y = x w + b
// in one cuBLAS call and no kernel; dw (written, then added into) and db from one call; x
// aligned and not. Under
// the emulation, cuBLASLt is also made to find no algorithm for an epilogue: the fallback
// (broadcast_rows + GEMM, GEMM + column sum) gives the same results and costs its launches.
void test_linear_epilogues() {
  cuda::Context::get().set_tf32(false);  // exact fp32 for the comparison
  const std::int64_t rows = 45, in = 19, out = 23;
  const auto x = seq(static_cast<std::size_t>(rows * in), 1, 0), w = seq(static_cast<std::size_t>(in * out), 1, 0);
  const auto b = seq(static_cast<std::size_t>(out), 1, 0.5f), dy = seq(static_cast<std::size_t>(rows * out), 1, 0.1f);
  const auto dw0 = seq(static_cast<std::size_t>(in * out), 1, 0);
  std::vector<float> y_ref(static_cast<std::size_t>(rows * out)), dw_ref(dw0.size()), db_ref(b.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = b[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i) s += double(x[static_cast<std::size_t>(r * in + i)]) * w[static_cast<std::size_t>(i * out + o)];
      y_ref[static_cast<std::size_t>(r * out + o)] = static_cast<float>(s);
    }
  for (std::int64_t o = 0; o < out; ++o) {
    double s = 0;
    for (std::int64_t r = 0; r < rows; ++r) s += dy[static_cast<std::size_t>(r * out + o)];
    db_ref[static_cast<std::size_t>(o)] = static_cast<float>(s);
    for (std::int64_t i = 0; i < in; ++i) {
      double t = 0;
      for (std::int64_t r = 0; r < rows; ++r) t += double(x[static_cast<std::size_t>(r * in + i)]) * dy[static_cast<std::size_t>(r * out + o)];
      dw_ref[static_cast<std::size_t>(i * out + o)] = static_cast<float>(t);
    }
  }
  // offset: x starts that many floats into its buffer (a view): cuBLASLt's plan may not assume
  // the 256-byte alignment it assumes by default
  auto run = [&](const char* how, std::int64_t want_launches, std::size_t offset = 0) {
    std::vector<float> xo(offset, 0.0f);
    xo.insert(xo.end(), x.begin(), x.end());
    DeviceBuf dxo(xo), dwt(w), dbias(b), ddy(dy), y(std::vector<float>(y_ref.size(), NAN));
    float* const xp = dxo.p + offset;
    DeviceBuf dw(std::vector<float>(dw0.size(), NAN)), db(std::vector<float>(b.size(), NAN));
    const auto c0 = cuda::device_counters().now();
    Cuda::linear_forward(y.p, xp, dwt.p, dbias.p, nullptr, rows, in, out);
    Cuda::linear_backward_weight(dw.p, db.p, xp, ddy.p, rows, in, out, 0.0f);
    const auto c1 = cuda::device_counters().now();
    // with a residual: y + r in the same GEMM (r its C operand), r left as it was
    DeviceBuf res(dy), yr(std::vector<float>(y_ref.size(), NAN));
    Cuda::linear_forward(yr.p, xp, dwt.p, dbias.p, res.p, rows, in, out);
    const auto c2 = cuda::device_counters().now();
    std::vector<float> yr_ref = y_ref;
    for (std::size_t i = 0; i < yr_ref.size(); ++i) yr_ref[i] += dy[i];
    const double er = maxdiff(yr.host(), yr_ref);
    check(er < 1e-4 && maxdiff(res.host(), dy) == 0.0, "linear_forward with a residual: y = r + x w + b", er);
    check(c2.gemms - c1.gemms == 1 && c2.launches - c1.launches == (want_launches > 0 ? 1 : 0),
          "linear with a residual: one GEMM, and a kernel only in the fallback",
          double(c2.launches - c1.launches));
    const double ey = maxdiff(y.host(), y_ref), ew = maxdiff(dw.host(), dw_ref), eb = maxdiff(db.host(), db_ref);
    std::printf("  linear (%s): y %.1e, dw %.1e, db %.1e; %lld GEMMs, %lld launches\n", how, ey, ew,
                eb, static_cast<long long>(c1.gemms - c0.gemms),
                static_cast<long long>(c1.launches - c0.launches));
    check(ey < 1e-4, "linear_forward: y = x w + b", ey);
    check(ew < 1e-4, "linear_backward_weight: dw = x^T dy, written over NaN", ew);
    check(eb < 1e-4, "linear_backward_weight: db = the column sums of dy, written over NaN", eb);
    check(c1.gemms - c0.gemms == 2 && c1.launches - c0.launches == want_launches,
          "linear: one GEMM each, and only the fallback launches kernels",
          double(c1.launches - c0.launches));
    // dw added into (beta 1): a second pass doubles it
    Cuda::copy_from_host(dw.p, dw0.data(), dw0.size() * 4);
    Cuda::linear_backward_weight(dw.p, db.p, xp, ddy.p, rows, in, out, 1.0f);
    std::vector<float> acc = dw_ref;
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += dw0[i];
    check(maxdiff(dw.host(), acc) < 1e-4, "linear_backward_weight with beta 1 adds into dw",
          maxdiff(dw.host(), acc));
  };
  run("cuBLASLt epilogues", 0);
  run("cuBLASLt epilogues, x 4 bytes past an alignment", 0, 1);
#if defined(REMAT_CUDA_EMULATION)
  auto& ctx = cuda::Context::get();
  ctx.lt_plans().clear();  // plans remember cuBLASLt's answer: ask again
  cuda::emu::device().faults().lt_no_epilogue = true;
  run("no epilogue algorithm: the fallback", 1 + 2);
  cuda::emu::device().faults().lt_no_epilogue = false;
  ctx.lt_plans().clear();
#endif
  cuda::Context::get().set_tf32(true);
}

// The MLP's GEMMs (linear.cuh): pre from one GEMM (epilogue BIAS) and act = GELU(pre) from
// remat's GELU kernel, bit for bit what that kernel gives on pre (a GELU rebuilt in backward
// must have the same bits; cuBLASLt's GELU epilogue, real or emulated, does not), dpre =
// (dy w2^T) GELU'(pre) and db1 from one GEMM (DGELU_BGRAD; DGELU without db1), against a host
// reference in double. A hidden width that is not a multiple of 8 (cuBLASLt's rule for the GELU
// matrix), and an emulated cuBLASLt without the epilogue, take the fallback: the same values
// from GEMMs and kernels.
void test_mlp_epilogues() {
  cuda::Context::get().set_tf32(false);
  const std::int64_t rows = 45, in = 19, out = 23;
  // fallback_forward: the forward's launches (the GELU; and the bias rows where cuBLASLt has no
  // BIAS epilogue either)
  auto run = [&](const char* how, std::int64_t hidden, bool fallback, std::int64_t fallback_forward = 1) {
    const auto x = seq(static_cast<std::size_t>(rows * in), 1, 0);
    const auto w1 = seq(static_cast<std::size_t>(in * hidden), 0.3f, 0);
    const auto b1 = seq(static_cast<std::size_t>(hidden), 1, 0.2f);
    const auto w2 = seq(static_cast<std::size_t>(hidden * out), 0.3f, 0);
    const auto dy = seq(static_cast<std::size_t>(rows * out), 1, 0.1f);
    const auto n = static_cast<std::size_t>(rows * hidden);
    std::vector<float> pre_ref(n), act_ref(n), dpre_ref(n), db_ref(static_cast<std::size_t>(hidden));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < hidden; ++h) {
        double s = b1[static_cast<std::size_t>(h)], g = 0;
        for (std::int64_t i = 0; i < in; ++i) s += double(x[static_cast<std::size_t>(r * in + i)]) * w1[static_cast<std::size_t>(i * hidden + h)];
        for (std::int64_t o = 0; o < out; ++o) g += double(dy[static_cast<std::size_t>(r * out + o)]) * w2[static_cast<std::size_t>(h * out + o)];
        const auto k = static_cast<std::size_t>(r * hidden + h);
        pre_ref[k] = static_cast<float>(s);
        act_ref[k] = math::gelu(pre_ref[k]);
        dpre_ref[k] = static_cast<float>(g * math::gelu_grad(pre_ref[k]));
      }
    for (std::int64_t h = 0; h < hidden; ++h) {
      double s = 0;
      for (std::int64_t r = 0; r < rows; ++r) s += dpre_ref[static_cast<std::size_t>(r * hidden + h)];
      db_ref[static_cast<std::size_t>(h)] = static_cast<float>(s);
    }
    const std::vector<float> poison(n, NAN);
    DeviceBuf dx(x), dw1(w1), db1(b1), dw2(w2), ddy(dy), pre(poison), act(poison), dpre(poison),
        db(std::vector<float>(db_ref.size(), NAN)), dpre2(poison);
    // the ledger holds each call's scratch once, the size the estimator mirrors (CudaSizes)
    const std::int64_t live0 = memory_stats<Cuda>().live_total;
    reset_peak_memory<Cuda>();
    const auto c0 = cuda::device_counters().now();
    Cuda::linear_gelu_forward(act.p, pre.p, dx.p, dw1.p, db1.p, rows, in, hidden);
    const std::int64_t fwd_scratch = memory_stats<Cuda>().peak_total - live0;
    reset_peak_memory<Cuda>();
    const auto c1 = cuda::device_counters().now();
    Cuda::linear_dgelu_backward(dpre.p, db.p, ddy.p, dw2.p, pre.p, rows, hidden, out);
    const std::int64_t bwd_scratch = memory_stats<Cuda>().peak_total - live0;
    const auto c2 = cuda::device_counters().now();
    check(fwd_scratch == static_cast<std::int64_t>(Cuda::linear_gelu_forward_scratch(rows, in, hidden)) &&
              bwd_scratch == static_cast<std::int64_t>(Cuda::linear_dgelu_backward_scratch(rows, hidden, out)),
          "mlp GEMMs: the scratch the ledger sees is CudaSizes' (fallback included)",
          double(fwd_scratch));
    Cuda::linear_dgelu_backward(dpre2.p, nullptr, ddy.p, dw2.p, pre.p, rows, hidden, out);
    const auto c3 = cuda::device_counters().now();
    const double ep = maxdiff(pre.host(), pre_ref), ea = maxdiff(act.host(), act_ref);
    const double ed = maxdiff(dpre.host(), dpre_ref), eb = maxdiff(db.host(), db_ref);
    const double ed2 = maxdiff(dpre2.host(), dpre_ref);
    std::printf("  mlp GEMMs (%s, hidden %lld): pre %.1e, act %.1e, dpre %.1e (%.1e without db), "
                "db %.1e; launches %lld + %lld + %lld\n", how, static_cast<long long>(hidden), ep,
                ea, ed, ed2, eb, static_cast<long long>(c1.launches - c0.launches),
                static_cast<long long>(c2.launches - c1.launches),
                static_cast<long long>(c3.launches - c2.launches));
    check(ep < 1e-4 && ea < 1e-4, "linear_gelu_forward: pre = x w1 + b1, act = GELU(pre)", std::max(ep, ea));
    // act must be what backward's rebuild gives (MlpOp::slim: Cuda::gelu_forward on pre), bit
    // for bit (the device's tanhf is not the host's: compare with the kernel, not math::gelu)
    DeviceBuf rebuilt(poison);
    Cuda::gelu_forward(rebuilt.p, pre.p, rows * hidden);
    const auto act_h = act.host(), rebuilt_h = rebuilt.host();
    std::size_t same = 0;
    for (std::size_t i = 0; i < n; ++i) same += act_h[i] == rebuilt_h[i];
    check(same == n, "linear_gelu_forward: act is the GELU kernel's on pre, bit for bit (a rebuilt act)",
          double(n - same));
    check(ed < 1e-4 && ed2 < 1e-4, "linear_dgelu_backward: dpre = (dy w2^T) GELU'(pre)", std::max(ed, ed2));
    check(eb < 1e-4, "linear_dgelu_backward: db = the column sums of dpre", eb);
    const bool gemms = c1.gemms - c0.gemms == 1 && c2.gemms - c1.gemms == 1 && c3.gemms - c2.gemms == 1;
    // backward's fallback: GELU backward and a column sum (2); GELU backward
    const bool launches = c1.launches - c0.launches == fallback_forward &&
                          (fallback ? c2.launches - c1.launches == 3 && c3.launches - c2.launches == 1
                                    : c3.launches == c1.launches);
    check(gemms && launches, "mlp GEMMs: one GEMM each, the GELU's kernel, backward's kernels only in the fallback",
          double(c3.launches - c0.launches));
  };
  run("cuBLASLt epilogues", 24, false);
  run("hidden not a multiple of 8: the fallback", 20, true);
#if defined(REMAT_CUDA_EMULATION)
  auto& ctx = cuda::Context::get();
  ctx.lt_plans().clear();
  cuda::emu::device().faults().lt_no_epilogue = true;
  run("no epilogue algorithm: the fallback", 24, true, 2);
  cuda::emu::device().faults().lt_no_epilogue = false;
  ctx.lt_plans().clear();
#endif
  cuda::Context::get().set_tf32(true);
}

void test_pointwise() {
  const std::size_t n = 1000;
  auto x = seq(n, 2, 0), dy = seq(n, 1, 0);
  DeviceBuf dx(x), ddy(dy), out(std::vector<float>(n, 0.0f)), grad(std::vector<float>(n, 0.0f));
  Cuda::gelu_forward(out.p, dx.p, static_cast<std::int64_t>(n));
  Cuda::gelu_backward(grad.p, dx.p, ddy.p, static_cast<std::int64_t>(n));
  const auto y = out.host(), g = grad.host();
  double e1 = 0, e2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e1 = std::max(e1, std::fabs(double(y[i]) - math::gelu(x[i])));
    e2 = std::max(e2, std::fabs(double(g[i]) - dy[i] * math::gelu_grad(x[i])));
  }
  check(e1 < 1e-5 && e2 < 1e-5, "gelu forward and backward follow core/math.hpp", std::max(e1, e2));
  // dropout: the mask of element i is the CPU's
  Cuda::dropout_forward(out.p, dx.p, static_cast<std::int64_t>(n), 0.3f, 42, 1000);
  const auto d = out.host();
  int mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float want = rng::uniform(42, 1000, i) >= 0.3f ? x[i] / 0.7f : 0.0f;
    mismatches += std::fabs(d[i] - want) > 1e-6f;
  }
  check(mismatches == 0, "dropout masks equal the CPU's", mismatches);
  // add_into (a leaf's gradient accumulation) and fill
  Cuda::add_into(grad.p, ddy.p, static_cast<std::int64_t>(n));
  const auto acc = grad.host();
  double e5 = 0;
  for (std::size_t i = 0; i < n; ++i) e5 = std::max(e5, std::fabs(double(acc[i]) - (double(g[i]) + dy[i])));
  Cuda::fill(grad.p, static_cast<std::int64_t>(n), 0.25f);
  const auto filled = grad.host();
  check(e5 < 1e-6 && maxdiff(filled, std::vector<float>(n, 0.25f)) == 0.0, "add_into and fill",
        std::max(e5, maxdiff(filled, std::vector<float>(n, 0.25f))));
  // binary with a broadcast bias: forward and the summed gradient
  const std::int64_t outer = 50, inner = 20;
  auto a = seq(static_cast<std::size_t>(outer * inner), 1, 0), bias = seq(static_cast<std::size_t>(inner), 1, 2), go = seq(static_cast<std::size_t>(outer * inner), 1, 0);
  DeviceBuf da(a), dbias(bias), dgo(go), dy2(std::vector<float>(a.size())), gb(std::vector<float>(bias.size(), 0.0f));
  Cuda::binary_forward(math::BinaryKind::mul, dy2.p, da.p, dbias.p, outer, inner, false, true);
  Cuda::binary_backward(math::BinaryKind::mul, nullptr, gb.p, dgo.p, da.p, dbias.p, outer, inner, false, true);
  const auto yh = dy2.host(), gbh = gb.host();
  double e3 = 0, e4 = 0;
  for (std::int64_t j = 0; j < inner; ++j) {
    double s = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      const auto i = static_cast<std::size_t>(o * inner + j);
      e3 = std::max(e3, std::fabs(double(yh[i]) - double(a[i]) * bias[static_cast<std::size_t>(j)]));
      s += double(go[i]) * a[i];
    }
    e4 = std::max(e4, std::fabs(s - gbh[static_cast<std::size_t>(j)]));
  }
  check(e3 < 1e-5 && e4 < 1e-3, "broadcast mul forward and summed gradient", std::max(e3, e4));
}

// Runs on a fresh allocator (before anything else): the real steps' ledger and reserved bytes
// against the estimate, to the byte.
void test_estimator() {
  for (const char* strategy : {"none", "block", "selective"}) {
    nn::GPTConfig c;
    c.n_layer = 4;
    c.n_embd = 128;
    c.n_head = 2;
    c.vocab_size = 1000;
    c.block_size = 128;
    c.dropout = 0.0f;
    c.checkpoint = nn::CheckpointStrategy::parse(strategy);
    std::int64_t B = 2, T = 128;
#if defined(REMAT_CUDA_EMULATION)
    // Emulated (the CPU runs every CUDA thread): 2 layers at T 64, a vocabulary of 4096 so the
    // logits (2 MiB) still take the allocator's mid-size segments; 40 s -> a few.
    c.n_layer = 2;
    c.vocab_size = 4096;
    T = 64;
#endif
    const StepEstimate est = estimate_gpt_step<Cuda>(c, B, T);
    const StepEstimate model = estimate_gpt_step<CudaModel>(c, B, T);
    Cuda::empty_cache();
    Cuda::reset_peak_reserved();
    const std::int64_t live0 = memory_stats<Cuda>().live_total;
    reset_peak_memory<Cuda>();
    std::int64_t peak_first = 0, peak_step = 0, reserved_first = 0, reserved_step = 0;
    {
      Tape<Cuda> tape(c.seed);
      nn::GPT<Cuda> model_(tape, c);
      optim::AdamW<Cuda> opt(model_.parameters(), {});
      const std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T), 0);
      for (int step = 0; step < 3; ++step) {  // (the third: the estimate's reserved bytes)
        const auto x = tape.tokens({B, T}, ids), y = tape.tokens({B, T}, ids);
        gpt_train_step(model_, opt, x, y);
        Cuda::synchronize();
        const auto r = static_cast<std::int64_t>(Cuda::peak_reserved_bytes());
        if (step == 0) {
          peak_first = memory_stats<Cuda>().peak_total - live0;
          reserved_first = r;
          reset_peak_memory<Cuda>();
        } else if (step == 1) {
          peak_step = memory_stats<Cuda>().peak_total - live0;
        } else {
          reserved_step = r;
        }
      }
    }
    std::printf("  estimator %-9s: ledger peak %lld (predicted %lld), reserved %lld (predicted %lld, "
                "host model %lld)\n", strategy, (long long)peak_step, (long long)est.step.peak_total,
                (long long)reserved_step, (long long)est.reserved_peak, (long long)model.reserved_peak);
    check(peak_first == est.first.peak_total, "first step's ledger peak = the estimate",
          double(peak_first - est.first.peak_total));
    check(peak_step == est.step.peak_total, "a step's ledger peak = the estimate",
          double(peak_step - est.step.peak_total));
    check(reserved_first == est.reserved_first, "reserved through the first step = the estimate",
          double(reserved_first - est.reserved_first));
    check(reserved_step == est.reserved_peak, "reserved through three steps = the estimate",
          double(reserved_step - est.reserved_peak));
    check(model.reserved_peak == est.reserved_peak && model.step.peak_total == est.step.peak_total,
          "the host-only CudaModel predicts what Meta<Cuda> does");
    Cuda::empty_cache();
  }
}

void test_allocator() {
  auto& alloc = cuda::CachingAllocator::get();
  const auto live0 = memory_stats<Cuda>().live_total;
  { Storage<Cuda> s(1 << 20, Category::temporaries); }
  const auto mallocs = alloc.cuda_mallocs();
  for (int i = 0; i < 10; ++i) {
    Storage<Cuda> s(1 << 20, Category::activations);  // same size: from the cache
    check(memory_stats<Cuda>().live_total == live0 + (1 << 20), "the ledger counts live bytes exactly");
  }
  check(alloc.cuda_mallocs() == mallocs, "reuse costs no cudaMalloc", double(alloc.cuda_mallocs() - mallocs));
  check(alloc.reserved_bytes() >= (1u << 20), "reserved bytes include the cached block");
  bool threw = false;
  try {
    Storage<Cuda> huge(std::size_t(1) << 50, Category::temporaries);  // a petabyte
  } catch (const OutOfMemory& e) {
    threw = std::string(e.what()).find("out of GPU memory") != std::string::npos;
  }
  check(threw, "out of memory throws remat::OutOfMemory");
  { Storage<Cuda> after(1 << 20, Category::temporaries); }  // and the process goes on
  check(memory_stats<Cuda>().live_total == live0, "nothing leaks");
}
// max |a - b| / max |b|: one number per tensor, stated with its limit
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double m = 1e-12;
  for (std::size_t i = 0; i < b.size(); ++i) m = std::max(m, std::fabs(double(b[i])));
  return maxdiff(a, b) / m;
}
double worst(const remat_cuda_test::Result& a, const remat_cuda_test::Result& b) {
  double e = rel(a.out, b.out);
  if (a.grads.size() != b.grads.size()) return 1e30;
  for (std::size_t i = 0; i < a.grads.size(); ++i) e = std::max(e, rel(a.grads[i], b.grads[i]));
  return e;
}

// Every float of x and y has the same bits.
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
}
bool same_bits(const remat_cuda_test::Result& a, const remat_cuda_test::Result& b) {
  if (!same_bits(a.out, b.out) || a.grads.size() != b.grads.size()) return false;
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    if (!same_bits(a.grads[i], b.grads[i])) return false;
  return true;
}

bool is_attention(const std::string& op) {
  return op.find("attention") != std::string::npos;
}
void test_ops_against_cpu() {
  cuda::Context::get().set_tf32(false);  // exact fp32 GEMMs: differences are summation order only
  int ledger_misses = 0;  // ops whose ledger Meta<Cuda> did not predict (scratch included)
  for (const auto& name : remat_cuda_test::op_names<Cuda>()) {
    const auto cpu = remat_cuda_test::cpu_op(name);
    // attention both ways: fused (head sizes up to 128) and materialized (P kept, as the CPU)
    for (const auto path : {cuda::AttentionPath::fused, cuda::AttentionPath::materialized}) {
      if (path == cuda::AttentionPath::materialized && !is_attention(name)) continue;
      Cuda::set_attention_path(path);
      // the ledger's peak and its number of allocations (a scratch freed before the peak
      // shows only there), against the shape-only twin's
      const auto before = memory_stats<Cuda>();
      reset_peak_memory<Cuda>();
      const auto dev = remat_cuda_test::run_op<Cuda>(name);
      const double e = worst(dev, cpu);
      const std::int64_t peak = memory_stats<Cuda>().peak_total - before.live_total;
      const std::int64_t allocs = memory_stats<Cuda>().alloc_count - before.alloc_count;
      const std::int64_t meta_allocs0 = memory_stats<Meta<Cuda>>().alloc_count;
      const std::int64_t predicted = estimate_memory<Cuda>([&](auto&) {
        (void)remat_cuda_test::run_op<Meta<Cuda>>(name);
      }).peak_total;
      const std::int64_t predicted_allocs = memory_stats<Meta<Cuda>>().alloc_count - meta_allocs0;
      if (peak != predicted || allocs != predicted_allocs) {
        std::printf("  op %s: ledger peak %lld in %lld allocations, Meta<Cuda> predicted %lld in %lld\n",
                    name.c_str(), static_cast<long long>(peak), static_cast<long long>(allocs),
                    static_cast<long long>(predicted), static_cast<long long>(predicted_allocs));
        ++ledger_misses;
      }
      // a bf16 case's outputs are rounded to bf16 (8 bits): one rounding that falls the other
      // way after another order of fp32 sums (or CUDA's fused attention backward, which takes
      // rowsum(dO O) from the bf16 O where the CPU sums dP P) is 2^-8 of the value, and a
      // flipped bf16 gradient carries on through a product's backward
      const double limit = name.find("bf16") != std::string::npos ? 2e-2 : 1e-4;
      const std::string what = name + (is_attention(name) ? path == cuda::AttentionPath::fused
                                                                  ? " (fused)" : " (materialized)"
                                                            : "");
      std::printf("  op %-32s forward+backward vs CPU: max rel diff %.2e (limit %.0e)\n",
                  what.c_str(), e, limit);
      check(e <= limit, what.c_str(), e);
      if (name.size() > 10 && name.compare(name.size() - 10, 10, "_sums_bf16") == 0) {
        // one bf16 output, every gradient fp32: the output may differ where a rounding falls
        // the other way (one bf16 step: 2^-7 of the element at most), the gradients only by
        // the order of fp32 sums. A sum held in bf16 on either side is 1e-3 off or more.
        double eg = 0;
        for (std::size_t i = 0; i < cpu.grads.size() && i < dev.grads.size(); ++i)
          eg = std::max(eg, rel(dev.grads[i], cpu.grads[i]));
        const double eo = rel(dev.out, cpu.out);
        std::printf("  op %-32s bf16 output %.2e (limit 7.9e-3), fp32 gradients %.2e (limit 1e-4)\n",
                    name.c_str(), eo, eg);
        check(eo <= 1.0 / 128 && eg <= 1e-4 && dev.grads.size() == cpu.grads.size(),
              (name + ": fp32 sums of bf16 values as the CPU's").c_str(), eg > 1e-4 ? eg : eo);
      }
    }
  }
  check(ledger_misses == 0, "every op's ledger peak and allocations, scratch included, are Meta<Cuda>'s",
        double(ledger_misses));
  // The embedding's backward sums a repeated token's rows in token order on both backends
  // (NOTE [embedding backward]): the same bits, not only close ones (ids 0, 3 and 49 repeat).
  const auto cpu = remat_cuda_test::cpu_op("embedding"), dev = remat_cuda_test::run_op<Cuda>("embedding");
  check(same_bits(cpu, dev), "the embedding's table gradient is the CPU's bit for bit");
  Cuda::set_attention_path(cuda::AttentionPath::from_env);
}

void test_optim_against_cpu() {
  for (const auto& name : remat_cuda_test::optim_names()) {
    const double e = worst(remat_cuda_test::run_optim<Cuda>(name), remat_cuda_test::cpu_optim(name));
    std::printf("  optimizer %-14s 3 steps vs CPU: max rel diff %.2e (limit 1e-5)\n", name.c_str(), e);
    check(e <= 1e-5, name.c_str(), e);
  }
}

// Clipping's list kernels (32 buffers per launch) against the one-buffer kernels, bit for bit:
// the sums of squares (45 buffers, an empty one among them) and the scaling.
void test_clip_lists() {
  constexpr int kBuffers = 45;
  std::vector<std::vector<float>> host;
  std::vector<std::int64_t> ns;
  for (int k = 0; k < kBuffers; ++k) {
    ns.push_back(k == 7 ? 0 : (k * 2917) % 13000 + 1);
    host.push_back(seq(static_cast<std::size_t>(ns.back()) + 1, 1.0f, 0.01f * k));
  }
  std::vector<std::unique_ptr<DeviceBuf>> a, b;
  std::vector<float*> xa, xb;
  for (int k = 0; k < kBuffers; ++k) {
    a.push_back(std::make_unique<DeviceBuf>(host[static_cast<std::size_t>(k)]));
    b.push_back(std::make_unique<DeviceBuf>(host[static_cast<std::size_t>(k)]));
    xa.push_back(a.back()->p);
    xb.push_back(b.back()->p);
  }
  std::vector<const float*> xs(xa.begin(), xa.end());
  std::vector<double> many(kBuffers);
  Cuda::sum_squares_many(many.data(), xs.data(), ns.data(), kBuffers);
  int differ = 0;
  for (std::size_t k = 0; k < kBuffers; ++k) {
    const double one = Cuda::sum_squares(xa[k], ns[k]);
    differ += std::memcmp(&many[k], &one, sizeof(double)) != 0;
  }
  check(differ == 0, "sum_squares_many = sum_squares of each buffer, bit for bit", differ);
  Cuda::scale_many(xa.data(), ns.data(), kBuffers, 0.37f);
  for (int k = 0; k < kBuffers; ++k) Cuda::scale(xb[static_cast<std::size_t>(k)], ns[static_cast<std::size_t>(k)], 0.37f);
  differ = 0;
  for (int k = 0; k < kBuffers; ++k) {
    const auto ha = a[static_cast<std::size_t>(k)]->host(), hb = b[static_cast<std::size_t>(k)]->host();
    differ += std::memcmp(ha.data(), hb.data(), ha.size() * 4) != 0;
    // the element past each buffer is untouched
    differ += ha.back() != host[static_cast<std::size_t>(k)].back();
  }
  check(differ == 0, "scale_many = scale of each buffer, bit for bit, and nothing past them", differ);
  // Clipping on the device: the norm and the scaling are the host's, bit for bit (the non-empty
  // buffers; the sums above, added in order), under the limit and over it.
  std::vector<float*> xc;
  std::vector<std::int64_t> nc;
  double total = 0.0;
  for (int k = 0; k < kBuffers; ++k)
    if (ns[static_cast<std::size_t>(k)] > 0) {
      xc.push_back(xb[static_cast<std::size_t>(k)]);
      nc.push_back(ns[static_cast<std::size_t>(k)]);
    }
  for (int k = 0; k < kBuffers; ++k) {
    const double one = Cuda::sum_squares(xb[static_cast<std::size_t>(k)], ns[static_cast<std::size_t>(k)]);
    total += one;
  }
  const float want = static_cast<float>(std::sqrt(total));
  auto read = [](const float* x, std::int64_t n) {
    std::vector<float> h(static_cast<std::size_t>(n));
    Cuda::copy_to_host(h.data(), x, h.size() * 4);
    return h;
  };
  for (const float limit : {want * 2.0f, want * 0.25f}) {
    std::vector<std::vector<float>> before;
    for (float* x : xc) before.push_back(read(x, nc[before.size()]));
    DeviceBuf norm(std::vector<float>{-1.0f});
    Cuda::clip_norm_many(norm.p, xc.data(), nc.data(), xc.size(), limit);
    const float got = norm.host()[0], factor = limit / (want + 1e-6f);
    check(std::memcmp(&got, &want, 4) == 0, "clip_norm_many's norm = the host's sum, bit for bit", got - want);
    differ = 0;
    for (std::size_t k = 0; k < xc.size(); ++k) {
      const auto after = read(xc[k], nc[k]);
      for (std::size_t i = 0; i < after.size(); ++i) {
        const float w = factor < 1.0f ? before[k][i] * factor : before[k][i];
        differ += std::memcmp(&after[i], &w, 4) != 0;
      }
    }
    check(differ == 0, "clip_norm_many scales by the host's factor when < 1, else not at all", differ);
  }
}

// NOTE [multi-tensor updates]: one launch per kListTensors tensors gives the bits of one launch
// per tensor. 45 tensors (two lists), sizes from 0 to past several chunks, AdamW and SGD
// (plain, momentum at its first and a later use, Nesterov).
void test_update_lists() {
  constexpr int kTensors = 45;
  std::vector<std::int64_t> ns;
  for (int k = 0; k < kTensors; ++k) ns.push_back(k == 7 ? 0 : (k * 2917) % 13000 + 1);
  // state[k] = {p, g, m, v} on the device, one copy for each way of updating
  auto make = [&] {
    std::vector<std::vector<DeviceBuf>> st(kTensors);
    for (int k = 0; k < kTensors; ++k) {
      const auto n = static_cast<std::size_t>(ns[static_cast<std::size_t>(k)]);
      auto& b = st[static_cast<std::size_t>(k)];
      b.reserve(4);  // DeviceBuf owns its memory: never copied
      b.emplace_back(seq(n + 1, 1.0f, 0.0f));
      b.emplace_back(seq(n + 1, 0.1f, 0.01f * k));
      b.emplace_back(seq(n + 1, 0.05f, 0.0f));
      b.emplace_back(seq(n + 1, 0.0f, 0.01f));  // v >= 0
    }
    return st;
  };
  auto slices = [&](std::vector<std::vector<DeviceBuf>>& st, bool momentum, bool first) {
    std::vector<UpdateSlice> s;
    for (int k = 0; k < kTensors; ++k) {
      auto& b = st[static_cast<std::size_t>(k)];
      s.push_back({b[0].p, b[1].p, momentum ? b[2].p : nullptr, b[3].p, ns[static_cast<std::size_t>(k)], first});
    }
    return s;
  };
  auto same = [&](std::vector<std::vector<DeviceBuf>>& a, std::vector<std::vector<DeviceBuf>>& b) {
    for (int k = 0; k < kTensors; ++k)
      for (int j = 0; j < 4; ++j)
        if (!same_bits(a[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)].host(),
                       b[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)].host()))
          return false;
    return true;
  };
  const std::int64_t l0 = cuda::device_counters().now().launches;
  {
    auto one = make(), many = make();
    for (int step = 1; step <= 2; ++step) {
      const float bc1 = 1.0f - std::pow(0.9f, float(step)), bc2 = 1.0f - std::pow(0.999f, float(step));
      for (const auto& s : slices(one, true, false))
        Cuda::adamw_update(s.p, s.g, s.m, s.v, s.n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
      const auto m = slices(many, true, false);
      Cuda::adamw_update_many(m.data(), m.size(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
    }
    check(same(one, many), "AdamW over 45 tensors in lists of 32: the bits of one launch per tensor");
  }
  for (int kind = 0; kind < 3; ++kind) {  // plain, momentum, Nesterov
    auto one = make(), many = make();
    for (int step = 0; step < 2; ++step) {
      for (const auto& s : slices(one, kind > 0, step == 0))
        Cuda::sgd_update(s.p, s.g, s.m, s.n, 0.05f, 0.9f, 0.01f, kind == 2, s.first);
      const auto m = slices(many, kind > 0, step == 0);
      Cuda::sgd_update_many(m.data(), m.size(), 0.05f, 0.9f, 0.01f, kind == 2);
    }
    check(same(one, many), "SGD over 45 tensors in lists of 32: the bits of one launch per tensor");
  }
  const std::int64_t launches = cuda::device_counters().now().launches - l0;
  // per-tensor: 44 non-empty tensors per update; lists: 2 launches per update (8 updates in
  // all), but plain SGD (no state, so no distance to differ) takes the flat way: 1 launch
  std::printf("  multi-tensor updates: %lld launches for 8 updates of 45 tensors each way\n",
              static_cast<long long>(launches));
  check(launches == 8 * 44 + 6 * 2 + 2 * 1, "a list update of 44 non-empty tensors is 2 launches",
        double(launches));
}

// NOTE [multi-tensor updates], flat state: parameters, moments and momentum in one buffer each
// with one layout (NOTE [flat buffers]), gradients apart: kFlatTensors tensors per launch, the
// bits of one launch per tensor. 45 tensors (one launch) and 170 (two), sizes from 0 to several
// chunks; a distance that differs for one tensor sends the update the list way.
void test_update_flat() {
  for (const int kTensors : {45, 170}) {
    std::vector<std::int64_t> ns, off;
    std::int64_t total = 0;
    for (int k = 0; k < kTensors; ++k) {
      ns.push_back(k == 7 ? 0 : (k * 2917) % 13000 + 1);
      off.push_back(total);
      total += flat_round(ns.back());
    }
    const auto T = static_cast<std::size_t>(total);
    struct State {
      std::vector<DeviceBuf> b;  // p, m, v: flat; then one gradient per tensor
    };
    auto make = [&] {
      State st;
      st.b.reserve(3 + ns.size());
      st.b.emplace_back(seq(T, 1.0f, 0.0f));
      st.b.emplace_back(seq(T, 0.05f, 0.0f));
      st.b.emplace_back(seq(T, 0.0f, 0.01f));  // v >= 0
      for (int k = 0; k < kTensors; ++k)
        st.b.emplace_back(seq(static_cast<std::size_t>(ns[static_cast<std::size_t>(k)]) + 1, 0.1f, 0.01f * k));
      return st;
    };
    auto slices = [&](State& st, bool momentum, bool first) {
      std::vector<UpdateSlice> s;
      for (int k = 0; k < kTensors; ++k) {
        const auto o = off[static_cast<std::size_t>(k)];
        s.push_back({st.b[0].p + o, st.b[3 + static_cast<std::size_t>(k)].p, momentum ? st.b[1].p + o : nullptr,
                     st.b[2].p + o, ns[static_cast<std::size_t>(k)], first});
      }
      return s;
    };
    auto same = [&](State& a, State& b) {
      for (int j = 0; j < 3; ++j)
        if (!same_bits(a.b[static_cast<std::size_t>(j)].host(), b.b[static_cast<std::size_t>(j)].host())) return false;
      return true;
    };
    const std::int64_t lists = (kTensors - 1 + cuda::kFlatTensors - 1) / cuda::kFlatTensors;
    auto launches = [] { return cuda::device_counters().now().launches; };
    {
      auto one = make(), flat = make();
      std::int64_t l = 0;
      for (int step = 1; step <= 2; ++step) {
        const float bc1 = 1.0f - std::pow(0.9f, float(step)), bc2 = 1.0f - std::pow(0.999f, float(step));
        for (const auto& x : slices(one, true, false))
          Cuda::adamw_update(x.p, x.g, x.m, x.v, x.n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
        const auto m = slices(flat, true, false);
        const std::int64_t l0 = launches();
        Cuda::adamw_update_many(m.data(), m.size(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
        l += launches() - l0;
      }
      std::printf("  flat AdamW, %d tensors: %lld launches an update\n", kTensors, static_cast<long long>(l / 2));
      check(same(one, flat), "AdamW over flat state: the bits of one launch per tensor", kTensors);
      check(l == 2 * lists, "AdamW over flat state: one launch per kFlatTensors tensors", double(l));
    }
    for (int kind = 0; kind < 3; ++kind) {  // plain, momentum, Nesterov
      auto one = make(), flat = make();
      std::int64_t l = 0;
      for (int step = 0; step < 2; ++step) {
        for (const auto& x : slices(one, kind > 0, step == 0))
          Cuda::sgd_update(x.p, x.g, x.m, x.n, 0.05f, 0.9f, 0.01f, kind == 2, x.first);
        const auto m = slices(flat, kind > 0, step == 0);
        const std::int64_t l0 = launches();
        Cuda::sgd_update_many(m.data(), m.size(), 0.05f, 0.9f, 0.01f, kind == 2);
        l += launches() - l0;
      }
      check(same(one, flat), "SGD over flat state: the bits of one launch per tensor", kind);
      check(l == 2 * lists, "SGD over flat state: one launch per kFlatTensors tensors", double(l));
    }
    {  // one tensor's moments elsewhere: the list way, the same bits
      auto one = make(), mixed = make();
      DeviceBuf m9(seq(static_cast<std::size_t>(ns[9]), 0.05f, 0.0f)), m9b(seq(static_cast<std::size_t>(ns[9]), 0.05f, 0.0f));
      auto a = slices(one, true, false), b = slices(mixed, true, false);
      a[9].m = m9.p;
      b[9].m = m9b.p;
      for (const auto& x : a)
        Cuda::adamw_update(x.p, x.g, x.m, x.v, x.n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f);
      const std::int64_t l0 = launches();
      Cuda::adamw_update_many(b.data(), b.size(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f);
      const std::int64_t l = launches() - l0;
      check(same(one, mixed) && same_bits(m9.host(), m9b.host()),
            "AdamW with one tensor's moments apart: the bits of one launch per tensor", kTensors);
      check(l == (kTensors - 1 + 31) / 32, "... in lists of 32", double(l));
    }
  }
}

// NOTE [fresh gradient buffers]: a segment's node hands the gradient buffers made for it to the
// replay unset; one that no replayed op reaches is zeroed at the end. On the device (and in
// the emulation, where memory nobody wrote reads as NaN) skipping that leaves garbage.
void test_checkpoint_unreached_input() {
  Tape<Cuda> tape;
  auto x = tape.randn({4, 16}, 1.0f, 5, true), u = tape.randn({4, 16}, 1.0f, 6, true);
  auto y = checkpoint([](const Tensor<Cuda>& a, const Tensor<Cuda>& b) { (void)b; return a * a; }, x, u);
  tape.backward(sum(y));
  const auto gx = x.grad().to_vector(), xv = x.to_vector();
  double worst = 0.0;
  for (std::size_t i = 0; i < gx.size(); ++i) worst = std::max(worst, std::fabs(gx[i] - 2.0 * xv[i]));
  check(worst == 0.0, "a segment's used input gets its gradient", worst);
  check(u.grad().defined(), "a segment's unused input gets a gradient buffer");
  double most = 0.0;
  for (float g : u.grad().to_vector()) most = std::isnan(g) ? INFINITY : std::max(most, double(std::fabs(g)));
  check(most == 0.0, "a segment input that no replayed op reaches gets zeros", most);
  // The version check fails before the replay: the buffer made for x is zeroed, not left unset.
  auto v = tape.randn({4, 16}, 1.0f, 7, true);
  auto z = checkpoint([](const Tensor<Cuda>& a) { return a * a; }, v);
  (void)v.mutable_data<float>();  // a write in place after the forward pass
  bool threw = false;
  try {
    tape.backward(sum(z));
  } catch (const Error&) {
    threw = true;
  }
  check(threw, "a segment whose input was written after forward throws in backward");
  double left = 0.0;
  if (v.grad().defined())
    for (float g : v.grad().to_vector()) left = std::isnan(g) ? INFINITY : std::max(left, double(std::fabs(g)));
  check(left == 0.0, "a segment that throws before its replay leaves zeros in its input's buffer", left);
}

// NOTE [CUDA graphs] (graph.cuh): forward, backward and clipping captured once and replayed
// over new batches (written in place into the static ids and targets), with AdamW's update
// eager between replays, train exactly as eager steps do: the same losses and parameters bit
// for bit, with checkpointing none, block and selective; the capture's ledger peak is the
// eager step's; a replay is one launch. Waiting for the device inside a capture, dropout, a
// second capture and a replay of nothing are errors, and the stream works after them.
void test_cuda_graph() {
  const remat_cuda_test::GptShape shape{64, 4, 2};
  auto batch = [](int k, std::vector<std::int32_t>& x, std::vector<std::int32_t>& y) {
    remat_cuda_test::gpt_batch(x, y);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<std::int32_t>((x[i] + 7 * k + static_cast<int>(i) * k) % 64);
      y[i] = static_cast<std::int32_t>((y[i] + 11 * k) % 64);
    }
  };
  const optim::AdamWOptions ao{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
  constexpr int kSteps = 4;
  for (const char* strategy : {"none", "block", "selective"}) {
    std::vector<std::int32_t> x, y;
    // eager: forward, backward, clipping, AdamW, zero_grad per step
    Tape<Cuda> t1(5);
    nn::GPT<Cuda> m1(t1, remat_cuda_test::gpt_config(strategy, 0.0f, shape));
    optim::AdamW<Cuda> o1(m1.parameters(), ao);
    std::vector<float> eager_loss;
    std::int64_t eager_peak = 0, eager_work = 0;
    for (int k = 0; k < kSteps; ++k) {
      batch(k, x, y);
      const auto ids = t1.tokens({2, 32}, x), tg = t1.tokens({2, 32}, y);
      const std::int64_t live0 = memory_stats<Cuda>().live_total;
      reset_peak_memory<Cuda>();
      const auto c0 = cuda::device_counters().now();
      auto loss = m1.loss(ids, tg);
      t1.backward(loss);
      (void)optim::clip_grad_norm_(m1.parameters(), 0.5f);
      const auto c1 = cuda::device_counters().now();
      eager_peak = memory_stats<Cuda>().peak_total - live0;
      eager_work = (c1.launches - c0.launches) + (c1.gemms - c0.gemms);
      o1.step();
      o1.zero_grad();
      eager_loss.push_back(loss.item());
    }
    // graph: a first step eager (the optimizer's state is made), then the same work captured
    // once; inputs written in place, AdamW eager, no zero_grad
    Tape<Cuda> t2(5);
    nn::GPT<Cuda> m2(t2, remat_cuda_test::gpt_config(strategy, 0.0f, shape));
    optim::AdamW<Cuda> o2(m2.parameters(), ao);
    batch(0, x, y);
    const auto ids = t2.tokens({2, 32}, x, 0, 63), tg = t2.tokens({2, 32}, y, 0, 63);
    std::vector<float> graph_loss;
    graph_loss.push_back(gpt_train_step(m2, o2, ids, tg, 0.5f).item());
    Tensor<Cuda> loss;
    cuda::Graph graph;
    const std::int64_t live0 = memory_stats<Cuda>().live_total;
    reset_peak_memory<Cuda>();
    const std::size_t reserved0 = Cuda::reserved_bytes();
    graph.capture([&] {
      loss = m2.loss(ids, tg);
      t2.backward(loss);
      (void)optim::clip_grad_norm_(m2.parameters(), 0.5f);
    });
    const std::int64_t graph_peak = memory_stats<Cuda>().peak_total - live0;
    const std::size_t reserved1 = Cuda::reserved_bytes();
    std::int64_t launches = 0;
    bool probe_kept = true;
    for (int k = 1; k < kSteps; ++k) {
      batch(k, x, y);
      t2.write_tokens(ids, x);
      t2.write_tokens(tg, y);
      // an evaluation beside the graph: its buffers must not be where the replay writes
      Tensor<Cuda> probe;
      {
        NoGrad no_grad;
        probe = m2(ids, false);
      }
      const std::vector<float> before = probe.to_vector();
      const auto c0 = cuda::device_counters().now();
      graph.replay();
      launches = cuda::device_counters().now().launches - c0.launches;
      o2.step();
      graph_loss.push_back(loss.item());
      probe_kept = probe_kept && same_bits(before, probe.to_vector());
    }
    std::printf("  CUDA graph (%s): %zu nodes (eager %lld kernels and GEMMs), %zu blocks held, "
                "reserved %zu B after the capture (before %zu; with the evaluations %zu), ledger peak %lld B (eager %lld), losses "
                "%.6f .. %.6f\n", strategy, graph.nodes(), static_cast<long long>(eager_work),
                graph.held_blocks(), reserved1, reserved0, Cuda::reserved_bytes(), static_cast<long long>(graph_peak),
                static_cast<long long>(eager_peak), graph_loss.front(), graph_loss.back());
    check(same_bits(eager_loss, graph_loss), "replays of a captured step give the eager losses bit for bit");
    bool params_same = true;
    for (std::size_t i = 0; i < m1.parameters().size(); ++i)
      params_same = params_same && same_bits(m1.parameters()[i].to_vector(), m2.parameters()[i].to_vector());
    check(params_same, "... and, with AdamW between replays, the eager parameters bit for bit");
    check(eager_loss.front() != eager_loss.back(), "... of a run that trains (the loss moves)");
    check(graph_peak == eager_peak, "the capture's ledger peak is the eager step's",
          double(graph_peak - eager_peak));
    check(launches == 1, "a replay is one launch", double(launches));
    check(probe_kept, "a tensor made beside the graph keeps its values through replays");
    check(graph.held_blocks() > 0, "the graph holds the pool's free blocks");
    check(reserved1 == reserved0, "the capture reserves nothing new (the pool had settled)",
          double(reserved1) - double(reserved0));
#if defined(REMAT_CUDA_EMULATION)
    check(graph.nodes() == static_cast<std::size_t>(eager_work),
          "the graph holds the eager step's kernels and GEMMs, one node each",
          double(graph.nodes()) - double(eager_work));
#endif
    auto& pool = cuda::CachingAllocator::get();
    const std::size_t cached = pool.cached_bytes();
    graph.reset();
    check(pool.cached_bytes() > cached, "a graph's reset gives its blocks back to the pool");
  }
  // errors
  Tape<Cuda> tape(5);
  nn::GPT<Cuda> model(tape, remat_cuda_test::gpt_config("none", 0.0f, shape));
  std::vector<std::int32_t> x, y;
  remat_cuda_test::gpt_batch(x, y);
  const auto ids = tape.tokens({2, 32}, x, 0, 63), tg = tape.tokens({2, 32}, y, 0, 63);
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  {
    cuda::Graph g;
    const std::string m = message([&] { g.capture([&] { (void)model.loss(ids, tg).item(); }); });
    check(m.find("waited for the device") != std::string::npos && m.find("hint") != std::string::npos,
          "a capture that reads a value back fails, saying so");
    check(!g.captured(), "... and holds nothing");
    Tensor<Cuda> l;
    g.capture([&] { l = model.loss(ids, tg); });
    check(message([&] { g.capture([] {}); }).find("holds a capture already") != std::string::npos,
          "a second capture into one graph is an error");
    g.replay();
    const float a = l.item();
    const float b = model.loss(ids, tg).item();
    check(a == b, "after a failed capture the stream works: a replay gives the eager loss", double(a - b));
  }
  {
    cuda::Graph g;
    check(message([&] { g.replay(); }).find("nothing captured") != std::string::npos,
          "a replay before a capture is an error");
    Tape<Cuda> t3(5);
    nn::GPT<Cuda> dropped(t3, remat_cuda_test::gpt_config("none", 0.1f, shape));
    const auto ids3 = t3.tokens({2, 32}, x), tg3 = t3.tokens({2, 32}, y);
    check(message([&] { g.capture([&] { (void)dropped.loss(ids3, tg3); }); }).find("dropout") != std::string::npos,
          "dropout inside a capture is an error (one mask would be replayed)");
  }
  check(message([&] { tape.write_tokens(ids, std::vector<std::int32_t>(64, 64)); }).find("outside the declared range") != std::string::npos,
        "writing an id outside the declared range is an error");
  check(message([&] { tape.write_tokens(ids, std::vector<std::int32_t>(63, 0)); }).find("expected an i32 tensor of as many") != std::string::npos,
        "writing the wrong number of ids is an error");
}

void test_gpt() {
  using remat_cuda_test::run_gpt;
  cuda::Context::get().set_tf32(false);
  for (float p : {0.0f, 0.1f}) {  // dropout masks are the CPU's, so even p > 0 compares
    const double e = worst(run_gpt<Cuda>("none", p), remat_cuda_test::cpu_gpt("none", p));
    std::printf("  GPT step (dropout %.1f) vs CPU: max rel diff %.2e (limit 1e-3)\n", p, e);
    check(e <= 1e-3, "GPT step matches the CPU", e);
    const auto base = run_gpt<Cuda>("none", p);
    for (const char* s : {"block", "every:2", "sqrt", "selective"}) {
      const double d = worst(run_gpt<Cuda>(s, p), base);
      std::printf("  GPT checkpoint %-9s (dropout %.1f) vs none on CUDA: max rel diff %.2e (limit 0: same bits)\n", s, p, d);
      check(d == 0, "checkpointed gradients equal the plain ones on CUDA, bit for bit", d);
    }
  }
  // bf16 (nn::GPTConfig::precision): against the CPU's bf16 step within bf16's rounding (the
  // fp32 sums differ in order, so a value may round the other way), and every strategy gives
  // the plain bf16 step's gradients bit for bit
  remat_cuda_test::GptShape bf16;
  bf16.precision = DType::bf16;
  for (float p : {0.0f, 0.1f}) {
    const auto base = run_gpt<Cuda>("none", p, bf16);
    const double e = worst(base, remat_cuda_test::cpu_gpt("none", p, bf16));
    std::printf("  GPT step bf16 (dropout %.1f) vs CPU bf16: max rel diff %.2e (limit 3e-2)\n", p, e);
    check(e <= 3e-2, "bf16 GPT step matches the CPU's within bf16 rounding", e);
    for (const char* s : {"block", "every:2", "save_linear"}) {
      const double d = worst(run_gpt<Cuda>(s, p, bf16), base);
      std::printf("  GPT bf16 checkpoint %-11s (dropout %.1f) vs none on CUDA: max rel diff %.2e (limit 0)\n", s, p, d);
      check(d == 0, "bf16 checkpointed gradients equal the plain ones on CUDA, bit for bit", d);
    }
  }
  // GPT-2's head size (64: 2 heads of 128), fused and materialized attention
  remat_cuda_test::GptShape gpt2_head;
  gpt2_head.n_embd = 128;
  gpt2_head.n_head = 2;
  gpt2_head.n_layer = 2;
  const auto cpu = remat_cuda_test::cpu_gpt("none", 0.1f, gpt2_head);
  for (const auto path : {cuda::AttentionPath::fused, cuda::AttentionPath::materialized}) {
    Cuda::set_attention_path(path);
    const double e = worst(run_gpt<Cuda>("none", 0.1f, gpt2_head), cpu);
    const char* how = path == cuda::AttentionPath::fused ? "fused" : "materialized";
    std::printf("  GPT step, head size 64, %s attention, vs CPU: max rel diff %.2e (limit 1e-3)\n", how, e);
    check(e <= 1e-3, "GPT step at head size 64 matches the CPU", e);
  }
  Cuda::set_attention_path(cuda::AttentionPath::from_env);
  cuda::Context::get().set_tf32(true);
}

// Tensor-core attention (flash_mma.cuh: TF32 mma.sync, issue 25 item 1). With TF32 on (the
// default) the fused attention at head sizes 64 and 128 runs on the tensor cores: forward and
// backward against the CPU's fp32 within TF32's error (T 67: a partial query block and partial
// key tiles, causal and not), the mma kernels are the ones launched (emulation: by name), and
// a GPT step at head size 64: against the CPU, and every checkpoint strategy gives the plain
// step's gradients bit for bit (the kernels have no atomics; under the emulation, under two
// block schedules too).
void test_mma_attention() {
  using remat_cuda_test::Result;
  auto& ctx = cuda::Context::get();
  ctx.set_tf32(true);
  if (!ctx.tensor_cores()) {
    std::printf("  no tensor cores on this device (sm < 80): the SIMT kernels serve; skipped\n");
    return;
  }
  Cuda::set_attention_path(cuda::AttentionPath::fused);
  for (const char* name : {"attention_t67_d64", "attention_t67_d64_full", "attention_t67_d128",
                           "attention_t67_d128_full", "grouped_attention_t67_d64"}) {
#if defined(REMAT_CUDA_EMULATION)
    const auto before = cuda::emu::device().launches_by_kernel();
#endif
    const double e = worst(remat_cuda_test::run_op<Cuda>(name), remat_cuda_test::cpu_op(name));
    std::printf("  op %-24s (tensor cores, TF32) vs CPU: max rel diff %.2e (limit 3e-3)\n", name, e);
    check(e <= 3e-3, "tensor-core attention matches the CPU within TF32's error", e);
#if defined(REMAT_CUDA_EMULATION)
    const std::string D = std::string(name).find("d128") != std::string::npos ? "128" : "64";
    auto ran = [&](const std::string& kernel) {
      const auto& now = cuda::emu::device().launches_by_kernel();
      const auto a = now.find(kernel), b = before.find(kernel);
      return (a == now.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second);
    };
    const bool mma = ran("flash_mma_forward_kernel<" + D + ">") == 1 &&
                     ran("flash_mma_dq_kernel<" + D + ">") == 1 &&
                     ran("flash_mma_dkdv_kernel<" + D + ">") == 1 &&
                     ran("flash_forward_kernel<>") == 0 && ran("flash_dq_kernel<>") == 0;
    check(mma, "the tensor-core kernels ran, not the SIMT ones");
#endif
  }
  remat_cuda_test::GptShape gpt2_head;
  gpt2_head.n_embd = 128;
  gpt2_head.n_head = 2;
  gpt2_head.n_layer = 2;
  const double e = worst(remat_cuda_test::run_gpt<Cuda>("none", 0.1f, gpt2_head),
                         remat_cuda_test::cpu_gpt("none", 0.1f, gpt2_head));
  std::printf("  GPT step, head size 64, TF32 (GEMMs and attention) vs CPU: max rel diff %.2e (limit 2e-2)\n", e);
  check(e <= 2e-2, "a TF32 GPT step at head size 64 matches the CPU within TF32's error", e);
  auto step = [&](const char* strategy) { return remat_cuda_test::run_gpt<Cuda>(strategy, 0.1f, gpt2_head); };
#if defined(REMAT_CUDA_EMULATION)
  auto& dev = cuda::emu::device();
  const std::uint64_t seed0 = dev.schedule_seed();
  const std::vector<std::uint64_t> seeds = {0x5EED0003u, 0x5EED0004u};
  auto set_seed = [&](std::uint64_t seed) { dev.set_schedule_seed(seed); };
#else
  const std::vector<std::uint64_t> seeds = {0};  // the GPU's own schedule
  auto set_seed = [](std::uint64_t) {};
#endif
  std::vector<Result> plains;
  for (const std::uint64_t seed : seeds) {
    set_seed(seed);
    plains.push_back(step("none"));
    for (const char* strategy : {"none", "block", "selective"}) {
      const bool same = same_bits(step(strategy), plains.back());
      std::printf("  GPT step, head size 64, TF32, checkpoint %-9s vs none: %s\n", strategy,
                  same ? "same bits" : "DIFFER");
      check(same, "tensor-core attention: checkpointed (and repeated) steps give the plain step's bits");
    }
  }
#if defined(REMAT_CUDA_EMULATION)
  dev.set_schedule_seed(seed0);
  check(same_bits(plains[0], plains[1]), "tensor-core attention: the same bits under two block schedules");
#endif
  Cuda::set_attention_path(cuda::AttentionPath::from_env);
}

#if defined(REMAT_CUDA_EMULATION)
// Every __global__ kernel of include/remat/backend/cuda ran at least once in this process:
// the emulation counts launches by name, the headers are read for the names.
void test_every_kernel_ran() {
  std::set<std::string> declared, launched;
  for (const char* f : {"memory.cuh", "pointwise.cuh", "colsum.cuh", "optim.cuh", "nn.cuh", "flash.cuh",
                        "flash_mma.cuh"}) {
    std::ifstream in(std::string(REMAT_CUDA_KERNEL_DIR) + "/" + f);
    check(bool(in), "the kernel headers are readable");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::size_t at = text.find("__global__ void "); at != std::string::npos;
         at = text.find("__global__ void ", at + 1)) {
      std::size_t b = at + 16;
      if (text.compare(b, 17, "__launch_bounds__") == 0) b = text.find(')', b) + 1;
      while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
      std::size_t e = b;
      while (e < text.size() && (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_')) ++e;
      declared.insert(text.substr(b, e - b));
    }
  }
  for (const auto& [name, count] : cuda::emu::device().launches_by_kernel())
    if (count > 0) launched.insert(name.substr(0, name.find('<')));
  std::string never;
  for (const auto& k : declared)
    if (!launched.count(k)) never += " " + k;
  std::printf("  kernels: %zu declared, %zu launched; never launched:%s\n", declared.size(),
              launched.size(), never.empty() ? " none" : never.c_str());
  check(declared.size() >= 20, "the kernel headers declare the kernels", double(declared.size()));
  check(never.empty(), "every kernel is reached by a test");
}

// Determinism (issue 25, item 7): under two random block schedules (Device::set_schedule_seed:
// the blocks of every launch in a seeded random order, each block's threads lowest- or
// highest-first at random, atomics applied in that order, as a GPU may) every op's output and
// gradients, and a GPT step's loss and every parameter's gradient (wte included, whose rows
// repeat), keep their bits; and a checkpointed step's gradients are the plain step's, bit for
// bit, under either schedule. A kernel whose result depends on the order of its blocks (an
// atomicAdd scatter) fails here, not only on a GPU.
void test_schedule_seeds() {
  using remat_cuda_test::Result;
  auto& dev = cuda::emu::device();
  const std::uint64_t before = dev.schedule_seed();
  const std::uint64_t seeds[2] = {0x5EED0001u, 0x5EED0002u};
  auto under = [&](std::uint64_t seed, auto fn) {
    dev.set_schedule_seed(seed);
    Result r = fn();
    dev.set_schedule_seed(before);
    return r;
  };
  cuda::Context::get().set_tf32(false);
  std::string differ;
  for (const auto& name : remat_cuda_test::op_names<Cuda>()) {
    auto op = [&] { return remat_cuda_test::run_op<Cuda>(name); };
    if (!same_bits(under(seeds[0], op), under(seeds[1], op))) differ += " " + name;
  }
  std::printf("  every op under two block schedules: %s\n", differ.empty() ? "same bits" : ("differ:" + differ).c_str());
  check(differ.empty(), "every op gives the same bits under two block schedules");
  for (const char* strategy : {"none", "block", "selective"}) {
    auto step = [&] { return remat_cuda_test::run_gpt<Cuda>(strategy, 0.1f); };
    const Result a = under(seeds[0], step), b = under(seeds[1], step);
    const Result plain = under(seeds[1], [&] { return remat_cuda_test::run_gpt<Cuda>("none", 0.1f); });
    const bool same = same_bits(a, b), as_plain = same_bits(b, plain);
    std::printf("  GPT step, checkpoint %-9s: two schedules %s; vs none %s\n", strategy,
                same ? "same bits" : "DIFFER", as_plain ? "same bits" : "DIFFER");
    check(same, "a GPT step's loss and gradients keep their bits under two block schedules");
    check(as_plain, "a checkpointed GPT step's gradients are the plain step's bit for bit");
  }
  cuda::Context::get().set_tf32(true);
}

// What one GPT training step (no checkpointing, clipping, AdamW) launches, kernel by kernel,
// against the model's structure (issue 25: launches per step). L layers, P = 12 L + 4 parameter
// tensors. Per layer: 2 layer norms, 1 attention, 2 linears and 1 MLP (2 linears, the GELU's
// gradient in a GEMM's epilogue), the residual adds inside c_proj's GEMMs (their C operand).
//   cuBLAS: 4 linears x 3 (forward, dx, dw + db in one call) + the tied head's 3 = 12 L + 3
//   layer norm: forward, backward (its dw/db finish in the last block), each 2 L + 1 (ln_f too)
//   residual adds: none of their own (the residual's gradient is the output's, passed
//     through); only wte + wpe's add: 1 forward, and wpe's gradient, broadcast over the batch,
//     is one column sum (2 launches)
//   GELU: L forward kernels (remat's GELU, so a rebuilt one has the same bits: linear.cuh);
//     its gradient is in the DGELU_BGRAD epilogue
//   attention forward, dq (with delta), dk/dv: L each
//   no broadcast rows (biases are in the GEMMs); 1 fill (the loss's seed: the cross-entropy
//   and the embeddings write their fresh gradients); embeddings 2 + 2, loss 3; the positions 1
//   AdamW, the clipping norm's partial sums and its scaling: ceil(P / 32) each, plus 1 sum
//   and 1 factor (all on the device)
void test_launches_per_step() {
  for (const int L : {1, 3}) {
    Tape<Cuda> tape(5);
    nn::GPT<Cuda> model(tape, remat_cuda_test::gpt_config("none", 0.0f, {64, 4, L}));
    optim::AdamW<Cuda> opt(model.parameters(), optim::AdamWOptions{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f});
    std::vector<std::int32_t> x, y;
    remat_cuda_test::gpt_batch(x, y);
    auto step = [&] {
      (void)gpt_train_step(model, opt, tape.tokens({2, 32}, x), tape.tokens({2, 32}, y), 1.0f);
    };
    step();
    auto& dev = cuda::emu::device();
    const auto before = dev.launches_by_kernel();
    const auto c0 = cuda::device_counters().now();
    step();
    const auto c1 = cuda::device_counters().now();
    std::map<std::string, std::int64_t> n;
    for (const auto& [name, count] : dev.launches_by_kernel()) {
      const auto it = before.find(name);
      const std::int64_t d = count - (it == before.end() ? 0 : it->second);
      if (d) n[name.substr(0, name.find('<'))] = d;
    }
    std::printf("  one step, %d layers: %lld kernels, %lld cuBLAS calls:", L,
                static_cast<long long>(c1.launches - c0.launches), static_cast<long long>(c1.gemms - c0.gemms));
    for (const auto& [name, count] : n) std::printf(" %s %lld", name.c_str(), static_cast<long long>(count));
    std::printf("\n");
    const std::int64_t lists = (12 * L + 4 + 31) / 32, flat = (12 * L + 4 + 159) / 160;
    const std::map<std::string, std::int64_t> want = {
        {"layer_norm_forward_kernel", 2 * L + 1}, {"layer_norm_backward_kernel", 2 * L + 1},
        {"binary_forward_kernel", 1},
        {"column_partial_kernel", 1},             {"column_finish_kernel", 1},
        {"flash_forward_kernel", L},              {"flash_dq_kernel", L},
        {"flash_dkdv_kernel", L},                 {"fill_kernel", 1},
        {"gelu_forward_kernel", L},
        {"embedding_forward_kernel", 2},          {"embedding_backward_kernel", 2},
        {"cross_entropy_forward_kernel", 1},      {"cross_entropy_backward_kernel", 1},
        {"mean_kernel", 1},                       {"iota_kernel", 1},
        {"adamw_flat_kernel", flat},              {"sum_squares_list_kernel", lists},
        {"sum_rows_kernel", 1},                   {"clip_factor_kernel", 1},
        {"clip_list_kernel", lists}};
    std::int64_t total = 0;
    for (const auto& [name, count] : want) total += count;
    check(n == want, "a GPT step launches, kernel by kernel, what its structure says", double(L));
    check(c1.launches - c0.launches == total && c1.gemms - c0.gemms == 12 * L + 3,
          "a GPT step's launches and cuBLAS calls", double(c1.launches - c0.launches - total));
  }
}

// NOTE [host round trips] (cuda.hpp): a training step with clipping copies from the device to
// the host once, loss.item() (the gradient norm and its factor stay on the device), however
// many parameters the model has; it waits on the device for that and for the batch's two
// uploads (ids, targets; the positions are made on the device), nothing else. (Before: a copy of the ids and of the
// targets for their range checks, of the rows' losses, of the loss's gradient in backward, one
// per parameter for the norm, later one for all of the norm's sums.) The emulation counts both.
void test_host_round_trips() {
  for (const int layers : {1, 3}) {
    Tape<Cuda> tape(5);
    nn::GPT<Cuda> model(tape, remat_cuda_test::gpt_config("block", 0.0f, {64, 4, layers}));
    optim::AdamW<Cuda> opt(model.parameters(), optim::AdamWOptions{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f});
    std::vector<std::int32_t> x, y;
    remat_cuda_test::gpt_batch(x, y);
    auto step = [&] {
      const auto loss = gpt_train_step(model, opt, tape.tokens({2, 32}, x), tape.tokens({2, 32}, y), 1.0f);
      return loss.item();
    };
    step();  // the allocator's first segments
    auto& dev = cuda::emu::device();
    const std::int64_t w0 = dev.host_waits(), c0 = dev.copies_to_host();
    const float l = step();
    const std::int64_t waits = dev.host_waits() - w0, copies = dev.copies_to_host() - c0;
    std::printf("  one training step (%d layers, %zu parameters, clipping, loss %.4f): %lld copies "
                "to the host, %lld waits on the device\n", layers, model.parameters().size(), l,
                static_cast<long long>(copies), static_cast<long long>(waits));
    check(copies == 1, "a step copies to the host once: the loss", double(copies));
    check(waits == 3, "a step waits on the device 3 times: 2 uploads, the loss", double(waits));
    // A tensor whose range is not known (not made by Tape::tokens) is still checked, by a read.
    auto ids = tape.tokens({2, 32}, x);
    auto bad = detail::alias(ids, Shape{64});
    bad.impl()->known_lo = 1;
    bad.impl()->known_hi = 0;
    std::vector<std::int32_t> wrong(x);
    wrong[17] = 64;
    Cuda::copy_from_host(bad.template data<std::int32_t>(), wrong.data(), wrong.size() * 4);
    bool threw = false;
    try {
      (void)embedding(model.wte.weight, bad);
    } catch (const Error& e) {
      threw = std::string(e.what()).find("id 64 is out of range") != std::string::npos;
    }
    check(threw, "an id past the table, in a tensor of unknown range, is an error");
  }
}
#endif

// One section: its failures (and an exception, which ends only this section) are counted,
// and its time is printed (the emulation's budget is stated in tests/cuda/README.md).
template <class Fn>
void section(const char* name, Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    fn();
  } catch (const std::exception& e) {
    std::printf("FAILED: %s ended with an exception: %s\n", name, e.what());
    ++failed;
  }
  std::printf("[%s: %.1f s]\n", name,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}
}  // namespace

int main() {
  if (!cuda::device_available()) {
    std::printf("SKIP: no CUDA device here; these tests need a GPU (they are not counted as passed)\n");
    return 77;
  }
  std::printf("%s\n", Cuda::describe().c_str());
  section("estimator", test_estimator);  // first: on a fresh allocator
  section("gemm", test_gemm);
  section("linear epilogues", test_linear_epilogues);
  section("mlp epilogues", test_mlp_epilogues);
  section("pointwise", test_pointwise);
  section("allocator", test_allocator);
  section("ops", test_ops_against_cpu);
  section("optimizers", test_optim_against_cpu);
  section("update lists", test_update_lists);
  section("flat updates", test_update_flat);
  section("clipping lists", test_clip_lists);
  section("gpt", test_gpt);
  section("checkpoint, unreached input", test_checkpoint_unreached_input);
  section("CUDA graph", test_cuda_graph);
  section("tensor-core attention", test_mma_attention);
#if defined(REMAT_CUDA_EMULATION)
  section("host round trips", test_host_round_trips);
  section("launches per step", test_launches_per_step);
  section("block schedules", test_schedule_seeds);
  section("coverage", test_every_kernel_ran);
#endif
  section("synchronize", [] { Cuda::synchronize(); });
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
