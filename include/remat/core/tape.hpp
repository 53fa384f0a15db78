#pragma once
// SPDX-License-Identifier: MIT
// The tape: ops recorded in program order, replayed in reverse by backward(). No topological
// sort, no recursion. Each node owns what its op saved for backward and drops it the moment its
// backward has run, so memory falls during backward. Gradients of recorded tensors live in
// slots on the tape (freed once consumed); gradients of leaves accumulate into the leaf.
//
// NOTE [graph lifetime]
// 1. backward(loss) runs the nodes that reach `loss` and removes exactly those. Other graphs on
//    the tape (a second loss, an evaluation forward whose result is still held) stay valid:
//    l1 = f(); l2 = g(); backward(l1); backward(l2) works when f and g share no recorded op.
// 2. A node that no living tensor can reach any more (its outputs dropped, and no node that
//    can be reached consumes them) is freed with what it saved: at every backward() and, while
//    recording, whenever the tape has doubled since it last looked. So a forward pass without
//    NoGrad whose results are dropped (evaluation) pins nothing for long; NoGrad records
//    nothing at all and is still the cheaper way to evaluate.
// 3. Ops that two graphs share are consumed by the first backward through them; the second
//    backward then raises an error naming the op (sum the losses and call backward once).
// 4. clear() drops every graph at once.
// 5. After an exception (OutOfMemory included) the tape stays usable. A failed backward()
//    frees its graph and every gradient slot; gradients it already added into leaves stay
//    there (drop them with zero_grad before a retry). A failed forward leaves the nodes it
//    recorded until the tensors they made are dropped: the next record() after an allocation
//    failure prunes them (so a retry starts from the pre-step memory), prune() does it at once.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <typeindex>
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
  DType dtype = DType::f32;  // its gradient's type (TensorImpl::grad_dtype)
  bool needs_grad() const { return id >= 0 || leaf != nullptr; }
};

/// Type-erased backward of one node; the concrete body owns the op's Saved.
template <class B>
struct NodeBody {
  virtual ~NodeBody() = default;
  /// douts: one per output (never undefined; the body may take them over: the tape drops them
  /// after the call); dinp: one per input, undefined where no gradient is needed, else a
  /// buffer to accumulate (+=) into.
  virtual void backward(Tape<B>& tape, std::vector<Tensor<B>>& douts,
                        std::vector<Tensor<B>>& dinp) = 0;
  /// True when backward() writes (=) every gradient buffer that Tape::fresh_grads() marks,
  /// instead of adding into it (NOTE [fresh gradient buffers]); false: the tape zeroes them.
  virtual bool writes_fresh() const { return false; }
  /// The input whose gradient is the output's gradient unchanged (a residual add's operand), or
  /// -1. Its buffer may be the output's gradient itself, passed through (NOTE [fresh gradient
  /// buffers]); only a node that writes_fresh() is asked.
  virtual int pass_through() const { return -1; }
  /// The input whose gradient backward may write over a tensor the node saved (cross-entropy's
  /// dlogits over its logits), with that tensor in `t`; or -1. Only a node that writes_fresh()
  /// is asked (NOTE [fresh gradient buffers]).
  virtual int grad_over_saved(const Tensor<B>*& t) const { (void)t; return -1; }
  std::size_t saved_bytes = 0;  // distinct bytes this node keeps alive for backward
  bool segment = false;         // a checkpoint segment: its replayed interior adds the gradients
  std::uint64_t frame_serial = 0;  // a segment: the serial of its first run's frame
  /// A segment: the output of its op `op` escaped the first run and became an extra output of
  /// this node (NOTE [escaped tensors]); the replay hands that op's new output its gradient.
  virtual void add_escaped_output(std::int64_t op) { (void)op; }
};

/// Watches the parameters' gradients of a graph (remat/dist/data_parallel.hpp reduces each one
/// as soon as it is final). NOTE [gradient contributions]: every recorded op that takes a leaf
/// adds into that leaf's gradient exactly once per input slot when its backward runs; so in
/// forward, used() is called once per (op, leaf input) -- in checkpoint segments' first runs
/// too, where nothing records -- and in backward, contributed() once per (node, leaf input)
/// after the node ran, with the gradient buffer the node added into (a checkpoint replay's
/// alias of a parameter shares the parameter's buffer). Segment nodes themselves add nothing and
/// report nothing: their replayed interior reports. node_done() follows every backward node.
template <class B>
struct GradObserver {
  virtual ~GradObserver() = default;
  virtual void used(const TensorImpl<B>& leaf) = 0;
  virtual void contributed(const Storage<B>* grad) = 0;
  virtual void node_done() = 0;
};

template <class B>
struct Node {
  const char* op = "";
  std::vector<NodeInput<B>> inputs;
  std::vector<TensorId> outputs;
  std::vector<Shape> output_shapes;
  std::vector<DType> output_grad_dtypes;  // each output's gradient type
  std::unique_ptr<NodeBody<B>> body;
};

