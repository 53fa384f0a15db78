#pragma once
// SPDX-License-Identifier: MIT
// The budget planner: Rotor's persistent dynamic program over (interval, memory slots) with K
// options per stage (Rockmate's rk_rotor), filled once for every slot count 0..M, so one table
// answers any budget, the Pareto curve and a re-plan after an OOM. See chain.hpp for the model.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/plan/chain.hpp"

namespace remat::plan {

// NOTE [planner DP]
// Stages are numbered 1..n here (stage s is Chain::stages[s-1]); X_b is the slot count of x_b,
// b = 0..n (X_0 = input). C(s,t,m) is the least time of "forward from the held x_{s-1} through
// stage t, then backward from delta_t down to delta_{s-1}" with at most m slots live at every
// instant, x_{s-1} not counted. delta_t is live during the forward when t < n (a re-solve: the
// gradient came back first); for t = n it appears with the Loss, after F_all(n). Let
// Gf_t = X_t for t < n, 0 for t = n. For option k of stage s: A (tape), Pf, Pb (extras), FB (time).
//
//   TAPE_k(s,t,m) = FB_sk + [s<t] C(s+1, t, m - A_sk)
//       valid if  Gf_t + A_sk + Pf_sk <= m                 (F_all(s))
//           and   X_s + A_sk + X_{s-1} + Pb_sk <= m        (B(s): delta_s, tape, delta_{s-1})
//   CKPT_j(s,t,m) = sum_{i=s}^{j-1} Fn_i + C(j, t, m - X_{j-1}) + C(s, j-1, m - Fr(s,j-1)),
//                   s < j <= t, where Fr(s,l) = X_{s-1} + 2 X_l is the segment's frame (NOTE
//                   [chain model]): what the checkpoint() call that replays it holds on top
//       valid if  stages s..j-1 can be checkpointed and, for i in s..j-1,
//                 Gf_t + X_i + [i>s] X_{i-1} + Pn_i <= m   (the sweep F_ck(s), F_nograd(s+1..j-1))
//   C(s,t,m) = min over both (infinity if none is valid)
//
// Every right-hand side refers to a shorter interval, so the table is filled by interval length,
// and for one interval all m at once: the inner loops run over contiguous rows of m.
// - Above ka(s,t), the slots keep-all (fastest options) of [s..t] needs, C is the keep-all time:
//   only TAPE with the fastest option is evaluated there.
// - CKPT_j costs at least its sweep plus the keep-all time of [s..t]; where the row already holds
//   a smaller value at some m' <= m, CKPT_j cannot win at m and is not evaluated (see fill()).
// - Ties: values within 1e-9 (relative) of the best are ties, won by the plan with fewer segments
//   (less recomputation); the table keeps that count per entry.
// - C is non-increasing in m (a plan valid at m is valid at m+1). The tie rule could break that by
//   1e-9, so a last pass per row carries the previous choice up where the row would rise; that
//   choice's value at m+1 is <= its value at m. Predicted time is thus non-increasing in budget.

/// How the DP discretizes memory. Sizes are rounded UP to slots, so a plan that fits in slots
/// fits in bytes; the plan is optimal for the rounded sizes.
/// The fill takes ~ n^3/6 * slots steps (fewer with pruning): 98 stages x 512 slots ~ 40 ms.
struct PlannerOptions {
  int slots = 512;              // table size when unit = 0: it spans 0..slots units
  std::int64_t max_budget = 0;  // bytes, whole step; 0: the peak of keep_all(chain)
  std::int64_t unit = 0;        // bytes per slot; 0: with max_budget given, ceil((max_budget -
                                // base) / slots); without, the least unit that fits keep-all's
                                // rounded-up sizes into `slots`
};

/// One stage of a plan, for Plan::table().
struct PlanRow {
  std::string stage, option;  // names
  std::string segment;        // innermost segment ("S2.1" = first segment inside the second), "-"
  int depth = 0;              // segments around the stage = its no-grad forwards
  std::int64_t held = 0;      // bytes left live by the first forward (its tape, or checkpoint)
  std::int64_t tape = 0;      // bytes of its tape while its backward waits
  double time_s = 0;          // fwd + bwd of its option + depth * nograd forward
};

/// The planner's answer for one budget.
struct Plan {
  Schedule schedule;
  double time_s = 0;           // predicted step time: forwards, backwards and replays (seconds)
  std::int64_t peak = 0;       // predicted peak: simulate(chain, schedule).peak, bytes incl. base
  std::int64_t budget = 0;     // the budget asked for (bytes, whole step)
  double keep_all_time_s = 0;  // the fastest schedule's time, for comparison
  int segments = 0;
  std::vector<PlanRow> rows;

