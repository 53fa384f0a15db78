#pragma once
// SPDX-License-Identifier: MIT
// remat::dist::NcclComm: the communicator on NCCL, for the CUDA backend (one GPU per rank: NCCL
// refuses two ranks on one device). Buffers are device pointers. Collectives run on a stream of
// their own, ordered after the work the compute stream has queued (an event, no host wait);
// a Request is an event recorded after them. CMake target remat::nccl (the CUDA toolkit's NCCL).
//
//   remat::dist::MpiComm host(&argc, &argv);                       // or any Comm that reaches every rank
//   cudaSetDevice(local_rank);
//   remat::dist::NcclComm comm(host, remat::cuda::Context::get().stream());
//   remat::dist::DataParallel<remat::Cuda> dp(tape, model.named_parameters(), comm);
//
// Order::fast is ncclAllReduce / ncclReduceScatter (NCCL's ring or tree order: the same on every
// rank, dependent on N and the algorithm). Order::fixed (NOTE [reduction order]) sends chunk q to
// rank q (ncclSend/ncclRecv in one group), sums the received chunks pairwise with cublasSaxpy
// (alpha 1: x + y exactly, element by element) and sends the sum to every rank.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/dist/comm.hpp"

namespace remat {
namespace dist {
namespace detail {

inline void nccl_check(ncclResult_t r, const char* what) {
  REMAT_CHECK(r == ncclSuccess, "remat::dist::NcclComm: ", what, " failed: ", ncclGetErrorString(r),
              r == ncclInvalidUsage ? " (hint: one GPU per rank; cudaSetDevice before NcclComm)" : "");
}
inline void cuda_check_dist(cudaError_t e, const char* what) {
  REMAT_CHECK(e == cudaSuccess, "remat::dist::NcclComm: ", what, " failed: ", cudaGetErrorString(e));
}
inline void cublas_check_dist(cublasStatus_t s, const char* what) {
  REMAT_CHECK(s == CUBLAS_STATUS_SUCCESS, "remat::dist::NcclComm: ", what, " failed: cuBLAS status ",
              static_cast<int>(s));
}

/// Done when its event has passed on the communication stream.
class NcclRequest final : public Request {
 public:
  explicit NcclRequest(cudaStream_t s) {
    cuda_check_dist(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check_dist(cudaEventRecord(ev_, s), "cudaEventRecord");
  }
  ~NcclRequest() override {
    if (ev_) cudaEventDestroy(ev_);
  }
  bool test() override {
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    cuda_check_dist(e, "cudaEventQuery");
    return true;
  }
  void wait() override { cuda_check_dist(cudaEventSynchronize(ev_), "cudaEventSynchronize"); }

 private:
  cudaEvent_t ev_ = nullptr;
};

}  // namespace detail

class NcclComm final : public Comm {
 public:
  /// Rank and size from `host`, which carries the unique id from rank 0 to every rank; the
  /// collectives follow the work queued on `compute` (the backend's stream).
  NcclComm(Comm& host, cudaStream_t compute) : rank_(host.rank()), size_(host.size()), compute_(compute) {
    ncclUniqueId id;
    if (rank_ == 0) detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host.broadcast(&id, sizeof id, 0);
    detail::nccl_check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    detail::cuda_check_dist(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                            "cudaStreamCreate");
    detail::cuda_check_dist(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming),
                            "cudaEventCreate");
    detail::cublas_check_dist(cublasCreate(&blas_), "cublasCreate");
    detail::cublas_check_dist(cublasSetStream(blas_, stream_), "cublasSetStream");
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (float* p : scratch_) cudaFree(p);
    if (blas_) cublasDestroy(blas_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  cudaStream_t stream() const noexcept { return stream_; }

  std::unique_ptr<Request> allreduce_sum(float* buf, std::size_t n, Order order) override {
    follow_compute();
    if (size_ > 1 && n > 0) {
      if (order == Order::fast) {
        detail::nccl_check(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream_),
                           "ncclAllReduce");
      } else {
        const std::size_t N = static_cast<std::size_t>(size_), chunk = (n + N - 1) / N;
        float* work = buf;
        if (chunk * N != n) {  // pad to whole chunks in scratch
          work = scratch(chunk * N, 1);
          detail::cuda_check_dist(cudaMemsetAsync(work, 0, chunk * N * sizeof(float), stream_), "cudaMemsetAsync");
          detail::cuda_check_dist(cudaMemcpyAsync(work, buf, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                                  "cudaMemcpyAsync");
        }
        fixed_sum(work, work + static_cast<std::size_t>(rank_) * chunk, chunk);
        gather(work + static_cast<std::size_t>(rank_) * chunk, work, chunk);
        if (work != buf)
          detail::cuda_check_dist(cudaMemcpyAsync(buf, work, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                                  "cudaMemcpyAsync");
      }
    }
    return std::make_unique<detail::NcclRequest>(stream_);
  }
  std::unique_ptr<Request> reduce_scatter_sum(const float* in, float* out, std::size_t chunk,
                                              Order order) override {
    follow_compute();
    if (size_ == 1) {
      if (in != out && chunk)
        detail::cuda_check_dist(cudaMemcpyAsync(out, in, chunk * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                                "cudaMemcpyAsync");
    } else if (order == Order::fast) {
      detail::nccl_check(ncclReduceScatter(in, out, chunk, ncclFloat, ncclSum, comm_, stream_),
                         "ncclReduceScatter");
    } else {
      fixed_sum(in, out, chunk);
    }
    return std::make_unique<detail::NcclRequest>(stream_);
  }
  std::unique_ptr<Request> all_gather(const float* in, float* out, std::size_t chunk) override {
    follow_compute();
    if (size_ == 1) {
      if (in != out && chunk)
        detail::cuda_check_dist(cudaMemcpyAsync(out, in, chunk * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                                "cudaMemcpyAsync");
    } else {
      gather(in, out, chunk);
    }
    return std::make_unique<detail::NcclRequest>(stream_);
  }
  void broadcast(void* buf, std::size_t bytes, int root) override {
    REMAT_CHECK(root >= 0 && root < size_, "remat::dist::NcclComm::broadcast: root ", root,
                " (expected a rank from 0 to ", size_ - 1, ")");
    follow_compute();
    if (size_ > 1)
      detail::nccl_check(ncclBroadcast(buf, buf, bytes, ncclChar, root, comm_, stream_), "ncclBroadcast");
    detail::cuda_check_dist(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  std::vector<std::uint64_t> all_gather_u64(const std::vector<std::uint64_t>& mine) override {
    std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(size_));
    if (mine.empty()) return all;
    if (size_ == 1) return mine;
    std::uint64_t* d = nullptr;
    detail::cuda_check_dist(cudaMalloc(&d, all.size() * 8), "cudaMalloc");
    const std::size_t k = mine.size();
    cudaError_t e = cudaMemcpyAsync(d + static_cast<std::size_t>(rank_) * k, mine.data(), k * 8,
                                    cudaMemcpyHostToDevice, stream_);
    ncclResult_t r = ncclSuccess;
    if (e == cudaSuccess)
      r = ncclAllGather(d + static_cast<std::size_t>(rank_) * k, d, k, ncclUint64, comm_, stream_);
    if (e == cudaSuccess && r == ncclSuccess)
      e = cudaMemcpyAsync(all.data(), d, all.size() * 8, cudaMemcpyDeviceToHost, stream_);
    if (e == cudaSuccess && r == ncclSuccess) e = cudaStreamSynchronize(stream_);
    cudaFree(d);
    detail::nccl_check(r, "ncclAllGather");
    detail::cuda_check_dist(e, "all_gather_u64");
    return all;
  }
  void barrier() override {
    all_gather_u64({0});
  }
  void abort(int code) noexcept override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    std::_Exit(code == 0 ? 1 : code);  // NCCL alone has no job to end: this process goes
  }

 private:
  /// The communication stream waits for what the compute stream has queued (packed buckets).
  void follow_compute() {
    detail::cuda_check_dist(cudaEventRecord(ready_, compute_), "cudaEventRecord");
    detail::cuda_check_dist(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  }
  /// A scratch buffer of n floats (slot 0: received chunks, 1: padding), kept for reuse.
  float* scratch(std::size_t n, int slot) {
    if (scratch_.size() <= static_cast<std::size_t>(slot)) {
      scratch_.resize(static_cast<std::size_t>(slot) + 1, nullptr);
      scratch_n_.resize(static_cast<std::size_t>(slot) + 1, 0);
    }
    if (scratch_n_[static_cast<std::size_t>(slot)] < n) {
      detail::cuda_check_dist(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      cudaFree(scratch_[static_cast<std::size_t>(slot)]);
      detail::cuda_check_dist(cudaMalloc(&scratch_[static_cast<std::size_t>(slot)], n * sizeof(float)),
                              "cudaMalloc (NCCL scratch)");
      scratch_n_[static_cast<std::size_t>(slot)] = n;
    }
    return scratch_[static_cast<std::size_t>(slot)];
  }
  /// out = the pairwise sum over ranks of chunk rank() of in (NOTE [reduction order]).
  void fixed_sum(const float* in, float* out, std::size_t chunk) {
    const std::size_t N = static_cast<std::size_t>(size_);
    float* recv = scratch(N * chunk, 0);
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int q = 0; q < size_; ++q) {
      float* into = recv + static_cast<std::size_t>(q) * chunk;
      const float* from = in + static_cast<std::size_t>(q) * chunk;
      if (q == rank_) {
        detail::cuda_check_dist(cudaMemcpyAsync(into, from, chunk * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                                "cudaMemcpyAsync");
        continue;
      }
      detail::nccl_check(ncclSend(from, chunk, ncclFloat, q, comm_, stream_), "ncclSend");
      detail::nccl_check(ncclRecv(into, chunk, ncclFloat, q, comm_, stream_), "ncclRecv");
    }
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    PairwiseSum<float*> sum;
    cublasHandle_t h = blas_;
    const int n = static_cast<int>(chunk);
    auto add = [h, n](float* a, float* b) {
      const float one = 1.0f;
      detail::cublas_check_dist(cublasSaxpy(h, n, &one, b, 1, a, 1), "cublasSaxpy");
      return a;
    };
    for (int q = 0; q < size_; ++q) sum.push(recv + static_cast<std::size_t>(q) * chunk, add);
    float* s = sum.finish(add);
    if (s != out)
      detail::cuda_check_dist(cudaMemcpyAsync(out, s, chunk * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                              "cudaMemcpyAsync");
  }
  void gather(const float* in, float* out, std::size_t chunk) {
    detail::nccl_check(ncclAllGather(in, out, chunk, ncclFloat, comm_, stream_), "ncclAllGather");
  }

  int rank_ = 0, size_ = 1;
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::vector<float*> scratch_;
  std::vector<std::size_t> scratch_n_;
};

}  // namespace dist
}  // namespace remat
