#pragma once
// SPDX-License-Identifier: MIT
// What one stage of a planner chain costs (NOTE [chain model] in plan/chain.hpp), measured by
// running it: its bytes from the ledger (exact on the shape-only twin, backend/meta.hpp), its
// times from the clock on a real backend, or from the work its kernels ask for on the twin.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "remat/backend/meta.hpp"
#include "remat/core/work.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/tape.hpp"
#include "remat/plan/chain.hpp"

namespace remat::plan {

/// A nominal time for `w` on a CPU-class device: FLOPs at 50 GFLOP/s plus compulsory bytes at
/// 10 GB/s. The planner only compares times, so only the ratio of the two rates matters.
inline double nominal_seconds(const Work& w) {
  return w.total_flops() / 50e9 + w.total_bytes() / 10e9;
}

namespace detail {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
/// The clock a measurement reads: wall time on a real backend; on the shape-only twin the
/// nominal seconds of the work counted so far (nominal_seconds), so differences are times.
template <class B>
double clock_s() {
  if constexpr (is_meta_backend_v<B>)
    return nominal_seconds(B::work());
  else
    return now_s();
}

}  // namespace detail

/// What one way of running a stage costs, measured around fwd (see NOTE [chain model]).
struct StageCost {
  std::int64_t saved = 0, fwd_extra = 0, bwd_extra = 0, nograd_extra = 0;
  double fwd_s = 0, bwd_s = 0, nograd_s = 0;
};

/// Runs y = fwd(x) recorded, then its backward (seeded with dy, or from the scalar y when dy is
/// undefined), `repeats` times after a warm-up that makes the parameters' gradients; then once
/// without grad. Bytes from B's ledger, times from detail::clock_s<B> (the wall clock, or the
/// shape-only twin's nominal seconds). `in_grad` is |delta_in|.
template <class B, class Fwd>
StageCost measure_stage(Tape<B>& tape, Fwd&& fwd, const Tensor<B>& x, const Tensor<B>& dy,
                        std::int64_t in_grad, int repeats) {
  auto backward = [&](const Tensor<B>& y) {
    if (dy.defined())
      tape.backward(y, dy);
    else
      tape.backward(y);
  };
  {
    Tensor<B> y = fwd(x);
    backward(y);
  }
  StageCost c;
  std::vector<double> tf, tb, tn;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    if (x.requires_grad()) x.clear_grad();
    B::synchronize();
    const std::int64_t live0 = memory_stats<B>().live_total;
    reset_peak_memory<B>();
    double t0 = detail::clock_s<B>();
    Tensor<B> y = fwd(x);
    B::synchronize();
    tf.push_back(detail::clock_s<B>() - t0);
    const std::int64_t live1 = memory_stats<B>().live_total;
    c.saved = live1 - live0;
    c.fwd_extra = memory_stats<B>().peak_total - live1;
    const std::int64_t seed_copy = static_cast<std::int64_t>(y.bytes());  // backward's copy of dy
    reset_peak_memory<B>();
    t0 = detail::clock_s<B>();
    backward(y);
    B::synchronize();
    tb.push_back(detail::clock_s<B>() - t0);
    c.bwd_extra = std::max<std::int64_t>(0, memory_stats<B>().peak_total - live1 - in_grad - seed_copy);
  }
  for (int r = 0; r < std::max(1, repeats); ++r) {
    NoGrad off;
    const std::int64_t live0 = memory_stats<B>().live_total;
    reset_peak_memory<B>();
    const double t0 = detail::clock_s<B>();
    Tensor<B> y = fwd(x);
    B::synchronize();
    tn.push_back(detail::clock_s<B>() - t0);
    c.nograd_extra = memory_stats<B>().peak_total - live0 - static_cast<std::int64_t>(y.bytes());
  }
  c.fwd_s = detail::median(tf);
  c.bwd_s = detail::median(tb);
  c.nograd_s = detail::median(tn);
  if (x.requires_grad()) x.clear_grad();
  return c;
}

}  // namespace remat::plan