  /// A readable table: per stage its option, segment, held and tape bytes, and time.
  std::string table() const {
    std::size_t w = 5, wo = 6;
    for (const PlanRow& r : rows)
      w = std::max(w, r.stage.size()), wo = std::max(wo, r.option.size());
    std::string out;
    char line[512];
    auto row = [&](const std::string& a, const std::string& b, const std::string& c,
                   const std::string& d, const std::string& e, const std::string& f,
                   const std::string& g) {
      std::snprintf(line, sizeof line, "%-*s  %-*s  %-8s  %4s  %12s  %12s  %10s\n",
                    static_cast<int>(w), a.c_str(), static_cast<int>(wo), b.c_str(), c.c_str(),
                    d.c_str(), e.c_str(), f.c_str(), g.c_str());
      out += line;
    };
    auto ms = [](double s) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f ms", s * 1e3);
      return std::string(b);
    };
    row("stage", "option", "segment", "fwds", "held", "tape", "time");
    std::int64_t held = 0;
    for (const PlanRow& r : rows) {
      row(r.stage, r.option, r.segment, std::to_string(r.depth + 1), detail::format_bytes(r.held),
          detail::format_bytes(r.tape), ms(r.time_s));
      held += r.held;
    }
    row("total", "", std::to_string(segments) + " seg", "", detail::format_bytes(held), "",
        ms(time_s));
    std::snprintf(
        line, sizeof line,
        "budget %s, predicted peak %s, predicted time %.3f ms (keep-all %.3f ms, %+.1f%%)\n",
        detail::format_bytes(budget).c_str(), detail::format_bytes(peak).c_str(), time_s * 1e3,
        keep_all_time_s * 1e3,
        keep_all_time_s > 0 ? 100.0 * (time_s / keep_all_time_s - 1.0) : 0.0);
    out += line;
    return out;
  }
};

