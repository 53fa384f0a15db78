#pragma once
// SPDX-License-Identifier: MIT
// A model's step as a chain of stages, x_0 -> x_1 -> ... -> loss, that runs any planner
// schedule (plan/chain.hpp) through checkpoint(): the link between a user's own blocks and the
// byte-budget planner (plan/fit_stages.hpp). Each stage is a callable over one tensor; the
// model's parameters are whatever the callables use.
//
//   remat::Stages<B> s;
//   s.add_fixed("embed", [m](const Tensor<B>& ids) { return m->embed(ids); });  // ids: no segment
//   for (int i = 0; i < L; ++i)
//     s.add("h." + std::to_string(i), [m, i](const Tensor<B>& x) { return m->h[i](x); });
//   s.add("head", [m, y](const Tensor<B>& x) { return m->loss(x, y); });        // a scalar
//   Tensor<B> loss = s(ids, schedule);   // schedule: a plan's, or remat::plan::keep_all(...)
//
// The callables are copied into the tape's checkpoint nodes, so what they capture must outlive
// the backward pass: capture the model by shared_ptr (as above) or keep it alive yourself.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/checkpoint/policy.hpp"
#include "remat/core/error.hpp"
#include "remat/core/tensor.hpp"
#include "remat/plan/chain.hpp"

namespace remat {

/// One way to run a stage that a schedule keeps (a keep step): as it is, storing everything its
/// ops save, or as a segment of its own that keeps what `policy` names and replays the rest.
struct KeepOption {
  std::string name;      // "keep_all", or the policy's name
  bool segment = false;  // false: run as is
  Policy policy;         // segment only

  static KeepOption keep_all() { return KeepOption{"keep_all", false, Policy{}}; }
  static KeepOption with(Policy p) {
    std::string n = p.name;
    return KeepOption{std::move(n), true, std::move(p)};
  }
};

/// The options a stage gets by default, in the planner's option order: keep_all, then two
/// selective policies defined by role (checkpoint/policy.hpp), so they apply to any model.
inline std::vector<KeepOption> default_keep_options() {
  return {KeepOption::keep_all(), KeepOption::with(policy::save_all_but_attention()),
          KeepOption::with(policy::save_linear())};
}

template <class B>
class Stages {
 public:
  using Fn = std::function<Tensor<B>(const Tensor<B>&)>;
  struct Stage {
    std::string name;
    Fn fn;
    bool can_checkpoint = true;       // false: never inside a segment (e.g. token ids in)
    std::vector<KeepOption> options;  // options[0] runs it as is
  };

  Stages() : stages_(std::make_shared<std::vector<Stage>>()) {}

  /// Appends the stage x -> fn(x), which a plan may keep (with any of `options`; the first must
  /// run it as is) or put inside a segment.
  Stages& add(std::string name, Fn fn, std::vector<KeepOption> options = default_keep_options()) {
    return push(Stage{std::move(name), std::move(fn), true, std::move(options)});
  }
  /// Appends a stage that is never inside a segment and always kept as is: one whose input
  /// cannot be a segment's boundary, such as the embedding of integer token ids.
  Stages& add_fixed(std::string name, Fn fn) {
    return push(Stage{std::move(name), std::move(fn), false, {KeepOption::keep_all()}});
  }

  std::size_t size() const noexcept { return stages_->size(); }
  const Stage& operator[](std::size_t i) const { return stages_->at(i); }

  /// The chain's structure for the planner: names, options, can_checkpoint; no costs yet
  /// (plan/fit_stages.hpp measures them). Also what a schedule is validated against.
  plan::Chain skeleton() const {
    plan::Chain c;
    for (const Stage& s : *stages_) {
      plan::Stage st;
      st.name = s.name;
      st.can_checkpoint = s.can_checkpoint;
      for (const KeepOption& o : s.options) {
        plan::StageOption po;
        po.name = o.name;
        st.options.push_back(po);
      }
      c.stages.push_back(std::move(st));
    }
    return c;
  }

