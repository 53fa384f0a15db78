// SPDX-License-Identifier: MIT
// The budget planner (remat/plan): the DP against a brute-force oracle that enumerates every
// legal schedule tree and simulates it; monotone time in the budget; special chains; errors.

#include <remat/plan/planner.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/catch.hpp"

using namespace remat::plan;

namespace {

int uniform(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A small chain with integer sizes and times: with unit = 1 byte per slot the DP sees the exact
// sizes, so its optimum must equal the oracle's.
Chain random_int_chain(std::mt19937& rng, int n, int max_options) {
  Chain c;
  c.input = uniform(rng, 0, 4);
  c.base = uniform(rng, 0, 5);
  for (int i = 0; i < n; ++i) {
    Stage s;
    s.name = "s" + std::to_string(i);
    s.out = i + 1 == n ? uniform(rng, 0, 2) : uniform(rng, 0, 5);
    s.nograd_fwd_s = uniform(rng, 0, 6);
    // a large no-grad scratch now and then, so that a sweep is sometimes the peak
    s.nograd_extra = uniform(rng, 0, 99) < 25 ? uniform(rng, 5, 14) : uniform(rng, 0, 4);
    s.can_checkpoint = uniform(rng, 0, 99) >= (i == 0 ? 40 : 12);
    const int k = uniform(rng, 1, max_options);
    for (int o = 0; o < k; ++o) {
      StageOption opt;
      opt.name = "o" + std::to_string(o);
      opt.fwd_s = uniform(rng, 1, 8);
      opt.bwd_s = uniform(rng, 1, 12);
      opt.saved = s.out + uniform(rng, 0, 8);
      opt.fwd_extra = uniform(rng, 0, 4);
      opt.bwd_extra = uniform(rng, 0, 4);
      s.options.push_back(opt);
    }
    c.stages.push_back(s);
  }
  return c;
}

// Every legal schedule over [a..b]: the first step is a keep of stage a (any option) or a
// segment [a..e], e < b, of checkpointable stages with any legal inner schedule over [a..e];
// then any legal schedule over the rest. The last step is always a keep of stage b.
class Enumerator {
 public:
  explicit Enumerator(const Chain& c) : c_(c) {}

  std::int64_t count(int a, int b) {
    auto key = std::make_pair(a, b);
    if (auto it = counts_.find(key); it != counts_.end()) return it->second;
    const auto k = static_cast<std::int64_t>(c_.stages[static_cast<std::size_t>(a)].options.size());
    std::int64_t total = a == b ? k : k * count(a + 1, b);
    for (int e = a; e < b; ++e) {
      if (!c_.stages[static_cast<std::size_t>(e)].can_checkpoint) break;
      total += count(a, e) * count(e + 1, b);
    }
    return counts_[key] = total;
  }

  const std::vector<Schedule>& all(int a, int b) {
    auto key = std::make_pair(a, b);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::vector<Schedule> out;
    const int k = static_cast<int>(c_.stages[static_cast<std::size_t>(a)].options.size());
    for (int o = 0; o < k; ++o) {
      if (a == b) {
        out.push_back({make_keep(a, o)});
        continue;
      }
      for (const Schedule& rest : all(a + 1, b)) {
        Schedule s{make_keep(a, o)};
        s.insert(s.end(), rest.begin(), rest.end());
        out.push_back(std::move(s));
      }
    }
    for (int e = a; e < b; ++e) {
      if (!c_.stages[static_cast<std::size_t>(e)].can_checkpoint) break;
      const std::vector<Schedule> inner = all(a, e);  // copies: `all` may rehash the memo
      const std::vector<Schedule> rest = all(e + 1, b);
      for (const Schedule& in : inner)
        for (const Schedule& r : rest) {
          Schedule s{make_segment(a, e, in)};
          s.insert(s.end(), r.begin(), r.end());
          out.push_back(std::move(s));
        }
    }
    return memo_[key] = std::move(out);
  }

 private:
  const Chain& c_;
  std::map<std::pair<int, int>, std::int64_t> counts_;
  std::map<std::pair<int, int>, std::vector<Schedule>> memo_;
};

int count_segments(const Schedule& s) {
  int n = 0;
  for (const Step& st : s)
    if (st.kind == Step::Kind::segment) n += 1 + count_segments(st.inner);
  return n;
}

// The oracle's answer for any budget: the least time among schedules with peak <= budget, and
// the fewest segments among those (the DP's tie rule; times are integers here, so ties are exact).
struct Oracle {
  struct Point {
    std::int64_t peak;
    double time;
    int segments;
  };
  std::vector<Point> best_upto;  // by peak; the least (time, segments) at that peak or below
  std::size_t schedules = 0;

  explicit Oracle(const Chain& c) {
    Enumerator e(c);
    const auto& all = e.all(0, static_cast<int>(c.stages.size()) - 1);
    schedules = all.size();
    best_upto.reserve(all.size());
    for (const Schedule& s : all) {
      const SimResult r = simulate(c, s);
      best_upto.push_back({r.peak, r.time_s, count_segments(s)});
    }
    std::sort(best_upto.begin(), best_upto.end(),
              [](const Point& a, const Point& b) { return a.peak < b.peak; });
    for (std::size_t i = 1; i < best_upto.size(); ++i) {
      const Point& prev = best_upto[i - 1];
      Point& cur = best_upto[i];
      if (std::make_pair(prev.time, prev.segments) < std::make_pair(cur.time, cur.segments))
        cur.time = prev.time, cur.segments = prev.segments;
    }
  }
  // {infinity, -1} if nothing fits
  std::pair<double, int> best(std::int64_t budget) const {
    const auto it = std::upper_bound(best_upto.begin(), best_upto.end(), budget,
                                     [](std::int64_t b, const Point& p) { return b < p.peak; });
    if (it == best_upto.begin()) return {std::numeric_limits<double>::infinity(), -1};
    return {std::prev(it)->time, std::prev(it)->segments};
  }
  std::int64_t min_peak() const { return best_upto.front().peak; }
};

std::string chain_str(const Chain& c) {
  std::string s = remat::detail::cat("input ", c.input, " base ", c.base, "\n");
  for (std::size_t i = 0; i < c.stages.size(); ++i) {
    const Stage& st = c.stages[i];
    s += remat::detail::cat("  ", i, ": out ", st.out, " nograd ", st.nograd_fwd_s, "s+",
                            st.nograd_extra, "B", st.can_checkpoint ? "" : " (no ckpt)", " |");
    for (const StageOption& o : st.options)
      s += remat::detail::cat(" [", o.fwd_s, "+", o.bwd_s, "s saved ", o.saved, " fx ", o.fwd_extra,
                              " bx ", o.bwd_extra, "]");
    s += "\n";
  }
  return s;
}

PlannerOptions unit_one() {
  PlannerOptions o;
  o.unit = 1;
  return o;
}

bool segments_avoid_fixed(const Chain& c, const Schedule& s) {
  for (const Step& st : s)
    if (st.kind == Step::Kind::segment) {
      for (int i = st.first; i <= st.last; ++i)
        if (!c.stages[static_cast<std::size_t>(i)].can_checkpoint) return false;
      if (!segments_avoid_fixed(c, st.inner)) return false;
    }
  return true;
}

// A GPT-2-small-like chain: embedding, L blocks with three options, head with the logits.
Chain gpt_chain(int L) {
  const std::int64_t bt = 8 * 1024, C = 768, V = 50257, H = 12, T = 1024;
  const std::int64_t act = bt * C * 4;           // one (B, T, C) fp32 activation: 24 MiB
  const std::int64_t probs = 8 * H * T * T * 4;  // attention probabilities: 384 MiB
  Chain c;
  c.input = bt * 4;
  c.base = 124'000'000LL * 16;
  Stage emb{"embedding", act, 0.5e-3, 0, false, {{"keep_all", 0.5e-3, 1.0e-3, act, 0, act}}};
  c.stages.push_back(emb);
  for (int l = 0; l < L; ++l) {
    const double f = 10e-3 * (1.0 + 0.01 * (l % 3));
    Stage b;
    b.name = "h." + std::to_string(l);
    b.out = act;
    b.nograd_fwd_s = 0.9 * f;
    b.nograd_extra = probs + 4 * act;
    b.options = {{"keep_all", f, 2.0 * f, 16 * act + probs, 2 * act, 4 * act},
                 {"save_linear", f, 2.25 * f, 16 * act, 2 * act, probs + 4 * act},
                 {"save_matmuls", f, 2.5 * f, 9 * act, 2 * act, probs + 8 * act}};
    c.stages.push_back(b);
  }
  const std::int64_t logits = bt * V * 4;
  Stage head{"head", 4, 6e-3, logits, true, {{"keep_all", 6e-3, 12e-3, logits + act, act, logits}}};
  c.stages.push_back(head);
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("the DP's plan is the fastest of all schedule trees that fit, on 1000 random chains",
          "[plan]") {
  std::mt19937 rng(20240611);
  std::int64_t budgets = 0, infeasible = 0, schedules = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int trial = 0; trial < 1000; ++trial) {
    const int n = 1 + trial % 8;
    Chain c = random_int_chain(rng, n, 3);
    // bound the enumeration: drop options (then segments) until the tree count is small
    for (;;) {
      Enumerator e(c);
      if (e.count(0, n - 1) <= 4000) break;
      std::vector<int> multi;
      for (int i = 0; i < n; ++i)
        if (c.stages[static_cast<std::size_t>(i)].options.size() > 1) multi.push_back(i);
      if (!multi.empty()) {
        c.stages[static_cast<std::size_t>(multi[static_cast<std::size_t>(
                     uniform(rng, 0, static_cast<int>(multi.size()) - 1))])]
            .options.pop_back();
      } else {
        c.stages[static_cast<std::size_t>(uniform(rng, 0, n - 2))].can_checkpoint = false;
      }
    }
    const Oracle oracle(c);
    schedules += static_cast<std::int64_t>(oracle.schedules);
    const Planner planner(c, unit_one());
    INFO("trial " << trial << "\n" << chain_str(c));
    REQUIRE(planner.unit() == 1);
    REQUIRE(planner.min_feasible() == oracle.min_peak());
    REQUIRE(oracle.best(planner.keep_all_peak()).first == planner.keep_all_time());

    std::vector<std::int64_t> bs;
    const std::int64_t lo = oracle.min_peak() - 3, hi = planner.keep_all_peak() + 2;
    if (hi - lo <= 80) {
      for (std::int64_t b = lo; b <= hi; ++b) bs.push_back(b);
    } else {
      for (int q = 0; q < 60; ++q) bs.push_back(lo + (hi - lo) * q / 59);
    }
    bs.push_back(0);
    bs.push_back(c.base - 1);
    for (const std::int64_t b : bs) {
      const auto [want, want_segments] = oracle.best(b);
      ++budgets;
      if (!std::isfinite(want)) {
        ++infeasible;
        INFO("budget " << b);
        REQUIRE_THROWS_AS(planner.plan(b), remat::Error);
        continue;
      }
      const Plan p = planner.plan(b);
      const SimResult r = simulate(c, p.schedule);
      INFO("budget " << b << ": plan " << describe(p.schedule) << " time " << p.time_s << " peak "
                     << r.peak << "; oracle time " << want << " with " << want_segments
                     << " segments");
      if (std::fabs(p.time_s - want) > 1e-9 * std::max(1.0, want) || r.peak > b ||
          r.peak != p.peak || p.segments != want_segments ||
          count_segments(p.schedule) != p.segments ||
          std::fabs(r.time_s - p.time_s) > 1e-9 * std::max(1.0, want) ||
          !segments_avoid_fixed(c, p.schedule)) {
        FAIL("the DP's plan differs from the oracle");
      }
    }
  }
  WARN("oracle: 1000 chains, " << schedules << " schedule trees, " << budgets << " budgets ("
                               << infeasible << " infeasible) in " << seconds_since(t0) << " s");
}

TEST_CASE("predicted time never rises as the budget grows, and every plan fits its budget",
          "[plan]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = uniform(rng, 2, 30);
    Chain c;
    c.input = uniform(rng, 0, 1 << 16);
    c.base = uniform(rng, 0, 1 << 20);
    std::uniform_real_distribution<double> sec(1e-4, 1e-2);
    for (int i = 0; i < n; ++i) {
      Stage s;
      s.name = "s" + std::to_string(i);
      s.out = uniform(rng, 1 << 10, 1 << 20);
      s.nograd_fwd_s = sec(rng);
      s.nograd_extra = uniform(rng, 0, 1 << 20);
      s.can_checkpoint = i > 0 || uniform(rng, 0, 1) == 1;
      for (int o = uniform(rng, 1, 3); o > 0; --o)
        s.options.push_back({"o" + std::to_string(o), sec(rng), 2 * sec(rng),
                             s.out + uniform(rng, 0, 1 << 22), uniform(rng, 0, 1 << 19),
                             uniform(rng, 0, 1 << 20)});
      c.stages.push_back(s);
    }
    PlannerOptions opt;
    opt.slots = uniform(rng, 32, 256);
    const Planner planner(c, opt);
    const std::int64_t lo = planner.min_feasible(), hi = planner.keep_all_peak();
    REQUIRE_THROWS_AS(planner.plan(lo - 1), remat::Error);
    double last = std::numeric_limits<double>::infinity();
    for (int q = 0; q <= 400; ++q) {
      const std::int64_t b = lo + (hi + hi / 10 - lo) * q / 400;
      const Plan p = planner.plan(b);
      INFO("trial " << trial << " budget " << b << " plan " << describe(p.schedule));
      REQUIRE(p.time_s <= last);
      REQUIRE(p.peak <= b);
      REQUIRE(std::fabs(simulate(c, p.schedule).time_s - p.time_s) <= 1e-9 * p.time_s);
      REQUIRE(segments_avoid_fixed(c, p.schedule));
      last = p.time_s;
    }
    REQUIRE(last == Approx(planner.keep_all_time()).epsilon(1e-12));
    // the Pareto points: time falls and peak rises, from the leanest plan to keep-all
    const std::vector<Plan> front = planner.pareto();
    REQUIRE(!front.empty());
    const Plan leanest = planner.plan(lo);
    REQUIRE(front.front().peak <= leanest.peak);  // the leanest plan, or one that dominates it
    REQUIRE(front.front().time_s <= leanest.time_s);
    REQUIRE(front.back().time_s == Approx(planner.keep_all_time()).epsilon(1e-12));
    for (std::size_t i = 0; i < front.size(); ++i) {
      REQUIRE(front[i].peak <= front[i].budget);
      REQUIRE(planner.plan(front[i].budget).time_s == front[i].time_s);
      if (i > 0) {
        REQUIRE(front[i].time_s < front[i - 1].time_s);
        REQUIRE(front[i].peak > front[i - 1].peak);
      }
    }
  }
}

TEST_CASE("a budget at or above the keep-all peak keeps every stage with its fastest option",
          "[plan]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const Chain c = random_int_chain(rng, uniform(rng, 1, 12), 3);
    double sum = 0;
    for (const Stage& s : c.stages) {
      double f = std::numeric_limits<double>::infinity();
      for (const StageOption& o : s.options) f = std::min(f, o.fwd_s + o.bwd_s);
      sum += f;
    }
    const Planner planner(c);
    for (const std::int64_t b : {planner.keep_all_peak(), planner.keep_all_peak() * 3 + 100}) {
      const Plan p = planner.plan(b);
      INFO("trial " << trial << " plan " << describe(p.schedule) << "\n" << chain_str(c));
      REQUIRE(describe(p.schedule) == describe(keep_all(c)));
      REQUIRE(p.segments == 0);
      REQUIRE(p.time_s == Approx(sum).epsilon(1e-12));
      REQUIRE(p.peak == planner.keep_all_peak());
    }
    // one byte less is never faster (the exact table, unit 1)
    const Planner exact(c, unit_one());
    if (exact.min_feasible() < exact.keep_all_peak())
      REQUIRE(exact.plan(exact.keep_all_peak() - 1).time_s >= sum);
  }
}