/// Fills the DP table once for every slot count, then answers budgets.
///
///   Planner planner(chain);                  // ~ n^3 / 6 * slots steps
///   Plan p = planner.plan(8LL << 30);        // fastest schedule with peak <= 8 GiB
///   std::puts(p.table().c_str());
class Planner {
 public:
  explicit Planner(Chain chain, PlannerOptions options = {})
      : chain_(std::move(chain)), options_(options) {
    validate(chain_);
    n_ = static_cast<int>(chain_.stages.size());
    REMAT_CHECK(n_ < 30000, "remat::plan::Planner: the chain has ", n_,
                " stages; expected fewer than 30000");
    for (const Stage& st : chain_.stages)
      REMAT_CHECK(st.options.size() < 30000, "remat::plan::Planner: stage '", st.name, "' has ",
                  st.options.size(), " options; expected fewer than 30000");
    ka_schedule_ = keep_all(chain_);
    const SimResult ka = simulate(chain_, ka_schedule_);
    keep_all_peak_ = ka.peak;
    keep_all_time_ = ka.time_s;
    max_budget_ = options_.max_budget > 0 ? options_.max_budget : keep_all_peak_;
    const std::int64_t span = max_budget_ - chain_.base;
    REMAT_CHECK(span >= 0, "remat::plan::Planner: max_budget is ", max_budget_,
                " bytes; expected at least base = ", chain_.base,
                " bytes (budgets are whole-step budgets, base included)");
    REMAT_CHECK(options_.unit > 0 || options_.slots > 0, "remat::plan::Planner: slots is ",
                options_.slots, "; expected > 0 (or a unit in bytes)");
    REMAT_CHECK(options_.unit >= 0, "remat::plan::Planner: unit is ", options_.unit,
                "; expected >= 0");
    unit_ = options_.unit > 0
                ? options_.unit
                : std::max<std::int64_t>(1, (span + options_.slots - 1) / options_.slots);
    slot_sizes();
    if (options_.unit <= 0 && options_.max_budget <= 0) {
      // sizes round up, so keep-all needs more than span / unit slots: grow the unit until it
      // fits in `slots`, which keeps the table (and the time to fill it) the size asked for
      std::int64_t lo = unit_ - 1;  // too small (or 0); ka_slots only falls as the unit grows
      while (ka_slots(1, n_) > options_.slots) {
        lo = unit_;
        unit_ =
            std::max(unit_ + 1, (unit_ * ka_slots(1, n_) + options_.slots - 1) / options_.slots);
        slot_sizes();
      }
      for (std::int64_t hi = unit_; hi - lo > 1;) {  // the least unit that fits, in (lo, hi]
        unit_ = lo + (hi - lo) / 2;
        slot_sizes();
        (ka_slots(1, n_) > options_.slots ? lo : hi) = unit_;
        if (hi - lo <= 1) unit_ = hi, slot_sizes();
      }
    }
    std::int64_t m = span / unit_;
    if (options_.max_budget <= 0)
      m = std::max<std::int64_t>(m, ka_slots(1, n_));  // keep-all inside
    const std::int64_t rows = static_cast<std::int64_t>(n_) * (n_ + 1) / 2;
    REMAT_CHECK((m + 1) * rows <= (std::int64_t{1} << 27),
                "remat::plan::Planner: the table would hold ", m + 1, " slot counts x ", rows,
                " intervals; expected at most 2^27 entries (hint: fewer slots, or a "
                "larger unit; unit is ",
                unit_, " bytes)");
    M_ = static_cast<int>(m);
    fill();
  }

  /// The fastest schedule whose simulated peak is <= budget (bytes, whole step, base included).
  /// Budgets above the table's span get the table's best plan; budgets at or above the keep-all
  /// peak get keep_all(chain). Throws remat::Error below min_feasible().
  Plan plan(std::int64_t budget) const {
    if (budget >= keep_all_peak_) return make_plan(ka_schedule_, top_keep_all_time(), budget);
    const std::int64_t m =
        budget < chain_.base ? -1 : std::min<std::int64_t>((budget - chain_.base) / unit_, M_);
    if (m < 0 || m < mlo(1, n_)) throw Error(infeasible(budget));
    const int mi = static_cast<int>(m);
    return make_plan(build(1, n_, mi), value(1, n_, mi), budget);
  }

  /// A Plan (rows, table) for any legal schedule, e.g. a fixed strategy to compare with; its
  /// time and peak are simulate()'s.
  Plan describe(const Schedule& s, std::int64_t budget) const {
    return make_plan(s, simulate(chain_, s).time_s, budget);
  }

  /// The smallest budget (bytes, whole step) for which plan() succeeds.
  std::int64_t min_feasible() const {
    const int m0 = mlo(1, n_);
    if (m0 > M_) return keep_all_peak_;
    return std::min(keep_all_peak_, chain_.base + static_cast<std::int64_t>(m0) * unit_);
  }

