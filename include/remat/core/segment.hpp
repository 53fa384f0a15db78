#pragma once
// SPDX-License-Identifier: MIT
// The tape's side of checkpointing: while a checkpoint() segment runs, the tape holds a stack of
// SegmentFrames, and every op (core/apply.hpp) reports to them. A frame in its first run keeps
// nothing but what its policy asks for; a frame in replay hands those kept outputs back and
// checks each op against the first run. The public API is in remat/checkpoint/.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
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
  std::int64_t skipped_ops = 0;     // ops the last replay recorded without computing them
  double replay_s = 0.0;            // total seconds spent re-running fn (not its backward)
};

namespace detail {

enum class FrameMode { first_run, replay, plain };

/// What the replay does at an op (NOTE [replay only what backward needs]).
enum class ReplayAction : unsigned char {
  compute,  // run its forward
  reuse,    // take the output (and state) kept from the first run
  skip,     // nothing reads its output: record it with an output that holds no values
};

/// One op as the first run saw it; the replay must see the same.
struct TraceEntry {
  const char* op = "";
  Shape shape;
  DType dtype = DType::f32;
  DType grad_dtype = DType::f32;  // the output's gradient type (TensorImpl::grad_dtype)
  std::uint64_t hash = 0;  // of the output's bytes, when values are verified
  bool keepable = false;   // the op can rebuild its backward state from its output
  // The data flow, for plan_replay (indices into the trace; ops of this segment only):
  std::vector<std::int32_t> inputs;     // the ops that made its inputs
  std::vector<std::int32_t> save_refs;  // the ops whose outputs its `save` keeps for backward
  bool saved_by_plain = false;  // some op's backward state holds its output (a plain run keeps it)
  bool aliases = false;         // its output shares an input's buffer (a view: costs nothing)
  std::int32_t alias_of = -1;   // ... made by this op (keeping either keeps the same bytes)
  bool nested = false;          // it ran inside a checkpoint nested in this one (always computed)
  bool read_on_host = false;    // the function read its values (to_vector, item): computed
  std::uint64_t signature = 0;  // its inputs' shapes and its attributes, hashed (OpSignature)
  bool signed_fully = false;    // every attribute was hashed
  ReplayAction action = ReplayAction::compute;
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

/// An op's inputs' shapes and dtypes and its attributes, hashed. A replay reuses a kept output
/// or skips an op only when its signature is the first run's: a function that changes an op's
/// attributes between the runs (a counter, a cache) gets the op computed, and the replay check
/// names it.
struct OpSignature {
  std::uint64_t hash = kHashSeed;
  bool full = true;  // false: an attribute of a type it cannot hash
  void add(std::uint64_t w) { hash = hash_mix(hash, w); }
};
inline void sign(OpSignature& s, const Shape& v) {
  s.add(static_cast<std::uint64_t>(v.rank()));
  for (int i = 0; i < v.rank(); ++i) s.add(static_cast<std::uint64_t>(v[i]));
}
inline void sign(OpSignature& s, const std::string& v) { s.add(hash_bytes(v)); }
inline void sign(OpSignature& s, const char* v) { s.add(v ? hash_bytes(v, std::strlen(v)) : 0); }
template <std::size_t N>
void sign(OpSignature& s, const char (&v)[N]) {  // a string literal
  sign(s, static_cast<const char*>(v));
}
template <class T>
void sign(OpSignature& s, const std::vector<T>& v) {
  s.add(v.size());
  for (const T& e : v) sign(s, e);
}
template <class T>
void sign(OpSignature& s, const T& v) {
  if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
    s.add(hash_bytes(&v, sizeof v));
  } else {
    s.full = false;  // (a struct's padding bytes are not its value)
  }
}

/// Thrown inside a replay that ran an op other than the first run did (SegmentFrame::mismatch
/// says which); checkpoint's backward reports it as the replay check does.
struct ReplayDiverged : Error {
  using Error::Error;
};

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
  std::int64_t skipped_ops = 0;              // replay: ops recorded without computing
  // First run: which op of the trace made each buffer, as it is made (buffers are alive while
  // an op reads them, so a lookup always finds the op that made the buffer read).
  std::unordered_map<const void*, std::int32_t> producer;
  std::string mismatch;                      // replay: the first op that differs, described
  // First run: outputs that own their recipes (NOTE [saved as a recipe]); drop_recipes() lets
  // go of those still alive when the first run ends, so no interior tensor outlives it.
  std::vector<std::weak_ptr<TensorImpl<B>>> recipe_outputs;
  void drop_recipes() {
    for (const auto& w : recipe_outputs)
      if (auto impl = w.lock()) impl->recipe_owned.reset();
    recipe_outputs.clear();
  }
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
      TraceEntry e;
      e.op = op;
      e.shape = out.shape();
      e.dtype = out.dtype();
      e.grad_dtype = out.impl()->grad_dtype;
      e.hash = hash;
      e.keepable = keepable;
      trace->push_back(std::move(e));
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
  /// First run: the trace index of the op that made t's buffer in this segment, or -1.
  std::int32_t producer_of(const Tensor<B>& t) const {
    if (!t.defined()) return -1;
    auto it = producer.find(t.storage().get());
    return it == producer.end() ? -1 : it->second;
  }
  // First run: outputs a policy chose that no op has saved yet, held weakly: a policy keeps
  // only what a plain run keeps, and holding them all through the first run would raise its
  // peak above the plain run's (NOTE [replay only what backward needs]).
  std::map<std::int64_t, std::weak_ptr<TensorImpl<B>>> candidates;