TEST_CASE("a chain of one stage: keep it, or nothing fits", "[plan]") {
  Chain c;
  c.input = 10, c.base = 100;
  c.stages.push_back(
      {"only", 4, 1.0, 0, true, {{"a", 1.0, 2.0, 8, 3, 5}, {"b", 2.0, 3.0, 4, 1, 1}}});
  const Planner planner(c, unit_one());
  // a: max(fwd 8 + 3, bwd 8 + delta_1 4 + delta_0 10 + 5) = 27; b: max(5, 4 + 4 + 10 + 1) = 19
  REQUIRE(planner.keep_all_peak() == 127);
  REQUIRE(planner.min_feasible() == 119);
  REQUIRE(describe(planner.plan(119).schedule) == "k0:1");
  REQUIRE(planner.plan(126).time_s == 5.0);
  REQUIRE(describe(planner.plan(127).schedule) == "k0:0");
  REQUIRE(planner.plan(127).time_s == 3.0);
  REQUIRE_THROWS_AS(planner.plan(118), remat::Error);
  const Planner coarse(c);  // default slots
  REQUIRE(coarse.plan(1000).time_s == 3.0);
  REQUIRE(coarse.plan(coarse.min_feasible()).peak <= coarse.min_feasible());
}

TEST_CASE(
    "a homogeneous chain just above the per-stage checkpointing peak is checkpointed per stage",
    "[plan]") {
  // tapes (10) are much larger than boundaries (1): no two tapes fit at once at that budget, so
  // every stage but the last is swept exactly once and kept only in its own replay
  Chain c;
  c.input = 1;
  for (int i = 0; i < 6; ++i)
    c.stages.push_back(
        {"h" + std::to_string(i), 1, 1.0, 0, true, {{"keep_all", 1.0, 2.0, 10, 0, 0}}});
  const Schedule each = checkpoint_each(c);
  const SimResult r = simulate(c, each);
  REQUIRE(describe(each) ==
          "seg[0..0]{k0:0} seg[1..1]{k1:0} seg[2..2]{k2:0} seg[3..3]{k3:0} seg[4..4]{k4:0} k5:0");
  REQUIRE(r.time_s == 6 * 3.0 + 5 * 1.0);
  const Planner planner(c, unit_one());
  const Plan p = planner.plan(r.peak);
  REQUIRE(describe(p.schedule) == describe(each));
  REQUIRE(p.time_s == r.time_s);
  REQUIRE(p.peak == r.peak);
  // the oracle agrees that nothing is faster within that budget
  const Oracle oracle(c);
  REQUIRE(oracle.best(r.peak).first == r.time_s);
  // one byte less needs more replays; far less needs nested segments
  REQUIRE(planner.plan(r.peak - 1).time_s > r.time_s);
  const Plan lean = planner.plan(planner.min_feasible());
  INFO(describe(lean.schedule));
  REQUIRE(planner.min_feasible() <= r.peak - 1);  // frames (3 per level) eat what nesting saves
  REQUIRE(lean.time_s >= planner.plan(r.peak - 1).time_s);
  REQUIRE(lean.table().find("S1.1") != std::string::npos);
  // the table names every stage and the fifth segment
  const std::string table = p.table();
  for (const Stage& s : c.stages) REQUIRE(table.find(s.name) != std::string::npos);
  REQUIRE(table.find("S5") != std::string::npos);
}