  /// The Pareto points (predicted time, peak) of the table, one per change of plan, from the
  /// leanest to keep-all; each Plan's budget is the smallest budget that gives it.
  std::vector<Plan> pareto() const {
    std::vector<Plan> cand;
    double last = std::numeric_limits<double>::infinity();
    for (int m = std::max(0, mlo(1, n_)); m <= M_; ++m) {
      const double v = value(1, n_, m);
      if (v < last) {
        const std::int64_t b = chain_.base + static_cast<std::int64_t>(m) * unit_;
        if (b >= keep_all_peak_) break;
        cand.push_back(make_plan(build(1, n_, m), v, b));
        last = v;
      }
    }
    cand.push_back(make_plan(ka_schedule_, top_keep_all_time(), keep_all_peak_));
    // keep a point only if no leaner one is as fast (rounding can make a later plan leaner)
    std::vector<Plan> out;
    for (std::size_t i = 0; i < cand.size(); ++i) {
      bool dominated = false;
      for (std::size_t j = 0; j < cand.size() && !dominated; ++j)
        dominated = j != i && cand[j].peak <= cand[i].peak && cand[j].time_s <= cand[i].time_s &&
                    (cand[j].peak < cand[i].peak || cand[j].time_s < cand[i].time_s || j < i);
      if (!dominated) out.push_back(std::move(cand[i]));
    }
    return out;
  }

  std::int64_t unit() const { return unit_; }  // bytes per slot
  int slots() const { return M_; }             // the table spans 0..slots()
  std::int64_t max_budget() const { return max_budget_; }
  std::int64_t keep_all_peak() const { return keep_all_peak_; }
  double keep_all_time() const { return keep_all_time_; }
  const Chain& chain() const { return chain_; }

 private:
  using Code = std::int16_t;  // >= 0: TAPE with that option; <= -2: CKPT at split -code
  static constexpr Code kNone = -1;
  static constexpr double kTie = 1e-9;    // relative: closer values are ties, won by fewer segments
  static constexpr double kPrune = 1e-6;  // relative margin of the pruning bound (>> tie drift)

  Chain chain_;
  PlannerOptions options_;
  int n_ = 0, M_ = 0;
  std::int64_t unit_ = 1, max_budget_ = 0, keep_all_peak_ = 0;
  double keep_all_time_ = 0;
  Schedule ka_schedule_;

  // slot sizes, stages 1..n (index 0 unused except X_[0] = input)
  std::vector<std::int64_t> X_, Pn_;
  std::vector<double> Fn_;
  std::vector<char> ck_;
  std::vector<std::size_t> opt0_;  // options of stage s are [opt0_[s], opt0_[s+1])
  std::vector<std::int64_t> A_, Pf_, Pb_;
  std::vector<double> FB_;
  std::vector<int> fast_;       // fastest option of each stage
  std::vector<double> fb_min_;  // prefix sums of the fastest fwd + bwd: keep-all time of [s..t]

  // the table: one row of M+1 entries per interval (s,t)
  std::vector<std::size_t> row_;  // (n+2)^2 -> offset
  std::vector<int> mlo_, ka_;     // least finite m; slots keep-all needs (both per interval)
  std::vector<double> T_;
  std::vector<Code> W_;
  std::vector<std::uint16_t> S_;  // segments in the chosen plan (saturating), the tie-breaker