namespace detail {
/// Writes the n draws std * rng::normal(seed, offset, i) (counter-based: the same on every
/// backend) to the f32 buffer `dst` of backend B, through a 16 KiB host piece: a staging
/// vector as large as the tensor would be memory the ledger does not count (under a system
/// limit its std::bad_alloc, not the ledger's OutOfMemory, would end the run).
template <class B>
void fill_normal(void* dst, std::int64_t n, float std, std::uint64_t seed, std::uint64_t offset) {
  constexpr std::int64_t kPiece = std::int64_t{1} << 12;
  float piece[kPiece];
  for (std::int64_t at = 0; at < n; at += kPiece) {
    const std::int64_t m = std::min(kPiece, n - at);
    for (std::int64_t i = 0; i < m; ++i)
      piece[i] = std * rng::normal(seed, offset, static_cast<std::uint64_t>(at + i));
    B::copy_from_host(static_cast<char*>(dst) + at * std::int64_t{sizeof(float)}, piece,
                      static_cast<std::size_t>(m) * sizeof(float));
  }
}
}  // namespace detail

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
    return from_host(shape, data.data(), data.size(), DType::f32, Category::temporaries,
                     "Tape::input");
  }
  /// A constant input of bf16 values (no gradient), e.g. as read from a file; floats become
  /// bf16 with to_dtype(input(shape, floats), DType::bf16). (Not an overload of input: a
  /// braced list of numbers would then fit both.)
  Tensor<B> input_bf16(const Shape& shape, const std::vector<bf16>& data) {
    return from_host(shape, data.data(), data.size(), DType::bf16, Category::temporaries,
                     "Tape::input_bf16");
  }
  /// Integer data: token ids or class targets. Their range is recorded for the ops' range
  /// checks (a device then reads nothing back): the elements are constants, so write new ids
  /// as a new tensor, never through data().
  Tensor<B> tokens(const Shape& shape, const std::vector<std::int32_t>& data) {
    auto t = from_host(shape, data.data(), data.size(), DType::i32, Category::temporaries,
                       "Tape::tokens");
    if (!data.empty()) {
      const auto [lo, hi] = std::minmax_element(data.begin(), data.end());
      t.impl()->known_lo = *lo;
      t.impl()->known_hi = *hi;
    }
    return t;
  }
  /// Token ids that will be written again in place (write_tokens), e.g. the inputs of a CUDA
  /// graph's step: their range is declared as [lo, hi] (what the model accepts, e.g. 0 and
  /// vocab_size - 1) instead of taken from these values, so the ops' range checks hold for
  /// every later write.
  Tensor<B> tokens(const Shape& shape, const std::vector<std::int32_t>& data, std::int32_t lo,
                   std::int32_t hi) {
    REMAT_CHECK(lo <= hi, "remat::Tape::tokens: declared range [", lo, ", ", hi,
                "] is empty (expected lo <= hi)");
    check_in_range(data, lo, hi, "Tape::tokens");
    auto t = from_host(shape, data.data(), data.size(), DType::i32, Category::temporaries,
                       "Tape::tokens");
    t.impl()->known_lo = lo;
    t.impl()->known_hi = hi;
    return t;
  }
  /// Writes new ids into t (made by tokens with a declared range): as many, within the range.
  /// On a device it waits for the copy (the host buffer may go away).
  void write_tokens(const Tensor<B>& t, const std::vector<std::int32_t>& data) {
    REMAT_CHECK(t.defined() && t.dtype() == DType::i32 &&
                    static_cast<std::int64_t>(data.size()) == t.numel() &&
                    t.impl()->known_lo <= t.impl()->known_hi,
                "remat::Tape::write_tokens: ", data.size(), " ids into ",
                t.defined() ? std::string(dtype_name(t.dtype())) + " " + t.shape().str()
                            : std::string("an undefined tensor"),
                " (expected an i32 tensor of as many elements, made by Tape::tokens with a "
                "declared range)");
    check_in_range(data, t.impl()->known_lo, t.impl()->known_hi, "Tape::write_tokens");
    if (!data.empty())
      B::copy_from_host(t.template mutable_data<std::int32_t>(), data.data(), t.bytes());
  }
  /// Positions 0, 1, ..., n - 1 (i32 [n], a constant), written by the backend where they live:
  /// nothing is uploaded, so a CUDA graph can hold the step that makes them.
  Tensor<B> positions(std::int64_t n) {
    auto t = detail::make_tensor<B>(this, Shape{n}, DType::i32, Category::temporaries);
    B::iota(t.template data<std::int32_t>(), n);
    t.impl()->known_lo = 0;
    t.impl()->known_hi = n > 0 ? static_cast<std::int32_t>(n - 1) : 0;
    return t;
  }
  /// A trainable tensor: requires grad, counted under `parameters`.
  Tensor<B> parameter(const Shape& shape, const std::vector<float>& data) {
    auto t = from_host(shape, data.data(), data.size(), DType::f32, Category::parameters,
                       "Tape::parameter");
    t.impl()->requires_grad = true;
    return t;
  }
  /// A trainable tensor whose values are left to the caller (a loader fills it), or that
  /// has none (a shape-only backend, remat::Meta).
  Tensor<B> parameter(const Shape& shape) {
    shape.check_concrete("Tape::parameter");
    auto t = detail::make_tensor<B>(this, shape, DType::f32, Category::parameters);
    t.impl()->requires_grad = true;
    return t;
  }
  /// A tensor of zeros; `requires_grad` makes it a leaf that collects a gradient.
  Tensor<B> zeros(const Shape& shape, bool requires_grad = false,
                  Category c = Category::temporaries) {
    shape.check_concrete("Tape::zeros");
    auto t = detail::make_tensor<B>(this, shape, DType::f32, c);
    B::fill(t.template data<float>(), t.numel(), 0.0f);
    t.impl()->requires_grad = requires_grad;
    return t;
  }
  /// A tensor with every element `value` (filled where it lives: nothing is uploaded).
  Tensor<B> full(const Shape& shape, float value, bool requires_grad = false,
                 Category c = Category::temporaries) {
    shape.check_concrete("Tape::full");
    auto t = detail::make_tensor<B>(this, shape, DType::f32, c);
    B::fill(t.template data<float>(), t.numel(), value);
    t.impl()->requires_grad = requires_grad;
    return t;
  }
  /// A tensor of ones.
  Tensor<B> ones(const Shape& shape, bool requires_grad = false,
                 Category c = Category::temporaries) {
    return full(shape, 1.0f, requires_grad, c);
  }
  /// start, start + step, ..., start + (n - 1) step: a constant f32 [n], each value computed
  /// in double on the host and copied in (for tables made once, such as RoPE's angles).
  Tensor<B> arange(std::int64_t n, float start = 0.0f, float step = 1.0f) {
    REMAT_CHECK(n >= 0, "remat::Tape::arange: ", n, " elements (expected n >= 0)");
    std::vector<float> h(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < h.size(); ++i)
      h[i] = static_cast<float>(static_cast<double>(start) + static_cast<double>(i) * step);
    return input(Shape{n}, h);
  }
  /// A tensor of N(0, std^2) draws from the counter-based generator (reproducible anywhere).
  Tensor<B> randn(const Shape& shape, float std, std::uint64_t seed, bool requires_grad = false,
                  Category c = Category::temporaries) {
    shape.check_concrete("Tape::randn");
    if constexpr (is_meta_backend_v<B>) {  // a shape-only backend: no values to draw
      auto t = detail::make_tensor<B>(this, shape, DType::f32, c);
      t.impl()->requires_grad = requires_grad;
      return t;
    }
    auto t = detail::make_tensor<B>(this, shape, DType::f32, c);
    detail::fill_normal<B>(t.storage()->data(), shape.numel(), std, seed, 0);
    t.impl()->requires_grad = requires_grad;
    return t;
  }

  // ---- recording ------------------------------------------------------------------------
  /// Records a node producing `outs` from `ins`; marks the outputs as requiring grad.
  void record(const char* op, const std::vector<const Tensor<B>*>& ins,
              const std::vector<Tensor<B>*>& outs, std::unique_ptr<NodeBody<B>> body) {
    // NOTE [graph lifetime] 5: an allocation failed since the last record (a forward that ended
    // in OutOfMemory): free the nodes it left before this graph grows, so a retry starts clean.
    if (const std::int64_t f = detail::ledger<B>().failures(); f != failures_seen_) {
      failures_seen_ = f;
      if (!in_backward_ && frames_.empty()) prune();
    }
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
      owners_.push_back(out->impl_ptr());
      live_.push_back(1);
      node.outputs.push_back(impl->id);
      node.output_shapes.push_back(impl->shape);
      node.output_grad_dtypes.push_back(impl->grad_dtype);
    }
    node.body = std::move(body);
    nodes_.push_back(std::move(node));
    // NOTE [graph lifetime] 2: amortized, so a long forward pays O(1) per node.
    if (nodes_.size() >= 2 * prune_mark_ && !in_backward_ && frames_.empty()) {
      prune();
      prune_mark_ = std::max<std::size_t>(kPruneMin, nodes_.size());
    }
  }

  // ---- backward ----------------------------------------------------------------------------
  /// Backpropagates from `loss` (a scalar, or any shape with a `seed` gradient of that shape),
  /// accumulating into the gradients of leaves, then frees the nodes that reached `loss`; the
  /// rest of the tape stays valid (NOTE [graph lifetime]).
  void backward(const Tensor<B>& loss, const Tensor<B>& seed = Tensor<B>()) {
    REMAT_CHECK(loss.defined(), "remat::Tape::backward: loss is an undefined tensor");
    REMAT_CHECK(&loss.tape() == this, "remat::Tape::backward: loss belongs to another tape "
                "(hint: call backward on the tape that recorded the loss)");
    adopt_escaped("Tape::backward", 0, loss);
    REMAT_CHECK(loss.requires_grad(), "remat::Tape::backward: loss of shape ", loss.shape().str(),
                " does not require grad: nothing that requires grad contributed to it (was it "
                "computed under NoGrad, or from inputs only?)");
    REMAT_CHECK(loss.dtype() == DType::f32 && (!seed.defined() || seed.dtype() == DType::f32),
                "remat::Tape::backward: the loss", seed.defined() ? " and its seed" : "",
                " must be f32, found ", dtype_name(loss.dtype()),
                seed.defined() ? std::string(" and ") + dtype_name(seed.dtype()) : std::string(),
                " (hint: widen a bf16 loss with to_dtype(loss, DType::f32))");
    if (seed.defined()) {
      REMAT_CHECK(seed.shape() == loss.shape(), "remat::Tape::backward: seed gradient has shape ",
                  seed.shape().str(), ", expected the loss's shape ", loss.shape().str());
    } else {
      REMAT_CHECK(loss.numel() == 1, "remat::Tape::backward: loss has shape ", loss.shape().str(),
                  "; backward() needs a scalar (did you forget mean()?) or a seed gradient");
    }
    REMAT_CHECK(!in_backward_, "remat::Tape::backward: called while another backward() runs on "
                "this tape (from inside a checkpointed function?); backward is not reentrant");
    if (loss.is_leaf()) {  // no node reaches a leaf: nothing to run, nothing consumed
      Tensor<B> g = seed_grad(loss, seed);
      Tensor<B> lg = leaf_grad(loss.impl_ptr());
      B::add_into(lg.template data<float>(), g.template data<float>(), g.numel());
      prune();
      return;
    }
    REMAT_CHECK(produced_here(loss), "remat::Tape::backward: this loss's graph was already "
                "consumed by an earlier backward() (backward twice); run the forward pass again "
                "to build a new graph");
    // The nodes that reach the loss, found in one reverse sweep (program order is topological).
    const std::size_t n = nodes_.size();
    std::vector<char> need(grads_.size(), 0), in_graph(n, 0);
    need[static_cast<std::size_t>(loss.impl()->id)] = 1;
    for (std::size_t i = n; i-- > 0;) {
      const Node<B>& node = nodes_[i];
      bool reaches = false;
      for (TensorId id : node.outputs) reaches = reaches || need[static_cast<std::size_t>(id)];
      if (!reaches) continue;
      in_graph[i] = 1;
      for (std::size_t k = 0; k < node.inputs.size(); ++k) {
        const TensorId id = node.inputs[k].id;
        if (id < 0) continue;
        REMAT_CHECK(live_[static_cast<std::size_t>(id)], "remat::Tape::backward: input ", k,
                    " of op ", node.op, " on the way to this loss was produced by ops that an "
                    "earlier backward() already consumed (the two losses share part of their "
                    "graph; NOTE [graph lifetime] 3). Hint: backward(l1 + l2) once, or run the "
                    "forward pass again");
        need[static_cast<std::size_t>(id)] = 1;
      }
    }
    // Take the graph off the tape, in program order; the other nodes stay where they were.
    std::vector<Node<B>> graph;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (in_graph[i]) {
        for (TensorId id : nodes_[i].outputs) live_[static_cast<std::size_t>(id)] = 0;
        graph.push_back(std::move(nodes_[i]));
      } else {
        if (kept != i) nodes_[kept] = std::move(nodes_[i]);
        ++kept;
      }
    }
    nodes_.resize(kept);
    grads_[static_cast<std::size_t>(loss.impl()->id)] = seed_grad(loss, seed);
    in_backward_ = true;
    try {
      run_nodes(graph, 0);
    } catch (...) {
      in_backward_ = false;
      graph.clear();
      drop_from(kept);  // a replay that threw leaves its scratch range
      for (TensorId id : need_ids(need)) grads_[static_cast<std::size_t>(id)] = Tensor<B>();
      seen_segments_.clear();
      prune();
      throw;
    }
    in_backward_ = false;
    seen_segments_.clear();  // the next graph numbers its segments from 0 (segment_row)
    prune();
  }

  /// Runs the backward of nodes [begin, end) in reverse and removes them. Gradient slots of
  /// their outputs must already hold what flows in. Used by checkpoint replay.
  void run_backward(std::size_t begin) {
    std::vector<Node<B>> range;
    range.reserve(nodes_.size() - begin);
    for (std::size_t i = begin; i < nodes_.size(); ++i) {
      for (TensorId id : nodes_[i].outputs) live_[static_cast<std::size_t>(id)] = 0;
      range.push_back(std::move(nodes_[i]));
    }
    nodes_.resize(begin);
    run_nodes(range, 0);
  }

  /// Installs (or, with nullptr, removes) the observer of parameter gradients
  /// (NOTE [gradient contributions]); one per tape.
  void set_grad_observer(GradObserver<B>* o) noexcept { observer_ = o; }
  GradObserver<B>* grad_observer() const noexcept { return observer_; }
  bool in_backward() const noexcept { return in_backward_; }
  /// Forward: reports the leaves an op takes to the observer (core/apply.hpp calls it).
  template <class Range>
  void note_leaf_uses(const Range& in) {
    if (!observer_ || in_backward_ || !grad_enabled()) return;
    for (const Tensor<B>& t : in)
      if (t.is_leaf() && t.requires_grad()) observer_->used(*t.impl());
  }

  /// Drops the recorded graph (after backward, or to discard a forward pass).
  void clear() {
    nodes_.clear();
    reset_ids();
  }

  // ---- checkpoint segments (core/segment.hpp, checkpoint/checkpoint.hpp) ---------------------
  /// True while a checkpoint segment runs (first run or replay).
  bool in_segment() const noexcept { return !frames_.empty(); }
  // NOTE [escaped tensors]: a tensor made inside a segment's first run, with a gradient flowing
  // into it, that reached the outside other than through the segment's outputs (a capture by
  // reference, then an op outside, a later segment's input or output, a loss). Nothing inside
  // was recorded, so no gradient path leads to it; rather than drop its gradient, the tape
  // adopts it, when an op outside first takes it with grad mode on, as an extra output of the
  // segment's node: the replay then hands the same op's new output the gradient that reached
  // it, after what the ops past the segment added, as in the plain run (bit for bit). It cannot
  // be adopted, and the op raises an error naming the segment, when the segment's node has
  // left the tape (backward consumed it) or never was recorded (no output needed a gradient),
  // or when a checkpoint nested inside the segment made the tensor (its replay records it).
  /// The label of the segment whose first run made t, when t escaped it (see the NOTE above)
  /// and has not been adopted yet; nullptr for any other tensor.
  const std::string* escaped_from(const TensorImpl<B>& t) const {
    if (t.first_run_serial == 0 || t.requires_grad || !t.segment_grad || !t.first_run_label)
      return nullptr;
    for (const auto* f : frames_)
      if (f->serial == t.first_run_serial) return nullptr;  // still inside that segment
    return t.first_run_label.get();
  }
  /// Adopts input i of op as an extra output of its segment's node when it is an escaped tensor
  /// and a gradient is wanted (grad mode on), or throws where it cannot (NOTE [escaped tensors]).
  void adopt_escaped(const char* op, std::size_t i, const Tensor<B>& t) {
    if (!grad_enabled()) return;
    TensorImpl<B>& ti = *t.impl();
    const std::string* seg = escaped_from(ti);
    if (seg == nullptr) return;
    Node<B>* owner = nullptr;
    for (auto n = nodes_.rbegin(); n != nodes_.rend() && !owner; ++n)
      if (n->body && n->body->frame_serial == ti.first_run_serial) owner = &*n;
    const bool nested = ti.segment_serial != ti.first_run_serial || ti.segment_op < 0;
    REMAT_CHECK(owner && !nested, "remat::", op, ": input ", i, " (shape ", t.shape().str(),
                ") was made inside ", *seg, " during its first run and left it through a capture, "
                "not through its outputs, and ",
                nested ? "a checkpoint nested inside that segment made it"
                       : "the segment's node is not on the tape (backward() consumed it, or no "
                         "output of the segment needed a gradient)",
                ", so no gradient can flow back to it. Hint: return the tensor from the "
                "checkpointed function (outputs may be a tuple or vector), use remat::detach() "
                "if it needs no gradient, or run this op under NoGrad");
    ti.requires_grad = true;
    ti.id = static_cast<TensorId>(grads_.size());
    ti.epoch = epoch_;
    grads_.emplace_back();
    owners_.push_back(t.impl_ptr());
    live_.push_back(1);
    owner->outputs.push_back(ti.id);
    owner->output_shapes.push_back(ti.shape);
    owner->output_grad_dtypes.push_back(ti.grad_dtype);
    owner->body->add_escaped_output(ti.segment_op);
  }
  /// True while an op's forward runs: the ops it is made of are part of it, run as plain
  /// calls (core/apply.hpp), and checkpoint segments trace only the op itself.
  bool in_op_forward() const noexcept { return op_depth_ > 0; }
  void enter_op_forward(int d) noexcept { op_depth_ += d; }
  /// A host read (to_vector, item) of t: when a segment's first run made it, its replay
  /// computes it too (NOTE [replay only what backward needs], core/segment.hpp).
  void note_host_read(const TensorImpl<B>& t) {
    for (auto* f : frames_)
      if (f->mode == detail::FrameMode::first_run && f->serial == t.first_run_serial)
        f->note_host_read(t.storage.get());
  }
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
  /// The row of the per-segment ledger for a segment about to run. A segment is identified by
  /// its name, the type of its function (each lambda expression has its own: the call site)
  /// and how many segments of that name and type came before it in this graph (a loop over
  /// blocks), so a row holds the same segment in every step, whatever else runs around it.
  std::size_t segment_row(const std::string& name, std::type_index fn) {
    if (nodes_.empty() && frames_.empty() && !in_backward_) seen_segments_.clear();  // a new graph
    if (segment_rows_.size() != segment_stats_.size()) segment_rows_.clear();  // rows cleared
    const int nth = seen_segments_[{name, fn}]++;
    const auto key = std::make_tuple(name, fn, nth);
    auto it = segment_rows_.find(key);
    if (it != segment_rows_.end()) return it->second;
    const std::size_t row = segment_stats_.size();
    segment_rows_.emplace(key, row);
    segment_stats_.emplace_back();
    segment_stats_.back().name = name.empty() ? "segment " + std::to_string(row) : name;
    return row;
  }
  /// Per-segment ledger, one row per segment identity (segment_row); kept across steps
  /// (remat::segment_table).
  std::vector<SegmentStats>& segment_stats() noexcept { return segment_stats_; }
  SegmentStats& segment_stats(std::size_t row) {
    if (segment_stats_.size() <= row) segment_stats_.resize(row + 1);  // rows cleared meanwhile
    return segment_stats_[row];
  }
  /// The first row named `name`; nullptr if no segment of that name has run.
  const SegmentStats* find_segment_stats(const std::string& name) const {
    for (const auto& st : segment_stats_)
      if (st.name == name) return &st;
    return nullptr;
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
  /// Frees the nodes that no living tensor can reach any more (NOTE [graph lifetime] 2);
  /// backward() and recording call it, so a caller rarely needs to.
  void prune() {
    if (in_backward_ || !frames_.empty()) return;
    std::vector<char> need(grads_.size(), 0);
    bool removed = false;
    for (std::size_t i = nodes_.size(); i-- > 0;) {  // later nodes first: their saved go first
      Node<B>& node = nodes_[i];
      bool alive = false;
      for (TensorId id : node.outputs) {
        const auto u = static_cast<std::size_t>(id);
        alive = alive || need[u] || !owners_[u].expired();
      }
      if (alive) {
        for (const NodeInput<B>& in : node.inputs)
          if (in.id >= 0) need[static_cast<std::size_t>(in.id)] = 1;
        continue;
      }
      for (TensorId id : node.outputs) {
        live_[static_cast<std::size_t>(id)] = 0;
        grads_[static_cast<std::size_t>(id)] = Tensor<B>();
      }
      node.body.reset();  // releases what it saved now, so earlier nodes see their outputs die
      removed = true;
    }
    if (removed)
      nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(),
                                  [](const Node<B>& nd) { return nd.body == nullptr; }),
                   nodes_.end());
    if (nodes_.empty() && frames_.empty()) reset_ids();
  }

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
    bool fresh = false;
    Tensor<B> g = leaf_grad_unset(leaf, fresh);
    if (fresh) detail::zero_fill(g);
    return g;
  }
  /// While a node's backward runs: per input, whether its gradient buffer was made for this node
  /// and holds no values yet (NOTE [fresh gradient buffers]); empty outside a backward.
  const std::vector<char>& fresh_grads() const { return fresh_; }

 private:
  Tensor<B> from_host(const Shape& shape, const void* data, std::size_t n, DType dt, Category c,
                      const char* what) {
    shape.check_concrete(what);
    REMAT_CHECK(static_cast<std::int64_t>(n) == shape.numel(), "remat::", what,
                ": shape ", shape.str(), " has ", shape.numel(), " elements but ", n,
                " values were given");
    auto t = detail::make_tensor<B>(this, shape, dt, c);
    if (n) B::copy_from_host(t.storage()->data(), data, t.bytes());
    return t;
  }

  static void check_in_range(const std::vector<std::int32_t>& data, std::int32_t lo,
                             std::int32_t hi, const char* what) {
    for (std::size_t i = 0; i < data.size(); ++i)
      REMAT_CHECK(data[i] >= lo && data[i] <= hi, "remat::", what, ": id ", data[i],
                  " at index ", i, " is outside the declared range [", lo, ", ", hi,
                  "] (expected every id within it)");
  }

  static constexpr std::size_t kPruneMin = 256;

  /// True when t is the output of a node still on this tape.
  bool produced_here(const Tensor<B>& t) const {
    const TensorId id = t.impl()->id;
    return t.impl()->epoch == epoch_ && id >= 0 && static_cast<std::size_t>(id) < live_.size() &&
           live_[static_cast<std::size_t>(id)];
  }
  Tensor<B> seed_grad(const Tensor<B>& loss, const Tensor<B>& seed) {
    Tensor<B> g = detail::make_tensor<B>(this, loss.shape());
    if (seed.defined())
      B::copy(g.template data<float>(), seed.template data<float>(), g.bytes());
    else
      B::fill(g.template data<float>(), 1, 1.0f);
    return g;
  }
  static std::vector<TensorId> need_ids(const std::vector<char>& need) {
    std::vector<TensorId> ids;
    for (std::size_t i = 0; i < need.size(); ++i)
      if (need[i]) ids.push_back(static_cast<TensorId>(i));
    return ids;
  }
  /// Runs the backward of `nodes` (in program order) from the last to the first, each node
  /// dying (with what it saved) as soon as it has run.
  void run_nodes(std::vector<Node<B>>& nodes, std::size_t begin) {
    std::vector<Tensor<B>> douts, dinp;
    while (nodes.size() > begin) {
      Node<B> node = std::move(nodes.back());
      nodes.pop_back();
      douts.clear();
      bool any = false;
      for (TensorId id : node.outputs) {
        douts.push_back(std::move(grads_[static_cast<std::size_t>(id)]));
        grads_[static_cast<std::size_t>(id)] = Tensor<B>();
        any = any || douts.back().defined();
      }
      if (!any) continue;  // no gradient reached this node: just drop what it saved
      for (std::size_t o = 0; o < douts.size(); ++o)
        if (!douts[o].defined()) {
          douts[o] = detail::make_tensor<B>(this, node.output_shapes[o], node.output_grad_dtypes[o]);
          detail::zero_fill(douts[o]);
        }
      // NOTE [fresh gradient buffers]: a gradient buffer made for this node holds no values
      // yet. A node whose body writes such buffers (writes_fresh: an op whose backward takes
      // the flags, e.g. linear's GEMMs with beta 0) gets them as they are; for any other the
      // tape zeroes them first, as before. One buffer behind two inputs of the node (x * x, an
      // alias of a parameter beside the parameter) is zeroed: both inputs add into it. A
      // checkpoint segment's node writes_fresh too: it hands such buffers to its replay unset
      // (TensorImpl::grad_unset), where the first replayed contribution writes them.
      // Passed through: where such a node's input takes the output's gradient unchanged
      // (pass_through(): a residual add), that input has no buffer yet, and nothing else holds
      // the output's gradient, the gradient itself becomes the input's buffer: no copy, no new
      // buffer. Its flag is 2 (it holds the gradient already; the op leaves it alone).
      // Written over: where such a node's input may take its gradient in a tensor the node
      // saved (grad_over_saved(): cross-entropy's logits), that input has no buffer yet, and
      // nothing but the node holds that tensor, the saved buffer becomes the input's gradient
      // buffer, fresh: backward writes the gradient over the values it reads (element by
      // element, each read before it is written). One buffer of that size fewer at the peak.
      dinp.clear();
      fresh_.clear();
      const int passed = node.body->writes_fresh() ? pass_through_input(node, douts) : -1;
      const Tensor<B>* over = nullptr;
      const int overwritten = node.body->writes_fresh() ? over_saved_input(node, passed, over) : -1;
      for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        bool fresh = false;
        if (static_cast<int>(i) == passed) grads_[static_cast<std::size_t>(node.inputs[i].id)] = douts[0];
        if (static_cast<int>(i) == overwritten)
          grads_[static_cast<std::size_t>(node.inputs[i].id)] = detail::alias(*over, over->shape());
        dinp.push_back(grad_buffer(node.inputs[i], fresh));
        const bool made = fresh || static_cast<int>(i) == overwritten;
        fresh_.push_back(static_cast<int>(i) == passed ? 2 : made ? 1 : 0);
      }
      for (std::size_t i = 0; i < dinp.size(); ++i) {
        if (fresh_[i] != 1) continue;
        bool shared = !node.body->writes_fresh();
        for (std::size_t j = 0; j < dinp.size() && !shared; ++j)
          shared = j != i && dinp[j].defined() && dinp[j].storage() == dinp[i].storage();
        if (!shared) continue;
        detail::zero_fill(dinp[i]);
        for (std::size_t j = 0; j < dinp.size(); ++j)  // the same buffer is zeroed once
          if (dinp[j].defined() && dinp[j].storage() == dinp[i].storage()) fresh_[j] = 0;
      }
      try {
        node.body->backward(*this, douts, dinp);
      } catch (...) {  // (an OutOfMemory mid-node) no buffer is left holding undefined values
        // (a segment settles its own: its replay's nodes reused fresh_)
        for (std::size_t i = 0; i < dinp.size() && !node.body->segment; ++i)
          if (fresh_[i] == 1) detail::zero_fill(dinp[i]);
        fresh_.clear();
        throw;
      }
      fresh_.clear();
      if (observer_) {  // NOTE [gradient contributions]
        if (!node.body->segment)
          for (const NodeInput<B>& in : node.inputs)
            if (in.leaf) observer_->contributed(in.leaf->grad.get());
        observer_->node_done();
      }
    }  // `node` dies here: its saved tensors are released at once
  }
  /// Removes the nodes from `begin` on (what a failed replay recorded).
  void drop_from(std::size_t begin) {
    while (nodes_.size() > begin) {
      for (TensorId id : nodes_.back().outputs) {
        live_[static_cast<std::size_t>(id)] = 0;
        grads_[static_cast<std::size_t>(id)] = Tensor<B>();
      }
      nodes_.pop_back();
    }
  }
  /// With no node left, tensor ids start again from 0 in a new epoch (old ids become stale).
  void reset_ids() {
    grads_.clear();
    owners_.clear();
    live_.clear();
    ++epoch_;
    seen_segments_.clear();
    prune_mark_ = kPruneMin;
  }

  NodeInput<B> make_input(const char* op, std::size_t i, const Tensor<B>& t) {
    NodeInput<B> in;
    in.shape = t.shape();
    in.dtype = t.impl()->grad_dtype;
    if (!t.requires_grad()) return in;
    // In a replay, a recorded tensor the segment captured sends its gradient to its stand-in
    // (NOTE [captured tensors] in checkpoint/checkpoint.hpp); the innermost replay decides.
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      for (const auto& [orig, leaf] : (*f)->stand_ins)
        if (orig == t.impl()) {
          if (leaf->requires_grad) in.leaf = leaf;
          return in;
        }
    if (t.is_leaf()) {
      in.leaf = t.impl_ptr();
    } else {
      REMAT_CHECK(produced_here(t), "remat::", op, ": input ", i,
                  " was produced by ops that backward() already consumed (or clear() dropped); "
                  "its gradient cannot flow further (hint: recompute it, or use remat::detach() "
                  "to treat it as a constant)");
      in.id = t.impl()->id;
    }
    return in;
  }

  /// The input of `node` that takes its output's gradient as its own buffer, or -1: the one
  /// pass_through() names, when it is a recorded tensor with no gradient buffer yet, of the
  /// output's shape, and the output's gradient is held by nothing but `douts`.
  int pass_through_input(const Node<B>& node, const std::vector<Tensor<B>>& douts) const {
    const int i = node.body->pass_through();
    if (i < 0 || douts.size() != 1 || static_cast<std::size_t>(i) >= node.inputs.size()) return -1;
    const NodeInput<B>& in = node.inputs[static_cast<std::size_t>(i)];
    if (in.id < 0 || grads_[static_cast<std::size_t>(in.id)].defined()) return -1;
    const Tensor<B>& g = douts[0];
    if (!(in.shape == g.shape()) || in.dtype != g.dtype()) return -1;
    if (g.impl_ptr().use_count() != 1 || g.storage().use_count() != 1) return -1;
    for (std::size_t j = 0; j < node.inputs.size(); ++j)  // x + x: both add into one buffer
      if (j != static_cast<std::size_t>(i) && node.inputs[j].id == in.id) return -1;
    return i;
  }
  /// The input of `node` whose gradient buffer is a tensor the node saved (`over`), or -1: the
  /// one grad_over_saved() names, when it is a recorded tensor with no gradient buffer yet, not
  /// the passed-through one nor another input too, and the saved tensor has its shape and
  /// dtype, covers its whole buffer, and is held by nothing but the node (no handle, view or
  /// other node shares the buffer).
  int over_saved_input(const Node<B>& node, int passed, const Tensor<B>*& over) const {
    const int i = node.body->grad_over_saved(over);
    if (i < 0 || i == passed || static_cast<std::size_t>(i) >= node.inputs.size() || !over ||
        !over->defined())
      return -1;
    const NodeInput<B>& in = node.inputs[static_cast<std::size_t>(i)];
    if (in.id < 0 || grads_[static_cast<std::size_t>(in.id)].defined()) return -1;
    if (!(in.shape == over->shape()) || in.dtype != over->dtype()) return -1;
    if (over->impl_ptr().use_count() != 1 || over->storage().use_count() != 1 ||
        over->bytes() != over->storage()->bytes())
      return -1;
    for (std::size_t j = 0; j < node.inputs.size(); ++j)
      if (j != static_cast<std::size_t>(i) && node.inputs[j].id == in.id) return -1;
    return i;
  }
  /// The buffer input `in`'s gradient goes into; `fresh` when it was made now (no values yet).
  Tensor<B> grad_buffer(const NodeInput<B>& in, bool& fresh) {
    fresh = false;
    if (in.id >= 0) {
      Tensor<B>& slot = grads_[static_cast<std::size_t>(in.id)];
      if (!slot.defined()) {
        slot = detail::make_tensor<B>(this, in.shape, in.dtype);  // x's gradient type
        fresh = true;
      }
      return slot;
    }
    if (in.leaf) return leaf_grad_unset(in.leaf, fresh);
    return Tensor<B>();
  }
  /// A leaf's gradient buffer; made (under `gradients`, values unset) when absent, then `fresh`;
  /// `fresh` too for a replay's stand-in whose buffer is still unset (grad_unset, cleared now).
  Tensor<B> leaf_grad_unset(const std::shared_ptr<TensorImpl<B>>& leaf, bool& fresh) {
    fresh = false;
    if (!leaf->grad) {
      const std::size_t bytes = static_cast<std::size_t>(leaf->shape.numel()) * dtype_size(leaf->grad_dtype);
      leaf->grad = std::make_shared<Storage<B>>(bytes, leaf->grad_category);
      fresh = true;
    } else if (leaf->grad_unset) {
      leaf->grad_unset = false;
      fresh = true;
    }
    return Tensor<B>(leaf).grad();
  }

  std::vector<Node<B>> nodes_;
  std::vector<Tensor<B>> grads_;  // gradient slot per recorded tensor id, this epoch
  std::vector<char> fresh_;       // the running node's inputs: buffers made for it, unset
  std::vector<std::weak_ptr<TensorImpl<B>>> owners_;  // per id: the handle made (liveness)
  std::vector<char> live_;        // per id: its node is still on the tape
  std::size_t prune_mark_ = kPruneMin;
  std::int64_t failures_seen_ = detail::ledger<B>().failures();  // NOTE [graph lifetime] 5
  bool in_backward_ = false;
  GradObserver<B>* observer_ = nullptr;
  std::uint64_t epoch_ = 1;
  std::uint64_t seed_ = 0x5eed;
  std::uint64_t rng_offset_ = 0;
  std::vector<detail::SegmentFrame<B>*> frames_;
  int unrecorded_ = 0;
  int op_depth_ = 0;  // ops whose forward is running (an op made of ops: custom_op.hpp)
  std::uint64_t frame_serial_ = 0;
  std::vector<SegmentStats> segment_stats_;
  std::map<std::tuple<std::string, std::type_index, int>, std::size_t> segment_rows_;
  std::map<std::pair<std::string, std::type_index>, int> seen_segments_;  // this graph
};

}  // namespace remat
