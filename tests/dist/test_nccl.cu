// SPDX-License-Identifier: MIT
// remat::dist::NcclComm on a GPU at world size 1 (one H200 is all a session gets; NCCL refuses
// two ranks on one device, so several ranks are tested on the CPU through MPI, with the same
// DataParallel code): every collective is the identity in both orders, the id travels through
// a host communicator, and DataParallel<Cuda> gives the plain backward's gradients bit for bit.
// Compiled wherever nvcc and NCCL are (CI included); without a device it exits 77 (skipped).

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <remat/cuda.hpp>
#include <remat/dist/data_parallel.hpp>
#include <remat/dist/nccl.hpp>
#include <remat/nn/gpt_estimate.hpp>

using namespace remat;

namespace {
int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) ++failures;
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
}
}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  try {
    dist::LocalComm host;
    dist::NcclComm comm(host, cuda::Context::get().stream());
    check(comm.rank() == 0 && comm.size() == 1, "world size 1 through a host communicator");
    const std::size_t n = 1001;
    std::vector<float> h(n), back(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = 0.25f * static_cast<float>(i) - 7.0f;
    float* d = nullptr;
    cudaMalloc(&d, n * sizeof(float));
    for (dist::Order o : {dist::Order::fixed, dist::Order::fast}) {
      cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      comm.allreduce_sum(d, n, o)->wait();
      cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
      check(std::memcmp(back.data(), h.data(), n * sizeof(float)) == 0,
            std::string("allreduce_sum, Order::") + dist::order_name(o) + ": the identity");
    }
    comm.broadcast(d, n * sizeof(float), 0);
    check(comm.all_gather_u64({42, 7}) == std::vector<std::uint64_t>{42, 7}, "all_gather_u64");
    cudaFree(d);

    // DataParallel<Cuda> on a tiny GPT (exact fp32 GEMMs: TF32 off) vs the plain backward.
    cuda::Context::get().set_tf32(false);
    nn::GPTConfig c;
    c.vocab_size = 64;
    c.block_size = 16;
    c.n_layer = 2;
    c.n_embd = 32;
    c.n_head = 2;
    c.checkpoint = nn::CheckpointStrategy::parse("block");
    Tape<Cuda> ta, tb;
    nn::GPT<Cuda> a(ta, c), b(tb, c);
    dist::DataParallelOptions opt;
    opt.first_bucket_bytes = 4096;
    opt.bucket_bytes = 16384;
    dist::DataParallel<Cuda> dp(ta, a.named_parameters(), comm, opt);
    std::vector<std::int32_t> x(32), y(32);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int32_t>((7 * i) % 64), y[i] = static_cast<std::int32_t>((5 * i + 3) % 64);
    dp.backward(a.loss(ta.tokens({2, 16}, x), ta.tokens({2, 16}, y)));
    auto lb = b.loss(tb.tokens({2, 16}, x), tb.tokens({2, 16}, y));
    tb.backward(lb);
    bool same = true;
    for (std::size_t i = 0; i < a.parameters().size(); ++i) {
      const auto ga = a.parameters()[i].grad().to_vector(), gb = b.parameters()[i].grad().to_vector();
      same = same && ga.size() == gb.size() && std::memcmp(ga.data(), gb.data(), ga.size() * 4) == 0;
    }
    check(same, "DataParallel<Cuda> over NCCL: gradients bitwise the plain backward's");
    check(dp.stats().launched_in_backward >= 1 && dp.stats().buckets >= 3,
          "buckets issued during backward (" + std::to_string(dp.stats().launched_in_backward) +
              " of " + std::to_string(dp.stats().buckets) + ")");
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
