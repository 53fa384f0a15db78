#pragma once
// SPDX-License-Identifier: MIT
// The estimator: runs a training program on Meta<Target> (backend/meta.hpp), the shape-only
// twin of a backend, and returns the ledger it kept. Same modules, ops, tape, checkpoint()
// replays and optimizer as the real run, so the predicted peak is the real ledger's, to the byte.
// Model-free: the bundled GPT's step estimate is nn/gpt_estimate.hpp.
//
//   auto est = remat::estimate_memory<remat::Cpu>([&](auto& tape) {  // any program, generic
//     MyModel<std::decay_t<decltype(tape)>::backend> m(tape);        // over the backend
//     tape.backward(m.loss(...));
//   });
//   est.peak_total;                                    // the bytes the real run will peak at

#include <cstdint>
#include <string>

#include "remat/backend/meta.hpp"
#include "remat/core/work.hpp"
#include "remat/core/error.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/tape.hpp"

namespace remat {

/// Runs program(tape) on a fresh Tape<Meta<Target>> and returns the ledger it left: the bytes
/// live when it ended and the peaks it reached, as Target would have them. `program` is a
/// generic lambda (`[&](auto& tape) { ... }`) that builds what it needs on `tape` and runs it;
/// it may call reset_peak_memory<B>() after a warm-up, exactly as on Target. Not reentrant
/// (one Meta ledger per target backend).
template <class Target, class Program>
MemoryStats estimate_memory(Program&& program) {
  using M = Meta<Target>;
  REMAT_CHECK(memory_stats<M>().live_total == 0, "remat::estimate_memory: the shape-only ledger "
              "holds ", memory_stats<M>().live_total, " bytes before the estimate (expected 0: "
              "another estimate is running, or Meta tensors outlived one)");
  reset_peak_memory<M>();
  M::reset_reserved();  // a fresh model of Target's allocator, where it has one
  {
    Tape<M> tape;
    program(tape);
  }
  return memory_stats<M>();
}

/// A training step's memory, predicted: `first` covers building the model and its first step
/// (optimizer state is made at the end of it), `step` a later step, with the optimizer state
/// live throughout: its peak_total is what a training run reaches at every step after the first.
struct StepEstimate {
  MemoryStats first;
  MemoryStats step;
  // Bytes Target's allocator reserves at its peak, from a fresh allocator: through the first
  // step, and through the third (reserved bytes only grow; the steps repeat their allocations,
  // but where the pool's blocks lie can still change in the second step and ask for one more
  // segment in the third, e.g. GPT-2 124M at T512: +4 MiB; the later steps reserve nothing
  // more, tests/plan/test_cuda_model.cpp). 0 where Target has no ReservedModel (the CPU: its
  // arena keeps at most 0.5% over the ledger's peak, NOTE [CPU arena allocator]).
  std::int64_t reserved_first = 0;
  std::int64_t reserved_peak = 0;
  double seconds = 0.0;  // time the estimate took
  // What the second step's kernels ask of the device (FLOPs and compulsory bytes by kind,
  // core/work.hpp): plan/roofline.hpp predicts its time on a GPU from it.
  Work work;
  std::int64_t peak() const noexcept { return step.peak_total; }
};

/// "parameters 23.0 MiB, gradients 512.0 KiB, optimizer state 45.9 MiB, activations 153.3 MiB,
/// temporaries 6.1 MiB": where the bytes of m's peak go, for tables and errors.
inline std::string bytes_at_peak(const MemoryStats& m) {
  return detail::cat("parameters ", format_bytes(m.at_peak_of(Category::parameters)),
                     ", gradients ", format_bytes(m.at_peak_of(Category::gradients)),
                     ", optimizer state ", format_bytes(m.at_peak_of(Category::optimizer_state)),
                     ", activations ", format_bytes(m.at_peak_of(Category::activations)),
                     ", temporaries ", format_bytes(m.at_peak_of(Category::temporaries)));
}

/// Inside an estimate_memory program on M = Meta<Target>: runs one_step() (a whole training
/// step) twice, the second from a reset peak, and a third where M models a caching allocator,
/// and fills est from the ledger (StepEstimate's fields say which step each one covers).
template <class M, class OneStep>
void record_training_steps(StepEstimate& est, OneStep&& one_step) {
  one_step();
  est.first = memory_stats<M>();
  est.reserved_first = static_cast<std::int64_t>(M::peak_reserved_bytes());
  reset_peak_memory<M>();
  M::reset_work();
  one_step();
  est.step = memory_stats<M>();
  est.work = M::work();
  if (M::models_reserved) one_step();  // the pool settles (StepEstimate::reserved_peak)
  est.reserved_peak = static_cast<std::int64_t>(M::peak_reserved_bytes());
}

}  // namespace remat
