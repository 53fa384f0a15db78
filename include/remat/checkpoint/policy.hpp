#pragma once
// SPDX-License-Identifier: MIT
// Selective checkpoint policies: which interior ops' outputs a segment keeps from its first run
// instead of recomputing them in backward. A policy chooses among the tensors a plain run keeps
// for backward and never keeps another (NOTE [replay only what backward needs] in
// core/segment.hpp), so a checkpointed segment holds at most what the plain run holds. Ops
// that can rebuild their backward state from their output (they define `save`: linear,
// matmul, pointwise, shape ops) are kept by their output; the others (layer norm, attention,
// the loss) only by a policy with keep_state, which keeps their whole saved state
// (policy::megatron_selective).

#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "remat/core/segment.hpp"
#include "remat/core/tape.hpp"

namespace remat {
namespace policy {

/// Keep nothing: every interior op is recomputed (the default).
inline Policy recompute_all() { return Policy{}; }

namespace detail {
inline bool is_op(const OpInfo& op, const char* name) { return std::strcmp(op.op, name) == 0; }
// Roles, not classes: what the policies below decide on, on any model.
/// A product with a weight: linear and mlp, and a matmul taking a parameter (a model's own
/// x @ W, written without nn::Linear).
inline bool is_weight_product(const OpInfo& op) {
  return is_op(op, "linear") || is_op(op, "mlp") || (is_op(op, "matmul") && op.with_weight);
}
/// The attention core (scores, softmax, times values), fused into one op.
inline bool is_attention_core(const OpInfo& op) {
  return is_op(op, "attention") || is_op(op, "self_attention") || is_op(op, "grouped_attention");
}
}  // namespace detail

/// Keep the outputs of the products with a weight (linear layers, however written: linear,
/// mlp, a matmul taking a parameter) that backward reads; recompute everything else in the
/// segment: layer norms, pointwise ops (GELU, residual adds, dropout) and the attention core. A
/// product whose output only a residual add or a copy reads is not kept (the plain run does not
/// keep it either): the replay recomputes it, or skips it when nothing recomputed reads it. A
/// fused MLP (remat::mlp: two linear layers with the GELU between them inside its GEMMs) keeps
/// its state less the GELU's output (its input and its first layer's output; backward rebuilds
/// the GELU's output from the first layer's). (This is not Megatron-LM's selective recompute,
/// which keeps norms and pointwise ops as well and recomputes only the attention core:
/// policy::megatron_selective.)
inline Policy save_linear() {
  Policy p;
  p.name = "save_linear";
  p.keep_state = true;  // for the fused MLP only
  p.keep_op = [](const OpInfo& op) { return detail::is_weight_product(op); };
  return p;
}

/// Keep every output that backward reads and that an op can rebuild its backward from (linear,
/// matmul, pointwise, shape ops), and the fused MLP's state (less the GELU output, which its
/// backward rebuilds); recompute only layer norms and the attention core. The cheapest replay
/// that still drops attention's state (its probabilities, when they are kept).
inline Policy save_all_but_attention() {
  Policy p;
  p.name = "save_all_but_attention";
  p.keep_state = true;  // for the fused MLP only
  p.keep_op = [](const OpInfo& op) { return op.keepable || detail::is_op(op, "mlp"); };
  return p;
}

/// Megatron-LM's selective recompute (Korthikanti et al. 2022, "Reducing Activation
/// Recomputation in Large Transformer Models"): keep every op's state as a plain run would,
/// except the attention core, the only op recomputed in backward. Here the core is one fused op
/// (attention, self_attention: scores, softmax, probabilities times values), so a segment drops
/// its state (lse, B H T floats, or the probabilities, B H T T, on a materialized path, and its
/// output) and recomputes nothing else. A model that writes the core as separate matmul and
/// softmax ops needs policy::custom to say which those are.
inline Policy megatron_selective() {
  Policy p;
  p.name = "megatron_selective";
  p.keep_state = true;
  p.keep_op = [](const OpInfo& op) { return !detail::is_attention_core(op); };
  return p;
}

/// JAX's checkpoint_dots: keep every matrix product's output (linear and matmul) that backward
/// reads, and a fused MLP's state less its GELU output.
inline Policy save_matmuls() {
  Policy p;
  p.name = "save_matmuls";
  p.keep_state = true;  // for the fused MLP only
  p.keep_op = [](const OpInfo& op) {
    return detail::is_op(op, "linear") || detail::is_op(op, "matmul") || detail::is_op(op, "mlp");
  };
  return p;
}

/// Keep the tensors tagged inside the segment with one of these names (remat::tag).
inline Policy save_names(std::vector<std::string> names) {
  Policy p;
  p.name = "save_names";
  p.keep_names = std::move(names);
  return p;
}

/// A user predicate over each interior op (its kind, index, output shape and bytes).
inline Policy custom(std::function<bool(const OpInfo&)> keep, std::string name = "custom") {
  Policy p;
  p.name = std::move(name);
  p.keep_op = std::move(keep);
  return p;
}

}  // namespace policy

/// Names x so a checkpoint policy can keep it (policy::save_names). Inside a segment's first
/// run, a tensor whose name the policy lists is kept for the replay; elsewhere only named.
template <class B>
Tensor<B> tag(const Tensor<B>& x, std::string name) {
  x.impl()->name = std::move(name);
  Tape<B>& tape = x.tape();
  if (!tape.in_segment()) return x;
  detail::SegmentFrame<B>& top = *tape.frames().back();
  const std::int64_t i = x.impl()->segment_op;
  if (top.mode != detail::FrameMode::first_run || !top.policy || i < 0 ||
      x.impl()->segment_serial != top.serial || i >= static_cast<std::int64_t>(top.trace->size()))
    return x;
  for (const auto& n : top.policy->keep_names)
    if (n == x.impl()->name && (*top.trace)[static_cast<std::size_t>(i)].keepable &&
        x.impl()->segment_grad)
      top.keep(i, x);
  return x;
}

}  // namespace remat