TEST_CASE("a stage that cannot be checkpointed is never inside a segment", "[plan]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    Chain c = random_int_chain(rng, uniform(rng, 3, 16), 2);
    for (Stage& s : c.stages) s.can_checkpoint = uniform(rng, 0, 2) > 0;
    c.stages[0].can_checkpoint = false;  // an embedding of integer ids
    const Planner planner(c, unit_one());
    for (const Plan& p : planner.pareto()) {
      INFO(describe(p.schedule));
      REQUIRE(segments_avoid_fixed(c, p.schedule));
    }
  }
}

TEST_CASE(
    "an infeasible budget names the minimum feasible bytes, and simulate rejects bad schedules",
    "[plan][errors]") {
  Chain c;
  c.input = 4;
  c.base = 1000;
  c.stages.push_back({"embedding", 8, 1.0, 0, false, {{"keep_all", 1.0, 1.0, 8, 0, 0}}});
  for (int i = 1; i <= 3; ++i) {
    Stage h{"h." + std::to_string(i), 8, 1.0, 2, true, {}};
    h.options = {{"keep_all", 1.0, 2.0, 40, 4, 4}, {"lean", 1.0, 3.0, 16, 4, 20}};
    c.stages.push_back(h);
  }
  c.stages.push_back({"head", 1, 1.0, 0, true, {{"keep_all", 1.0, 1.0, 64, 16, 16}}});

  const Planner planner(c, unit_one());
  const std::int64_t minf = planner.min_feasible();
  REQUIRE_NOTHROW(planner.plan(minf));
  REQUIRE_THROWS_WITH(planner.plan(minf - 1),
                      REMAT_CONTAINS(">= " + std::to_string(minf) + " bytes"));
  REQUIRE_THROWS_WITH(planner.plan(minf - 1), REMAT_CONTAINS("base 1000 bytes"));
  REQUIRE_THROWS_WITH(planner.plan(minf - 1), REMAT_CONTAINS("'head'"));
  REQUIRE_THROWS_WITH(planner.plan(10), REMAT_CONTAINS("Hint"));

  auto rejects = [&](const Schedule& s, const std::string& text) {
    INFO(describe(s));
    REQUIRE_THROWS_WITH(simulate(c, s), REMAT_CONTAINS(text));
  };
  const Schedule good{make_keep(0, 0), make_segment(1, 2, {make_keep(1, 1), make_keep(2, 0)}),
                      make_keep(3, 0), make_keep(4, 0)};
  REQUIRE_NOTHROW(simulate(c, good));
  rejects({make_keep(0, 0), make_keep(1, 0), make_keep(2, 0), make_keep(3, 0)},
          "cover stages up to 4");
  rejects({make_keep(0, 0), make_keep(2, 0), make_keep(3, 0), make_keep(4, 0)}, "expected stage 1");
  rejects({make_keep(0, 0), make_keep(1, 2), make_keep(2, 0), make_keep(3, 0), make_keep(4, 0)},
          "uses option 2");
  rejects({make_segment(0, 1, {make_keep(0, 0), make_keep(1, 0)}), make_keep(2, 0), make_keep(3, 0),
           make_keep(4, 0)},
          "can_checkpoint = false");
  rejects({make_keep(0, 0), make_keep(1, 0), make_keep(2, 0),
           make_segment(3, 4, {make_keep(3, 0), make_keep(4, 0)})},
          "expected a keep step of stage 4 last");
  rejects(
      {make_keep(0, 0), make_segment(1, 2, {make_keep(1, 0)}), make_keep(3, 0), make_keep(4, 0)},
      "cover stages up to 2");
  rejects({make_keep(0, 0),
           make_segment(1, 2, {make_segment(1, 2, {make_keep(1, 0), make_keep(2, 0)})}),
           make_keep(3, 0), make_keep(4, 0)},
          "expected a keep step of stage 2 last");
  Step wide = make_keep(1, 0);
  wide.last = 2;
  rejects({make_keep(0, 0), wide, make_keep(3, 0), make_keep(4, 0)}, "expected a single stage");
  Step odd = make_keep(1, 0);
  odd.inner = {make_keep(1, 0)};
  rejects({make_keep(0, 0), odd, make_keep(2, 0), make_keep(3, 0), make_keep(4, 0)},
          "expected none");
  rejects({}, "is empty");

  Chain bad = c;
  bad.stages[2].options[0].saved = 2;
  REQUIRE_THROWS_WITH(Planner(bad), REMAT_CONTAINS("expected at least out = 8"));
  bad = c;
  bad.stages[1].options.clear();
  REQUIRE_THROWS_WITH(simulate(bad, good), REMAT_CONTAINS("has no options"));
}

