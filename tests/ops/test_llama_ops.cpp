// SPDX-License-Identifier: MIT
// The Llama-family ops' values (their gradients, estimates, checkpointing and CUDA twins are
// op cases: support/op_cases.hpp): rotary embeddings against Hugging Face's formulas written
// here in double (rotate_half; rope_theta; Llama 3's rope_scaling bands), SwiGLU against
// silu(a) * b, grouped-query attention against multi-head attention over repeated key/value
// heads (Hugging Face's repeat_kv), and their errors.
#include <algorithm>
#include <cmath>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using namespace remat;
using remat_test::require_error;


namespace {

// Hugging Face's inverse frequencies (_compute_default_rope_parameters and
// _compute_llama3_parameters), in double
std::vector<double> hf_frequencies(int D, double theta, double factor = 0, double low = 1, double high = 4,
                                   double original = 8192) {
  std::vector<double> f;
  for (int j = 0; j < D / 2; ++j) {
    double v = 1.0 / std::pow(theta, 2.0 * j / D);
    if (factor > 0) {
      const double wavelength = 2 * M_PI / v, low_wavelength = original / low, high_wavelength = original / high;
      if (wavelength > low_wavelength) {
        v /= factor;
      } else if (wavelength >= high_wavelength) {  // the medium band: a blend
        const double smooth = (original / wavelength - low) / (high - low);
        v = (1 - smooth) * v / factor + smooth * v;
      }
    }
    f.push_back(v);
  }
  return f;
}

}  // namespace

TEST_CASE("rope_frequencies are Hugging Face's, with and without Llama 3's scaling", "[ops][rope]") {
  // Llama-3.2-1B's config: head 64, rope_theta 500000, rope_scaling factor 32, 1, 4, 8192
  const std::vector<float> f = rope_frequencies(64, RopeConfig{500000.0f, 32.0f, 1.0f, 4.0f, 8192});
  const std::vector<double> want = hf_frequencies(64, 500000.0, 32.0, 1.0, 4.0, 8192.0);
  REQUIRE(f.size() == 32);
  int kept = 0, divided = 0;
  for (std::size_t j = 0; j < f.size(); ++j) {
    CHECK(std::fabs(f[j] - want[j]) <= 2e-6 * want[j]);
    const double plain = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(j) / 64);
    kept += std::fabs(want[j] - plain) < 1e-12 * plain;
    divided += std::fabs(want[j] - plain / 32) < 1e-12 * plain;
  }
  CHECK(kept > 0);  // every band occurs at this shape
  CHECK(divided > 0);
  CHECK(kept + divided < 32);
  const std::vector<float> g = rope_frequencies(64, RopeConfig{100000.0f});  // SmolLM2-135M
  const std::vector<double> gw = hf_frequencies(64, 100000.0);
  for (std::size_t j = 0; j < g.size(); ++j) CHECK(std::fabs(g[j] - gw[j]) <= 2e-6 * gw[j]);
}

TEST_CASE("rope turns each head's halves as Hugging Face's rotate_half does", "[ops][rope]") {
  Tape<Cpu> tape;
  const std::int64_t Bn = 2, Tn = 7, H = 3, D = 8, pos0 = 5;
  const Tensor<Cpu> x = tape.randn({Bn, Tn, H, D}, 1.0f, 9);
  const std::vector<float> xs = x.to_vector();
  for (const RopeConfig& c : {RopeConfig{}, RopeConfig{500000.0f, 8.0f, 1.0f, 4.0f, 64}}) {
    const std::vector<float> y = rope(x, c, pos0).to_vector();
    const std::vector<double> f = c.factor > 0 ? hf_frequencies(D, c.theta, 8, 1, 4, 64) : hf_frequencies(D, c.theta);
    double worst = 0;
    for (std::int64_t b = 0; b < Bn; ++b)
      for (std::int64_t t = 0; t < Tn; ++t)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t i = 0; i < D; ++i) {
            const std::int64_t o = ((b * Tn + t) * H + h) * D, j = i % (D / 2);
            const double a = static_cast<double>(pos0 + t) * f[static_cast<std::size_t>(j)];
            // q * cos + rotate_half(q) * sin; rotate_half(x) = cat(-x[D/2:], x[:D/2])
            const double rot = i < D / 2 ? -xs[static_cast<std::size_t>(o + i + D / 2)]
                                         : xs[static_cast<std::size_t>(o + i - D / 2)];
            const double want = xs[static_cast<std::size_t>(o + i)] * std::cos(a) + rot * std::sin(a);
            worst = std::max(worst, std::fabs(y[static_cast<std::size_t>(o + i)] - want));
          }
    CHECK(worst < 2e-5);
  }
  // position 0 is the identity; the rotation keeps each pair's length
  const Tensor<Cpu> x1 = tape.randn({1, 1, 2, 4}, 1.0f, 3);
  CHECK(rope(x1).to_vector() == x1.to_vector());
}

