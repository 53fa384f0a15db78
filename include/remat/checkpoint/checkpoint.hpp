#pragma once
// SPDX-License-Identifier: MIT
// remat::checkpoint(fn, inputs...): runs fn keeping only its inputs (and what a policy keeps),
// and replays it from those inputs when backward reaches it. checkpoint_sequential() cuts a
// chain of blocks into segments.
//
// NOTE [checkpoint semantics]
// 1. Forward runs fn with recording off: no interior op records a node, so no interior Saved
//    outlives its op. The tape records one "checkpoint" node: inputs, outputs, a copy of fn, the
//    RNG seed and counter at the start, the first run's op trace, the outputs the policy kept,
//    and what fn read from outside (NOTE [captured tensors]).
// 2. Backward at that node restores the RNG seed and counter (then puts the caller's back),
//    replays fn on aliases of the inputs into a scratch range of the tape, checks the replay
//    against the first run (every op's kind, output shape and dtype, input shapes and
//    attributes; with verify_values also its bytes), backpropagates through the scratch range
//    and frees it at once. The replay computes only what backward reads (NOTE [replay only what
//    backward needs] in core/segment.hpp). Captured parameters get their gradients directly; so do the inputs and
//    captured recorded tensors: the replay's stand-ins for them share their real gradient
//    buffers (NOTE 9).
// 3. fn must be pure in its inputs and captured tensors. The replay check catches state that
//    changes between the two runs (a cache, a counter) and names the first op that differs; an
//    in-place write to anything fn read (optimizer.step(), loading weights, mutable_data())
//    between the forward pass and backward is an error naming the tensor and the first op that
//    read it (NOTE [version counter] in core/storage.hpp).
// 4. A checkpoint inside another segment's first run is a plain call; it becomes a segment of
//    its own while the outer one replays, so the innermost segment owns its saved tensors.
// 5. Under NoGrad, or when nothing inside needs a gradient, checkpoint() is a plain call.
// 6. Dropout needs no stashed state: its masks are a function of (seed, counter), and the
//    replay starts from the same seed and counter, so it draws the same masks on every backend,
//    even when tape.set_seed() was called between the forward pass and backward.
// 7. Tensors should leave a segment through its outputs. One made inside that leaves through a
//    capture (then used by an op outside, returned by another segment, or a loss) is adopted by
//    the tape as an extra output of the segment, so its gradient flows as in the plain run;
//    where that cannot be (the segment's node is gone, or a checkpoint nested inside made it)
//    the op raises an error naming the segment (NOTE [escaped tensors] in core/tape.hpp).
//    Under NoGrad, or after remat::detach(), it is an ordinary constant.
// 8. The ledger row of a segment (segment_table) is keyed by its name, the type of fn (its
//    call site) and its place among same-keyed segments of the graph (numbered from 0 again
//    after each backward), never by creation order.
// 9. Bit for bit for every graph (CPU, same thread count): the replay adds each gradient into
//    the buffer the plain run adds it into, in the plain run's order. The stand-ins the replay
//    starts from use the real gradient buffers (slot or leaf grad) of the inputs and of the
//    captured recorded tensors, which already hold what ops after the segment added; so a skip
//    connection across the segment, an input passed twice, a tensor computed once and captured
//    by every segment (a weight-norm or LoRA merge), and weights shared by micro-batches
//    (captured or passed as inputs) sum in the plain order. An output that fn returns unchanged
//    (an input, or a captured tensor that requires grad) passes through unrecorded, so its
//    consumers add into its own gradient as in the plain run; a tensor returned twice is one
//    recorded output with one gradient slot. Tested in tests/checkpoint/test_bitwise_graphs.cpp.
//
// NOTE [captured tensors]: what fn reads without taking it as an input is found in the first
// run (core/apply.hpp, note_outside_reads): every buffer read from outside, with its version
// (checked before the replay, NOTE 3), and the recorded tensors among them (made by ops outside
// the segment, e.g. s = w * 2 computed once per step). Those become extra inputs of the node,
// so backward reaches their producers (without that, w.grad stayed undefined), and in the
// replay an op that takes one records it against a stand-in whose gradient buffer is its slot.
// Captured leaves (parameters, constants) need nothing: ops add into a leaf's own gradient.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "remat/checkpoint/policy.hpp"
#include "remat/core/apply.hpp"

