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

#include <array>
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

}  // namespace remat