  /// First run: a policy chose op i's output. Kept at once when an op saved it already (its
  /// own op: exp, softmax), else when one does (note_saved), else not at all.
  void keep(std::int64_t i, const Tensor<B>& out) {
    if ((*trace)[static_cast<std::size_t>(i)].saved_by_plain)
      kept->emplace(i, out);
    else
      candidates[i] = out.impl_ptr();
  }
  /// First run: an op's backward state holds t (what a plain run keeps): the op that made its
  /// buffer, and the ops that made the buffer it views (reshape(matmul(x, w)) saved keeps the
  /// product's bytes, so keeping the product costs nothing more).
  void note_saved(const Tensor<B>& t) {
    for (std::int32_t p = producer_of(t); p >= 0;
         p = (*trace)[static_cast<std::size_t>(p)].alias_of)
      mark_saved(p, t);
  }
  void mark_saved(std::int32_t p, const Tensor<B>& t) {
    TraceEntry& e = (*trace)[static_cast<std::size_t>(p)];
    e.saved_by_plain = true;
    auto c = candidates.find(p);
    if (c == candidates.end()) return;
    std::shared_ptr<TensorImpl<B>> impl = c->second.lock();
    candidates.erase(c);
    if (impl) {
      kept->emplace(p, Tensor<B>(std::move(impl)));
    } else if (t.storage()->bytes() == static_cast<std::size_t>(e.shape.numel()) *
                                           dtype_size(e.dtype)) {  // gone; its buffer is t's
      Tensor<B> a = detail::alias(t, t.shape());
      a.impl()->shape = e.shape;
      a.impl()->dtype = e.dtype;
      a.impl()->grad_dtype = e.grad_dtype;
      kept->emplace(p, a);
    }
  }
  /// First run: the function read this buffer's values on the host.
  void note_host_read(const void* storage) {
    auto it = producer.find(storage);
    if (it != producer.end()) (*trace)[static_cast<std::size_t>(it->second)].read_on_host = true;
  }
  /// First run: counts the bytes an op would have saved, each buffer once.
  void count_saved(const std::shared_ptr<Storage<B>>& s) {
    if (s && counted.insert(s).second) freed_bytes += static_cast<std::int64_t>(s->bytes());
  }
};

// NOTE [replay only what backward needs]
// A policy chooses among the tensors a plain run keeps for backward; it never keeps one the
// plain run would not (the output of a product that only a residual add reads, of a copy that
// another copy reads), so a segment holds at most the plain run's bytes. And the replay computes
// only what backward reads. After the first run, plan_replay walks its trace from the last op
// to the first and gives each op one action:
//   reuse    its output was kept (a policy's choice that the plain run saves too);
//   skip     no later computed op reads its output and no backward state holds it, and the op
//            can rebuild its state without computing (it defines `save`, or its state was kept
//            whole): it is recorded with an output that holds no values (Tensor::data throws
//            on it), so its backward runs as in the plain run. A block's last residual add is
//            such an op (its output only seeds the gradient), and so is each product whose
//            output only feeds a kept op;
//   compute  everything else, every op whose values the function read on the host (item(),
//            to_vector(): logging inside a block keeps working), and every op when values are
//            verified or inside a nested segment.
// Every input of a computed op, and every tensor a reused or skipped op's `save` holds, is
// needed: its op is computed unless kept. The gradients are the plain run's bit for bit: the
// same nodes are recorded with the same state; only values nothing reads are not computed.
template <class B>
void plan_replay(std::vector<TraceEntry>& trace, std::map<std::int64_t, Tensor<B>>& kept,
                 std::map<std::int64_t, std::shared_ptr<KeptState<B>>>& kept_state,
                 bool compute_all) {
  const std::int64_t n = static_cast<std::int64_t>(trace.size());
  for (auto it = kept.begin(); it != kept.end();) {  // only what the plain run keeps
    if (it->first < n && trace[static_cast<std::size_t>(it->first)].saved_by_plain) {
      ++it;
    } else {
      it = kept.erase(it);  // (a state kept whole stays: the op may still be skipped)
    }
  }
  std::vector<char> needed(trace.size(), 0);
  const auto need = [&](const std::vector<std::int32_t>& ops) {
    for (std::int32_t j : ops)
      if (j >= 0) needed[static_cast<std::size_t>(j)] = 1;
  };
  for (std::int64_t k = n - 1; k >= 0; --k) {
    TraceEntry& t = trace[static_cast<std::size_t>(k)];
    const bool own_state = std::find(t.save_refs.begin(), t.save_refs.end(),
                                     static_cast<std::int32_t>(k)) != t.save_refs.end();
    const bool rebuilds = (t.keepable && !own_state) || kept_state.count(k) != 0;
    if (kept.count(k) != 0) {
      t.action = ReplayAction::reuse;
      if (t.keepable) need(t.save_refs);
    } else if (!compute_all && !t.nested && !t.read_on_host &&
               !needed[static_cast<std::size_t>(k)] && rebuilds) {
      t.action = ReplayAction::skip;
      if (kept_state.count(k) == 0) need(t.save_refs);
    } else {
      t.action = ReplayAction::compute;
      kept_state.erase(k);  // recomputed: a state kept whole would only be held twice
      need(t.inputs);
    }
  }
}

}  // namespace detail
}  // namespace remat
