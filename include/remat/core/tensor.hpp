#pragma once
// SPDX-License-Identifier: MIT
// Tensor<B>: a handle (shared) to a dense, contiguous, row-major array on backend B.
// A tensor belongs to one Tape (tape.hpp): ops find their tape through their inputs, so there
// is no global "current graph". Reshape shares storage; every other op writes a new buffer.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "remat/core/dtype.hpp"
#include "remat/core/error.hpp"
#include "remat/core/shape.hpp"
#include "remat/core/storage.hpp"

namespace remat {

template <class B>
class Tape;
template <class B>
struct Recipe;

/// Index of a recorded tensor's gradient slot on its tape; -1 for leaves.
using TensorId = std::int64_t;

template <class B>
struct TensorImpl {
  std::shared_ptr<Storage<B>> storage;
  Shape shape;
  DType dtype = DType::f32;
  // The type of its gradient: dtype, except a bf16 value cast down from f32 (to_dtype), whose
  // gradient stays f32, so a weight's gradient is summed in fp32 (NOTE [precision policy]).
  DType grad_dtype = DType::f32;
  Tape<B>* tape = nullptr;
  bool requires_grad = false;
  TensorId id = -1;              // gradient slot, set when an op that produced it was recorded
  std::uint64_t epoch = 0;       // the tape epoch `id` belongs to (stale after backward)
  std::shared_ptr<Storage<B>> grad;  // accumulated gradient of a leaf (parameters, inputs)
  Category grad_category = Category::gradients;  // where `grad` is counted in the ledger
  // `grad` holds no values yet: a checkpoint replay's stand-in for a gradient buffer made for
  // the segment's node; the first contribution writes it (NOTE [fresh gradient buffers])
  bool grad_unset = false;
  std::string name;              // optional tag (remat::tag), used by checkpoint policies
  // Set while a checkpoint segment runs forward unrecorded (checkpoint/segment.hpp):
  bool segment_grad = false;     // a gradient would flow through this tensor
  std::int64_t segment_op = -1;  // index of the op that made it in the innermost segment
  std::uint64_t segment_serial = 0;  // ... and that segment frame's serial number
  // The segment in its first run when an op made this tensor (0: none; at most one segment is
  // in its first run at a time), and its label. A tensor that leaves the segment other than
  // through its outputs has no recorded gradient path: the tape adopts it as an extra output of
  // the segment's node, or raises an error (NOTE [escaped tensors] in core/tape.hpp).
  std::uint64_t first_run_serial = 0;
  std::shared_ptr<const std::string> first_run_label;
  // An i32 tensor made from host data (Tape::tokens): its smallest and largest element, so that
  // range checks (embedding ids, cross-entropy targets) read nothing back from a device (NOTE
  // [host round trips], cuda.hpp). known_lo > known_hi: not known (B::minmax_i32 reads them).
  std::int32_t known_lo = 1, known_hi = 0;
  // A pointwise op's output: how to remake it from what its op's state keeps (NOTE [saved as
  // a recipe], core/recipe.hpp). Owned by the op's node, or by the tensor in a first run.
  std::weak_ptr<const Recipe<B>> recipe;
  std::shared_ptr<const Recipe<B>> recipe_owned;
};

template <class B>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl<B>> impl) : impl_(std::move(impl)) {}

  bool defined() const noexcept { return impl_ != nullptr; }
  const Shape& shape() const { return get().shape; }
  int rank() const { return get().shape.rank(); }
  std::int64_t size(int i) const { return get().shape[i]; }
  std::int64_t numel() const { return get().shape.numel(); }
  DType dtype() const { return get().dtype; }
  /// The type of its gradient (NOTE [precision policy] in ops/cast.hpp): dtype(), except a bf16
  /// copy of an f32 value, whose gradient is f32.
  DType grad_dtype() const { return get().grad_dtype; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  Tape<B>& tape() const { return *get().tape; }
  bool requires_grad() const { return get().requires_grad; }
  /// A leaf is a tensor no recorded op produced: parameters, inputs, constants.
  bool is_leaf() const { return get().id < 0; }
  const std::string& name() const { return get().name; }
  Category category() const { return get().storage->category(); }

  /// Backend pointer to the elements (a host pointer on the CPU backend), for reading, and for
  /// writing a tensor nothing has read yet. To write into a tensor that a recorded op or a
  /// checkpoint segment may have read, use mutable_data(): backward then reports the write
  /// instead of computing a gradient from the new values (NOTE [version counter]).
  /// data<void>() is the bytes whatever the element type (a kernel that takes the type as an
  /// argument: the casts).
  template <class T>
  T* data() const {
    if constexpr (!std::is_void_v<T>)
      REMAT_CHECK(dtype_of<T>::value == dtype(), "remat::Tensor::data: element type is ",
                  dtype_name(dtype()), ", asked for ", dtype_name(dtype_of<T>::value));
    REMAT_CHECK(!get().storage->skipped(), "remat::Tensor::data: ", shape().str(), " ",
                dtype_name(dtype()), " was made by an op that a checkpoint replay did not "
                "compute, because no backward and no computed op reads it (NOTE [replay only "
                "what backward needs]); its values do not exist. Hint: inside a checkpointed "
                "function, read values with item() or to_vector() (the replay then computes "
                "them), or run it with CheckpointOptions::verify_values(true)");
    return static_cast<T*>(get().storage->data());
  }
  /// data() for an in-place write: bumps the storage's version (NOTE [version counter]).
  template <class T>
  T* mutable_data() const {
    T* p = data<T>();
    get().storage->bump_version();
    return p;
  }
  const std::shared_ptr<Storage<B>>& storage() const { return get().storage; }

  /// Copies the elements to the host; to_vector<float>() of a bf16 tensor widens them (exact).
  template <class T = float>
  std::vector<T> to_vector() const {
    if (get().first_run_serial != 0) get().tape->note_host_read(get());  // NOTE [replay only ...]
    if constexpr (std::is_same_v<T, float>) {
      if (dtype() == DType::bf16) {
        const std::vector<bf16> h = to_vector<bf16>();
        std::vector<float> out(h.size());
        for (std::size_t i = 0; i < h.size(); ++i) out[i] = math::from_bf16(h[i]);
        return out;
      }
    }
    std::vector<T> out(static_cast<std::size_t>(numel()));
    if (!out.empty()) B::copy_to_host(out.data(), data<T>(), bytes());
    return out;
  }
  /// The value of a one-element tensor.
  float item() const {
    REMAT_CHECK(numel() == 1, "remat::Tensor::item: tensor has shape ", shape().str(),
                "; item() needs exactly one element (reduce with sum() or mean() first)");
    return to_vector<float>()[0];
  }

  /// The accumulated gradient of a leaf; an undefined tensor if none has been computed.
  Tensor grad() const {
    const auto& g = get().grad;
    if (!g) return Tensor();
    auto impl = std::make_shared<TensorImpl<B>>();
    impl->storage = g;
    impl->shape = get().shape;
    impl->dtype = get().grad_dtype;
    impl->grad_dtype = get().grad_dtype;
    impl->tape = get().tape;
    return Tensor(std::move(impl));
  }
  /// Drops the gradient buffer (the next backward allocates a zeroed one).
  void clear_grad() const { get().grad.reset(); }
  void set_requires_grad(bool on) const {
    REMAT_CHECK(is_leaf(), "remat::Tensor::set_requires_grad: only leaves can change it; this "
                "tensor was produced by a recorded op (hint: use detach())");
    REMAT_CHECK(!on || dtype() == DType::f32, "remat::Tensor::set_requires_grad: a ",
                dtype_name(dtype()), " leaf of shape ", shape().str(), " cannot collect a "
                "gradient; leaves that train are f32 (hint: keep the f32 tensor as the leaf and "
                "use to_dtype(leaf, DType::bf16) inside the step)");
    get().requires_grad = on;
  }

  TensorImpl<B>* impl() const noexcept { return impl_.get(); }
  const std::shared_ptr<TensorImpl<B>>& impl_ptr() const noexcept { return impl_; }

 private:
  TensorImpl<B>& get() const {
    REMAT_CHECK(impl_ != nullptr, "remat::Tensor: use of an undefined (default-constructed) "
                "tensor (hint: was it assigned the result of an op?)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl<B>> impl_;
};

namespace detail {

/// A new tensor on `tape` with fresh, uninitialized storage of category `c`.
template <class B>
Tensor<B> make_tensor(Tape<B>* tape, const Shape& shape, DType dt = DType::f32,
                      Category c = Category::temporaries) {
  shape.check_concrete("Tensor");  // a backstop: factories and ops check with their own names
  auto impl = std::make_shared<TensorImpl<B>>();
  impl->storage = std::make_shared<Storage<B>>(
      static_cast<std::size_t>(shape.numel()) * dtype_size(dt), c);
  impl->shape = shape;
  impl->dtype = dt;
  impl->grad_dtype = dt;
  impl->tape = tape;
  return Tensor<B>(std::move(impl));
}
template <class B>
Tensor<B> empty_like(const Tensor<B>& t) {
  return make_tensor<B>(&t.tape(), t.shape(), t.dtype());
}
/// Writes zeros over t's buffer, whatever its element type (+0 is all zero bits in f32, bf16
/// and i32): floats over whole 4-byte words, the copy of one zero for an odd bf16 tail.
template <class B>
void zero_fill(const Tensor<B>& t) {
  const std::size_t bytes = t.bytes(), words = bytes / sizeof(float);
  if (words) B::fill(static_cast<float*>(t.storage()->data()), static_cast<std::int64_t>(words), 0.0f);
  if (bytes % sizeof(float)) {
    const std::uint16_t zero = 0;
    B::copy_from_host(static_cast<char*>(t.storage()->data()) + words * sizeof(float), &zero,
                      bytes % sizeof(float));
  }
}
/// An output a checkpoint replay records without computing it: `shape` and `dt` (its gradient
/// of type grad_dt), no bytes, and data() throws (NOTE [replay only what backward needs],
/// core/segment.hpp).
template <class B>
Tensor<B> skipped_tensor(Tape<B>* tape, const Shape& shape, DType dt, DType grad_dt) {
  auto impl = std::make_shared<TensorImpl<B>>();
  impl->storage = std::make_shared<Storage<B>>(0, Category::temporaries);
  impl->storage->mark_skipped();
  impl->shape = shape;
  impl->dtype = dt;
  impl->grad_dtype = grad_dt;
  impl->tape = tape;
  return Tensor<B>(std::move(impl));
}
/// A tensor sharing `t`'s storage under another shape (same element count).
template <class B>
Tensor<B> alias(const Tensor<B>& t, const Shape& shape) {
  REMAT_ASSERT(shape.is_concrete() && shape.numel() == t.numel());
  auto impl = std::make_shared<TensorImpl<B>>();
  impl->storage = t.storage();
  impl->shape = shape;
  impl->dtype = t.dtype();
  impl->grad_dtype = t.impl()->grad_dtype;
  impl->tape = &t.tape();
  impl->known_lo = t.impl()->known_lo;  // the same elements
  impl->known_hi = t.impl()->known_hi;
  return Tensor<B>(std::move(impl));
}

/// "a parameter of shape [4, 8]", "the tensor 'qkv' of shape [2, 16, 96] (activations)": how
/// errors name a tensor that the user holds no name for.
inline std::string describe_tensor(const std::string& name, const Shape& shape, Category c) {
  if (c == Category::parameters)
    return name.empty() ? cat("a parameter of shape ", shape.str())
                        : cat("the parameter '", name, "' of shape ", shape.str());
  if (!name.empty()) return cat("the tensor '", name, "' of shape ", shape.str(), " (", category_name(c), ")");
  return cat("a tensor of shape ", shape.str(), " (", category_name(c), ")");
}
template <class B>
std::string describe_tensor(const Tensor<B>& t) {
  return describe_tensor(t.name(), t.shape(), t.category());
}

/// The smallest and largest element of a non-empty i32 tensor: as recorded when it was made
/// from host data (Tape::tokens), else read by the backend (from a device: a copy to the host).
template <class B>
std::pair<std::int32_t, std::int32_t> int_range(const Tensor<B>& t) {
  const TensorImpl<B>& i = *t.impl();
  if (i.known_lo <= i.known_hi) return {i.known_lo, i.known_hi};
  std::int32_t lo = 0, hi = 0;
  B::minmax_i32(t.template data<std::int32_t>(), t.numel(), lo, hi);
  return {lo, hi};
}

}  // namespace detail

/// Returns a leaf sharing x's storage that no gradient flows through.
template <class B>
Tensor<B> detach(const Tensor<B>& x) {
  return detail::alias(x, x.shape());
}

}  // namespace remat
