#pragma once
// SPDX-License-Identifier: MIT
// gradcheck in the tests: the public remat::testing::gradcheck (remat/testing/gradcheck.hpp)
// with Catch2's CHECK on its report, and a helper for random leaves. One line per op.

#include <functional>
#include <vector>

#include <remat/remat.hpp>
#include <remat/testing/gradcheck.hpp>

#include "support/catch.hpp"

namespace remat_test {

using remat::Cpu;
using T = remat::Tensor<Cpu>;
using GradcheckOptions = remat::testing::GradcheckOptions;

/// Checks every input that requires grad (remat::testing::gradcheck); a failure prints the
/// report's mismatching elements. (A template: with options given, argument-dependent lookup
/// also finds remat::testing::gradcheck, and the exact match for the lambda picks this one.)
template <class F>
void gradcheck(remat::Tape<Cpu>& tape, F&& f, const std::vector<T>& inputs,
               GradcheckOptions o = {}) {
  const remat::testing::GradcheckReport r = remat::testing::gradcheck(tape, f, inputs, o);
  INFO(r.detail);
  CHECK(r.ok);
}

/// A leaf that requires grad, filled with N(0, std^2) numbers (shifted by `shift`).
inline T param(remat::Tape<Cpu>& tape, const remat::Shape& s, std::uint64_t seed,
               float std = 1.0f, float shift = 0.0f) {
  std::vector<float> h(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = shift + std * remat::rng::normal(seed, 3, i);
  auto t = tape.input(s, h);
  t.set_requires_grad(true);
  return t;
}

}  // namespace remat_test
