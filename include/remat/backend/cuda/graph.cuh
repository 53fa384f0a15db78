#pragma once
// SPDX-License-Identifier: MIT
// A CUDA graph of device work (issue 25, item 8): capture() runs a function's host code once
// with the backend's stream captured, so every kernel, cuBLAS call and device copy it sends is
// recorded instead of run; replay() sends the whole recording with one call. A training step
// of a few hundred launches then costs the host one launch.
//
// NOTE [CUDA graphs]
// - What a graph holds: device work with its arguments as they were at the capture: pointers,
//   shapes, scalars. The host code (the tape, the checkpoint planner, the ledger) runs once, at
//   the capture; a replay runs none of it. So the inputs must be tensors that stay (written in
//   place before each replay: Tape::write_tokens), the outputs are the tensors the capture made
//   (the loss, the parameters' gradients: a replay overwrites them; keep them, and do not drop
//   the gradients with zero_grad between replays), and anything the host decides per step (a
//   learning-rate schedule, AdamW's step count, dropout's seed) stays outside the graph.
// - The capture runs nothing on the device: the outputs hold their values after the first
//   replay(). Checkpointed segments are captured with their replays in backward, so a replay
//   recomputes exactly as the eager step does, bit for bit (tests/cuda: "CUDA graph").
// - Nothing may wait for the device while capturing (a copy to or from the host, item(),
//   a synchronize): CUDA refuses it and the capture fails with the reason and a hint.
//   Positions are made on the device (Tape::positions) for this.
// - Profiling (profile.cuh) times launches one by one; it is refused during a capture.
//
// NOTE [CUDA graph memory]
// - A replay writes where the capture's allocations were, so no other tensor may be given
//   those blocks while the graph lives. The capture allocates from the one pool as an eager
//   step does (after eager steps its layout has settled, and it reserves nothing new); no
//   segment goes back to the device during it (a miss reserves beside the cache). At its end
//   the graph takes every free block of the pool (what the capture freed, and what earlier
//   steps cached), and the capture's outputs (the loss, the gradients) once they are freed;
//   all go back to the pool with the graph (reset()).
// - So the reserved bytes are those of the eager steps before it (issue 25's acceptance 3:
//   predicted 0.1-0.9% over the ledger's peak at GPT-2 124M); a graph's own pool (PyTorch's
//   way) modelled for the same steps came to 2.1-11.6% over, as a fresh pool that may return
//   nothing during the capture never settles. What runs eagerly beside a graph (an evaluation
//   pass) reserves its own segments.
// - The ledger (core/memory.hpp) is host bookkeeping: the capture counts the step's bytes as
//   the eager step does, so its peak is the eager step's; replays change nothing there.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "remat/backend/cuda/context.cuh"
#include "remat/backend/cuda/error.cuh"
#include "remat/backend/cuda/launch.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/profile.cuh"

namespace remat {
namespace cuda {

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() { reset(); }

  /// Records the device work of fn() (its host code runs once, now; nothing runs on the
  /// device). Throws when fn waits for the device, when it throws (the capture is dropped,
  /// and so is what it allocated), and when this graph holds a capture already.
  template <class F>
  void capture(F&& fn) {
    REMAT_CHECK(!exec_, "remat::cuda::Graph::capture: this graph holds a capture already "
                "(expected a fresh graph; hint: reset() it first, or keep replaying it)");
    REMAT_CHECK(!Profiler::get().enabled(), "remat::cuda::Graph::capture: the profile is on "
                "(expected it off: it times launches one by one, a graph has one; hint: profile "
                "the eager step)");
    auto& alloc = CachingAllocator::get();
    auto hold = std::make_shared<GraphHold>();
    const cudaStream_t s = Context::get().stream();
    REMAT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    alloc.begin_capture(hold);
    capturing_flag().store(true);
    auto end = [&](bool keep) {
      capturing_flag().store(false);
      cudaGraph_t g = nullptr;
      const cudaError_t e = cudaStreamEndCapture(s, &g);
      alloc.end_capture(hold, keep && e == cudaSuccess);
      return std::make_pair(e, g);
    };
    auto abandon = [&] {  // fn threw: the capture and what it recorded go
      const auto [e, g] = end(false);
      (void)cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      return e;
    };
    try {
      fn();
    } catch (const std::exception& ex) {
      const cudaError_t e = abandon();
      // fn waited for the device (the capture is invalidated), or CUDA refused a call that a
      // capture cannot hold (a copy to pageable host memory, say)
      if (e == cudaErrorStreamCaptureInvalidated || dynamic_cast<const CudaError*>(&ex))
        throw CudaError(::remat::detail::cat(
            "remat::cuda::Graph::capture: the captured code waited for the device or made a call "
            "a capture refuses (", ex.what(), "); expected device work only (hint: make inputs "
            "before the capture and write them in place, Tape::write_tokens; read outputs such "
            "as loss.item() after replay())"));
      throw;
    } catch (...) {
      abandon();
      throw;
    }
    const auto [e, g] = end(true);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw CudaError(::remat::detail::cat("remat::cuda::Graph::capture: cudaStreamEndCapture "
                                           "failed: ", cudaGetErrorString(e), " (",
                                           cudaGetErrorName(e), ")"));
    }
    graph_ = g;
    hold_ = std::move(hold);
    const cudaError_t ie = cudaGraphInstantiate(&exec_, graph_, 0);
    if (ie != cudaSuccess) {
      exec_ = nullptr;
      reset();
      (void)cudaGetLastError();
      throw CudaError(::remat::detail::cat("remat::cuda::Graph::capture: cudaGraphInstantiate "
                                           "failed: ", cudaGetErrorString(ie)));
    }
  }

  /// Runs the captured work once, in stream order after what was sent before (one launch).
  void replay() {
    REMAT_CHECK(exec_ != nullptr, "remat::cuda::Graph::replay: nothing captured (expected "
                "capture() first)");
    device_counters().launches.fetch_add(1, std::memory_order_relaxed);
    REMAT_CUDA_CHECK(cudaGraphLaunch(exec_, Context::get().stream()));
  }

  bool captured() const noexcept { return exec_ != nullptr; }
  /// The recorded device operations (kernels, GEMMs, copies, fills).
  std::size_t nodes() const {
    std::size_t n = 0;
    if (graph_) REMAT_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
    return n;
  }
  /// Blocks the graph holds so that nothing else lands where it writes (NOTE [CUDA graph
  /// memory]): the pool's free blocks at the capture's end, and its outputs once freed.
  std::size_t held_blocks() const noexcept { return hold_ ? hold_->blocks.size() : 0; }

  /// Drops the capture; the blocks it held go back to the pool.
  void reset() noexcept {
    if (exec_ || graph_) (void)cudaStreamSynchronize(Context::get().stream());  // a replay may run
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    if (hold_) CachingAllocator::get().release_graph(*hold_);
    hold_.reset();
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::shared_ptr<GraphHold> hold_;
};

}  // namespace cuda
}  // namespace remat
