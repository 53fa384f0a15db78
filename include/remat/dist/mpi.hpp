#pragma once
// SPDX-License-Identifier: MIT
// remat::dist::MpiComm: the communicator on MPI (Debian: openmpi-bin libopenmpi-dev; CMake target
// remat::mpi). Only MPI's C API. Non-blocking collectives are advanced by Request::test():
// Open MPI has no progress thread, so DataParallel tests its requests after every backward node.
// Errors come back as remat::Error (MPI_ERRORS_RETURN), never as an abort inside MPI.
// A request dropped before it completes is left to MPI (MPI forbids freeing a collective's
// request): that happens only on an error, after which the job must end (Comm::abort).

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "remat/dist/comm.hpp"

namespace remat {
namespace dist {
namespace detail {

inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  REMAT_CHECK(false, "remat::dist::MpiComm: ", what, " failed: ", std::string(msg, len));
}

/// One MPI request.
class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request r, const char* what) : r_(r), what_(what) {}
  bool test() override {
    if (r_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    mpi_check(MPI_Test(&r_, &done, MPI_STATUS_IGNORE), what_);
    return done != 0;
  }
  void wait() override {
    if (r_ != MPI_REQUEST_NULL) mpi_check(MPI_Wait(&r_, MPI_STATUS_IGNORE), what_);
  }

 private:
  MPI_Request r_;
  const char* what_;
};

/// Fixed-order sum (NOTE [reduction order]) with point-to-point messages: chunk q of this rank's
/// buffer goes to rank q, each rank sums the chunks it receives in the canonical order, and (for an
/// all-reduce) sends its sum to every rank. Point-to-point, not MPI_Ialltoall: the second
/// half starts when the first ends, which differs between ranks, and MPI requires collectives
/// on a communicator to start in the same order everywhere; messages are matched by their tag
/// (two per request, from a sequence every rank advances alike) instead.
class FixedOrderSum final : public Request {
 public:
  // n = size * chunk floats at `in`; the sum of chunk `rank` goes to `out` (chunk floats); with
  // `gather_to`, every rank's sum is gathered there afterwards (an all-reduce). A padded
  // all-reduce passes its zero-padded copy of the user's buffer (which `in` and `gather_to`
  // point into) and where the first `user_n` floats of the sum go in the end.
  FixedOrderSum(MPI_Comm comm, int rank, int size, int tag, const float* in, float* out,
                std::size_t chunk, float* gather_to, std::vector<float> padded = {},
                float* user = nullptr, std::size_t user_n = 0)
      : comm_(comm), rank_(rank), size_(size), tag_(tag), out_(out), chunk_(chunk),
        gather_to_(gather_to), padded_(std::move(padded)), user_(user), user_n_(user_n),
        recv_(static_cast<std::size_t>(size) * chunk) {
    const int c = static_cast<int>(chunk);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) {  // this rank's own chunk: no message
        std::memcpy(recv_.data() + static_cast<std::size_t>(q) * chunk_,
                    in + static_cast<std::size_t>(q) * chunk_, chunk_ * sizeof(float));
        continue;
      }
      reqs_.emplace_back();
      mpi_check(MPI_Irecv(recv_.data() + static_cast<std::size_t>(q) * chunk_, c, MPI_FLOAT, q,
                          tag_, comm_, &reqs_.back()),
                "MPI_Irecv (fixed-order sum)");
      reqs_.emplace_back();
      mpi_check(MPI_Isend(in + static_cast<std::size_t>(q) * chunk_, c, MPI_FLOAT, q, tag_, comm_,
                          &reqs_.back()),
                "MPI_Isend (fixed-order sum)");
    }
  }
  bool test() override {
    while (phase_ != 2) {
      int done = 1;
      if (!reqs_.empty())
        mpi_check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done,
                              MPI_STATUSES_IGNORE),
                  "MPI_Testall (fixed-order sum)");
      if (!done) return false;
      advance();
    }
    return true;
  }
  void wait() override {
    while (phase_ != 2) {
      if (!reqs_.empty())
        mpi_check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall (fixed-order sum)");
      advance();
    }
  }

 private:
  void advance() {
    reqs_.clear();
    if (phase_ == 0) {
      // The chunks of ranks 0, 1, ... summed in the canonical pairwise order.
      PairwiseSum<float*> sum;
      const std::size_t c = chunk_;
      auto add = [c](float* a, float* b) {
        for (std::size_t i = 0; i < c; ++i) a[i] += b[i];
        return a;
      };
      for (int r = 0; r < size_; ++r) sum.push(recv_.data() + static_cast<std::size_t>(r) * c, add);
      std::memcpy(out_, sum.finish(add), c * sizeof(float));
      if (!gather_to_) {
        phase_ = 2;
        return;
      }
      phase_ = 1;
      const int count = static_cast<int>(chunk_);
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        reqs_.emplace_back();
        mpi_check(MPI_Irecv(gather_to_ + static_cast<std::size_t>(q) * chunk_, count, MPI_FLOAT, q,
                            tag_ + 1, comm_, &reqs_.back()),
                  "MPI_Irecv (fixed-order sum)");
        reqs_.emplace_back();
        mpi_check(MPI_Isend(out_, count, MPI_FLOAT, q, tag_ + 1, comm_, &reqs_.back()),
                  "MPI_Isend (fixed-order sum)");
      }
    } else {
      phase_ = 2;
      if (user_) std::memcpy(user_, padded_.data(), user_n_ * sizeof(float));  // padded copy
    }
  }

  MPI_Comm comm_;
  int rank_, size_, tag_;
  float* out_;
  std::size_t chunk_;
  float* gather_to_;
  std::vector<float> padded_;
  float* user_;  // padded all-reduce: where the sum goes in the end
  std::size_t user_n_;
  std::vector<float> recv_;  // size() chunks, one from every rank (one bucket, off the ledger)
  std::vector<MPI_Request> reqs_;
  int phase_ = 0;
};

}  // namespace detail

