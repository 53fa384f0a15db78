#pragma once
// SPDX-License-Identifier: MIT
// For users' own tests: runs a function with and without checkpoint() from the same RNG state
// and compares every gradient bit for bit, and the peak of saved activations of both runs.
// Framework-free; remat/testing/catch2.hpp wraps it in REQUIRE-style macros.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/core/memory.hpp"
#include "remat/ops/elementwise.hpp"

namespace remat {
namespace testing {

struct EquivalenceReport {
  bool equal = true;            // every gradient (and the output) bitwise equal
  std::string detail;           // the first difference, or a summary
  std::int64_t plain_peak_saved = 0;       // peak bytes of saved activations, plain run
  std::int64_t checkpoint_peak_saved = 0;  // ... with checkpoint()
};

namespace detail_eq {
template <class B>
std::vector<std::vector<float>> take_grads(const std::vector<Tensor<B>>& ts) {
  std::vector<std::vector<float>> g;
  for (const auto& t : ts) {
    auto gr = t.grad();
    g.push_back(gr.defined() ? gr.template to_vector<float>() : std::vector<float>());
    t.clear_grad();
  }
  return g;
}
/// A float as "-1.33981204 (0xbfab7f1e)": enough digits to tell neighbours apart, and its bits.
inline std::string exact(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  char b[48];
  std::snprintf(b, sizeof b, "%.9g (0x%08x)", static_cast<double>(f), static_cast<unsigned>(u));
  return b;
}
}  // namespace detail_eq

/// Runs `run(false)` and `run(true)` (each returns one Tensor: the plain and the checkpointed
/// version of the same computation) from the tape's current RNG counter, backpropagates the
/// same pseudo-random seed gradient through both, and compares the outputs and the gradients
/// of `watch` (parameters, inputs) bit for bit. On a difference, `detail` names the first
/// gradient that differs, its first differing element (both values with 9 digits and their
/// bits) and how many of its elements differ; when the checkpointed run throws (the replay
/// check: an op ran with other attributes than in the first pass), the error.
template <class B, class Run>
EquivalenceReport compare_runs(Tape<B>& tape, Run&& run, const std::vector<Tensor<B>>& watch) {
  EquivalenceReport r;
  const std::uint64_t rng0 = tape.rng_offset();
  for (const auto& t : watch) t.clear_grad();
  auto once = [&](bool ck, std::int64_t& peak) {
    tape.set_rng_offset(rng0);
    const std::int64_t base = memory_stats<B>().live_of(Category::activations);
    reset_peak_memory<B>();
    Tensor<B> out = run(ck);
    std::vector<float> seed(static_cast<std::size_t>(out.numel()));
    for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = rng::normal(2024, 1, i);
    auto values = out.template to_vector<float>();
    tape.backward(out, tape.input(out.shape(), seed));
    peak = memory_stats<B>().peak_of(Category::activations) - base;
    auto grads = detail_eq::take_grads(watch);
    grads.push_back(std::move(values));
    return grads;
  };
  const auto plain = once(false, r.plain_peak_saved);
  std::vector<std::vector<float>> ckpt;
  try {
    ckpt = once(true, r.checkpoint_peak_saved);
  } catch (const Error& e) {  // the replay check found the function impure (or another error)
    r.equal = false;
    r.detail = std::string("the checkpointed run threw: ") + e.what();
    return r;
  }
  for (std::size_t i = 0; i < plain.size() && r.equal; ++i) {
    const std::string what = i + 1 == plain.size() ? "the output" : "gradient " + std::to_string(i);
    if (plain[i].size() != ckpt[i].size()) {
      r.equal = false;
      r.detail = what + ": " + std::to_string(plain[i].size()) + " elements plainly, " +
                 std::to_string(ckpt[i].size()) + " with checkpointing";
      break;
    }
    std::size_t first = plain[i].size(), differ = 0;
    for (std::size_t j = 0; j < plain[i].size(); ++j)
      if (std::memcmp(&plain[i][j], &ckpt[i][j], sizeof(float)) != 0) {
        if (differ++ == 0) first = j;
      }
    if (differ == 0) continue;
    r.equal = false;
    r.detail = what + " element " + std::to_string(first) + ": " +
               detail_eq::exact(plain[i][first]) + " plainly, " +
               detail_eq::exact(ckpt[i][first]) + " with checkpointing; " +
               std::to_string(differ) + " of " + std::to_string(plain[i].size()) +
               " elements differ";
  }
  if (r.equal)
    r.detail = "bitwise equal; peak saved activations " + std::to_string(r.plain_peak_saved) +
               " B plainly, " + std::to_string(r.checkpoint_peak_saved) + " B with checkpointing";
  return r;
}

/// compare_runs of fn(inputs...) against checkpoint(opt, fn, inputs...).
template <class B, class Fn, class... In>
EquivalenceReport checkpoint_equivalence(Tape<B>& tape, Fn fn, const std::vector<Tensor<B>>& watch,
                                         const CheckpointOptions& opt, const Tensor<B>& first,
                                         const In&... rest) {
  return compare_runs(
      tape,
      [&](bool ck) {
        return ck ? Tensor<B>(checkpoint(opt, fn, first, rest...)) : Tensor<B>(fn(first, rest...));
      },
      watch);
}

}  // namespace testing
}  // namespace remat
