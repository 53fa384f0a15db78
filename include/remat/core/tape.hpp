#pragma once
// SPDX-License-Identifier: MIT
// The tape: ops recorded in program order, replayed in reverse by backward(). No topological
// sort, no recursion. Each node owns what its op saved for backward and drops it the moment its
// backward has run, so memory falls during backward. Gradients of recorded tensors live in
// slots on the tape (freed once consumed); gradients of leaves accumulate into the leaf.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/rng.hpp"
#include "remat/core/segment.hpp"
#include "remat/core/tensor.hpp"

namespace remat {

/// Where a node's input sends its gradient: a slot (recorded tensor), a leaf, or nowhere.
template <class B>
struct NodeInput {
  TensorId id = -1;
  std::shared_ptr<TensorImpl<B>> leaf;  // leaves that require grad (parameters, inputs)
  Shape shape;
  DType dtype = DType::f32;
  bool needs_grad() const { return id >= 0 || leaf != nullptr; }
};

/// Type-erased backward of one node; the concrete body owns the op's Saved.
template <class B>
struct NodeBody {
  virtual ~NodeBody() = default;
  /// douts: one per output (never undefined); dinp: one per input, undefined where no
  /// gradient is needed, else a buffer to accumulate (+=) into.
  virtual void backward(Tape<B>& tape, const std::vector<Tensor<B>>& douts,
                        std::vector<Tensor<B>>& dinp) = 0;
  std::size_t saved_bytes = 0;  // distinct bytes this node keeps alive for backward
};

template <class B>
struct Node {
  const char* op = "";
  std::vector<NodeInput<B>> inputs;
  std::vector<TensorId> outputs;
  std::vector<Shape> output_shapes;
  std::unique_ptr<NodeBody<B>> body;
};

template <class B>
class Tape {
 public:
  using backend = B;
  Tape() = default;
  explicit Tape(std::uint64_t seed) : seed_(seed) {}
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // ---- making tensors -------------------------------------------------------------------
  /// A constant input (no gradient), filled from host data.
  Tensor<B> input(const Shape& shape, const std::vector<float>& data) {
    return from_host(shape, data.data(), data.size(), DType::f32, Category::temporaries, "input");
  }
  /// Integer data: token ids or class targets.
  Tensor<B> tokens(const Shape& shape, const std::vector<std::int32_t>& data) {
    return from_host(shape, data.data(), data.size(), DType::i32, Category::temporaries,
                     "tokens");
  }
  /// A trainable tensor: requires grad, counted under `parameters`.
  Tensor<B> parameter(const Shape& shape, const std::vector<float>& data) {
    auto t = from_host(shape, data.data(), data.size(), DType::f32, Category::parameters,
                       "parameter");
    t.impl()->requires_grad = true;
    return t;
  }
  /// A trainable tensor whose values are left to the caller (a loader fills it), or that
  /// has none (a shape-only backend, remat::Meta).
  Tensor<B> parameter(const Shape& shape) {
    auto t = detail::make_tensor<B>(this, shape, DType::f32, Category::parameters);
    t.impl()->requires_grad = true;
    return t;
  }
  /// A tensor of zeros; `requires_grad` makes it a leaf that collects a gradient.
  Tensor<B> zeros(const Shape& shape, bool requires_grad = false,
                  Category c = Category::temporaries) {
    auto t = detail::make_tensor<B>(this, shape, DType::f32, c);
    B::fill(t.template data<float>(), t.numel(), 0.0f);
    t.impl()->requires_grad = requires_grad;
    return t;
  }
  /// A tensor of N(0, std^2) draws from the counter-based generator (reproducible anywhere).
  Tensor<B> randn(const Shape& shape, float std, std::uint64_t seed, bool requires_grad = false,
                  Category c = Category::temporaries) {
    if constexpr (is_meta_backend_v<B>) {  // a shape-only backend: no values to draw
      auto t = detail::make_tensor<B>(this, shape, DType::f32, c);
      t.impl()->requires_grad = requires_grad;
      return t;
    }
    std::vector<float> h(static_cast<std::size_t>(shape.numel()));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = std * rng::normal(seed, 0, i);
    auto t = from_host(shape, h.data(), h.size(), DType::f32, c, "randn");
    t.impl()->requires_grad = requires_grad;
    return t;
  }

