#pragma once
// SPDX-License-Identifier: MIT
// The tape's side of checkpointing: while a checkpoint() segment runs, the tape holds a stack of
// SegmentFrames, and every op (core/apply.hpp) reports to them. A frame in its first run keeps
// nothing but what its policy asks for; a frame in replay hands those kept outputs back and
// checks each op against the first run. The public API is in remat/checkpoint/.

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "remat/core/tensor.hpp"

namespace remat {

/// What a checkpoint policy sees of one interior op.
struct OpInfo {
  const char* op;        // "linear", "matmul", "gelu", ...
  std::int64_t index;    // position among the segment's ops, from 0
  const Shape* shape;    // the output's shape
  std::int64_t bytes;    // the output's bytes
  bool keepable = true;  // it can rebuild its backward state from its output (else: kept whole)
  bool with_weight = false;  // an input is a parameter: a product with one is a linear layer
};

/// Decides per interior op whether its output is kept from the first run (true) or
/// recomputed in backward (false); and which tagged tensors (remat::tag) are kept.
/// keep_op is asked about the ops that can rebuild their backward state from their output
/// (linear, matmul, pointwise and shape ops); with keep_state also about the others (layer
/// norm, attention, softmax, the loss), whose whole saved state (inputs and statistics) is then
/// kept with the output, as a run without checkpointing would keep it.
struct Policy {
  std::string name = "recompute_all";
  std::function<bool(const OpInfo&)> keep_op;  // empty: keep no op by kind
  std::vector<std::string> keep_names;         // tags whose tensors are kept
  bool keep_state = false;                     // keep_op may keep ops that need their state
};

/// What one checkpoint segment did in the last step, and its replays over time.
struct SegmentStats {
  std::string name;
  std::int64_t forwards = 0;        // first runs (one per step)
  std::int64_t replays = 0;         // replays in backward
  std::int64_t boundary_bytes = 0;  // inputs kept for the replay (last step)
  std::int64_t kept_bytes = 0;      // outputs kept by the policy (last step)
  std::int64_t freed_bytes = 0;     // bytes the interior would have saved without checkpointing
  std::int64_t remat_bytes = 0;     // bytes recomputed by the last replay
  double replay_s = 0.0;            // total seconds spent re-running fn (not its backward)
};

namespace detail {

enum class FrameMode { first_run, replay, plain };

/// One op as the first run saw it; the replay must see the same.
struct TraceEntry {
  const char* op = "";
  Shape shape;
  DType dtype = DType::f32;
  std::uint64_t hash = 0;  // of the output's bytes, when values are verified
  bool keepable = false;   // the op can rebuild its backward state from its output
};

/// The starting value of the hashes below (FNV-1a's offset basis).
constexpr std::uint64_t kHashSeed = 1469598103934665603ull;
/// Folds a 64-bit word into a running hash: one FNV-1a step over the word, then a shift-xor.
inline std::uint64_t hash_mix(std::uint64_t h, std::uint64_t w) {
  h = (h ^ w) * 1099511628211ull;
  return h ^ (h >> 29);
}
/// 64-bit hash of a buffer (hash_mix over 8-byte words, FNV-1a over the tail); a cheap bitwise
/// fingerprint, not a cryptographic one.
inline std::uint64_t hash_bytes(const void* p, std::size_t n) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  std::uint64_t h = kHashSeed;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, c + i, 8);
    h = hash_mix(h, w);
  }
  for (; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
inline std::uint64_t hash_bytes(const std::string& s) { return hash_bytes(s.data(), s.size()); }

/// The saved state of an op a policy kept whole (Policy::keep_state), type-erased.
template <class B>
struct KeptState {
  explicit KeptState(const char* o) : op(o) {}
  virtual ~KeptState() = default;
  virtual void each(const std::function<void(const Tensor<B>&)>& f) const = 0;
  const char* op;  // the op that saved it, checked before the replay takes it
};
template <class B, class Saved>
struct KeptStateOf final : KeptState<B> {
  KeptStateOf(const char* o, Saved s) : KeptState<B>(o), saved(std::move(s)) {}
  void each(const std::function<void(const Tensor<B>&)>& f) const override { saved.each(f); }
  Saved saved;
};

/// A tensor a segment's function read from outside (an input, a captured parameter or
/// constant, a captured recorded tensor) and the version it had then (NOTE [version counter]).
template <class B>
struct SegmentRead {
  std::weak_ptr<Storage<B>> storage;
  const Storage<B>* raw = nullptr;  // the same, for finding it again during the first run
  std::uint64_t version = 0;
  Shape shape;
  Category category = Category::temporaries;
  std::string name;      // its tag (remat::tag), if any
  std::int64_t op = 0;   // the first op of the segment that read it ...
  const char* op_name = "";  // ... and its kind
};

template <class B>
struct SegmentFrame {
  FrameMode mode = FrameMode::plain;
  std::uint64_t serial = 0;                  // unique per frame on its tape
  std::shared_ptr<const std::string> label;  // first run: "segment 3 ('h.2')", for errors
  std::int64_t count = 0;                    // ops seen in this frame (nested ones included)
  const Policy* policy = nullptr;            // first run
  bool hash_values = false;                  // verify values bitwise
  std::vector<TraceEntry>* trace = nullptr;  // first run fills it; replay compares with it
  std::map<std::int64_t, Tensor<B>>* kept = nullptr;  // index -> output kept from the first run
  std::map<std::int64_t, std::shared_ptr<KeptState<B>>>* kept_state = nullptr;  // ... and state
  bool touched_grad = false;                 // first run: some op's input needed a gradient
  std::int64_t freed_bytes = 0;              // first run: bytes the ops would have saved
  std::int64_t remat_bytes = 0;              // replay: bytes of recomputed outputs
  std::string mismatch;                      // replay: the first op that differs, described
  // First run (NOTE [captured tensors] in checkpoint/checkpoint.hpp): the segment's inputs; the
  // recorded tensors made outside that the function read without taking them as inputs, in the
  // order of first use; and everything read from outside, with its version.
  std::vector<const TensorImpl<B>*> boundary;
  std::vector<Tensor<B>>* captured = nullptr;
  std::vector<SegmentRead<B>>* reads = nullptr;
  // Replay: leaves that stand in for the captured recorded tensors (their gradient buffers are
  // the captured tensors' own slots), looked up by the tape when an op records.
  std::vector<std::pair<const TensorImpl<B>*, std::shared_ptr<TensorImpl<B>>>> stand_ins;
  // Replay: the ops whose outputs escaped the first run and were adopted as extra outputs
  // (NOTE [escaped tensors] in core/tape.hpp), and their outputs in this replay.
  const std::vector<std::int64_t>* adopted = nullptr;
  std::map<std::int64_t, Tensor<B>> adopted_out;
  std::set<std::weak_ptr<Storage<B>>, std::owner_less<std::weak_ptr<Storage<B>>>> counted;

  /// Notes the op that made `out` at this frame's next index.
  void note(const char* op, const Tensor<B>& out, std::uint64_t hash, bool keepable) {
    const std::int64_t i = count++;
    if (mode == FrameMode::first_run) {
      trace->push_back(TraceEntry{op, out.shape(), out.dtype(), hash, keepable});
    } else if (mode == FrameMode::replay && mismatch.empty()) {
      if (i >= static_cast<std::int64_t>(trace->size())) {
        mismatch = detail::cat("op ", i, " (", op, ") did not run in the first pass, which ran ",
                               trace->size(), " ops");
        return;
      }
      const TraceEntry& t = (*trace)[static_cast<std::size_t>(i)];
      if (std::strcmp(t.op, op) != 0 || t.shape != out.shape() || t.dtype != out.dtype())
        mismatch = detail::cat("op ", i, " is ", op, " with output ", out.shape().str(), " ",
                               dtype_name(out.dtype()), " in the replay but was ", t.op,
                               " with output ", t.shape.str(), " ", dtype_name(t.dtype),
                               " in the first pass");
      else if (hash_values && t.hash != hash)
        mismatch = detail::cat("op ", i, " (", op, ", output ", out.shape().str(),
                               ") computed different values in the replay than in the first "
                               "pass (bitwise)");
    }
  }
  /// First run: counts the bytes an op would have saved, each buffer once.
  void count_saved(const std::shared_ptr<Storage<B>>& s) {
    if (s && counted.insert(s).second) freed_bytes += static_cast<std::int64_t>(s->bytes());
  }
};

}  // namespace detail
}  // namespace remat