namespace remat {

/// Options of one checkpoint() call, as chained setters:
///   CheckpointOptions{}.name("block 3").policy(policy::save_linear()).verify_values(true)
class CheckpointOptions {
 public:
  /// Shown in the segment ledger and in errors.
  CheckpointOptions& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  /// Which interior outputs are kept instead of recomputed (default: none).
  CheckpointOptions& policy(Policy p) {
    policy_ = std::move(p);
    return *this;
  }
  /// Debug mode: hash every interior output in both runs and require them bitwise equal.
  /// Also on for every segment when the environment has REMAT_CHECKPOINT_DEBUG=1.
  CheckpointOptions& verify_values(bool on) {
    verify_ = on;
    return *this;
  }
  const std::string& name() const noexcept { return name_; }
  const Policy& policy() const noexcept { return policy_; }
  bool verify_values() const noexcept { return verify_ || debug_from_env(); }

 private:
  static bool debug_from_env() {
    static const bool on = [] {
      const char* v = std::getenv("REMAT_CHECKPOINT_DEBUG");
      return v && *v && std::string(v) != "0";
    }();
    return on;
  }
  std::string name_;
  Policy policy_;
  bool verify_ = false;
};

namespace detail {

template <class T> struct is_std_vector : std::false_type {};
template <class T, class A> struct is_std_vector<std::vector<T, A>> : std::true_type {};
template <class T, class = void> struct is_tuple_like : std::false_type {};
template <class T>
struct is_tuple_like<T, std::void_t<decltype(std::tuple_size<T>::value)>> : std::true_type {};

/// Pointers to every tensor in fn's result: a Tensor, a tuple/pair of them, or a vector.
template <class B, class T>
void collect(T& v, std::vector<Tensor<B>*>& out) {
  if constexpr (std::is_same_v<T, Tensor<B>>) {
    out.push_back(&v);
  } else if constexpr (is_std_vector<T>::value) {
    for (auto& e : v) collect<B>(e, out);
  } else {
    static_assert(is_tuple_like<T>::value,
                  "remat::checkpoint: the function must return a Tensor, a tuple or pair of "
                  "Tensors, or a std::vector of Tensors");
    std::apply([&](auto&... e) { (collect<B>(e, out), ...); }, v);
  }
}

template <class B>
class FrameGuard {
 public:
  FrameGuard(Tape<B>& t, SegmentFrame<B>* f) : t_(t), f_(f) { t_.push_frame(f_); }
  ~FrameGuard() { t_.pop_frame(f_); }
  FrameGuard(const FrameGuard&) = delete;
  FrameGuard& operator=(const FrameGuard&) = delete;

 private:
  Tape<B>& t_;
  SegmentFrame<B>* f_;
};

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The tape node of one segment: owns fn, the boundary inputs and the kept outputs.
template <class B, class Fn, class Out, std::size_t N>
struct CheckpointBody final : NodeBody<B> {
  CheckpointBody(Fn f, const std::array<Tensor<B>, N>& in, CheckpointOptions o, std::size_t sid,
                 std::uint64_t seed, std::uint64_t rng)
      : fn(std::move(f)), inputs(in), opt(std::move(o)), id(sid), rng_seed(seed), rng_offset(rng) {
    this->segment = true;
  }

  ~CheckpointBody() override {
    if (!retained) return;
    for (const auto& t : inputs) t.storage()->release_saved();
    for (const auto& t : captured) t.storage()->release_saved();
    for (const auto& k : kept) k.second.storage()->release_saved();
    for (const auto& k : kept_state)
      k.second->each([](const Tensor<B>& t) {
        if (t.defined()) t.storage()->release_saved();
      });
  }