/// MPI_COMM_WORLD (or a given communicator). Initializes MPI when nobody has (and finalizes it
/// then); a program that called MPI_Init itself keeps doing its own MPI_Finalize.
class MpiComm final : public Comm {
 public:
  MpiComm() : MpiComm(nullptr, nullptr) {}
  MpiComm(int* argc, char*** argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      detail::mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided),
                        "MPI_Init_thread");
      owns_init_ = true;
    }
    setup(MPI_COMM_WORLD);
  }
  /// An existing communicator (e.g. from MPI_Comm_split); MPI stays the caller's.
  explicit MpiComm(MPI_Comm comm) { setup(comm); }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  ~MpiComm() override {
    if (!owns_init_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Unwinding from an error: the other ranks may wait in a collective this rank will never
    // join; MPI_Finalize would wait for them. End the job instead.
    if (std::uncaught_exceptions() > 0) abort(1);
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }

  std::unique_ptr<Request> allreduce_sum(float* buf, std::size_t n, Order order) override {
    check_count(n, "allreduce_sum");
    if (size_ == 1 || n == 0) return std::make_unique<DoneRequest>();
    if (order == Order::fast) {
      MPI_Request r;
      detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                       comm_, &r),
                        "MPI_Iallreduce");
      return std::make_unique<detail::MpiRequest>(r, "MPI_Iallreduce");
    }
    const std::size_t N = static_cast<std::size_t>(size_);
    const std::size_t chunk = (n + N - 1) / N;
    if (chunk * N == n) {
      return std::make_unique<detail::FixedOrderSum>(comm_, rank_, size_, next_tag(), buf,
                                                     buf + rank_ * chunk, chunk, buf);
    }
    // Not a multiple of the rank count: sum a zero-padded copy, copy the sum back at the end.
    std::vector<float> padded(chunk * N, 0.0f);
    std::memcpy(padded.data(), buf, n * sizeof(float));
    float* p = padded.data();
    return std::make_unique<detail::FixedOrderSum>(comm_, rank_, size_, next_tag(), p,
                                                   p + rank_ * chunk, chunk, p, std::move(padded),
                                                   buf, n);
  }

  std::unique_ptr<Request> reduce_scatter_sum(const float* in, float* out, std::size_t chunk,
                                              Order order) override {
    check_count(chunk * static_cast<std::size_t>(size_), "reduce_scatter_sum");
    if (size_ == 1) {
      if (in != out && chunk) std::memmove(out, in, chunk * sizeof(float));
      return std::make_unique<DoneRequest>();
    }
    if (order == Order::fast) {
      MPI_Request r;
      detail::mpi_check(MPI_Ireduce_scatter_block(in, out, static_cast<int>(chunk), MPI_FLOAT,
                                                  MPI_SUM, comm_, &r),
                        "MPI_Ireduce_scatter_block");
      return std::make_unique<detail::MpiRequest>(r, "MPI_Ireduce_scatter_block");
    }
    return std::make_unique<detail::FixedOrderSum>(comm_, rank_, size_, next_tag(), in, out,
                                                   chunk, nullptr);
  }

  std::unique_ptr<Request> all_gather(const float* in, float* out, std::size_t chunk) override {
    check_count(chunk * static_cast<std::size_t>(size_), "all_gather");
    MPI_Request r;
    const bool in_place = in == out + static_cast<std::size_t>(rank_) * chunk;
    detail::mpi_check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(chunk),
                                     MPI_FLOAT, out, static_cast<int>(chunk), MPI_FLOAT, comm_, &r),
                      "MPI_Iallgather");
    return std::make_unique<detail::MpiRequest>(r, "MPI_Iallgather");
  }

  void broadcast(void* buf, std::size_t bytes, int root) override {
    REMAT_CHECK(root >= 0 && root < size_, "remat::dist::MpiComm::broadcast: root ", root,
                " (expected a rank from 0 to ", size_ - 1, ")");
    auto* p = static_cast<char*>(buf);
    const std::size_t step = std::size_t(1) << 30;  // MPI counts are int
    for (std::size_t off = 0; off < bytes; off += step) {
      const std::size_t k = bytes - off < step ? bytes - off : step;
      detail::mpi_check(MPI_Bcast(p + off, static_cast<int>(k), MPI_BYTE, root, comm_),
                        "MPI_Bcast");
    }
  }

  std::vector<std::uint64_t> all_gather_u64(const std::vector<std::uint64_t>& mine) override {
    std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(size_));
    detail::mpi_check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T,
                                    all.data(), static_cast<int>(mine.size()), MPI_UINT64_T,
                                    comm_),
                      "MPI_Allgather");
    return all;
  }

  void barrier() override { detail::mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void abort(int code) noexcept override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(comm_, code);
  }

 private:
  /// A private duplicate: our messages and collectives never meet the caller's.
  void setup(MPI_Comm parent) {
    detail::mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  /// Two tags per fixed-order request, from a sequence every rank advances alike (requests
  /// are issued in the same order everywhere); 32767 is the least MPI_TAG_UB allows.
  int next_tag() {
    const int t = 2 * static_cast<int>(seq_ % 16383);
    ++seq_;
    return t;
  }
  void check_count(std::size_t n, const char* what) const {
    REMAT_CHECK(n / static_cast<std::size_t>(size_) <= 0x7fffffffu, "remat::dist::MpiComm::",
                what, ": ", n, " floats is more than MPI's int counts allow per rank (hint: "
                "smaller buckets, DataParallelOptions::bucket_bytes)");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
  std::uint64_t seq_ = 0;
};

}  // namespace dist
}  // namespace remat
