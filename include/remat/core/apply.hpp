#pragma once
// SPDX-License-Identifier: MIT
// detail::apply<Op>: runs an op's forward and records a node when grad mode is on and an input
// requires grad. Ops never touch the tape themselves. The public face of this recipe, for ops
// written outside the library, is core/custom_op.hpp (remat::apply_op, NOTE [writing an op]).
//
// An op is a struct:
//   static constexpr const char* name = "gelu";
//   template <class B> struct Saved { Tensor<B> x;                // what backward needs
//     template <class F> void each(F f) const { f(x); } };      // lists the saved tensors
//   template <class B> static Tensor<B> forward(Saved<B>&, const Tensor<B>& x..., attrs...);
//   template <class B> static void backward(const Saved<B>&, const Tensor<B>& dout,
//                                           std::vector<Tensor<B>>& dinp);   // dinp[i] +=
// or, to write the gradient buffers made for this node instead of having the tape zero them
// first (NOTE [fresh gradient buffers] in core/tape.hpp; one fill launch less per buffer):
//   template <class B> static void backward(const Saved<B>&, const Tensor<B>& dout,
//       std::vector<Tensor<B>>& dinp, const std::vector<char>& fresh);  // fresh[i]: dinp[i] =
// and, with it, `static int pass_through(const Saved<B>&)`: the input whose gradient is dout
// unchanged (or -1); the tape may make dout that input's buffer (detail::passed_at); and/or
// `static int grad_over_saved(const Saved<B>&, const Tensor<B>*& t)`: the input whose gradient
// backward can write over the saved tensor t, element by element (or -1); the tape makes t that
// input's buffer, fresh, when nothing else holds it (cross-entropy: dlogits over the logits).
// `each` lets the node count the saved bytes exactly and mark them as activations.
// Optionally, `static void slim(Saved<B>&)` drops what backward can cheaply rebuild itself: a
// checkpoint policy that keeps the op's whole state (Policy::keep_state) keeps it slimmed.
// Optionally, `static void save(Saved<B>&, const Tensor<B>& out, inputs..., attrs...)` fills
// Saved from the output without computing: checkpoint policies can then keep the op's output
// and skip it in the replay (core/segment.hpp).
// Optionally, a pointwise op whose state keeps every input gives its output a recipe:
// `static std::shared_ptr<const Recipe<B>> recipe(const Saved<B>&, const Tensor<B>& out)` and a
// `made` member in Saved; an op that saves such an output keeps the recipe's operands instead
// (SavedOperand; NOTE [saved as a recipe] in core/recipe.hpp).

#include <array>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "remat/core/grad_mode.hpp"
#include "remat/core/recipe.hpp"
#include "remat/core/tape.hpp"