  /// After the first run: holds the inputs and kept outputs as saved activations.
  void retain(SegmentStats& st) {
    std::set<const void*> seen;
    auto hold = [&](const Tensor<B>& t, std::int64_t& bytes) {
      t.storage()->retain_saved();
      if (seen.insert(t.storage().get()).second) {
        this->saved_bytes += t.storage()->bytes();
        bytes += static_cast<std::int64_t>(t.storage()->bytes());
      }
    };
    st.boundary_bytes = st.kept_bytes = 0;
    for (const auto& t : inputs) hold(t, st.boundary_bytes);
    for (const auto& t : captured) hold(t, st.boundary_bytes);
    for (const auto& k : kept) hold(k.second, st.kept_bytes);
    for (const auto& k : kept_state)  // parameters in a kept state are not activations
      k.second->each([&](const Tensor<B>& t) {
        if (!t.defined()) return;
        if (t.category() == Category::parameters) {
          t.storage()->retain_saved();
          return;
        }
        hold(t, st.kept_bytes);
      });
    retained = true;
  }

  std::string label() const {
    return detail::cat("segment ", id, opt.name().empty() ? "" : " ('" + opt.name() + "')");
  }

  void add_escaped_output(std::int64_t op) override { escaped_ops.push_back(op); }
  // A gradient buffer made for this node is handed to the replay unset: the interior's first
  // contribution writes it (the stand-in's grad_unset), or it is zeroed at the end.
  bool writes_fresh() const override { return true; }

  void backward(Tape<B>& tape, std::vector<Tensor<B>>& douts,
                std::vector<Tensor<B>>& dinp) override {
    const double t0 = seconds_now();
    // Replay from aliases of the boundary inputs (leaves of the scratch range) whose gradient
    // buffer *is* the input's real gradient (its slot, or the leaf's grad): the interior adds
    // into it in the plain run's order, after what the ops past the segment added, so the
    // sums are bitwise the plain run's (NOTE [checkpoint semantics] 9). Captured recorded
    // tensors get such stand-ins too, which the tape substitutes when an op records. A buffer
    // made for this node (fresh) is unset: the first op of the replay to reach it writes it,
    // as the plain run's first contribution would; one that no op reached is zeroed (Unset).
    const std::vector<char> fresh = tape.fresh_grads();  // (the replay's nodes reuse the tape's)
    Unset unset;
    std::array<Tensor<B>, N> in;
    for (std::size_t i = 0; i < N; ++i) {
      in[i] = stand_in(inputs[i], dinp[i], detail::fresh_at(fresh, i));
      unset.watch(in[i]);
    }
    SegmentFrame<B> frame;
    frame.mode = FrameMode::replay;
    frame.hash_values = opt.verify_values();
    frame.trace = &trace;
    frame.kept = &kept;
    frame.kept_state = &kept_state;
    frame.adopted = &escaped_ops;
    for (std::size_t j = 0; j < captured.size(); ++j) {
      Tensor<B> s = stand_in(captured[j], dinp[N + j], detail::fresh_at(fresh, N + j));
      unset.watch(s);
      frame.stand_ins.emplace_back(captured[j].impl(), s.impl_ptr());
    }
    check_versions();  // (after the stand-ins: if it throws, Unset still zeroes their buffers)
    // The stream of the first run: its seed and counter (the caller may have changed either).
    const std::uint64_t seed_after = tape.seed(), rng_after = tape.rng_offset();
    tape.set_seed(rng_seed);
    tape.set_rng_offset(rng_offset);
    const std::size_t begin = tape.num_nodes();
    Out out;
    try {
      EnableGrad grad_on;
      FrameGuard<B> guard(tape, &frame);
      out = std::apply(fn, in);
    } catch (const ReplayDiverged&) {  // as check_outputs reports a difference
      tape.set_seed(seed_after);
      tape.set_rng_offset(rng_after);
      throw Error(detail::cat("remat::checkpoint: replay of ", label(), " differs from the "
                              "forward pass: ", frame.mismatch, kImpureHint));
    } catch (const OutOfMemory& e) {  // stays OutOfMemory, so a caller can re-plan
      tape.set_seed(seed_after);
      tape.set_rng_offset(rng_after);
      throw OutOfMemory(detail::cat("remat::checkpoint: ", label(),
                                    " ran out of memory while replaying in backward: ", e.what()));
    } catch (const std::exception& e) {
      tape.set_seed(seed_after);
      tape.set_rng_offset(rng_after);
      throw Error(detail::cat("remat::checkpoint: ", label(),
                              " threw while replaying in backward: ", e.what()));
    }
    tape.set_seed(seed_after);
    tape.set_rng_offset(rng_after);
    if (frame.mismatch.empty() && frame.count != static_cast<std::int64_t>(trace.size()))
      frame.mismatch = detail::cat("the replay ran ", frame.count, " ops, the first pass ",
                                   trace.size());
    const double replay_s = seconds_now() - t0;
    std::vector<Tensor<B>*> outs;
    collect<B>(out, outs);
    check_outputs(outs, frame.mismatch);

    // Seed the replayed outputs with the gradients that reached the segment, then backprop.
    // douts has one gradient per distinct recorded output (out_slot), then one per escaped
    // tensor adopted since (escaped_ops); pass-through outputs were not recorded. A gradient
    // is moved into its slot (the segment's node holds it no more), so the replayed op may
    // pass it through as the plain run does (NOTE [fresh gradient buffers]).
    const auto seed = [&](const Tensor<B>& r, Tensor<B>& d) {
      if (!r.requires_grad()) return;  // it depends on nothing that needs a gradient
      if (!r.is_leaf()) {
        Tensor<B>& slot = tape.grad_slots()[static_cast<std::size_t>(r.impl()->id)];
        if (!slot.defined())
          slot = std::move(d);
        else
          B::add_into(slot.template data<float>(), d.template data<float>(), d.numel());
      } else {
        Tensor<B> g = tape.leaf_grad(r.impl_ptr());
        B::add_into(g.template data<float>(), d.template data<float>(), d.numel());
      }
    };
    std::size_t slots = 0;
    for (std::size_t o = 0; o < outs.size(); ++o)
      if (out_slot[o] == static_cast<int>(slots)) seed(*outs[o], douts[slots++]);
    for (std::size_t j = 0; j < escaped_ops.size(); ++j) {
      auto r = frame.adopted_out.find(escaped_ops[j]);
      REMAT_CHECK(r != frame.adopted_out.end(), "remat::checkpoint: replay of ", label(),
                  " did not run op ", escaped_ops[j], ", whose output escaped the first pass"
                  " and took a gradient", frame.mismatch.empty() ? "" : "; " + frame.mismatch);
      seed(r->second, douts[slots + j]);
    }
    tape.run_backward(begin);  // the inputs' gradients are already in dinp
    SegmentStats& st = tape.segment_stats(id);
    st.replays += 1;
    st.remat_bytes = frame.remat_bytes;
    st.skipped_ops = frame.skipped_ops;
    st.replay_s += replay_s;
  }