  // ---- recording ------------------------------------------------------------------------
  /// Records a node producing `outs` from `ins`; marks the outputs as requiring grad.
  void record(const char* op, const std::vector<const Tensor<B>*>& ins,
              const std::vector<Tensor<B>*>& outs, std::unique_ptr<NodeBody<B>> body) {
    Node<B> node;
    node.op = op;
    node.inputs.reserve(ins.size());
    for (std::size_t i = 0; i < ins.size(); ++i) node.inputs.push_back(make_input(op, i, *ins[i]));
    for (Tensor<B>* out : outs) {
      TensorImpl<B>* impl = out->impl();
      impl->requires_grad = true;
      impl->id = static_cast<TensorId>(grads_.size());
      impl->epoch = epoch_;
      grads_.emplace_back();
      node.outputs.push_back(impl->id);
      node.output_shapes.push_back(impl->shape);
    }
    node.body = std::move(body);
    nodes_.push_back(std::move(node));
  }

  // ---- backward -------------------------------------------------------------------------
  /// Backpropagates from `loss` (a scalar, or any shape with a `seed` gradient of that shape),
  /// accumulating into the gradients of leaves, then frees the recorded graph.
  void backward(const Tensor<B>& loss, const Tensor<B>& seed = Tensor<B>()) {
    REMAT_CHECK(loss.defined(), "remat::Tape::backward: loss is an undefined tensor");
    REMAT_CHECK(&loss.tape() == this, "remat::Tape::backward: loss belongs to another tape "
                "(hint: call backward on the tape that recorded the loss)");
    REMAT_CHECK(loss.requires_grad(), "remat::Tape::backward: loss of shape ", loss.shape().str(),
                " does not require grad: nothing that requires grad contributed to it (was it "
                "computed under NoGrad, or from inputs only?)");
    if (seed.defined()) {
      REMAT_CHECK(seed.shape() == loss.shape(), "remat::Tape::backward: seed gradient has shape ",
                  seed.shape().str(), ", expected the loss's shape ", loss.shape().str());
    } else {
      REMAT_CHECK(loss.numel() == 1, "remat::Tape::backward: loss has shape ", loss.shape().str(),
                  "; backward() needs a scalar (did you forget mean()?) or a seed gradient");
    }
    Tensor<B> g = detail::make_tensor<B>(this, loss.shape());
    if (seed.defined())
      B::copy(g.template data<float>(), seed.template data<float>(), g.bytes());
    else
      B::fill(g.template data<float>(), 1, 1.0f);
    if (loss.is_leaf()) {
      Tensor<B> lg = leaf_grad(loss.impl_ptr());
      B::add_into(lg.template data<float>(), g.template data<float>(), g.numel());
      return;
    }
    REMAT_CHECK(loss.impl()->epoch == epoch_, "remat::Tape::backward: this loss's graph was "
                "already consumed by an earlier backward() (backward twice); run the forward "
                "pass again to build a new graph");
    grads_[static_cast<std::size_t>(loss.impl()->id)] = g;
    try {
      run_backward(0);
    } catch (...) {
      clear();
      throw;
    }
    clear();
  }

  /// Runs the backward of nodes [begin, end) in reverse and removes them. Gradient slots of
  /// their outputs must already hold what flows in. Used by backward() and by checkpoint replay.
  void run_backward(std::size_t begin) {
    std::vector<Tensor<B>> douts, dinp;
    while (nodes_.size() > begin) {
      Node<B> node = std::move(nodes_.back());
      nodes_.pop_back();
      douts.clear();
      bool any = false;
      for (TensorId id : node.outputs) {
        douts.push_back(std::move(grads_[static_cast<std::size_t>(id)]));
        grads_[static_cast<std::size_t>(id)] = Tensor<B>();
        any = any || douts.back().defined();
      }
      if (!any) continue;  // no gradient reached this node: just drop what it saved
      for (std::size_t o = 0; o < douts.size(); ++o)
        if (!douts[o].defined()) douts[o] = zeros(node.output_shapes[o]);
      dinp.clear();
      for (const NodeInput<B>& in : node.inputs) dinp.push_back(grad_buffer(in));
      node.body->backward(*this, douts, dinp);
    }  // `node` dies here: its saved tensors are released at once
  }

  /// Drops the recorded graph (after backward, or to discard a forward pass).
  void clear() {
    nodes_.clear();
    grads_.clear();
    ++epoch_;
    segments_made_ = 0;
  }

