#pragma once
// SPDX-License-Identifier: MIT
// Sampling from a trained language model, for any model: the model enters as a callable that
// gives the logits of a window's last position; tokens are drawn with a temperature from the
// counter-based generator, so a seed gives the same text on every backend and thread count.
//
//   train::SampleOptions o;
//   o.context = 1024;   // the model's positions
//   o.drawable = 50257; // the tokenizer's ids
//   auto ids = train::generate([&](const std::vector<std::int32_t>& window) { return last_row; },
//                              prompt, /*n=*/200, o, [] { return true; });

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/rng.hpp"

namespace remat {
namespace train {

/// How generate() draws tokens.
struct SampleOptions {
  float temperature = 1.0f;    ///< 0: always the most likely token
  std::uint64_t seed = 1337;   ///< of the counter-based generator (rng::uniform)
  std::int64_t context = 0;    ///< the longest window the model takes (its block size)
  std::int64_t drawable = 0;   ///< ids 0 .. drawable - 1 may be drawn (the real vocabulary)
};

/// Token `i` of a generation from `logits` (at least `drawable` floats): softmax of the logits
/// divided by the temperature (at least 1e-4, so 0 takes the most likely token), then the
/// inverse of its cumulative sum at u = rng::uniform(seed, 0xabc, i).
inline std::int32_t sample_token(const float* logits, std::int64_t drawable, float temperature,
                                 std::uint64_t seed, std::uint64_t i) {
  REMAT_CHECK(drawable > 0, "remat::train::sample_token: ", drawable,
              " drawable ids (expected at least 1)");
  float mx = logits[0];
  for (std::int64_t v = 1; v < drawable; ++v) mx = std::max(mx, logits[v]);
  std::vector<double> p(static_cast<std::size_t>(drawable));
  double sum = 0;
  for (std::int64_t v = 0; v < drawable; ++v)
    sum += p[static_cast<std::size_t>(v)] = std::exp((logits[v] - mx) / std::max(temperature, 1e-4f));
  double u = rng::uniform(seed, 0xabc, i) * sum;
  for (std::int64_t v = 0; v < drawable; ++v)
    if ((u -= p[static_cast<std::size_t>(v)]) <= 0) return static_cast<std::int32_t>(v);
  return static_cast<std::int32_t>(drawable - 1);
}

/// Generates up to `n` tokens after `prompt` (not empty): each from
/// logits_of(window) -> the logits of the window's last position (a container of at least
/// drawable floats), where the window is the last context tokens so far. Runs under NoGrad;
/// stops early when keep_going() turns false (a signal, say). Returns the new tokens only.
template <class LogitsOf, class KeepGoing>
std::vector<std::int32_t> generate(LogitsOf&& logits_of, std::vector<std::int32_t> prompt, int n,
                                   const SampleOptions& o, KeepGoing&& keep_going) {
  REMAT_CHECK(!prompt.empty() && o.context > 0 && o.drawable > 0, "remat::train::generate: a ",
              "prompt of ", prompt.size(), " tokens, context ", o.context, ", drawable ", o.drawable,
              " (expected a prompt of at least one token, and context and drawable > 0)");
  NoGrad no_grad;
  std::vector<std::int32_t> ctx = std::move(prompt), out;
  for (int i = 0; i < n && keep_going(); ++i) {
    const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(ctx.size()), o.context);
    const std::vector<std::int32_t> window(ctx.end() - T, ctx.end());
    const auto logits = logits_of(window);
    REMAT_CHECK(static_cast<std::int64_t>(logits.size()) >= o.drawable, "remat::train::generate: ",
                "the model gave ", logits.size(), " logits (expected at least drawable = ",
                o.drawable, ")");
    const std::int32_t next = sample_token(logits.data(), o.drawable, o.temperature, o.seed,
                                           static_cast<std::uint64_t>(i));
    ctx.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace train
}  // namespace remat