  /// A leaf over t's storage for the replay to start from, whose gradient buffer is `grad`
  /// (the real one of the tensor it stands for), `unset` when it holds no values yet; no
  /// gradient when `grad` is undefined.
  static Tensor<B> stand_in(const Tensor<B>& t, const Tensor<B>& grad, bool unset) {
    Tensor<B> a = detail::alias(t, t.shape());
    a.impl()->requires_grad = grad.defined();
    if (grad.defined()) a.impl()->grad = grad.storage();
    a.impl()->grad_unset = grad.defined() && unset;
    return a;
  }
  /// The stand-ins whose buffer no op of the replay reached are zeroed when the backward ends,
  /// normally or by an exception (no gradient buffer is left with undefined values).
  struct Unset {
    std::vector<std::shared_ptr<TensorImpl<B>>> leaves;
    void watch(const Tensor<B>& s) {
      if (s.impl()->grad_unset) leaves.push_back(s.impl_ptr());
    }
    ~Unset() {
      for (const auto& l : leaves) {
        if (!l->grad_unset) continue;
        l->grad_unset = false;
        try {
          detail::zero_fill(Tensor<B>(l).grad());
        } catch (...) {  // (a device already failing: its error was thrown before)
        }
      }
    }
  };

  /// NOTE [version counter]: what the first run read from outside must be as it was then.
  void check_versions() const {
    for (const SegmentRead<B>& r : reads) {
      const std::shared_ptr<Storage<B>> st = r.storage.lock();
      if (!st || st->version() == r.version) continue;  // gone: nothing can read it any more
      throw Error(detail::cat(
          "remat::checkpoint: ", label(), " read ", detail::describe_tensor(r.name, r.shape, r.category),
          " (first in op ", r.op, ", ", r.op_name, ") in its forward pass, and it was modified in "
          "place before backward (version ", r.version, ", now ", st->version(), "): the replay "
          "would compute other values than the forward pass did. Hint: write tensors "
          "(optimizer.step(), loading weights) only after backward(), or run the forward pass "
          "again after the write"));
    }
  }