  /// Every stage kept as is: the plain run.
  Tensor<B> operator()(const Tensor<B>& x) const {
    REMAT_CHECK(!stages_->empty(), "remat::Stages: no stages to run (hint: add() them first)");
    Tensor<B> h = x;
    for (const Stage& s : *stages_) h = s.fn(h);
    return h;
  }
  /// Runs `schedule` (a whole-chain schedule over these stages): keep steps run their stage
  /// with the option named, segment steps checkpoint a run of stages whose backward replays it
  /// by the inner schedule. Throws remat::Error when the schedule does not fit the chain.
  Tensor<B> operator()(const Tensor<B>& x, const plan::Schedule& schedule) const {
    return (*this)(x, std::make_shared<const plan::Schedule>(schedule));
  }
  Tensor<B> operator()(const Tensor<B>& x, std::shared_ptr<const plan::Schedule> schedule) const {
    REMAT_CHECK(schedule != nullptr, "remat::Stages: the schedule is null (expected a "
                "plan's schedule, e.g. remat::plan::keep_all(stages.skeleton()))");
    REMAT_CHECK(!stages_->empty(), "remat::Stages: no stages to run (hint: add() them first)");
    plan::validate(skeleton(), *schedule);
    return run(stages_, schedule, *schedule, x);
  }

 private:
  using List = std::shared_ptr<const std::vector<Stage>>;

  Stages& push(Stage s) {
    REMAT_CHECK(static_cast<bool>(s.fn), "remat::Stages: stage '", s.name,
                "' has no function (expected a callable Tensor(const Tensor&))");
    REMAT_CHECK(!s.options.empty() && !s.options[0].segment, "remat::Stages: stage '", s.name,
                "' has ", s.options.size(), " options, the first ",
                s.options.empty() ? "missing" : s.options[0].name.c_str(),
                " (expected at least one, the first running the stage as is: "
                "KeepOption::keep_all())");
    for (std::size_t k = 1; k < s.options.size(); ++k)
      REMAT_CHECK(s.options[k].segment, "remat::Stages: option ", k, " ('", s.options[k].name,
                  "') of stage '", s.name, "' runs it as is, as option 0 does (expected a "
                  "policy: KeepOption::with(policy::save_linear()))");
    if (stages_.use_count() > 1)  // a running schedule still reads the old list
      stages_ = std::make_shared<std::vector<Stage>>(*stages_);
    stages_->push_back(std::move(s));
    return *this;
  }

  // Runs `steps` on x; `list` and `owner` keep the stages and the schedule alive for the
  // replays in backward.
  static Tensor<B> run(const List& list, const std::shared_ptr<const plan::Schedule>& owner,
                       const plan::Schedule& steps, Tensor<B> x) {
    for (const plan::Step& s : steps) {
      const Stage& first = (*list)[static_cast<std::size_t>(s.first)];
      if (s.kind == plan::Step::Kind::keep) {
        const KeepOption& o = first.options[static_cast<std::size_t>(s.option)];
        if (!o.segment)
          x = first.fn(x);
        else
          x = checkpoint(CheckpointOptions{}.name(first.name).policy(o.policy), first.fn, x);
      } else {
        const plan::Schedule* inner = &s.inner;
        const std::string name =
            s.first == s.last ? first.name
                              : first.name + ".." + (*list)[static_cast<std::size_t>(s.last)].name;
        x = checkpoint(CheckpointOptions{}.name(name),
                       [list, owner, inner](const Tensor<B>& in) {
                         return run(list, owner, *inner, in);
                       },
                       x);
      }
    }
    return x;
  }

  std::shared_ptr<std::vector<Stage>> stages_;
};

/// What the planner runs of a user's model on one backend: the stages, a sample input x_0 of
/// the size the training run will use, and the parameters an optimizer updates.
template <class B>
struct StageProgram {
  Stages<B> stages;
  Tensor<B> input;
  std::vector<Tensor<B>> parameters;
};

}  // namespace remat
