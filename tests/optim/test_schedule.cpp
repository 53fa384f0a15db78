// SPDX-License-Identifier: MIT
// The learning-rate schedule against hand-computed rates, and its errors.

#include <cmath>

#include <remat/optim/schedule.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using remat::optim::LrSchedule;

TEST_CASE("warmup then cosine decay gives the hand-computed rates", "[optim][schedule]") {
  // peak 1e-3, final 1e-4, 2 warmup updates, decay over updates 2..6
  const LrSchedule s = LrSchedule::warmup_cosine(1e-3f, 1e-4f, 2, 6);
  CHECK(s.at(0) == Approx(0.5e-3));  // 1e-3 * 1/2
  CHECK(s.at(1) == Approx(1.0e-3));  // 1e-3 * 2/2
  CHECK(s.at(2) == Approx(1.0e-3));  // r = 0: the peak
  // r = 1/4: 1e-4 + 0.9e-3 * (1 + cos(pi/4)) / 2 = 8.6820e-4
  CHECK(s.at(3) == Approx(1e-4 + 0.9e-3 * (1 + std::cos(3.14159265358979323846 / 4)) / 2).epsilon(1e-6));
  CHECK(s.at(3) == Approx(8.6820e-4).epsilon(1e-4));
  CHECK(s.at(4) == Approx(5.5e-4));  // r = 1/2: halfway
  CHECK(s.at(6) == Approx(1e-4));    // the end of the decay
  CHECK(s.at(100) == 1e-4f);         // and after it
  CHECK(LrSchedule::constant(3e-4f).at(0) == 3e-4f);
  CHECK(LrSchedule::constant(3e-4f).at(1000) == 3e-4f);
  CHECK(LrSchedule::warmup_cosine(1e-3f, 0.0f, 0, 4).at(0) == 1e-3f);  // no warmup
}

TEST_CASE("schedule errors name the values and what is expected", "[optim][schedule]") {
  using remat_test::require_error;
  require_error([] { (void)LrSchedule::warmup_cosine(1e-3f, 2e-3f, 2, 6); },
                {"final rate", "0 <= final <= peak"});
  require_error([] { (void)LrSchedule::warmup_cosine(1e-3f, 1e-4f, 6, 6); },
                {"6 warmup updates of 6", "warmup < total"});
  require_error([] { (void)LrSchedule::constant(NAN); }, {"rate", "finite"});
}
