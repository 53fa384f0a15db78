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

#include "remat/backend/meta.hpp"
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

}  // namespace remat
