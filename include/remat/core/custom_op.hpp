#pragma once
// SPDX-License-Identifier: MIT
// Your own op: the public face of the recipe every op of include/remat/ops/ follows. An op is
// a struct with its forward and backward side by side and the state its backward needs;
// remat::apply_op runs it, records it when a gradient is needed, and takes part in
// checkpoint() (replayed like the built-in ops), the ledger and the estimator.
//
// NOTE [writing an op]
//   struct SwishOp {                                   // y = x sigmoid(b x)
//     static constexpr const char* name = "swish";     // in traces, errors, policies
//     template <class B> struct Saved {                // what backward needs, nothing more
//       Tensor<B> x;  float b = 1.0f;
//       template <class F> void each(F f) const { f(x); }   // lists the saved tensors
//     };
//     template <class B>
//     static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, float b) {
//       Tensor<B> y = remat::new_tensor_like(x);       // counted by the ledger
//       if constexpr (remat::has_values_v<B>) { ... write y from x ... }
//       s.x = x;  s.b = b;
//       return y;
//     }
//     template <class B>                               // dx[i] += dL/dinput_i
//     static void backward(const Saved<B>& s, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
//       ... with kernels over data<float>(), or with tensor ops and remat::add_grad ...
//     }
//   };
//   Tensor<Cpu> y = remat::apply_op<SwishOp>(x, 1.0f);  // inputs first (1 or an array), then attributes
//
// - Inputs that need no gradient get an undefined dx[i]: check dx[i].defined() before writing.
// - The kernels: raw loops over data<float>() run on the CPU; has_values_v<B> is false on the
//   shape-only twin (Meta, what estimate_memory runs), where nothing may be read or written,
//   only tensors made. A CUDA version launches its own kernel where B is remat::Cuda.
// - Scratch: make it as tensors (new_tensor): the ledger and the estimate then count it, to the
//   byte, on every backend.
// - A backward written with tensor ops runs them unrecorded (the tape is in its backward pass);
//   add_grad(dx[i], t) adds the result into the gradient.
// - Optional members, as the built-in ops have them (core/apply.hpp): `static void save(Saved&,
//   out, inputs..., attrs...)`, which rebuilds Saved from the output without computing, lets a
//   checkpoint policy keep the op's output instead of replaying it.
// - Test it with remat::testing::gradcheck (remat/testing/gradcheck.hpp).
//
// NOTE [ops of several outputs]
// An op of M outputs says so, gives their shapes before it runs, and writes them:
//   static constexpr std::size_t outputs = 2;
//   template <class B> static std::array<Shape, 2> output_shapes(const Tensor<B>& x..., attrs...);
//   template <class B> static void forward(Saved<B>&, std::array<Tensor<B>, 2>& y,
//                                          const Tensor<B>& x..., attrs...);    // writes y[i]
//   template <class B> static void backward(const Saved<B>&, const std::array<Tensor<B>, 2>& dy,
//                                           std::vector<Tensor<B>>& dx);         // dx[i] +=
// and remat::apply_op_n<Op>(inputs, attrs...) returns the M outputs. Underneath they are the
// consecutive parts of one buffer: the op is recorded as one node whose output is that buffer,
// and each output is a view of its part made by an op of its own that copies nothing and whose
// backward adds its gradient into its part of the buffer's gradient. So:
// - dy[i] of an output that nothing downstream read holds zeros (never undefined);
// - the ledger counts the buffer once; an output kept alive keeps the whole buffer (the bytes
//   of one output saved by a later op are counted as its part, the buffer's other parts as
//   long as anything holds them);
// - inside checkpoint() the op is replayed as one op; a policy never keeps its outputs one by
//   one, only its whole state (Policy::keep_state).

#include <array>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "remat/core/apply.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/storage.hpp"