TEST_CASE("swiglu is silu(a) * b, packed or not", "[ops][swiglu]") {
  Tape<Cpu> tape;
  const Tensor<Cpu> a = tape.randn({3, 4, 6}, 2.0f, 1), b = tape.randn({3, 4, 6}, 1.0f, 2);
  const std::vector<float> y = swiglu(a, b).to_vector(), av = a.to_vector(), bv = b.to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(av[i])));
    CHECK(std::fabs(y[i] - av[i] * s * bv[i]) < 1e-5);
  }
  const Tensor<Cpu> ab = concat(std::vector<Tensor<Cpu>>{a, b}, 2);
  CHECK(swiglu(ab).shape() == Shape{3, 4, 6});
  CHECK(swiglu(ab).to_vector() == y);
}

TEST_CASE("rope and swiglu errors say what, where and what was expected", "[ops][rope][swiglu]") {
  Tape<Cpu> tape;
  require_error([&] { (void)rope(tape.zeros({4, 6})); }, {"remat::rope", "[4, 6]", "even head size"});
  require_error([&] { (void)rope(tape.zeros({2, 3, 2, 5})); }, {"remat::rope", "[2, 3, 2, 5]"});
  require_error([&] { (void)rope(tape.zeros({1, 2, 1, 512})); }, {"remat::rope", "2..256"});
  require_error([&] { (void)rope(tape.zeros({1, 2, 1, 8}), RopeConfig{10000.0f, 8.0f, 4.0f, 1.0f, 64}); },
                {"remat::rope", "Llama 3 scaling", "low_freq_factor 4", "0 < low < high"});
  require_error([&] { (void)rope(tape.zeros({1, 2, 1, 8}), RopeConfig{}, -1); }, {"remat::rope", "position -1"});
  require_error([&] { (void)swiglu(tape.zeros({2, 3}), tape.zeros({2, 4})); },
                {"remat::swiglu", "[2, 3]", "[2, 4]", "one shape"});
  require_error([&] { (void)swiglu(tape.zeros({2, 5})); }, {"remat::swiglu", "[2, 5]", "[..., 2F]"});
}

namespace {

// x [B, T, heads, D] as [B, heads * R, T, D], each head repeated R times in a row (Hugging
// Face's repeat_kv after the transpose)
std::vector<float> heads_first(const std::vector<float>& x, std::int64_t B, std::int64_t T,
                               std::int64_t heads, std::int64_t D, std::int64_t R) {
  std::vector<float> y(x.size() * static_cast<std::size_t>(R));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads * R; ++h)
      for (std::int64_t t = 0; t < T; ++t)
        std::copy_n(x.begin() + ((b * T + t) * heads + h / R) * D, D,
                    y.begin() + ((b * heads * R + h) * T + t) * D);
  return y;
}
// the gradient of heads_first: each [B, heads R, T, D] head added back into its source head
std::vector<float> heads_first_grad(const std::vector<float>& g, std::int64_t B, std::int64_t T,
                                    std::int64_t heads, std::int64_t D, std::int64_t R) {
  std::vector<float> x(g.size() / static_cast<std::size_t>(R), 0.0f);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads * R; ++h)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t d = 0; d < D; ++d)
          x[static_cast<std::size_t>(((b * T + t) * heads + h / R) * D + d)] +=
              g[static_cast<std::size_t>(((b * heads * R + h) * T + t) * D + d)];
  return x;
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(double(a[i]) - double(b[i])));
  return w;
}

}  // namespace