TEST_CASE("a budget above a user's max_budget gets the table's best plan", "[plan]") {
  const Chain c = gpt_chain(8);
  const std::int64_t ka = simulate(c, keep_all(c)).peak;
  PlannerOptions opt;
  opt.max_budget = c.base + (ka - c.base) / 2;
  const Planner planner(c, opt);
  REQUIRE(planner.max_budget() == opt.max_budget);
  const Plan top = planner.plan(opt.max_budget);
  const Plan above = planner.plan(opt.max_budget + (ka - opt.max_budget) / 2);
  REQUIRE(above.time_s == top.time_s);
  REQUIRE(above.peak <= opt.max_budget);
  REQUIRE(planner.plan(ka).time_s <= top.time_s);

  // a table that stops below every feasible plan knows only keep-all, and says so
  PlannerOptions tiny;
  tiny.max_budget = c.base + 1;
  const Planner small(c, tiny);
  REQUIRE(small.min_feasible() == ka);
  REQUIRE(small.plan(ka).time_s == Approx(small.keep_all_time()).epsilon(1e-12));
  REQUIRE_THROWS_WITH(small.plan(ka - 1), REMAT_CONTAINS("raise PlannerOptions::max_budget"));
}

TEST_CASE("a GPT-like chain of 96 blocks plans quickly and every plan fits", "[plan]") {
  const Chain c = gpt_chain(96);
  const auto t0 = std::chrono::steady_clock::now();
  const Planner planner(c);
  const std::int64_t each = simulate(c, checkpoint_each(c)).peak;
  const Plan p = planner.plan(each);
  const double dt = seconds_since(t0);
  WARN("L=96 (98 stages, 3 options): table of " << planner.slots() + 1 << " slot counts (unit "
                                                << remat::plan::detail::format_bytes(planner.unit())
                                                << "), constructor + plan() " << dt * 1e3 << " ms");
  REQUIRE(p.peak <= each);
  // The default table spans up to keep-all (~73 GB here), so a slot is ~150 MiB and a 24 MiB
  // boundary costs a whole slot: near per-stage checkpointing the plan pays for that rounding.
  // A table spanning only the budget of interest has 20x finer slots, and there the DP must do
  // at least as well as per-stage checkpointing (which its options and multi-level segments beat).
  const double each_time = simulate(c, checkpoint_each(c)).time_s;
  INFO(p.table());
  REQUIRE(p.time_s <= each_time * 1.15);
  PlannerOptions fine;
  fine.max_budget = each;
  const auto t1 = std::chrono::steady_clock::now();
  const Planner close(c, fine);
  const Plan fine_plan = close.plan(each);
  WARN("L=96 with max_budget = the per-stage checkpointing peak (unit "
       << remat::plan::detail::format_bytes(close.unit()) << "): constructor + plan() "
       << seconds_since(t1) * 1e3 << " ms; predicted " << fine_plan.time_s
       << " s against per-stage checkpointing " << each_time << " s and the default "
       << "table's " << p.time_s << " s");
  REQUIRE(fine_plan.peak <= each);
  REQUIRE(fine_plan.time_s <= each_time);
  double last = std::numeric_limits<double>::infinity();
  for (int q = 0; q <= 32; ++q) {
    const std::int64_t b =
        planner.min_feasible() + (planner.keep_all_peak() - planner.min_feasible()) * q / 32;
    const Plan pb = planner.plan(b);
    REQUIRE(pb.peak <= b);
    REQUIRE(pb.time_s <= last);
    last = pb.time_s;
  }
}

TEST_CASE("benchmark: planning an L=96 chain", "[.benchmark][plan]") {
  const Chain c = gpt_chain(96);
  const std::int64_t each = simulate(c, checkpoint_each(c)).peak;
  for (const int slots : {128, 256, 512, 1024}) {
    std::vector<double> ts;
    double t_plan = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      PlannerOptions opt;
      opt.slots = slots;
      const Planner planner(c, opt);
      const auto t1 = std::chrono::steady_clock::now();
      const Plan p = planner.plan(each + (planner.keep_all_peak() - each) / 3);
      t_plan = seconds_since(t1);
      ts.push_back(seconds_since(t0));
      REQUIRE(p.peak <= p.budget);
    }
    std::sort(ts.begin(), ts.end());
    WARN("L=96, slots " << slots << ": constructor + plan() median " << ts[2] * 1e3 << " ms (min "
                        << ts[0] * 1e3 << " ms; plan() alone " << t_plan * 1e3 << " ms)");
  }
}