  static constexpr const char* kImpureHint =
      ". Does the checkpointed function read state that changes between forward and backward "
      "(a cache, a counter, a flag)?";
  void check_outputs(const std::vector<Tensor<B>*>& outs, const std::string& first_diff) const {
    const char* hint = kImpureHint;
    const std::string where = first_diff.empty() ? "" : "; first difference: " + first_diff;
    REMAT_CHECK(outs.size() == out_meta.size(), "remat::checkpoint: replay of ", label(),
                " produced ", outs.size(), " outputs, but the forward pass produced ",
                out_meta.size(), where, hint);
    for (std::size_t o = 0; o < outs.size(); ++o) {
      REMAT_CHECK(outs[o]->defined(), "remat::checkpoint: replay of ", label(), " returned an "
                  "undefined tensor as output ", o, where, hint);
      int first = -1;  // the first earlier output that is this same tensor in the replay
      for (std::size_t p = 0; p < o && first < 0; ++p)
        if (outs[p]->impl() == outs[o]->impl()) first = static_cast<int>(p);
      REMAT_CHECK(first == same_as[o], "remat::checkpoint: replay of ", label(), " returned ",
                  first < 0 ? "a new tensor" : detail::cat("output ", first, " again"),
                  " as output ", o, ", the forward pass ",
                  same_as[o] < 0 ? "a new tensor" : detail::cat("output ", same_as[o], " again"),
                  where, hint);
      REMAT_CHECK(outs[o]->shape() == out_meta[o].first && outs[o]->dtype() == out_meta[o].second,
                  "remat::checkpoint: replay of ", label(), " produced output ", o,
                  " with shape ", outs[o]->shape().str(), " ", dtype_name(outs[o]->dtype()),
                  ", but the forward pass produced ", out_meta[o].first.str(), " ",
                  dtype_name(out_meta[o].second), where, hint);
    }
    REMAT_CHECK(first_diff.empty(), "remat::checkpoint: replay of ", label(),
                " differs from the forward pass: ", first_diff, hint);
  }