namespace remat {
namespace detail {

// Does Op's backward take the fresh flags (it writes the buffers made for its node)?
template <class Op, class B, class = void>
struct writes_fresh_grads : std::false_type {};
template <class Op, class B>
struct writes_fresh_grads<Op, B, std::void_t<decltype(Op::backward(
    std::declval<const typename Op::template Saved<B>&>(), std::declval<const Tensor<B>&>(),
    std::declval<std::vector<Tensor<B>>&>(), std::declval<const std::vector<char>&>()))>>
    : std::true_type {};

/// Whether input i's gradient buffer is fresh: made for this node, no values yet.
inline bool fresh_at(const std::vector<char>& fresh, std::size_t i) {
  return i < fresh.size() && fresh[i] == 1;
}
/// Whether input i's gradient buffer is the output's gradient, passed through (the op's
/// pass_through input: it holds its gradient already, the op writes nothing there).
inline bool passed_at(const std::vector<char>& fresh, std::size_t i) {
  return i < fresh.size() && fresh[i] == 2;
}
/// Input i's gradient is dout unchanged (a residual's): nothing to do where dout passed
/// through, a copy into a fresh buffer, else an add.
template <class B>
void gradient_is_dout(std::vector<Tensor<B>>& dinp, std::size_t i, const Tensor<B>& dout,
                      const std::vector<char>& fresh) {
  if (i >= dinp.size() || !dinp[i].defined() || passed_at(fresh, i)) return;
  float* d = dinp[i].template data<float>();
  if (fresh_at(fresh, i))
    B::copy(d, dout.template data<float>(), sizeof(float) * static_cast<std::size_t>(dout.numel()));
  else
    B::add_into(d, dout.template data<float>(), dout.numel());
}
// Does Op name an input whose gradient passes through (static int pass_through(const Saved&))?
template <class Op, class B, class = void>
struct has_pass_through : std::false_type {};
template <class Op, class B>
struct has_pass_through<Op, B, std::void_t<decltype(Op::pass_through(
    std::declval<const typename Op::template Saved<B>&>()))>> : std::true_type {};
// Does Op name an input whose gradient backward may write over a saved tensor?
template <class Op, class B, class = void>
struct has_grad_over_saved : std::false_type {};
template <class Op, class B>
struct has_grad_over_saved<Op, B, std::void_t<decltype(Op::grad_over_saved(
    std::declval<const typename Op::template Saved<B>&>(), std::declval<const Tensor<B>*&>()))>>
    : std::true_type {};

// Can Op's state be slimmed for keeping (static void slim(Saved&))?
template <class Op, class B, class = void>
struct has_slim : std::false_type {};
template <class Op, class B>
struct has_slim<Op, B, std::void_t<decltype(Op::slim(std::declval<typename Op::template Saved<B>&>()))>>
    : std::true_type {};

// Does Op give its outputs recipes (static std::shared_ptr<const Recipe<B>> recipe(const
// Saved&, const Tensor<B>& out), and a `made` member in Saved to own it)?
template <class Op, class B, class = void>
struct has_recipe : std::false_type {};
template <class Op, class B>
struct has_recipe<Op, B, std::void_t<decltype(Op::recipe(
    std::declval<const typename Op::template Saved<B>&>(), std::declval<const Tensor<B>&>()))>>
    : std::true_type {};
/// Gives out its recipe (NOTE [saved as a recipe], core/recipe.hpp): owned by the state (a
/// recorded run) or by out itself (a first run: `first_run`, which drops it when it ends).
template <class Op, class B>
void attach_recipe(typename Op::template Saved<B>& saved, const Tensor<B>& out,
                   SegmentFrame<B>* first_run) {
  if constexpr (has_recipe<Op, B>::value) {
    std::shared_ptr<const Recipe<B>> r = Op::recipe(saved, out);
    if (!r) return;
    out.impl()->recipe = r;
    if (first_run) {
      out.impl()->recipe_owned = r;
      first_run->recipe_outputs.push_back(out.impl_ptr());
    } else {
      saved.made = std::move(r);
    }
  } else {
    (void)saved, (void)out, (void)first_run;
  }
}

template <class Op, class B>
struct OpBody final : NodeBody<B> {
  using Saved = typename Op::template Saved<B>;
  explicit OpBody(Saved&& s) : saved(std::move(s)) {
    std::unordered_set<const void*> seen;
    saved.each([&](const Tensor<B>& t) {
      if (!t.defined()) return;
      t.storage()->retain_saved();
      versions.push_back(t.storage()->version());
      if (seen.insert(t.storage().get()).second) this->saved_bytes += t.storage()->bytes();
    });
  }
  ~OpBody() override {
    saved.each([](const Tensor<B>& t) {
      if (t.defined()) t.storage()->release_saved();
    });
  }
  bool writes_fresh() const override { return writes_fresh_grads<Op, B>::value; }
  int pass_through() const override {
    if constexpr (has_pass_through<Op, B>::value) return Op::pass_through(saved);
    return -1;
  }
  int grad_over_saved(const Tensor<B>*& t) const override {
    if constexpr (has_grad_over_saved<Op, B>::value) return Op::grad_over_saved(saved, t);
    (void)t;
    return -1;
  }
  void backward(Tape<B>& tape, std::vector<Tensor<B>>& douts,
                std::vector<Tensor<B>>& dinp) override {
    std::size_t k = 0;  // NOTE [version counter]: what was saved must not have been written since
    saved.each([&](const Tensor<B>& t) {
      if (!t.defined()) return;
      const std::uint64_t then = versions[k++];
      REMAT_CHECK(t.storage()->version() == then, "remat::Tape::backward: op ", Op::name,
                  " saved ", describe_tensor(t), " for its backward, and it was modified in place "
                  "after the forward pass (version ", then, ", now ", t.storage()->version(),
                  "): the gradient would be computed from the new values. Hint: write tensors "
                  "(optimizer.step(), loading weights) only after backward(), or run the forward "
                  "pass again after the write");
    });
    NoGrad inside_the_op;  // a backward of tensor ops records nothing (core/custom_op.hpp)
    if constexpr (writes_fresh_grads<Op, B>::value)
      Op::backward(saved, douts[0], dinp, tape.fresh_grads());
    else
      Op::backward(saved, douts[0], dinp);
  }
  Saved saved;
  std::vector<std::uint64_t> versions;  // of the saved tensors' storages, in each() order
};

/// Notes what an op in a segment's first run reads from outside the segment (NOTE [captured
/// tensors] in checkpoint/checkpoint.hpp): each buffer once, with its version; and the recorded
/// tensors it takes that are not the segment's inputs.
template <class B, class Range>
void note_outside_reads(SegmentFrame<B>& first, const char* op, std::int64_t index,
                        const Range& in) {
  for (const Tensor<B>& t : in) {
    if (t.impl()->first_run_serial == first.serial) continue;  // made inside
    const Storage<B>* raw = t.storage().get();
    bool seen = false;
    for (const SegmentRead<B>& r : *first.reads) seen = seen || r.raw == raw;
    if (!seen)
      first.reads->push_back(SegmentRead<B>{t.storage(), raw, t.storage()->version(), t.shape(),
                                            t.category(), t.name(), index, op});
    if (t.is_leaf() || !t.requires_grad()) continue;
    bool known = false;
    for (const TensorImpl<B>* b : first.boundary) known = known || b == t.impl();
    for (const Tensor<B>& c : *first.captured) known = known || c.impl() == t.impl();
    if (!known) first.captured->push_back(t);
  }
}

/// The tape all inputs share; throws on undefined inputs or inputs from different tapes.
template <class B, class Range>
Tape<B>& common_tape(const char* op, const Range& in) {
  Tape<B>* tape = nullptr;
  std::size_t i = 0;
  for (const Tensor<B>& t : in) {
    REMAT_CHECK(t.defined(), "remat::", op, ": input ", i, " is an undefined tensor (hint: was "
                "it assigned the result of an op?)");
    if (!tape) tape = &t.tape();
    REMAT_CHECK(tape == &t.tape(), "remat::", op, ": input ", i, " belongs to a different tape "
                "than input 0 (hint: make every tensor of one computation on the same Tape)");
    ++i;
  }
  REMAT_ASSERT(tape != nullptr);
  i = 0;
  for (const Tensor<B>& t : in) tape->adopt_escaped(op, i++, t);  // NOTE [escaped tensors]
  return *tape;
}

template <class B, class Range>
bool any_requires_grad(const Range& in) {
  for (const Tensor<B>& t : in)
    if (t.requires_grad()) return true;
  return false;
}

template <class T, std::size_t N, class = std::make_index_sequence<N>>
struct repeat;
template <class T, std::size_t N, std::size_t... I>
struct repeat<T, N, std::index_sequence<I...>> {
  template <std::size_t> using same = T;
  using type = std::tuple<same<I>...>;
};
template <class T, std::size_t N>
using repeat_t = typename repeat<T, N>::type;

template <class Op, class B, std::size_t N, std::size_t... I, class... A>
void call_save(typename Op::template Saved<B>& s, const Tensor<B>& out,
               const std::array<Tensor<B>, N>& in, std::index_sequence<I...>, const A&... attrs) {
  Op::save(s, out, in[I]..., attrs...);
}

template <class Op, class B, class Range>
void record_op(Tape<B>& tape, const Range& in, Tensor<B>& out,
               typename Op::template Saved<B>&& saved) {
  std::vector<const Tensor<B>*> ins;
  for (const Tensor<B>& t : in) ins.push_back(&t);
  tape.record(Op::name, ins, {&out}, std::make_unique<OpBody<Op, B>>(std::move(saved)));
}

// Does Op have `static void save(Saved&, out, inputs..., attrs...)`, which rebuilds its
// backward state from its output without computing? Only such ops can be kept by a policy.
template <class Op, class B, class Args, class = void>
struct has_save : std::false_type {};
template <class Op, class B, class... Args>
struct has_save<Op, B, std::tuple<Args...>,
                std::void_t<decltype(Op::save(std::declval<typename Op::template Saved<B>&>(),
                                              std::declval<const Tensor<B>&>(),
                                              std::declval<const Args&>()...))>>
    : std::true_type {};

/// True when t or a tensor it came from needs a gradient (also inside an unrecorded segment).
template <class B, class Range>
bool any_needs_grad(const Range& in) {
  for (const Tensor<B>& t : in)
    if (t.requires_grad() || t.impl()->segment_grad) return true;
  return false;
}

// NOTE [ops inside checkpoint segments]
// While segments run, an op reports to every frame on the tape's stack (each counts it and
// traces it), and the innermost frame decides: in its first run, keep the output if the policy
// says so (and the op can `save`), record nothing; in its replay, hand a kept output back
// without computing, else compute; record as usual (replays are recorded into a scratch range).
template <class B, class Range, class... A>
OpSignature signature_of(const Range& in, const A&... attrs) {
  OpSignature s;
  for (const Tensor<B>& t : in) {
    sign(s, t.shape());
    s.add(static_cast<std::uint64_t>(t.dtype()));
  }
  (sign(s, attrs), ...);
  return s;
}

template <class Op, class B, class Range, class Forward, class Save>
Tensor<B> apply_in_segment(Tape<B>& tape, const Range& in, Forward&& forward, Save&& save,
                           bool keepable, const OpSignature& signature) {
  auto& frames = tape.frames();
  SegmentFrame<B>& top = *frames.back();
  const std::int64_t index = top.count;
  SegmentFrame<B>* first = nullptr;  // the segment in its first run, if any (at most one)
  for (auto* f : frames)
    if (f->mode == FrameMode::first_run) first = f;
  if (first) note_outside_reads(*first, Op::name, first->count, in);
  const std::int64_t first_index = first ? first->count : -1;  // its place in that trace
  typename Op::template Saved<B> saved{};
  Tensor<B> out;
  bool from_cache = false;
  bool reused = false;  // the output kept from the first run: no recipe (NOTE [saved as a recipe])
  using Saved = typename Op::template Saved<B>;
  if (top.mode == FrameMode::replay) {
    const TraceEntry* entry = index < static_cast<std::int64_t>(top.trace->size())
                                  ? &(*top.trace)[static_cast<std::size_t>(index)] : nullptr;
    if (entry && std::strcmp(entry->op, Op::name) != 0) entry = nullptr;  // (note() reports it)
    // The op as the first run ran it? Another input shape or attribute: the function is not
    // pure, and the replay stops here (its plan may have skipped what this op would read).
    const bool same = entry && entry->signature == signature.hash;
    if (entry && !same && entry->signed_fully && signature.full) {
      if (top.mismatch.empty())
        top.mismatch = detail::cat("op ", index, " (", Op::name, ") ran on other input shapes "
                                   "or with other attributes in the replay than in the first "
                                   "pass");
      throw ReplayDiverged(top.mismatch);
    }
    const auto state = [&]() -> const Saved* {  // a state kept whole (Policy::keep_state)
      if (!top.kept_state) return nullptr;
      auto st = top.kept_state->find(index);
      if (st == top.kept_state->end() || std::strcmp(st->second->op, Op::name) != 0)
        return nullptr;
      return &static_cast<const KeptStateOf<B, Saved>&>(*st->second).saved;
    };
    auto it = same || !entry || !entry->signed_fully ? top.kept->find(index) : top.kept->end();
    if (it != top.kept->end()) {
      reused = true;
      if (keepable) {
        out = it->second;
        save(saved, out);
        from_cache = true;
      } else if (const Saved* s = state()) {  // the first run's state
        out = it->second;
        saved = *s;
        from_cache = true;
      }
    } else if (same && entry->signed_fully && entry->action == ReplayAction::skip) {
      // NOTE [replay only what backward needs] (core/segment.hpp): nothing reads the output
      if (keepable) {
        if (entry->aliases) {  // a view of its input: made as usual, for nothing
          out = forward(saved);
        } else {
          out = skipped_tensor(&tape, entry->shape, entry->dtype, entry->grad_dtype);
          save(saved, out);
        }
        from_cache = true;
      } else if (const Saved* s = state()) {
        out = skipped_tensor(&tape, entry->shape, entry->dtype, entry->grad_dtype);
        saved = *s;
        from_cache = true;
      }
      if (from_cache) ++top.skipped_ops;
    }
  }
  if (!from_cache) out = forward(saved);
  const Tensor<B>* viewed = nullptr;  // the input whose buffer `out` shares (a view), if any
  for (const Tensor<B>& t : in)
    if (t.storage() == out.storage()) viewed = &t;
  bool hashing = false;  // a shape-only backend has no values to compare
  if constexpr (!is_meta_backend_v<B>)
    for (auto* f : frames) hashing = hashing || f->hash_values;
  const std::uint64_t hash = hashing ? detail::hash_bytes(out.storage()->data(), out.bytes()) : 0;
  for (auto* f : frames) f->note(Op::name, out, hash, keepable);
  const bool needs = any_needs_grad<B>(in);
  out.impl()->segment_grad = needs;
  if (needs && !reused)
    attach_recipe<Op>(saved, out, top.mode == FrameMode::first_run ? &top : nullptr);
  // Every segment in its first run (an outer one sees through nested plain calls) learns
  // whether a gradient flows and what the interior would have saved.
  for (auto* f : frames) {
    if (f->mode != FrameMode::first_run) continue;
    f->touched_grad = f->touched_grad || needs;
    if (needs)
      saved.each([&](const Tensor<B>& t) {
        if (t.defined() && t.category() == Category::temporaries) f->count_saved(t.storage());
      });
  }
  if (first) {  // the data flow, for the replay's plan (plan_replay, core/segment.hpp)
    REMAT_ASSERT(first_index + 1 == static_cast<std::int64_t>(first->trace->size()));
    TraceEntry& entry = first->trace->back();
    entry.nested = &top != first;
    entry.signature = signature.hash;
    entry.signed_fully = signature.full;
    for (const Tensor<B>& t : in) entry.inputs.push_back(first->producer_of(t));
    entry.aliases = viewed != nullptr;
    if (viewed) entry.alias_of = first->producer_of(*viewed);
    first->producer[out.storage().get()] = static_cast<std::int32_t>(first_index);
    if (needs) {  // what a plain run keeps, and what `save` would keep in a replay
      saved.each([&](const Tensor<B>& t) { first->note_saved(t); });
      if (keepable) {
        Saved probe{};
        const std::uint64_t rng = tape.rng_offset();  // (dropout's save draws its counter)
        save(probe, out);
        tape.set_rng_offset(rng);
        probe.each([&](const Tensor<B>& t) { entry.save_refs.push_back(first->producer_of(t)); });
      }
    }
  }
  if (first) {  // the segment in its first run owns the tensor (NOTE [escaped tensors])
    out.impl()->first_run_serial = first->serial;
    out.impl()->first_run_label = first->label;
  }
  if (top.mode == FrameMode::replay && top.adopted)  // an output that escaped the first run
    for (std::int64_t k : *top.adopted)
      if (k == index) top.adopted_out[index] = out;
  if (top.mode == FrameMode::first_run) {
    out.impl()->segment_op = index;
    out.impl()->segment_serial = top.serial;
    const Policy* pol = top.policy;
    if (needs && pol && pol->keep_op && (keepable || (pol->keep_state && top.kept_state))) {
      const Shape& shape = out.shape();
      bool with_weight = false;
      for (const Tensor<B>& t : in) with_weight = with_weight || t.category() == Category::parameters;
      if (pol->keep_op(OpInfo{Op::name, index, &shape, static_cast<std::int64_t>(out.bytes()),
                              keepable, with_weight})) {
        top.keep(index, out);  // now, or when an op saves it (NOTE [replay only ...])
        if (!keepable) {  // nothing records in a first run: the state moves to the segment
          if constexpr (has_slim<Op, B>::value) Op::slim(saved);
          top.kept_state->emplace(index, std::make_shared<KeptStateOf<B, Saved>>(Op::name,
                                                                                 std::move(saved)));
        }
      }
    }
  } else if (top.mode == FrameMode::replay && !from_cache) {
    if (!viewed) top.remat_bytes += static_cast<std::int64_t>(out.bytes());  // (a view: none)
  }
  if (tape.recording() && grad_enabled() && any_requires_grad<B>(in))
    record_op<Op>(tape, in, out, std::move(saved));
  return out;
}

// An op's forward and backward run with grad mode off: an op composed of other ops (a
// custom op, core/custom_op.hpp) is recorded once, as itself, never through its insides.
template <class B>
struct InsideOp {  // grad mode off, and the tape knows an op's forward runs
  explicit InsideOp(Tape<B>& t) : tape(t) { tape.enter_op_forward(1); }
  ~InsideOp() { tape.enter_op_forward(-1); }
  InsideOp(const InsideOp&) = delete;
  InsideOp& operator=(const InsideOp&) = delete;
  Tape<B>& tape;
  NoGrad no_grad;
};
template <class Op, class B, std::size_t N, std::size_t... I, class... A>
Tensor<B> call_forward(typename Op::template Saved<B>& s, const std::array<Tensor<B>, N>& in,
                       std::index_sequence<I...>, const A&... attrs) {
  InsideOp<B> inside_the_op(in[0].tape());
  return Op::forward(s, in[I]..., attrs...);
}

/// Runs Op on a fixed number of inputs and records it when a gradient is needed.
template <class Op, class B, std::size_t N, class... A>
Tensor<B> apply(const std::array<Tensor<B>, N>& in, const A&... attrs) {
  Tape<B>& tape = common_tape<B>(Op::name, in);
  tape.note_leaf_uses(in);  // NOTE [gradient contributions] in core/tape.hpp
  using Seq = std::make_index_sequence<N>;
  if (tape.in_segment() && !tape.in_op_forward()) {
    using Args = decltype(std::tuple_cat(std::declval<repeat_t<Tensor<B>, N>>(), std::tuple<A...>{}));
    constexpr bool keepable = has_save<Op, B, Args>::value;
    return apply_in_segment<Op>(
        tape, in,
        [&](typename Op::template Saved<B>& s) { return call_forward<Op>(s, in, Seq{}, attrs...); },
        [&](typename Op::template Saved<B>& s, const Tensor<B>& out) {
          if constexpr (keepable) call_save<Op>(s, out, in, Seq{}, attrs...);
        },
        keepable, signature_of<B>(in, attrs...));
  }
  typename Op::template Saved<B> saved{};
  Tensor<B> out = call_forward<Op>(saved, in, Seq{}, attrs...);
  if (grad_enabled() && any_requires_grad<B>(in)) {
    attach_recipe<Op, B>(saved, out, nullptr);
    record_op<Op>(tape, in, out, std::move(saved));
  }
  return out;
}

/// Runs Op on a list of inputs (concat) and records it when a gradient is needed.
template <class Op, class B, class... A>
Tensor<B> apply_list(const std::vector<Tensor<B>>& in, const A&... attrs) {
  REMAT_CHECK(!in.empty(), "remat::", Op::name, ": needs at least one input, got none");
  Tape<B>& tape = common_tape<B>(Op::name, in);
  tape.note_leaf_uses(in);  // NOTE [gradient contributions] in core/tape.hpp
  if (tape.in_segment() && !tape.in_op_forward()) {
    constexpr bool keepable = has_save<Op, B, std::tuple<std::vector<Tensor<B>>, A...>>::value;
    return apply_in_segment<Op>(
        tape, in,
        [&](typename Op::template Saved<B>& s) {
          InsideOp<B> inside_the_op(tape);  // as call_forward
          return Op::forward(s, in, attrs...);
        },
        [&](typename Op::template Saved<B>& s, const Tensor<B>& out) {
          if constexpr (keepable) Op::save(s, out, in, attrs...);
        },
        keepable, signature_of<B>(in, attrs...));
  }
  typename Op::template Saved<B> saved{};
  Tensor<B> out = [&] {
    InsideOp<B> inside_the_op(tape);  // as call_forward
    return Op::forward(saved, in, attrs...);
  }();
  if (grad_enabled() && any_requires_grad<B>(in)) record_op<Op>(tape, in, out, std::move(saved));
  return out;
}

/// Throws unless t holds fp32 values.
template <class B>
void check_f32(const char* op, const char* what, const Tensor<B>& t) {
  REMAT_CHECK(t.dtype() == DType::f32, "remat::", op, ": ", what, " must be f32, found ",
              dtype_name(t.dtype()), " with shape ", t.shape().str(),
              t.dtype() == DType::bf16 ? " (hint: widen it with to_dtype(x, DType::f32))" : "");
}
/// Throws if t has no elements.
template <class B>
void check_nonempty(const char* op, const char* what, const Tensor<B>& t) {
  REMAT_CHECK(t.numel() > 0, "remat::", op, ": ", what, " is empty (shape ", t.shape().str(),
              "); expected at least one element");
}

}  // namespace detail
}  // namespace remat
