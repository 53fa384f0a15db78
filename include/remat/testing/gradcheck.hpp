#pragma once
// SPDX-License-Identifier: MIT
// For users' own ops and layers: the backward of a function of CPU tensors against central
// finite differences. The output is contracted with fixed pseudo-random weights R (the seed
// gradient), so one backward gives d(sum out R)/d input; the finite difference of the same sum
// uses a 4-point stencil in double. Framework-free: it returns a report;
// remat/testing/catch2.hpp wraps it as REMAT_REQUIRE_GRADCHECK.
//
//   auto x = tape.randn({4, 8}, 1.0f, /*seed*/ 1, /*requires_grad*/ true);
//   auto r = remat::testing::gradcheck(tape, [](const auto& in) { return my_op(in[0]); }, {x});
//   if (!r.ok) std::puts(r.detail.c_str());

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "remat/backend/cpu.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/rng.hpp"
#include "remat/core/tape.hpp"

namespace remat {
namespace testing {

struct GradcheckOptions {
  float h = 1e-2f;     // finite-difference step
  double atol = 2e-3;  // an element passes when |analytic - numeric| <= atol + rtol max(|a|, |n|)
  double rtol = 2e-2;
  int max_elems = 48;  // elements checked per input (evenly spread over big tensors)
  float kink = 0.0f;   // skip elements closer than this to 0 (ReLU's or abs's kink)
};

struct GradcheckReport {
  bool ok = true;
  std::int64_t checked = 0;     // elements compared, over every input
  std::int64_t mismatches = 0;  // of them, beyond the tolerance
  double max_diff = 0.0;        // the largest |analytic - numeric|
  std::string detail;           // each mismatch (the first 5 per input), or why nothing ran
};

/// Checks the gradient of every input that requires one. `f` must be a pure function of its
/// inputs (dropout is fine: the tape's random counter is restored before every evaluation).
/// The inputs' values are perturbed in place and restored. Float32 throughout: keep h near
/// 1e-2 and the values O(1).
inline GradcheckReport gradcheck(Tape<Cpu>& tape,
                                 const std::function<Tensor<Cpu>(const std::vector<Tensor<Cpu>>&)>& f,
                                 const std::vector<Tensor<Cpu>>& inputs, GradcheckOptions o = {}) {
  GradcheckReport rep;
  auto fail = [&](std::string why) {
    rep.ok = false;
    rep.detail += why;
    return rep;
  };
  const std::uint64_t rng0 = tape.rng_offset();
  const Tensor<Cpu> out = f(inputs);
  if (!out.defined() || !out.requires_grad())
    return fail("remat::testing::gradcheck: the function's output needs no gradient (expected "
                "it to depend on an input that requires one; hint: set_requires_grad(true))");
  std::vector<float> r(static_cast<std::size_t>(out.numel()));
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = rng::normal(99, 7, i);
  for (const Tensor<Cpu>& x : inputs)
    if (x.requires_grad()) x.clear_grad();
  tape.backward(out, tape.input(out.shape(), r));

  auto eval = [&]() {
    NoGrad ng;
    tape.set_rng_offset(rng0);
    const std::vector<float> v = f(inputs).to_vector();
    double s = 0.0;
    for (std::size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
    return s;
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Tensor<Cpu>& x = inputs[k];
    if (!x.requires_grad()) continue;
    const Tensor<Cpu> g = x.grad();
    if (!g.defined()) {
      fail("input " + std::to_string(k) + " (" + x.shape().str() + ") requires a gradient but "
           "got none (expected the output to depend on it)\n");
      continue;
    }
    const std::vector<float> ga = g.to_vector();
    float* xp = x.data<float>();
    const std::int64_t n = x.numel();
    const std::int64_t stride = std::max<std::int64_t>(1, n / std::max(1, o.max_elems));
    int bad = 0;
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
      ++rep.checked;
      rep.max_diff = std::max(rep.max_diff, diff);
      if (!(diff <= o.atol + o.rtol * std::max(std::fabs(ana), std::fabs(num)))) {
        ++rep.mismatches;
        rep.ok = false;
        if (bad++ < 5) {
          char line[160];
          std::snprintf(line, sizeof line, "input %zu %s element %lld: analytic %.6f, numeric %.6f\n",
                        k, x.shape().str().c_str(), static_cast<long long>(i), ana, num);
          rep.detail += line;
        }
      }
    }
  }
  if (rep.ok)
    rep.detail = std::to_string(rep.checked) + " elements agree; max |analytic - numeric| " +
                 std::to_string(rep.max_diff);
  return rep;
}

}  // namespace testing
}  // namespace remat