  Fn fn;
  std::array<Tensor<B>, N> inputs;
  CheckpointOptions opt;
  std::size_t id;
  std::uint64_t rng_seed;    // the tape's seed and RNG counter when the first run began
  std::uint64_t rng_offset;
  std::vector<TraceEntry> trace;
  std::map<std::int64_t, Tensor<B>> kept;
  std::map<std::int64_t, std::shared_ptr<KeptState<B>>> kept_state;  // Policy::keep_state
  std::vector<std::pair<Shape, DType>> out_meta;
  // Per output: which of the node's recorded outputs it is (-1: it passes through unrecorded,
  // NOTE 9), and the first earlier output that is the same tensor (-1: none).
  std::vector<int> out_slot, same_as;
  std::vector<Tensor<B>> captured;      // recorded tensors fn read from outside (node inputs N..)
  std::vector<SegmentRead<B>> reads;    // what fn read from outside, with versions
  std::vector<std::int64_t> escaped_ops;  // ops whose escaped outputs the tape adopted
  bool retained = false;
};

}  // namespace detail

/// Runs fn(inputs...) keeping only the inputs (and what opt's policy keeps) for backward, which
/// replays fn from them. fn returns a Tensor, a tuple/pair of Tensors or a vector of Tensors.
/// fn is copied into the tape node: what it captures by reference (modules) must outlive the
/// backward pass. See NOTE [checkpoint semantics].
template <class Fn, class B, class... Rest>
auto checkpoint(const CheckpointOptions& opt, Fn&& fn, const Tensor<B>& first,
                const Rest&... rest) {
  static_assert((std::is_same_v<Rest, Tensor<B>> && ...),
                "remat::checkpoint: every input must be a Tensor of the same backend (capture "
                "other arguments in the function)");
  constexpr std::size_t N = 1 + sizeof...(Rest);
  using F = std::decay_t<Fn>;
  using Out = std::decay_t<std::invoke_result_t<F&, Tensor<B>&, Rest&...>>;
  const std::array<Tensor<B>, N> in{first, rest...};
  Tape<B>& tape = detail::common_tape<B>("checkpoint", in);
  if (!grad_enabled()) return Out(fn(first, rest...));
  if (!tape.recording()) {  // inside another segment's first run: a plain call (NOTE 4)
    detail::SegmentFrame<B> plain;
    detail::FrameGuard<B> guard(tape, &plain);
    return Out(fn(first, rest...));
  }
  const std::size_t id = tape.segment_row(opt.name(), std::type_index(typeid(F)));
  using Body = detail::CheckpointBody<B, F, Out, N>;
  auto body = std::make_unique<Body>(F(std::forward<Fn>(fn)), in, opt, id, tape.seed(),
                                     tape.rng_offset());
  detail::SegmentFrame<B> frame;
  frame.mode = detail::FrameMode::first_run;
  frame.label = std::make_shared<const std::string>(body->label());
  frame.policy = &body->opt.policy();
  frame.hash_values = body->opt.verify_values();
  frame.trace = &body->trace;
  frame.kept = &body->kept;
  frame.kept_state = &body->kept_state;
  for (const auto& t : in) frame.boundary.push_back(t.impl());
  frame.captured = &body->captured;
  frame.reads = &body->reads;
  Out out = [&] {
    detail::FrameGuard<B> guard(tape, &frame);
    std::array<Tensor<B>, N> args = in;
    return Out(std::apply(body->fn, args));
  }();
  frame.producer.clear();
  frame.drop_recipes();  // NOTE [saved as a recipe]: a first run's recipes end with it
  // Keep only what the plain run keeps, and plan what the replay computes (NOTE [replay only
  // what backward needs] in core/segment.hpp).
  detail::plan_replay(body->trace, body->kept, body->kept_state, body->opt.verify_values());
  std::vector<Tensor<B>*> outs;
  detail::collect<B>(out, outs);
  REMAT_CHECK(!outs.empty(), "remat::checkpoint: the function returned no tensor (expected at "
              "least one output)");
  SegmentStats& st = tape.segment_stats(id);
  st.forwards += 1;
  st.freed_bytes = frame.freed_bytes;
  for (std::size_t o = 0; o < outs.size(); ++o) {
    REMAT_CHECK(outs[o]->defined() && &outs[o]->tape() == &tape, "remat::checkpoint: output ", o,
                " is undefined or belongs to another tape");
    // A tensor that escaped another segment, returned unchanged (NOTE [escaped tensors]).
    if (outs[o]->impl()->first_run_serial != frame.serial)
      tape.adopt_escaped("checkpoint (as an output)", o, *outs[o]);
  }
  if (!frame.touched_grad) return out;  // nothing inside needs a gradient (NOTE 5)
  // NOTE 9: an output that requires grad was not made by fn (an input, a captured tensor that
  // requires grad; nothing inside records) and passes through unrecorded, so its consumers add
  // into its own gradient, as in the plain run. Every other output is recorded once however
  // often fn returns it, so its consumers share one gradient slot, as in the plain run. A
  // tensor fn made is recorded itself (a capture of it is then no escape); a constant from
  // outside that fn returns is recorded through an alias, so the constant stays a leaf.
  std::vector<const TensorImpl<B>*> returned;  // what fn returned (before any alias)
  for (const Tensor<B>* t : outs) returned.push_back(t->impl());
  std::vector<Tensor<B>*> recorded;
  std::vector<const TensorImpl<B>*> made;  // per recorded output: the tensor fn returned
  for (std::size_t o = 0; o < outs.size(); ++o) {
    body->out_meta.emplace_back(outs[o]->shape(), outs[o]->dtype());
    const auto same = std::find(returned.begin(), returned.begin() + static_cast<std::ptrdiff_t>(o),
                                returned[o]);
    body->same_as.push_back(same == returned.begin() + static_cast<std::ptrdiff_t>(o)
                                ? -1 : static_cast<int>(same - returned.begin()));
    if (outs[o]->requires_grad()) {
      body->out_slot.push_back(-1);
      continue;
    }
    auto slot = std::find(made.begin(), made.end(), returned[o]);
    if (slot == made.end()) {
      made.push_back(returned[o]);
      if (outs[o]->impl()->first_run_serial != frame.serial) {
        Tensor<B> a = detail::alias(*outs[o], outs[o]->shape());
        a.impl()->name = outs[o]->name();
        *outs[o] = a;
      }
      recorded.push_back(outs[o]);
      body->out_slot.push_back(static_cast<int>(recorded.size()) - 1);
    } else {
      const int k = static_cast<int>(slot - made.begin());
      *outs[o] = *recorded[static_cast<std::size_t>(k)];  // the alias, if one was made
      body->out_slot.push_back(k);
    }
  }
  if (recorded.empty()) return out;  // every output passes through: no gradient flows inside
  body->retain(st);
  body->frame_serial = frame.serial;
  std::vector<const Tensor<B>*> ins;
  for (const auto& t : in) ins.push_back(&t);
  for (const auto& t : body->captured) ins.push_back(&t);
  tape.record("checkpoint", ins, recorded, std::move(body));
  return out;
}

/// checkpoint() with default options.
template <class Fn, class B, class... Rest>
auto checkpoint(Fn&& fn, const Tensor<B>& first, const Rest&... rest) {
  return checkpoint(CheckpointOptions{}, std::forward<Fn>(fn), first, rest...);
}

/// Runs the blocks in order on x (each `block(x)` -> Tensor), cut into `segments` runs of
/// near-equal length; every run but the last is checkpointed (the last would be replayed right
/// after its forward, so keeping it costs no more memory at the peak and saves its replay).
/// `blocks` must outlive the backward pass.
template <class Blocks, class B>
Tensor<B> checkpoint_sequential(const Blocks& blocks, std::size_t segments, const Tensor<B>& x,
                                const CheckpointOptions& opt = {}) {
  const std::size_t n = static_cast<std::size_t>(std::size(blocks));
  REMAT_CHECK(segments >= 1 && segments <= std::max<std::size_t>(n, 1),
              "remat::checkpoint_sequential: ", segments, " segments for ", n,
              " blocks (expected 1 <= segments <= blocks)");
  Tensor<B> h = x;
  for (std::size_t s = 0; s < segments; ++s) {
    const std::size_t lo = n * s / segments, hi = n * (s + 1) / segments;
    auto run = [&blocks, lo, hi](const Tensor<B>& in) {
      Tensor<B> t = in;
      for (std::size_t i = lo; i < hi; ++i) t = std::data(blocks)[i](t);
      return t;
    };
    if (s + 1 < segments) {
      CheckpointOptions o = opt;
      if (o.name().empty()) o.name("blocks " + std::to_string(lo) + "-" + std::to_string(hi - 1));
      h = checkpoint(o, run, h);
    } else {
      h = run(h);
    }
  }
  return h;
}

/// The per-segment ledger of a tape as a table: bytes freed in forward, kept, recomputed, the
/// ops the last replay skipped, and the replays with their time.
template <class B>
std::string segment_table(Tape<B>& tape) {
  std::string s =
      "segment                  forwards  replays  boundary MiB  kept MiB  freed MiB  "
      "remat MiB  skipped  replay ms\n";
  char line[256];
  for (const auto& st : tape.segment_stats()) {
    std::snprintf(line, sizeof line, "%-24s %8lld %8lld %13.2f %9.2f %10.2f %10.2f %8lld %10.1f\n",
                  st.name.c_str(), static_cast<long long>(st.forwards),
                  static_cast<long long>(st.replays), st.boundary_bytes / 1048576.0,
                  st.kept_bytes / 1048576.0, st.freed_bytes / 1048576.0,
                  st.remat_bytes / 1048576.0, static_cast<long long>(st.skipped_ops),
                  st.replay_s * 1e3);
    s += line;
  }
  return s;
}

}  // namespace remat
