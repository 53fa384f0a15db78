#pragma once
// SPDX-License-Identifier: MIT
// detail::apply<Op>: runs an op's forward and records a node when grad mode is on and an input
// requires grad. Ops never touch the tape themselves.
//
// An op is a struct:
//   static constexpr const char* name = "gelu";
//   template <class B> struct Saved { Tensor<B> x;                // what backward needs
//     template <class F> void each(F f) const { f(x); } };      // lists the saved tensors
//   template <class B> static Tensor<B> forward(Saved<B>&, const Tensor<B>& x..., attrs...);
//   template <class B> static void backward(const Saved<B>&, const Tensor<B>& dout,
//                                           std::vector<Tensor<B>>& dinp);   // dinp[i] +=
// `each` lets the node count the saved bytes exactly and mark them as activations.

#include <array>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "remat/core/tape.hpp"

namespace remat {
namespace detail {

template <class Op, class B>
struct OpBody final : NodeBody<B> {
  using Saved = typename Op::template Saved<B>;
  explicit OpBody(Saved&& s) : saved(std::move(s)) {
    std::unordered_set<const void*> seen;
    saved.each([&](const Tensor<B>& t) {
      if (!t.defined()) return;
      t.storage()->retain_saved();
      if (seen.insert(t.storage().get()).second) this->saved_bytes += t.storage()->bytes();
    });
  }
  ~OpBody() override {
    saved.each([](const Tensor<B>& t) {
      if (t.defined()) t.storage()->release_saved();
    });
  }
  void backward(Tape<B>&, const std::vector<Tensor<B>>& douts,
                std::vector<Tensor<B>>& dinp) override {
    Op::backward(saved, douts[0], dinp);
  }
  Saved saved;
};

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
  return *tape;
}

template <class B, class Range>
bool any_requires_grad(const Range& in) {
  for (const Tensor<B>& t : in)
    if (t.requires_grad()) return true;
  return false;
}

template <class Op, class B, class Range>
void record_op(Tape<B>& tape, const Range& in, Tensor<B>& out,
               typename Op::template Saved<B>&& saved) {
  std::vector<const Tensor<B>*> ins;
  for (const Tensor<B>& t : in) ins.push_back(&t);
  tape.record(Op::name, ins, {&out}, std::make_unique<OpBody<Op, B>>(std::move(saved)));
}

template <class Op, class B, std::size_t N, std::size_t... I, class... A>
Tensor<B> call_forward(typename Op::template Saved<B>& s, const std::array<Tensor<B>, N>& in,
                       std::index_sequence<I...>, const A&... attrs) {
  return Op::forward(s, in[I]..., attrs...);
}

/// Runs Op on a fixed number of inputs and records it when a gradient is needed.
template <class Op, class B, std::size_t N, class... A>
Tensor<B> apply(const std::array<Tensor<B>, N>& in, const A&... attrs) {
  Tape<B>& tape = common_tape<B>(Op::name, in);
  typename Op::template Saved<B> saved{};
  Tensor<B> out = call_forward<Op>(saved, in, std::make_index_sequence<N>{}, attrs...);
  if (grad_enabled() && any_requires_grad<B>(in)) record_op<Op>(tape, in, out, std::move(saved));
  return out;
}

/// Runs Op on a list of inputs (concat) and records it when a gradient is needed.
template <class Op, class B, class... A>
Tensor<B> apply_list(const std::vector<Tensor<B>>& in, const A&... attrs) {
  REMAT_CHECK(!in.empty(), "remat::", Op::name, ": needs at least one input, got none");
  Tape<B>& tape = common_tape<B>(Op::name, in);
  typename Op::template Saved<B> saved{};
  Tensor<B> out = Op::forward(saved, in, attrs...);
  if (grad_enabled() && any_requires_grad<B>(in)) record_op<Op>(tape, in, out, std::move(saved));
  return out;
}

/// Throws unless t holds fp32 values.
template <class B>
void check_f32(const char* op, const char* what, const Tensor<B>& t) {
  REMAT_CHECK(t.dtype() == DType::f32, "remat::", op, ": ", what, " must be f32, found ",
              dtype_name(t.dtype()), " with shape ", t.shape().str());
}
/// Throws if t has no elements.
template <class B>
void check_nonempty(const char* op, const char* what, const Tensor<B>& t) {
  REMAT_CHECK(t.numel() > 0, "remat::", op, ": ", what, " is empty (shape ", t.shape().str(),
              "); expected at least one element");
}

}  // namespace detail
}  // namespace remat