  static std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }
  std::size_t ix(int s, int t) const { return idx(s) * idx(n_ + 2) + idx(t); }  // (s,t) -> flat
  int mlo(int s, int t) const { return mlo_[ix(s, t)]; }
  double value(int s, int t, int m) const { return T_[row_[ix(s, t)] + idx(m)]; }
  std::int64_t Gf(int t) const { return t < n_ ? X_[idx(t)] : 0; }
  std::int64_t x(int b) const { return X_[idx(b)]; }
  // slots of the frame of a segment over stages s..l (chain.hpp detail::frame_bytes)
  std::int64_t frame(int s, int l) const { return x(s - 1) + 2 * x(l); }

  std::int64_t to_slots(std::int64_t bytes) const { return (bytes + unit_ - 1) / unit_; }

  void slot_sizes() {
    const auto n = idx(n_);
    X_.assign(n + 1, 0), Pn_.assign(n + 1, 0), Fn_.assign(n + 1, 0.0), ck_.assign(n + 1, 0);
    A_.clear(), Pf_.clear(), Pb_.clear(), FB_.clear();
    opt0_.assign(n + 2, 0), fast_.assign(n + 1, 0);
    X_[0] = to_slots(chain_.input);
    for (std::size_t s = 1; s <= n; ++s) {
      const Stage& st = chain_.stages[s - 1];
      X_[s] = to_slots(st.out), Pn_[s] = to_slots(st.nograd_extra), Fn_[s] = st.nograd_fwd_s;
      ck_[s] = st.can_checkpoint ? 1 : 0;
      fast_[s] = fastest_option(st);
      opt0_[s + 1] = opt0_[s] + st.options.size();
      for (const StageOption& o : st.options) {
        A_.push_back(to_slots(o.saved)), Pf_.push_back(to_slots(o.fwd_extra)),
            Pb_.push_back(to_slots(o.bwd_extra));
        FB_.push_back(o.fwd_s + o.bwd_s);
      }
    }
    opt0_[1] = 0;
    fb_min_.assign(n + 1, 0.0);
    for (std::size_t s = 1; s <= n; ++s)
      fb_min_[s] = fb_min_[s - 1] + FB_[opt0_[s] + idx(fast_[s])];
    // keep-all slots of every interval: ka(s,t) = max(F_all(s) peak, A + ka(s+1,t), B(s) peak)
    ka_.assign((n + 2) * (n + 2), 0);
    for (int t = 1; t <= n_; ++t)
      for (int s = t; s >= 1; --s) {
        const std::size_t o = opt0_[idx(s)] + idx(fast_[idx(s)]);
        std::int64_t need = std::max(Gf(t) + A_[o] + Pf_[o], x(s) + A_[o] + x(s - 1) + Pb_[o]);
        if (s < t) need = std::max(need, A_[o] + ka_[ix(s + 1, t)]);
        ka_[ix(s, t)] =
            static_cast<int>(std::min<std::int64_t>(need, std::numeric_limits<int>::max() / 4));
      }
  }
  std::int64_t ka_slots(int s, int t) const { return ka_[ix(s, t)]; }

  // The value and segment count of choice `c` for (s,t) at m (the rows it reads must be finite).
  std::pair<double, std::uint16_t> eval(int s, int t, int m, Code c) const {
    if (c >= 0) {
      const std::size_t o = opt0_[idx(s)] + idx(c);
      if (s == t) return {FB_[o] + 0.0, 0};
      const std::size_t p = row_[ix(s + 1, t)] + idx(m - A_[o]);
      return {FB_[o] + T_[p], S_[p]};
    }
    const int j = -c;
    double sweep = 0;
    for (int i = s; i < j; ++i) sweep += Fn_[idx(i)];
    const std::size_t pt = row_[ix(j, t)] + idx(m - x(j - 1));
    const std::size_t pr = row_[ix(s, j - 1)] + idx(m - frame(s, j - 1));
    return {sweep + T_[pt] + T_[pr], sat(1u + S_[pt] + S_[pr])};
  }
  static std::uint16_t sat(unsigned v) { return static_cast<std::uint16_t>(std::min(v, 65535u)); }

  // Offers candidate c for m in [m0, m1): value val(m), segment count seg(m). A candidate wins
  // where it is faster by more than the tie tolerance, or a near tie with fewer segments. Most
  // offers lose everywhere, so each chunk of m is first screened by a branch-free loop that the
  // compiler vectorizes (even with plain SSE2); only chunks with a possible winner go scalar.
  template <class Val, class Seg>
  static void offer(int m0, int m1, double* best, std::uint16_t* sg, Code* ch, Code c, Val val,
                    Seg seg) {
    constexpr double lo_f = 1.0 - kTie, hi_f = 1.0 + kTie;
    constexpr int kChunk = 16;
    for (int m = m0; m < m1; m += kChunk) {
      const int e = std::min(m + kChunk, m1);
      double maybe = 0;
      for (int q = m; q < e; ++q) maybe += val(q) <= best[q] * hi_f ? 1.0 : 0.0;
      if (maybe == 0) continue;
      for (int q = m; q < e; ++q) {
        const double v = val(q), b = best[q];
        if (v < b * lo_f || (v <= b * hi_f && seg(q) < unsigned{sg[q]}))
          best[q] = v, sg[q] = sat(seg(q)), ch[q] = c;
      }
    }
  }

  void fill() {
    const auto n = idx(n_);
    const std::size_t W = idx(M_) + 1;  // one row: m = 0..M
    const int none = M_ + 1;
    row_.assign((n + 2) * (n + 2), 0);
    mlo_.assign((n + 2) * (n + 2), none);
    std::size_t next = 0;
    for (int s = 1; s <= n_; ++s)
      for (int t = s; t <= n_; ++t) row_[ix(s, t)] = next, next += W;
    const double inf = std::numeric_limits<double>::infinity();
    T_.assign(next, inf);
    W_.assign(next, kNone);
    S_.assign(next, 0);
    std::vector<double> upper(W);  // U[m] of the pruning test below
    auto clampm = [&](std::int64_t v) {
      return static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(v, 0), none));
    };

    for (int len = 0; len < n_; ++len)
      for (int s = 1; s + len <= n_; ++s) {
        const int t = s + len;
        double* best = &T_[row_[ix(s, t)]];
        Code* ch = &W_[row_[ix(s, t)]];
        std::uint16_t* sg = &S_[row_[ix(s, t)]];
        const int hi = clampm(ka_slots(s, t));  // [hi, M]: keep-all is optimal
        const std::size_t o0 = opt0_[idx(s)], o1 = opt0_[idx(s) + 1];
        // TAPE_k
        for (std::size_t o = o0; o < o1; ++o) {
          std::int64_t req = std::max(Gf(t) + A_[o] + Pf_[o], x(s) + A_[o] + x(s - 1) + Pb_[o]);
          const Code c = static_cast<Code>(o - o0);
          const double fb = FB_[o];
          if (s == t) {
            offer(
                clampm(req), hi, best, sg, ch, c, [&](int) { return fb + 0.0; },
                [](int) { return 0u; });
          } else {
            const int m0 = clampm(std::max(req, A_[o] + mlo(s + 1, t)));
            if (m0 >= hi) continue;
            const std::size_t sub = row_[ix(s + 1, t)];
            const double* Ts = &T_[sub] - A_[o];  // Ts[m] = C(s+1, t, m - A)
            const std::uint16_t* Ss = &S_[sub] - A_[o];
            offer(
                m0, hi, best, sg, ch, c, [&](int m) { return fb + Ts[m]; },
                [&](int m) { return unsigned{Ss[m]}; });
          }
        }
        // CKPT_j: sweep s..j-1 without grad, hold x_{j-1}
        if (ck_[idx(s)] && s < t) {
          // Pruning: CKPT_j costs at least L_j = sweep + (keep-all time of [s..t]), and the final
          // C(s,t,m) is at most U[m], the running minimum of the row so far (C is monotone in m).
          // So CKPT_j cannot win (nor tie) where U[m] < L_j, a suffix of m since U is
          // non-increasing. The margin kPrune (1e-6) covers rounding and tie drift; U is not
          // refreshed as the splits lower the row (measured: refreshing costs more than it prunes).
          double run = std::numeric_limits<double>::infinity();
          for (int m = 0; m < hi; ++m) upper[idx(m)] = run = std::min(run, best[m]);
          const double lb_all = fb_min_[idx(t)] - fb_min_[idx(s) - 1];
          std::int64_t sweep_req = 0;
          double sweep = 0;
          for (int j = s + 1; j <= t; ++j) {
            const int i = j - 1;
            if (!ck_[idx(i)]) break;
            sweep_req = std::max(sweep_req, Gf(t) + x(i) + (i > s ? x(i - 1) : 0) + Pn_[idx(i)]);
            if (sweep_req > M_) break;  // a longer sweep cannot fit either
            sweep += Fn_[idx(i)];
            const std::int64_t fr = frame(s, i);
            const int m0 =
                clampm(std::max<std::int64_t>({sweep_req, x(i) + mlo(j, t), fr + mlo(s, i)}));
            if (m0 >= hi) continue;
            const double bound = (sweep + lb_all) / (1.0 + kPrune);
            const auto cut = std::partition_point(upper.begin() + m0, upper.begin() + hi,
                                                  [&](double u) { return u >= bound; });
            const int m1 = static_cast<int>(cut - upper.begin());
            if (m1 <= m0) continue;
            const double* Tt = &T_[row_[ix(j, t)]] - x(i);  // Tt[m] = C(j, t, m - X_{j-1})
            const std::uint16_t* St = &S_[row_[ix(j, t)]] - x(i);
            const double* Tr = &T_[row_[ix(s, i)]] - fr;  // Tr[m] = C(s, j-1, m - Fr)
            const std::uint16_t* Sr = &S_[row_[ix(s, i)]] - fr;
            const double sw = sweep;
            offer(
                m0, m1, best, sg, ch, static_cast<Code>(-j),
                [&](int m) { return sw + Tt[m] + Tr[m]; },
                [&](int m) { return 1u + St[m] + Sr[m]; });
          }
        }
        // keep-all region: TAPE with the fastest option is optimal (and has no segments)
        if (hi <= M_) {
          const Code c = static_cast<Code>(fast_[idx(s)]);
          const std::size_t o = o0 + idx(c);
          if (s == t) {
            for (int m = hi; m <= M_; ++m) best[m] = FB_[o] + 0.0, sg[m] = 0, ch[m] = c;
          } else {
            const std::size_t sub = row_[ix(s + 1, t)];
            const double* Ts = &T_[sub] - A_[o];
            const std::uint16_t* Ss = &S_[sub] - A_[o];
            for (int m = hi; m <= M_; ++m) best[m] = FB_[o] + Ts[m], sg[m] = Ss[m], ch[m] = c;
          }
        }
        int first = none;
        for (int m = 0; m <= M_; ++m)
          if (ch[m] != kNone) {
            first = m;
            break;
          }
        mlo_[ix(s, t)] = first;
        // monotone in m: carry the previous choice up where a near tie made the row rise
        for (int m = first + 1; m <= M_; ++m)
          if (best[m] > best[m - 1]) {
            const auto [v, sc] = eval(s, t, m, ch[m - 1]);
            best[m] = v, sg[m] = sc, ch[m] = ch[m - 1];
          }
      }
  }

  // The schedule of the table's choice for (s,t,m), stages renumbered from 0.
  Schedule build(int s, int t, int m) const {
    Schedule out;
    while (true) {
      const Code c = W_[row_[ix(s, t)] + idx(m)];
      REMAT_ASSERT(c != kNone);
      if (c >= 0) {
        out.push_back(make_keep(s - 1, c));
        if (s == t) break;
        m -= static_cast<int>(A_[opt0_[idx(s)] + idx(c)]);
        s += 1;
      } else {
        const int j = -c;
        out.push_back(make_segment(s - 1, j - 2, build(s, j - 1, m - static_cast<int>(frame(s, j - 1)))));
        m -= static_cast<int>(x(j - 1));
        s = j;
      }
    }
    return out;
  }

  // keep-all's predicted time: the table's top value where the table reaches keep-all (the same
  // number up to rounding of the sums; taking it keeps the predicted time monotone in budget)
  double top_keep_all_time() const {
    const double top =
        mlo(1, n_) <= M_ ? value(1, n_, M_) : std::numeric_limits<double>::infinity();
    return std::min(top, keep_all_time_);
  }

  Plan make_plan(Schedule s, double time_s, std::int64_t budget) const {
    Plan p;
    p.peak = simulate(chain_, s).peak;
    p.time_s = time_s;
    p.budget = budget;
    p.keep_all_time_s = keep_all_time_;
    p.rows.resize(chain_.stages.size());
    rows(s, "", 0, true, p);
    p.schedule = std::move(s);
    return p;
  }

  void rows(const Schedule& s, const std::string& label, int depth, bool top, Plan& p) const {
    int k = 0;
    for (const Step& st : s) {
      if (st.kind == Step::Kind::keep) {
        const Stage& stage = chain_.stages[idx(st.first)];
        const StageOption& o = stage.options[idx(st.option)];
        PlanRow& r = p.rows[idx(st.first)];
        r.stage = stage.name, r.option = o.name;
        r.segment = label.empty() ? "-" : label;
        r.depth = depth;
        r.tape = o.saved;
        if (top) r.held = o.saved;
        r.time_s = o.fwd_s + o.bwd_s + static_cast<double>(depth) * stage.nograd_fwd_s;
      } else {
        ++p.segments;
        const std::string l =
            label.empty() ? remat::detail::cat("S", ++k) : remat::detail::cat(label, ".", ++k);
        rows(st.inner, l, depth + 1, false, p);
        if (top) p.rows[idx(st.last)].held = chain_.stages[idx(st.last)].out;
      }
    }
  }

  std::string infeasible(std::int64_t budget) const {
    const std::int64_t need = min_feasible();
    const int m0 = mlo(1, n_);
    const Schedule lean = m0 <= M_ ? build(1, n_, m0) : ka_schedule_;
    const SimResult r = simulate(chain_, lean);
    // the largest single-stage footprint: min over options of max(forward, backward) alone
    std::int64_t big = -1;
    std::size_t big_i = 0, big_k = 0;
    for (std::size_t i = 0; i < chain_.stages.size(); ++i) {
      const Stage& st = chain_.stages[i];
      std::int64_t lo = std::numeric_limits<std::int64_t>::max();
      std::size_t lo_k = 0;
      for (std::size_t k = 0; k < st.options.size(); ++k) {
        const StageOption& o = st.options[k];
        const std::int64_t f =
            std::max(o.saved + o.fwd_extra, detail::boundary_bytes(chain_, static_cast<int>(i)) +
                                                st.out + o.saved + o.bwd_extra);
        if (f < lo) lo = f, lo_k = k;
      }
      if (lo > big) big = lo, big_i = i, big_k = lo_k;
    }
    const Stage& bs = chain_.stages[big_i];
    const std::string at = r.at.stage < 0
                               ? std::string("the start")
                               : remat::detail::cat(to_string(r.at), " of stage '",
                                                    chain_.stages[idx(r.at.stage)].name, "'");
    return remat::detail::cat(
        "remat::plan::Planner::plan: no schedule fits a budget of ", budget, " bytes (",
        detail::mib(budget), "); expected a budget >= ", need, " bytes (", detail::mib(need),
        "), the smallest this planner meets (unit ", unit_, " bytes). Where those bytes go: base ",
        chain_.base,
        " bytes (parameters, gradients, optimizer state); "
        "the leanest schedule peaks at ",
        r.peak, " bytes during ", at, " with held boundaries ", r.boundaries, ", tapes ", r.tapes,
        ", gradients ", r.grads, ", scratch ", r.scratch,
        " bytes; the largest single-stage footprint is stage ", big_i, " ('", bs.name, "'): ", big,
        " bytes with its leanest option '", bs.options[big_k].name, "'",
        m0 > M_
            ? remat::detail::cat(" (the table, which stops at max_budget ", max_budget_,
                                 " bytes, holds no feasible plan: keep-all is the leanest known)")
            : std::string(),
        ". Hint: raise the budget, give that stage a leaner option (save fewer tensors), shrink "
        "the batch",
        options_.max_budget > 0 && (budget > max_budget_ || m0 > M_)
            ? ", or raise PlannerOptions::max_budget"
            : "",
        ".");
  }
};

}  // namespace remat::plan
