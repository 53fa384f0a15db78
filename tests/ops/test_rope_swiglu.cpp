// SPDX-License-Identifier: MIT
// The Llama-family ops' values (their gradients, estimates, checkpointing and CUDA twins are
// op cases: support/op_cases.hpp): rotary embeddings against Hugging Face's formulas written
// here in double (rotate_half; rope_theta; Llama 3's rope_scaling bands), SwiGLU against
// silu(a) * b, and their errors.
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