  // ---- checkpoint segments (core/segment.hpp, checkpoint/checkpoint.hpp) ---------------------
  /// True while a checkpoint segment runs (first run or replay).
  bool in_segment() const noexcept { return !frames_.empty(); }
  /// False while some enclosing segment runs its first (unrecorded) pass.
  bool recording() const noexcept { return unrecorded_ == 0; }
  std::vector<detail::SegmentFrame<B>*>& frames() noexcept { return frames_; }
  void push_frame(detail::SegmentFrame<B>* f) {
    f->serial = ++frame_serial_;
    frames_.push_back(f);
    if (f->mode != detail::FrameMode::replay) ++unrecorded_;
  }
  void pop_frame(detail::SegmentFrame<B>* f) {
    REMAT_ASSERT(!frames_.empty() && frames_.back() == f);
    frames_.pop_back();
    if (f->mode != detail::FrameMode::replay) --unrecorded_;
  }
  /// The next segment id of this graph (segments are numbered in the order they are made).
  std::size_t next_segment_id() noexcept { return segments_made_++; }
  /// Per-segment ledger, indexed by segment id; kept across steps (remat::segment_table).
  std::vector<SegmentStats>& segment_stats() noexcept { return segment_stats_; }
  SegmentStats& segment_stats(std::size_t id) {
    if (segment_stats_.size() <= id) segment_stats_.resize(id + 1);
    return segment_stats_[id];
  }

  // ---- state ----------------------------------------------------------------------------
  std::size_t num_nodes() const noexcept { return nodes_.size(); }
  std::uint64_t epoch() const noexcept { return epoch_; }
  /// Distinct bytes the recorded nodes keep for backward (upper bound if nodes share buffers).
  std::size_t saved_bytes() const {
    std::size_t s = 0;
    for (const auto& n : nodes_) s += n.body ? n.body->saved_bytes : 0;
    return s;
  }
  std::vector<Tensor<B>>& grad_slots() noexcept { return grads_; }

  /// Seed and counter of the tape's random stream (dropout). Each draw of n numbers takes
  /// the next n counters: next_rng_offset(n) returns the first.
  std::uint64_t seed() const noexcept { return seed_; }
  void set_seed(std::uint64_t s) noexcept { seed_ = s; }
  std::uint64_t rng_offset() const noexcept { return rng_offset_; }
  void set_rng_offset(std::uint64_t o) noexcept { rng_offset_ = o; }
  std::uint64_t next_rng_offset(std::uint64_t n) noexcept {
    const std::uint64_t o = rng_offset_;
    rng_offset_ += (n + 3) / 4;  // Philox blocks of 4 numbers
    return o;
  }

  /// The gradient buffer of a leaf, allocated (zeroed, under `gradients`) on first use.
  Tensor<B> leaf_grad(const std::shared_ptr<TensorImpl<B>>& leaf) {
    if (!leaf->grad) {
      const std::size_t bytes = static_cast<std::size_t>(leaf->shape.numel()) * 4;
      leaf->grad = std::make_shared<Storage<B>>(bytes, leaf->grad_category);
      B::fill(static_cast<float*>(leaf->grad->data()), leaf->shape.numel(), 0.0f);
    }
    return Tensor<B>(leaf).grad();
  }

 private:
  Tensor<B> from_host(const Shape& shape, const void* data, std::size_t n, DType dt, Category c,
                      const char* what) {
    REMAT_CHECK(static_cast<std::int64_t>(n) == shape.numel(), "remat::Tape::", what,
                ": shape ", shape.str(), " has ", shape.numel(), " elements but ", n,
                " values were given");
    auto t = detail::make_tensor<B>(this, shape, dt, c);
    if (n) B::copy_from_host(t.storage()->data(), data, t.bytes());
    return t;
  }

  NodeInput<B> make_input(const char* op, std::size_t i, const Tensor<B>& t) {
    NodeInput<B> in;
    in.shape = t.shape();
    in.dtype = t.dtype();
    if (!t.requires_grad()) return in;
    if (t.is_leaf()) {
      in.leaf = t.impl_ptr();
    } else {
      REMAT_CHECK(t.impl()->epoch == epoch_, "remat::", op, ": input ", i,
                  " was produced by a graph that backward() already consumed; its gradient "
                  "cannot flow further (hint: recompute it, or use remat::detach() to treat it "
                  "as a constant)");
      in.id = t.impl()->id;
    }
    return in;
  }

  Tensor<B> grad_buffer(const NodeInput<B>& in) {
    if (in.id >= 0) {
      Tensor<B>& slot = grads_[static_cast<std::size_t>(in.id)];
      if (!slot.defined()) slot = zeros(in.shape);
      return slot;
    }
    if (in.leaf) return leaf_grad(in.leaf);
    return Tensor<B>();
  }

  std::vector<Node<B>> nodes_;
  std::vector<Tensor<B>> grads_;  // gradient slot per recorded tensor id, this epoch
  std::uint64_t epoch_ = 1;
  std::uint64_t seed_ = 0x5eed;
  std::uint64_t rng_offset_ = 0;
  std::vector<detail::SegmentFrame<B>*> frames_;
  int unrecorded_ = 0;
  std::uint64_t frame_serial_ = 0;
  std::size_t segments_made_ = 0;
  std::vector<SegmentStats> segment_stats_;
};

}  // namespace remat
