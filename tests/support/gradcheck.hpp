#pragma once
// SPDX-License-Identifier: MIT
// gradcheck: the backward of any function of tensors against central finite differences.
// The function's output is contracted with fixed random weights R (the seed gradient), so one
// backward gives d(sum out R)/d input; the finite difference of the same sum uses a 4-point
// stencil in double. One line per op in the tests.

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"

namespace remat_test {

using remat::Cpu;
using T = remat::Tensor<Cpu>;

struct GradcheckOptions {
  float h = 1e-2f;          // finite-difference step
  double atol = 2e-3;       // |analytic - numeric| <= atol + rtol * max(|a|, |n|)
  double rtol = 2e-2;
  int max_elems = 48;       // elements checked per input (evenly spread over big tensors)
  float kink = 0.0f;        // skip elements closer than this to 0 (ReLU's kink)
};

inline double contract(const T& out, const std::vector<float>& r) {
  const auto v = out.to_vector();
  double s = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

/// Checks every input that requires grad. `f` must be a pure function of its inputs (dropout
/// is handled: the tape's random counter is restored before every evaluation).
inline void gradcheck(remat::Tape<Cpu>& tape, const std::function<T(const std::vector<T>&)>& f,
                      const std::vector<T>& inputs, GradcheckOptions o = {}) {
  const std::uint64_t rng0 = tape.rng_offset();
  T out = f(inputs);
  REQUIRE(out.requires_grad());
  std::vector<float> r(static_cast<std::size_t>(out.numel()));
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = remat::rng::normal(99, 7, i);
  for (const T& x : inputs)
    if (x.requires_grad()) x.clear_grad();
  tape.backward(out, tape.input(out.shape(), r));

  auto eval = [&]() {
    remat::NoGrad ng;
    tape.set_rng_offset(rng0);
    return contract(f(inputs), r);
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const T& x = inputs[k];
    if (!x.requires_grad()) continue;
    const T g = x.grad();
    REQUIRE(g.defined());
    const auto ga = g.to_vector();
    float* xp = x.data<float>();
    const std::int64_t n = x.numel();
    const std::int64_t stride = std::max<std::int64_t>(1, n / o.max_elems);
    int bad = 0;
    double maxdiff = 0.0;
    for (std::int64_t i = 0; i < n; i += stride) {
      const float x0 = xp[i];
      if (o.kink > 0.0f && std::fabs(x0) < o.kink) continue;
      auto at = [&](float d) {
        xp[i] = x0 + d;
        const double v = eval();
        xp[i] = x0;
        return v;
      };
      const double h = o.h;
      const double num = (-at(2 * o.h) + 8 * at(o.h) - 8 * at(-o.h) + at(-2 * o.h)) / (12 * h);
      const double ana = ga[static_cast<std::size_t>(i)];
      const double diff = std::fabs(ana - num);
      maxdiff = std::max(maxdiff, diff);
      if (diff > o.atol + o.rtol * std::max(std::fabs(ana), std::fabs(num))) {
        if (bad++ < 5)
          std::printf("  input %zu element %lld: analytic %.6f numeric %.6f\n", k,
                      static_cast<long long>(i), ana, num);
      }
    }
    INFO("input " << k << " shape " << x.shape().str() << ": " << bad
                  << " mismatches, maxdiff " << maxdiff);
    CHECK(bad == 0);
  }
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
