#pragma once
// SPDX-License-Identifier: MIT
// The planner's model of a step: a chain of stages with per-stage options (Rotor's persistent
// model, extended to K options per stage as in Rockmate), schedules as trees of keep/segment
// steps (what nested checkpoint() calls execute), their flat op sequence, and a simulator that
// walks that sequence to get a schedule's peak bytes and time, independently of the DP.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"

namespace remat::plan {

// NOTE [chain model]
// Stages F_0..F_{n-1} (indices into Chain::stages) map x_i -> x_{i+1}; x_0 is the chain input,
// held by the caller and never charged; the last stage produces the loss. out_i = Stage::out of
// stage i = |x_{i+1}|. delta_i is the gradient of x_i, |delta_i| = |x_i| (|delta_0| = input).
// A stage runs in one of four ways:
//
//   F_all(i,k)  forward with grad, option k: leaves the tape xbar_ik (saved, INCLUDING x_{i+1})
//               peak during: live + saved_ik + fwd_extra_ik
//               after:       live += saved_ik
//   F_ck(i)     forward without grad, first stage of a segment; keeps its input
//               peak during: live + out_i + nograd_extra_i
//               after:       live += out_i
//   F_nograd(i) forward without grad inside a segment's sweep; frees its input boundary
//               peak during: live + out_i + nograd_extra_i
//               after:       live += out_i - out_{i-1}
//   B(i,k)      backward: needs delta_{i+1} and xbar_ik; makes delta_i
//               peak during: live + |delta_i| + bwd_extra_ik
//               after:       live -= saved_ik + out_i (xbar_ik and delta_{i+1} freed),
//                            live += |delta_i|, and x_i is freed if a sweep left it held
//   Loss        after the last stage's F_all: delta_n appears (live += out_{n-1})
//
// "live" excludes x_0 and Chain::base; a simulated peak adds base back. A boundary left by a sweep
// (the output of a segment) lives until the backward of the stage that reads it, its last use.
// A schedule tree runs as: keep(i,k) = F_all(i,k), <the rest of the list>, B(i,k);
// segment[f..l]{inner} = F_ck(f), F_nograd(f+1..l), <the rest of the list>, Frame(f,l) <inner>
// End; the whole-chain list ends with Loss.
//   Frame(f,l)  a segment's backward, which replays <inner> inside a checkpoint() call: for its
//               whole length it holds frame_bytes(f,l) = |delta_f| + 2 out_l on top: the
//               gradient buffer of the segment's input (made when the call begins), and the
//               replayed output and the gradient that reached it (both held until the call
//               returns). Nested segments stack their frames: measured at GPT L48 d128 T512 B8,
//               a 46-deep nest held 4.4-6.4 MiB per level (2-3 boundaries of 2 MiB) that a model
//               without frames did not see (210.8 MiB predicted, 396-488 MiB real).

/// One way to run a stage with gradient (store everything, or a selective keep policy).
struct StageOption {
  std::string name;             // "keep_all", "save_linear", "save_matmuls"
  double fwd_s = 0, bwd_s = 0;  // taped forward time; backward time incl. any internal replay
  std::int64_t saved = 0;       // |xbar|: bytes left live after the taped forward, incl. the output
  std::int64_t fwd_extra = 0;   // transient bytes on top during the taped forward
  std::int64_t bwd_extra = 0;   // transient bytes on top during the backward
};

/// One link of the chain: x_i -> x_{i+1}.
struct Stage {
  std::string name;               // "embedding", "h.3", "head"
  std::int64_t out = 0;           // |x_{i+1}| = |delta_{i+1}| bytes
  double nograd_fwd_s = 0;        // forward without grad (a sweep inside a checkpointed segment)
  std::int64_t nograd_extra = 0;  // transient bytes on top during that forward
  bool can_checkpoint = true;     // false: never starts a segment nor is swept (integer-id input)
  std::vector<StageOption> options;  // at least one
};

/// The whole step: stages in order, the input size and the bytes live all along.
struct Chain {
  std::int64_t input = 0;  // |x_0| bytes, held by the caller, never charged (|delta_0| = input)
  std::int64_t base = 0;   // parameters, gradients, optimizer state: live during the whole step
  std::vector<Stage> stages;
};

/// One node of a schedule tree.
///   keep:    stage `first` (== last) runs F_all with options[option], B later.
///   segment: stages [first..last] are swept without grad in the forward (F_ck, F_nograd...),
///            and replayed in the backward by `inner`, a schedule over [first..last].
struct Step {
  enum class Kind { keep, segment };
  Kind kind = Kind::keep;
  int first = 0, last = 0;
  int option = 0;           // keep only
  std::vector<Step> inner;  // segment only
};

/// A schedule covers an interval of stages in order; a whole-chain schedule covers 0..n-1.
using Schedule = std::vector<Step>;

inline Step make_keep(int stage, int option) {
  return Step{Step::Kind::keep, stage, stage, option, {}};
}
inline Step make_segment(int first, int last, Schedule inner) {
  return Step{Step::Kind::segment, first, last, -1, std::move(inner)};
}

/// One operation of the flat sequence (Rotor's op list).
struct Op {
  enum class Kind { fwd_all, fwd_ck, fwd_nograd, loss, bwd, frame_begin, frame_end };
  Kind kind = Kind::loss;
  int stage = -1;   // index into Chain::stages (the last stage for loss; a frame's first stage)
  int option = -1;  // fwd_all and bwd; a frame's last stage
};

/// A schedule's simulated cost and what is live at its peak.
struct SimResult {
  std::int64_t peak = 0;  // bytes, including Chain::base
  double time_s = 0;      // sum of the ops' times
  // the op during which the peak is reached (the first one if several), and the bytes then:
  Op at;
  std::int64_t base = 0, boundaries = 0, tapes = 0, grads = 0, scratch = 0, frames = 0;
};

namespace detail {

inline std::string format_bytes(std::int64_t b) {
  char buf[64];
  const double x = static_cast<double>(b);
  if (b < 1024)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  else if (b < (std::int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", x / 1024.0);
  else if (b < (std::int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", x / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", x / 1073741824.0);
  return buf;
}

inline std::string mib(std::int64_t b) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / 1048576.0);
  return buf;
}

inline std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

inline bool finite_nonneg(double x) { return std::isfinite(x) && x >= 0; }

// |delta_i| for boundary i in 0..n (the chain input's gradient has the input's size).
inline std::int64_t boundary_bytes(const Chain& c, int i) {
  return i == 0 ? c.input : c.stages[detail::idx(i - 1)].out;
}

/// Bytes a segment [f..l]'s backward holds while it replays (NOTE [chain model], Frame):
/// |delta_f| + 2 |x_{l+1}|.
inline std::int64_t frame_bytes(const Chain& c, int f, int l) {
  return boundary_bytes(c, f) + 2 * c.stages[detail::idx(l)].out;
}

inline std::string where(int first, int last, bool top) {
  return top ? std::string("the whole-chain schedule")
             : remat::detail::cat("the inner schedule of segment [", first, "..", last, "]");
}

// Checks that `s` covers [first..last] in order, ends with a keep of `last`, and that every
// step is legal; recurses into segments.
inline void validate_list(const Chain& c, const Schedule& s, int first, int last, bool top) {
  const char* fn = "remat::plan::validate(schedule)";
  REMAT_CHECK(!s.empty(), fn, ": ", where(first, last, top),
              " is empty; expected steps covering stages ", first, "..", last,
              " (hint: every interval needs at least a keep step per stage)");
  int next = first;
  for (std::size_t p = 0; p < s.size(); ++p) {
    const Step& st = s[p];
    REMAT_CHECK(st.first == next, fn, ": step ", p, " of ", where(first, last, top),
                " starts at stage ", st.first, "; expected stage ", next,
                " (hint: the steps must cover the interval in order, without gaps or overlaps)");
    REMAT_CHECK(st.last >= st.first && st.last <= last, fn, ": step ", p, " of ",
                where(first, last, top), " covers stages ", st.first, "..", st.last,
                "; expected an end in ", st.first, "..", last);
    if (st.kind == Step::Kind::keep) {
      REMAT_CHECK(st.first == st.last, fn, ": keep step ", p, " of ", where(first, last, top),
                  " covers stages ", st.first, "..", st.last,
                  "; expected a single stage (hint: use one keep step per stage)");
      const auto& stage = c.stages[detail::idx(st.first)];
      REMAT_CHECK(st.option >= 0 && st.option < static_cast<int>(stage.options.size()), fn,
                  ": keep step of stage ", st.first, " ('", stage.name, "') uses option ",
                  st.option, "; expected 0..", stage.options.size() - 1, " (the stage has ",
                  stage.options.size(), " options)");
      REMAT_CHECK(st.inner.empty(), fn, ": keep step of stage ", st.first, " ('", stage.name,
                  "') has ", st.inner.size(),
                  " inner steps; expected none (only segments have an inner schedule)");
    } else {
      REMAT_CHECK(p + 1 < s.size(), fn, ": segment [", st.first, "..", st.last, "] ends ",
                  where(first, last, top), "; expected a keep step of stage ", last,
                  " last (hint: a segment that reaches the end of its interval would be swept and "
                  "replayed at once; use its inner schedule directly)");
      for (int i = st.first; i <= st.last; ++i) {
        const auto& stage = c.stages[detail::idx(i)];
        REMAT_CHECK(stage.can_checkpoint, fn, ": segment [", st.first, "..", st.last,
                    "] contains stage ", i, " ('", stage.name,
                    "'), which has can_checkpoint = false; expected it outside every "
                    "segment (hint: keep that stage, e.g. the embedding of integer ids)");
      }
      validate_list(c, st.inner, st.first, st.last, false);
    }
    next = st.last + 1;
  }
  REMAT_CHECK(next == last + 1, fn, ": ", where(first, last, top), " ends at stage ", next - 1,
              "; expected it to cover stages up to ", last);
}

inline void emit(const Schedule& s, std::size_t p, bool top, int n, std::vector<Op>& ops) {
  if (p == s.size()) {
    if (top) ops.push_back(Op{Op::Kind::loss, n - 1, -1});
    return;
  }
  const Step& st = s[p];
  if (st.kind == Step::Kind::keep) {
    ops.push_back(Op{Op::Kind::fwd_all, st.first, st.option});
    emit(s, p + 1, top, n, ops);
    ops.push_back(Op{Op::Kind::bwd, st.first, st.option});
  } else {
    ops.push_back(Op{Op::Kind::fwd_ck, st.first, -1});
    for (int i = st.first + 1; i <= st.last; ++i) ops.push_back(Op{Op::Kind::fwd_nograd, i, -1});
    emit(s, p + 1, top, n, ops);       // the rest of the interval, with x_{last+1} held
    ops.push_back(Op{Op::Kind::frame_begin, st.first, st.last});
    emit(st.inner, 0, false, n, ops);  // delta_{last+1} is back: replay the segment
    ops.push_back(Op{Op::Kind::frame_end, st.first, st.last});
  }
}

}  // namespace detail

/// Throws remat::Error unless the chain is well formed (at least one stage, every stage at
/// least one option, sizes and times non-negative and finite, saved >= out).
inline void validate(const Chain& c) {
  const char* fn = "remat::plan::Chain";
  REMAT_CHECK(!c.stages.empty(), fn, ": the chain has no stages; expected at least one");
  REMAT_CHECK(c.input >= 0 && c.base >= 0, fn, ": input and base must be >= 0 bytes; found input ",
              c.input, ", base ", c.base);
  for (std::size_t i = 0; i < c.stages.size(); ++i) {
    const Stage& s = c.stages[i];
    REMAT_CHECK(!s.options.empty(), fn, ": stage ", i, " ('", s.name,
                "') has no options; expected at least one (hint: a 'keep_all' option)");
    REMAT_CHECK(s.out >= 0 && s.nograd_extra >= 0 && detail::finite_nonneg(s.nograd_fwd_s), fn,
                ": stage ", i, " ('", s.name, "') has out ", s.out, ", nograd_extra ",
                s.nograd_extra, ", nograd_fwd_s ", s.nograd_fwd_s,
                "; expected non-negative finite values");
    for (const StageOption& o : s.options) {
      REMAT_CHECK(o.saved >= 0 && o.fwd_extra >= 0 && o.bwd_extra >= 0 &&
                      detail::finite_nonneg(o.fwd_s) && detail::finite_nonneg(o.bwd_s),
                  fn, ": option '", o.name, "' of stage ", i, " ('", s.name,
                  "') has a negative or non-finite size or time; expected values >= 0");
      REMAT_CHECK(
          o.saved >= s.out, fn, ": option '", o.name, "' of stage ", i, " ('", s.name, "') saves ",
          o.saved, " bytes; expected at least out = ", s.out,
          " (saved includes the stage's output, which the next stage and the backward read)");
    }
  }
}

/// Throws remat::Error unless `s` is a legal whole-chain schedule for `c`: steps cover the stages
/// in order, keep steps name one stage and an existing option, segments hold only checkpointable
/// stages, have an inner schedule over the same stages, and never end their interval (so every
/// interval ends with a keep step; the last stage of the chain is always kept).
inline void validate(const Chain& c, const Schedule& s) {
  validate(c);
  detail::validate_list(c, s, 0, static_cast<int>(c.stages.size()) - 1, true);
}

/// The flat op sequence of a (validated) schedule: Rotor's F_all/F_ck/F_nograd/Loss/B list.
inline std::vector<Op> flatten(const Chain& c, const Schedule& s) {
  validate(c, s);
  std::vector<Op> ops;
  detail::emit(s, 0, true, static_cast<int>(c.stages.size()), ops);
  return ops;
}

/// Walks the op sequence of `s` (see NOTE [chain model]) with an explicit live set and returns
/// the peak (bytes, including base) and the total time. Independent of the planner's DP.
inline SimResult simulate(const Chain& c, const Schedule& s) {
  const std::vector<Op> ops = flatten(c, s);
  const int n = static_cast<int>(c.stages.size());
  auto stage = [&](int i) -> const Stage& { return c.stages[detail::idx(i)]; };
  // boundary b is x_b (b = i+1 is the output of stage i); x_0 is never an item
  std::vector<int> tape(detail::idx(n), -1);      // live tape: its option
  std::vector<char> held(detail::idx(n) + 1, 0);  // boundary item x_b live
  std::vector<char> grad(detail::idx(n) + 1, 0);  // delta_b live
  SimResult r;
  r.base = c.base;
  r.peak = c.base;
  std::int64_t boundaries = 0, tapes = 0, grads = 0, frames = 0;
  auto consider = [&](const Op& op, std::int64_t nb, std::int64_t nt, std::int64_t ng,
                      std::int64_t scratch) {
    const std::int64_t total = c.base + nb + nt + ng + scratch + frames;
    if (total > r.peak) {
      r.peak = total;
      r.at = op;
      r.boundaries = nb, r.tapes = nt, r.grads = ng, r.scratch = scratch, r.frames = frames;
    }
  };
  for (const Op& op : ops) {
    const auto i = detail::idx(op.stage);
    switch (op.kind) {
      case Op::Kind::fwd_all: {
        const StageOption& o = stage(op.stage).options[detail::idx(op.option)];
        REMAT_ASSERT(tape[i] < 0);
        consider(op, boundaries, tapes + o.saved, grads, o.fwd_extra);
        tape[i] = op.option;
        tapes += o.saved;
        r.time_s += o.fwd_s;
        break;
      }
      case Op::Kind::fwd_ck:
      case Op::Kind::fwd_nograd: {
        const Stage& st = stage(op.stage);
        REMAT_ASSERT(!held[i + 1]);
        consider(op, boundaries + st.out, tapes, grads, st.nograd_extra);
        held[i + 1] = 1;
        boundaries += st.out;
        if (op.kind == Op::Kind::fwd_nograd) {  // the sweep's previous output is dropped
          REMAT_ASSERT(i >= 1 && held[i]);
          held[i] = 0;
          boundaries -= stage(op.stage - 1).out;
        }
        r.time_s += st.nograd_fwd_s;
        break;
      }
      case Op::Kind::frame_begin:
        frames += detail::frame_bytes(c, op.stage, op.option);
        consider(op, boundaries, tapes, grads, 0);
        break;
      case Op::Kind::frame_end:
        frames -= detail::frame_bytes(c, op.stage, op.option);
        break;
      case Op::Kind::loss: {
        REMAT_ASSERT(!grad[detail::idx(n)]);
        grad[detail::idx(n)] = 1;
        grads += stage(n - 1).out;
        consider(op, boundaries, tapes, grads, 0);
        break;
      }
      case Op::Kind::bwd: {
        const Stage& st = stage(op.stage);
        const StageOption& o = st.options[detail::idx(op.option)];
        REMAT_ASSERT(tape[i] == op.option && grad[i + 1]);
        const std::int64_t din = detail::boundary_bytes(c, op.stage);
        consider(op, boundaries, tapes, grads + din, o.bwd_extra);
        tape[i] = -1;
        tapes -= o.saved;
        grad[i + 1] = 0;
        grads -= st.out;
        REMAT_ASSERT(!grad[i]);
        grad[i] = 1;
        grads += din;
        if (i >= 1 && held[i]) {  // a checkpoint read by this stage: its last use is over
          held[i] = 0;
          boundaries -= stage(op.stage - 1).out;
        }
        r.time_s += o.bwd_s;
        break;
      }
    }
  }
  REMAT_ASSERT(tapes == 0 && boundaries == 0 && frames == 0);
  return r;
}

/// The fastest option of a stage: least fwd_s + bwd_s; ties go to the smaller footprint.
inline int fastest_option(const Stage& s) {
  int best = 0;
  auto key = [&](std::size_t k) {
    const StageOption& o = s.options[k];
    return std::make_pair(o.fwd_s + o.bwd_s, o.saved + std::max(o.fwd_extra, o.bwd_extra));
  };
  for (std::size_t k = 1; k < s.options.size(); ++k)
    if (key(k) < key(detail::idx(best))) best = static_cast<int>(k);
  return best;
}

/// Every stage kept with its fastest option: the fastest schedule, and the largest useful peak.
inline Schedule keep_all(const Chain& c) {
  Schedule s;
  for (std::size_t i = 0; i < c.stages.size(); ++i)
    s.push_back(make_keep(static_cast<int>(i), fastest_option(c.stages[i])));
  return s;
}

/// Per-stage checkpointing: every checkpointable stage but the last in a segment of its own
/// (replayed with its fastest option); the others kept. What checkpointing each block does.
inline Schedule checkpoint_each(const Chain& c) {
  Schedule s;
  const int n = static_cast<int>(c.stages.size());
  for (int i = 0; i < n; ++i) {
    const Stage& st = c.stages[detail::idx(i)];
    if (st.can_checkpoint && i + 1 < n)
      s.push_back(make_segment(i, i, {make_keep(i, fastest_option(st))}));
    else
      s.push_back(make_keep(i, fastest_option(st)));
  }
  return s;
}

/// "F_all(3,k1)", "F_ck(2)", "F_nograd(4)", "Loss", "B(3,k1)".
inline std::string to_string(const Op& op) {
  switch (op.kind) {
    case Op::Kind::fwd_all:
      return remat::detail::cat("F_all(", op.stage, ",k", op.option, ")");
    case Op::Kind::fwd_ck:
      return remat::detail::cat("F_ck(", op.stage, ")");
    case Op::Kind::fwd_nograd:
      return remat::detail::cat("F_nograd(", op.stage, ")");
    case Op::Kind::loss:
      return "Loss";
    case Op::Kind::bwd:
      return remat::detail::cat("B(", op.stage, ",k", op.option, ")");
    case Op::Kind::frame_begin:
      return remat::detail::cat("Frame(", op.stage, ",", op.option, ")");
    case Op::Kind::frame_end:
      return "End";
  }
  return "?";
}

/// A one-line form of a schedule: "k0:0 seg[1..3]{k1:0 seg[2..2]{k2:1} k3:0} k4:2"
/// (kI:K = keep stage I with option K).
inline std::string describe(const Schedule& s) {
  std::string out;
  for (const Step& st : s) {
    if (!out.empty()) out += ' ';
    if (st.kind == Step::Kind::keep)
      out += remat::detail::cat("k", st.first, ":", st.option);
    else
      out += remat::detail::cat("seg[", st.first, "..", st.last, "]{", describe(st.inner), "}");
  }
  return out;
}

}  // namespace remat::plan