TEST_CASE("grouped_attention is attention over repeated key/value heads, on both CPU paths",
          "[ops][attention][gqa]") {
  // 6 query heads on 3, 2 and 1 key/value heads (G 2, 3, 6) and on 6 (G 1), causal or not
  const std::int64_t Bn = 2, Tn = 70, H = 6, D = 8;  // 70: two of the CPU's 64-row blocks
  for (const auto path : {cpu::AttentionPath::fused, cpu::AttentionPath::materialized})
    for (const std::int64_t KVH : {3, 2, 1, 6})
      for (const bool causal : {true, false}) {
        Cpu::set_attention_path(path);
        INFO("kv heads " << KVH << (causal ? ", causal" : ", full")
                         << (path == cpu::AttentionPath::fused ? ", fused" : ", materialized"));
        const std::int64_t R = H / KVH;
        Tape<Cpu> tape;
        const Tensor<Cpu> q = tape.randn({Bn, Tn, H, D}, 1.0f, 1, true);
        const Tensor<Cpu> k = tape.randn({Bn, Tn, KVH, D}, 1.0f, 2, true);
        const Tensor<Cpu> v = tape.randn({Bn, Tn, KVH, D}, 1.0f, 3, true);
        const Tensor<Cpu> o = grouped_attention(q, k, v, causal);
        REQUIRE(o.shape() == Shape{Bn, Tn, H, D});
        const Tensor<Cpu> g = tape.randn(o.shape(), 1.0f, 4);
        tape.backward(o, g);
        // the reference: [B, H, T, D] copies, k and v repeated, through attention()
        auto leaf = [&](const Tensor<Cpu>& x, std::int64_t heads, std::int64_t r) {
          Tensor<Cpu> t = tape.input({Bn, heads * r, Tn, D}, heads_first(x.to_vector(), Bn, Tn, heads, D, r));
          t.set_requires_grad(true);
          return t;
        };
        const Tensor<Cpu> qr = leaf(q, H, 1), kr = leaf(k, KVH, R), vr = leaf(v, KVH, R);
        const Tensor<Cpu> orf = attention(qr, kr, vr, causal);
        tape.backward(orf, tape.input(orf.shape(), heads_first(g.to_vector(), Bn, Tn, H, D, 1)));
        CHECK(max_abs_diff(heads_first(o.to_vector(), Bn, Tn, H, D, 1), orf.to_vector()) < 1e-5);
        CHECK(max_abs_diff(q.grad().to_vector(), heads_first_grad(qr.grad().to_vector(), Bn, Tn, H, D, 1)) < 1e-5);
        CHECK(max_abs_diff(k.grad().to_vector(), heads_first_grad(kr.grad().to_vector(), Bn, Tn, KVH, D, R)) < 1e-5);
        CHECK(max_abs_diff(v.grad().to_vector(), heads_first_grad(vr.grad().to_vector(), Bn, Tn, KVH, D, R)) < 1e-5);
      }
  Cpu::set_attention_path(cpu::AttentionPath::from_env);
}

TEST_CASE("grouped_attention errors say what, where and what was expected", "[ops][attention][gqa]") {
  Tape<Cpu> tape;
  require_error([&] { (void)grouped_attention(tape.zeros({1, 4, 6, 8}), tape.zeros({1, 4, 4, 8}), tape.zeros({1, 4, 4, 8})); },
                {"remat::grouped_attention", "[1, 4, 6, 8]", "[1, 4, 4, 8]", "H a multiple of KVH"});
  require_error([&] { (void)grouped_attention(tape.zeros({4, 6, 8}), tape.zeros({4, 6, 8}), tape.zeros({4, 6, 8})); },
                {"remat::grouped_attention", "[4, 6, 8]", "q [B, T, H, D]"});
  require_error([&] { (void)grouped_attention(tape.zeros({1, 4, 2, 8}), tape.zeros({1, 4, 1, 4}), tape.zeros({1, 4, 1, 4})); },
                {"remat::grouped_attention", "[1, 4, 1, 4]"});
  require_error([&] { (void)grouped_attention(tape.zeros({1, 4, 2, 8}), tape.zeros({1, 5, 1, 8}), tape.zeros({1, 5, 1, 8})); },
                {"remat::grouped_attention", "[1, 5, 1, 8]"});
  require_error([&] { (void)grouped_attention(tape.zeros({1, 4, 2, 8}), tape.zeros({1, 4, 1, 8}), tape.zeros({1, 4, 2, 8})); },
                {"remat::grouped_attention", "v is [1, 4, 2, 8]"});
  require_error([&] {
    (void)grouped_attention(tape.zeros({1, 4, 2, 8}), to_dtype(tape.zeros({1, 4, 1, 8}), DType::bf16), tape.zeros({1, 4, 1, 8}));
  }, {"remat::grouped_attention", "bf16", "one element type"});
}
