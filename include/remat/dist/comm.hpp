#pragma once
// SPDX-License-Identifier: MIT
// remat::dist::Comm: what data-parallel training needs from a transport (rank, size, sums,
// gathers, broadcast), blocking and non-blocking, on buffers of floats in the backend's memory.
// Implementations: LocalComm (one process, here: every collective is the identity) and MpiComm
// (remat/dist/mpi.hpp, opt-in: the CPU umbrella never includes MPI).
//
// NOTE [reduction order]
// Order::fixed sums in one canonical order, whatever the transport's algorithm: pairwise, as a
// binary counter over the summands in rank order (PairwiseSum below): ((g0 + g1) + (g2 + g3)),
// ((g0 + g1) + g2) for three. Each rank sends chunk q of its buffer to rank q, which sums the
// chunks it receives in that order and sends the sum to every rank: the bytes of a ring
// all-reduce, 2(N-1)/N of the buffer per rank. A process that accumulates micro-steps sums them
// in the same order (remat/dist/data_parallel.hpp), so with M micro-steps per rank (M a power of
// two, or 1), N ranks give bitwise the sums of one process doing N x M micro-steps, and a run
// can move between N=1, 2, 4 (keeping the micro-batch) without changing a bit. Order::fast hands
// the sum to the transport (MPI_Allreduce): every rank gets the same value, but which one
// depends on the algorithm and N (from 4 ranks on, measured: 23% of the elements differ from the
// rank-order sum; the research note ../shared/research/distributed-and-bf16.md, section 1.7).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"

namespace remat {
namespace dist {

enum class Order { fixed, fast };

/// The canonical pairwise sum (NOTE [reduction order]), fed one summand at a time: equal-sized
/// partial sums merge at once (left + right), the rest fold from the right at finish().
/// `add(a, b)` adds b into a and returns a.
template <class H>
class PairwiseSum {
 public:
  template <class Add>
  void push(H h, Add&& add) {
    stack_.emplace_back(std::move(h), 1);
    while (stack_.size() >= 2 && stack_[stack_.size() - 1].second == stack_[stack_.size() - 2].second)
      merge_top(add);
  }
  template <class Add>
  H finish(Add&& add) {
    REMAT_ASSERT(!stack_.empty());
    while (stack_.size() > 1) merge_top(add);
    H out = std::move(stack_[0].first);
    stack_.clear();
    return out;
  }
  bool empty() const noexcept { return stack_.empty(); }
  void clear() noexcept { stack_.clear(); }
  /// Summands pushed so far.
  std::int64_t count() const noexcept {
    std::int64_t n = 0;
    for (const auto& e : stack_) n += e.second;
    return n;
  }

 private:
  template <class Add>
  void merge_top(Add& add) {
    auto right = std::move(stack_.back());
    stack_.pop_back();
    auto& left = stack_.back();
    left.first = add(left.first, right.first);
    left.second += right.second;
  }
  std::vector<std::pair<H, std::int64_t>> stack_;
};

inline const char* order_name(Order o) { return o == Order::fixed ? "fixed" : "fast"; }

/// A collective in flight. test() advances it (transports without a progress thread, such as
/// Open MPI, move only inside such calls) and says whether it is done; wait() finishes it.
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

/// The communicator interface. Buffers hold floats; `n` counts floats.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// buf[0, n) becomes the sum over ranks, on every rank (NOTE [reduction order]).
  virtual std::unique_ptr<Request> allreduce_sum(float* buf, std::size_t n, Order order) = 0;
  /// in holds size() chunks of `chunk` floats; out[0, chunk) becomes the sum over ranks of chunk
  /// rank() (NOTE [reduction order]).
  virtual std::unique_ptr<Request> reduce_scatter_sum(const float* in, float* out,
                                                      std::size_t chunk, Order order) = 0;
  /// out (size() chunks) receives every rank's `chunk` floats from in, in rank order. `in` may be
  /// out + rank() * chunk (in place).
  virtual std::unique_ptr<Request> all_gather(const float* in, float* out, std::size_t chunk) = 0;
  /// Blocking: `bytes` bytes at buf on every rank become root's.
  virtual void broadcast(void* buf, std::size_t bytes, int root) = 0;
  /// Blocking: every rank's `mine` (the same length everywhere), in rank order.
  virtual std::vector<std::uint64_t> all_gather_u64(const std::vector<std::uint64_t>& mine) = 0;
  virtual void barrier() = 0;
  /// Ends every rank of the job at once (after an error on one rank, so that none waits for
  /// it in a collective). Never returns on a multi-process transport.
  virtual void abort(int code) noexcept = 0;

  /// Blocking forms.
  void allreduce_sum_now(float* buf, std::size_t n, Order order) {
    allreduce_sum(buf, n, order)->wait();
  }
  /// Blocking: every rank's `mine` (the same length everywhere) summed in one order, rank 0's
  /// values first, then rank 1's, ...: the same double on every rank, and the same for any
  /// split of a list of values over ranks (a step's micro-batch losses, listed globally).
  double sum_in_rank_order(const std::vector<double>& mine) {
    std::vector<std::uint64_t> bits(mine.size());
    if (!mine.empty()) std::memcpy(bits.data(), mine.data(), mine.size() * sizeof(double));
    double s = 0.0;
    for (std::uint64_t b : all_gather_u64(bits)) {
      double v;
      std::memcpy(&v, &b, sizeof v);
      s += v;
    }
    return s;
  }
};

/// A collective that was complete when it was issued.
class DoneRequest final : public Request {
 public:
  bool test() override { return true; }
  void wait() override {}
};

/// One process: the sum over one rank is the buffer itself.
class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<Request> allreduce_sum(float*, std::size_t, Order) override {
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> reduce_scatter_sum(const float* in, float* out, std::size_t chunk,
                                              Order) override {
    if (in != out && chunk) std::memmove(out, in, chunk * sizeof(float));
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> all_gather(const float* in, float* out, std::size_t chunk) override {
    if (in != out && chunk) std::memmove(out, in, chunk * sizeof(float));
    return std::make_unique<DoneRequest>();
  }
  void broadcast(void*, std::size_t, int root) override {
    REMAT_CHECK(root == 0, "remat::dist::LocalComm::broadcast: root ", root,
                " (expected 0: a one-process communicator has rank 0 only)");
  }
  std::vector<std::uint64_t> all_gather_u64(const std::vector<std::uint64_t>& mine) override {
    return mine;
  }
  void barrier() override {}
  void abort(int) noexcept override {}
};

}  // namespace dist
}  // namespace remat