namespace remat {

/// False on a shape-only backend (Meta): there a kernel must not touch data, only make tensors.
template <class B>
inline constexpr bool has_values_v = !is_meta_backend_v<B>;

/// A new f32 tensor on x's tape with x's shape, values unset; counted as a temporary.
template <class B>
Tensor<B> new_tensor_like(const Tensor<B>& x) {
  return detail::make_tensor<B>(&x.tape(), x.shape(), DType::f32);
}
/// A new f32 tensor of `shape` on `tape`, values unset; counted as a temporary.
template <class B>
Tensor<B> new_tensor(Tape<B>& tape, const Shape& shape) {
  shape.check_concrete("new_tensor");
  return detail::make_tensor<B>(&tape, shape, DType::f32);
}

/// In a backward: grad += t, elementwise (t has grad's element count; an undefined grad, the
/// gradient of an input that needs none, is skipped). t is usually the result of tensor ops.
template <class B>
void add_grad(Tensor<B>& grad, const Tensor<B>& t) {
  if (!grad.defined()) return;
  REMAT_CHECK(t.defined() && t.numel() == grad.numel() && t.dtype() == DType::f32,
              "remat::add_grad: adding ", t.defined() ? t.shape().str() : std::string("nothing"),
              " into a gradient of shape ", grad.shape().str(), " (expected an f32 tensor of ",
              grad.numel(), " elements)");
  B::add_into(grad.template data<float>(), t.template data<float>(), t.numel());
}

/// Runs Op (NOTE [writing an op]) on `inputs`, then attributes, and records it for backward
/// when a gradient is needed. Inside checkpoint() it is replayed like the built-in ops.
template <class Op, class B, std::size_t N, class... A>
Tensor<B> apply_op(const std::array<Tensor<B>, N>& inputs, const A&... attrs) {
  return detail::apply<Op>(inputs, attrs...);
}
/// The same for an op of one input.
template <class Op, class B, class... A>
Tensor<B> apply_op(const Tensor<B>& input, const A&... attrs) {
  return detail::apply<Op>(std::array<Tensor<B>, 1>{input}, attrs...);
}

namespace detail {

/// A tensor of `shape` over the elements [offset, offset + numel) of x's buffer: no copy.
template <class B>
Tensor<B> part_view(const Tensor<B>& x, std::int64_t offset, const Shape& shape) {
  const std::size_t size = dtype_size(x.dtype());
  std::shared_ptr<Storage<B>> root = x.storage();
  std::size_t at = static_cast<std::size_t>(offset) * size;
  if (root->parent()) {  // a view already: a part of its parent
    at += root->offset();
    root = root->parent();
  }
  auto impl = std::make_shared<TensorImpl<B>>();
  impl->storage = std::make_shared<Storage<B>>(root, at,
                                               static_cast<std::size_t>(shape.numel()) * size);
  impl->shape = shape;
  impl->dtype = x.dtype();
  impl->grad_dtype = x.impl()->grad_dtype;
  impl->tape = &x.tape();
  return Tensor<B>(std::move(impl));
}

// y = x[offset, offset + numel(shape)) viewed as `shape` (no copy; an output of an op of
// several outputs, NOTE [ops of several outputs]).  dx[offset, offset + n) += dy.
struct OutputPartOp {
  static constexpr const char* name = "output_part";
  template <class B>
  struct Saved {
    std::int64_t offset = 0, n = 0;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, std::int64_t offset, const Shape& shape) {
    s.offset = offset;
    s.n = shape.numel();
    REMAT_ASSERT(offset >= 0 && offset + s.n <= x.numel());
    return part_view(x, offset, shape);
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
    if (dx[0].defined() && s.n > 0)
      B::add_into(dx[0].template data<float>() + s.offset, dy.template data<float>(), s.n);
  }
};

// Op of M outputs as an op of one: its outputs' parts of one buffer (NOTE [ops of several
// outputs]). The buffer is the recorded output; OutputPartOp cuts it.
template <class Op>
struct PackedOp {
  static constexpr const char* name = Op::name;
  static constexpr std::size_t M = Op::outputs;
  template <class B>
  struct Saved {
    typename Op::template Saved<B> op;
    std::array<Shape, M> shapes;
    template <class F> void each(F f) const { op.each(f); }
  };
  // The parts' offsets in the buffer, and its length.
  static std::array<std::int64_t, M + 1> offsets(const std::array<Shape, M>& shapes) {
    std::array<std::int64_t, M + 1> at{};
    for (std::size_t i = 0; i < M; ++i) at[i + 1] = at[i] + shapes[i].numel();
    return at;
  }
  template <class B, class... A>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& first, const A&... rest) {
    s.shapes = Op::output_shapes(first, rest...);
    for (const Shape& sh : s.shapes) sh.check_concrete(Op::name);
    const auto at = offsets(s.shapes);
    Tensor<B> buffer = make_tensor<B>(&first.tape(), Shape{at[M]}, DType::f32);
    std::array<Tensor<B>, M> y;
    for (std::size_t i = 0; i < M; ++i) y[i] = part_view(buffer, at[i], s.shapes[i]);
    Op::forward(s.op, y, first, rest...);
    return buffer;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
    const auto at = offsets(s.shapes);
    std::array<Tensor<B>, M> parts;
    for (std::size_t i = 0; i < M; ++i) parts[i] = part_view(dy, at[i], s.shapes[i]);
    Op::backward(s.op, parts, dx);
  }
};

}  // namespace detail

/// Runs Op, an op of Op::outputs outputs (NOTE [ops of several outputs]), on `inputs`, then
/// attributes; returns its outputs, each recorded for backward when a gradient is needed.
template <class Op, class B, std::size_t N, class... A>
std::array<Tensor<B>, Op::outputs> apply_op_n(const std::array<Tensor<B>, N>& inputs,
                                              const A&... attrs) {
  static_assert(Op::outputs >= 1, "remat::apply_op_n: Op::outputs must be at least 1");
  const Tensor<B> buffer = detail::apply<detail::PackedOp<Op>>(inputs, attrs...);
  // the parts' shapes, again from the inputs (the buffer's node keeps them inside its state)
  const std::array<Shape, Op::outputs> shapes = std::apply(
      [&](const auto&... in) { return Op::output_shapes(in..., attrs...); }, inputs);
  const auto at = detail::PackedOp<Op>::offsets(shapes);
  std::array<Tensor<B>, Op::outputs> out;
  for (std::size_t i = 0; i < Op::outputs; ++i)
    out[i] = detail::apply<detail::OutputPartOp>(std::array<Tensor<B>, 1>{buffer}, at[i], shapes[i]);
  return out;
}
/// The same for an op of one input.
template <class Op, class B, class... A>
std::array<Tensor<B>, Op::outputs> apply_op_n(const Tensor<B>& input, const A&... attrs) {
  return apply_op_n<Op>(std::array<Tensor<B>, 1>{input}, attrs...);
}

}  // namespace remat
