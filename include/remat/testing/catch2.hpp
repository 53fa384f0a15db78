#pragma once
// SPDX-License-Identifier: MIT
// Catch2 (v2 or v3) assertions for users' own tests of checkpointed code. Include Catch2 first
// (catch2/catch.hpp or catch2/catch_all.hpp); this header adds no main().
//
//   // fn(x, ...) -> Tensor, once plainly and once inside checkpoint(): gradients bitwise equal
//   REMAT_REQUIRE_CHECKPOINT_EQUIVALENT(tape, fn, watch, x);
//   // run(bool checkpointing) -> Tensor (say, a model with and without its strategy):
//   // gradients bitwise equal, and the checkpointed peak of saved activations <= 0.4 x plain
//   REMAT_REQUIRE_CHECKPOINT_SAVES(tape, run, watch, 0.4);
//   // any statements: their peak of saved activations at most N bytes
//   REMAT_REQUIRE_PEAK_SAVED_AT_MOST(remat::Cpu, N, tape.backward(model.loss(x, y)));
//
//   // an op's or a layer's backward against finite differences (CPU tensors)
//   REMAT_REQUIRE_GRADCHECK(tape, fn, inputs);            // fn(const std::vector<Tensor>&)
//   REMAT_REQUIRE_GRADCHECK_WITH(tape, fn, inputs, opts); // remat::testing::GradcheckOptions
//
// watch: the tensors whose gradients are compared (parameters, inputs that require grad).
// Dropout inside is fine: both runs start from the same RNG counter.

#include "remat/testing/equivalence.hpp"
#include "remat/testing/gradcheck.hpp"

#define REMAT_REQUIRE_CHECKPOINT_EQUIVALENT(tape, fn, watch, ...)                         \
  do {                                                                                     \
    const auto remat_report_ = ::remat::testing::checkpoint_equivalence(                   \
        tape, fn, watch, ::remat::CheckpointOptions{}, __VA_ARGS__);                       \
    INFO("remat checkpoint equivalence: " << remat_report_.detail);                        \
    REQUIRE(remat_report_.equal);                                                          \
  } while (0)

#define REMAT_REQUIRE_CHECKPOINT_SAVES(tape, run, watch, max_ratio)                       \
  do {                                                                                     \
    const auto remat_report_ = ::remat::testing::compare_runs(tape, run, watch);           \
    INFO("remat checkpoint equivalence: " << remat_report_.detail);                        \
    REQUIRE(remat_report_.equal);                                                          \
    REQUIRE(static_cast<double>(remat_report_.checkpoint_peak_saved) <=                   \
            (max_ratio) * static_cast<double>(remat_report_.plain_peak_saved));            \
  } while (0)

#define REMAT_REQUIRE_PEAK_SAVED_AT_MOST(backend, max_bytes, ...)                         \
  do {                                                                                     \
    const std::int64_t remat_base_ =                                                       \
        ::remat::memory_stats<backend>().live_of(::remat::Category::activations);          \
    ::remat::reset_peak_memory<backend>();                                                 \
    __VA_ARGS__;                                                                           \
    const std::int64_t remat_peak_ =                                                       \
        ::remat::memory_stats<backend>().peak_of(::remat::Category::activations) -         \
        remat_base_;                                                                       \
    INFO("peak saved activations: " << remat_peak_ << " bytes");                           \
    REQUIRE(remat_peak_ <= static_cast<std::int64_t>(max_bytes));                          \
  } while (0)

#define REMAT_REQUIRE_GRADCHECK_WITH(tape, fn, inputs, options)                            \
  do {                                                                                     \
    const auto remat_gc_ = ::remat::testing::gradcheck(tape, fn, inputs, options);         \
    INFO("remat gradcheck: " << remat_gc_.detail);                                         \
    REQUIRE(remat_gc_.ok);                                                                 \
  } while (0)

#define REMAT_REQUIRE_GRADCHECK(tape, fn, inputs) \
  REMAT_REQUIRE_GRADCHECK_WITH(tape, fn, inputs, ::remat::testing::GradcheckOptions{})
