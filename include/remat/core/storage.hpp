#pragma once
// SPDX-License-Identifier: MIT
// Storage<B>: one buffer of backend B. Allocation, free and category changes all go through
// the ledger, so memory_stats<B>() is exact. Not copyable; tensors share it via shared_ptr.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "remat/core/error.hpp"
#include "remat/core/memory.hpp"

namespace remat {

/// True for shape-only backends (remat::Meta, backend/meta.hpp): buffers have sizes and go
/// through the ledger, but hold no values.
template <class B, class = void>
struct is_meta_backend : std::false_type {};
template <class B>
struct is_meta_backend<B, std::void_t<decltype(B::is_meta)>> : std::bool_constant<B::is_meta> {};
template <class B>
inline constexpr bool is_meta_backend_v = is_meta_backend<B>::value;

template <class B>
class Storage {
 public:
  Storage(std::size_t bytes, Category c) : bytes_(bytes), category_(c) {
    detail::apply_system_limit<B>();  // once: the host's memory limit, if B reads one
    detail::ledger<B>().check_limit(c, static_cast<std::int64_t>(bytes));
    ptr_ = bytes ? B::allocate(bytes) : nullptr;
    detail::ledger<B>().on_alloc(c, static_cast<std::int64_t>(bytes));
  }
  /// A view: `bytes` of `parent`'s buffer from byte `offset` (NOTE [flat buffers],
  /// core/flat.hpp). It allocates nothing and the ledger does not count it (the parent's bytes
  /// are counted once); it keeps the parent alive, and has the parent's category and its own
  /// version counter.
  Storage(std::shared_ptr<Storage> parent, std::size_t offset, std::size_t bytes)
      : bytes_(bytes), category_(parent->category()), parent_(std::move(parent)), offset_(offset) {
    REMAT_ASSERT(offset_ + bytes_ <= parent_->bytes() && !parent_->parent_);
    ptr_ = static_cast<char*>(parent_->data()) + offset_;
  }
  ~Storage() {
    if (parent_) return;  // a view: the parent frees and counts
    if (ptr_) B::deallocate(ptr_, bytes_);
    detail::ledger<B>().on_free(category_, static_cast<std::int64_t>(bytes_));
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const noexcept { return ptr_; }

  // NOTE [version counter]: every write into an existing buffer that the library makes in place
  // (an optimizer step, loading weights or a snapshot, Tensor::mutable_data) bumps its version.
  // A recorded op notes the versions of what it saved, a checkpoint segment those of every
  // tensor its function read from outside; backward compares them and names the tensor and the
  // op when one was written since, instead of computing a gradient from the new values.
  // Ops never write into a buffer they did not just make, so they need no bump.
  std::uint64_t version() const noexcept { return version_; }
  void bump_version() noexcept { ++version_; }
  std::size_t bytes() const noexcept { return bytes_; }
  Category category() const noexcept { return category_; }

  /// An output a checkpoint replay recorded without computing it (NOTE [replay only what
  /// backward needs], core/segment.hpp): no bytes, and nothing may read it.
  bool skipped() const noexcept { return skipped_; }
  void mark_skipped() noexcept { skipped_ = true; }

  /// The buffer this one is a view of (null: it owns its bytes) and where in it.
  const std::shared_ptr<Storage>& parent() const noexcept { return parent_; }
  std::size_t offset() const noexcept { return offset_; }

  /// Moves the buffer's bytes to another category in the ledger (a view keeps its parent's:
  /// its bytes are the parent's).
  void set_category(Category c) noexcept {
    if (c == category_ || parent_) return;
    detail::ledger<B>().on_move(category_, c, static_cast<std::int64_t>(bytes_));
    category_ = c;
  }

  // NOTE [saved activations]: a recorded op that keeps this buffer for its backward calls
  // retain_saved(); the first such op turns a Temporary into an Activation, the last release
  // turns it back. Parameters and other categories keep their category when saved.
  // A view passes both to its parent: what is saved is the parent's buffer, which the view
  // keeps alive (NOTE [ops of several outputs] in core/custom_op.hpp).
  void retain_saved() noexcept {
    if (parent_) {
      parent_->retain_saved();
      return;
    }
    if (saved_refs_++ == 0 && category_ == Category::temporaries) {
      set_category(Category::activations);
      promoted_ = true;
    }
  }
  void release_saved() noexcept {
    if (parent_) {
      parent_->release_saved();
      return;
    }
    if (--saved_refs_ == 0 && promoted_) {
      set_category(Category::temporaries);
      promoted_ = false;
    }
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  Category category_;
  std::uint64_t version_ = 0;
  int saved_refs_ = 0;
  bool promoted_ = false;
  bool skipped_ = false;
  std::shared_ptr<Storage> parent_;  // a view's: NOTE [flat buffers]
  std::size_t offset_ = 0;
};

}  // namespace remat
