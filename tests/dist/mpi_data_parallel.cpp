// SPDX-License-Identifier: MIT
// DataParallel under mpirun (ctest runs it with 1, 2, 3 and 4 ranks; tests/CMakeLists.txt).
//   mpi_data_parallel bitwise   N ranks with micro-batch b = one process with N micro-steps of b,
//                               bitwise, for none, block and save_linear checkpointing with dropout,
//                               over 3 AdamW steps; buckets issued during backward; Order::fast:
//                               ranks agree, within 1e-5 of the fixed-order sums
//   mpi_data_parallel mismatch  rank 1 builds another model: every rank gets the same error
//   mpi_data_parallel throw     the last rank throws in step 2: the job ends (Comm::abort)
// Prints one line per check; exit 0 when all hold. One thread per rank.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <remat/dist/data_parallel.hpp>
#include <remat/dist/mpi.hpp>
#include <remat/remat.hpp>

#include "dist/fixture.hpp"

using namespace remat;
using remat_test::T;

namespace {

int failures = 0;
void check(bool ok, int rank, const std::string& what) {
  if (!ok) ++failures;
  if (!ok || rank == 0) std::printf("rank %d: %s: %s\n", rank, ok ? "ok" : "FAILED", what.c_str());
}

std::uint64_t params_hash(const nn::GPT<Cpu>& m) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& p : m.parameters())
    h = (h ^ remat::detail::hash_bytes(p.data<float>(), p.bytes())) * 1099511628211ull;
  return h;
}

dist::DataParallelOptions small_buckets(dist::Order order) {
  dist::DataParallelOptions o;
  o.first_bucket_bytes = 8192;
  o.bucket_bytes = 32768;
  o.order = order;
  return o;
}

constexpr std::int64_t kB = 2, kT = 16;

int bitwise(dist::MpiComm& comm) {
  const int N = comm.size(), r = comm.rank();
  for (const char* strategy : {"none", "block", "save_linear"}) {
    const auto cfg = remat_test::tiny_gpt(strategy);
    Tape<Cpu> ta, tb;
    nn::GPT<Cpu> a(ta, cfg), b(tb, cfg);
    dist::DataParallel<Cpu> dp(ta, a.named_parameters(), comm, small_buckets(dist::Order::fixed));
    optim::AdamWOptions ao;
    ao.lr = 1e-2f;
    optim::AdamW<Cpu> oa(a.parameters(), ao), ob(b.parameters(), ao);
    bool same = true, agree = true, overlap = true;
    for (int step = 0; step < 3; ++step) {
      oa.zero_grad();
      dp.backward(remat_test::micro_loss(ta, a, step, r, kB, kT));  // micro-batch r of the step
      oa.step();
      remat_test::reference_gradients(tb, b, step, N, kB, kT);     // all N, in one process
      ob.step();
      std::string first;
      if (!remat_test::bitwise_equal(a, b, false, &first)) {
        if (same) std::printf("rank %d: %s step %d: first difference in %s\n", r, strategy, step,
                              first.c_str());
        same = false;
      }
      const auto hs = comm.all_gather_u64({params_hash(a)});
      for (auto h : hs) agree = agree && h == hs[0];
      const auto& st = dp.stats();
      overlap = overlap && st.buckets >= 3 && st.launched_in_backward >= 1 &&
                st.log.front().node < st.nodes_total;
    }
    const std::string tag = std::string(strategy) + ", " + std::to_string(N) + " ranks";
    check(same, r, tag + ": parameters after 3 steps bitwise = 1 process with " +
                       std::to_string(N) + " micro-steps");
    check(agree, r, tag + ": every rank holds the same parameters");
    check(overlap, r, tag + ": the first bucket was issued before backward ended (" +
                          std::to_string(dp.stats().launched_in_backward) + " of " +
                          std::to_string(dp.stats().buckets) + " buckets during backward)");
  }
  {  // Order::fast: the transport's own sum
    const auto cfg = remat_test::tiny_gpt("block");
    Tape<Cpu> ta, tb;
    nn::GPT<Cpu> a(ta, cfg), b(tb, cfg);
    dist::DataParallel<Cpu> dp(ta, a.named_parameters(), comm, small_buckets(dist::Order::fast));
    optim::zero_grad(a.parameters());
    dp.backward(remat_test::micro_loss(ta, a, 0, r, kB, kT));
    remat_test::reference_gradients(tb, b, 0, N, kB, kT);
    double worst = 0.0;
    std::uint64_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i < a.parameters().size(); ++i) {
      const T ga = a.parameters()[i].grad(), gb = b.parameters()[i].grad();
      double scale = 1e-30;
      for (std::int64_t j = 0; j < gb.numel(); ++j) scale = std::max(scale, double(std::fabs(gb.data<float>()[j])));
      for (std::int64_t j = 0; j < ga.numel(); ++j)
        worst = std::max(worst, std::fabs(double(ga.data<float>()[j]) - gb.data<float>()[j]) / scale);
      h = (h ^ remat::detail::hash_bytes(ga.data<float>(), ga.bytes())) * 1099511628211ull;
    }
    bool agree = true;
    const auto hs = comm.all_gather_u64({h});
    for (auto x : hs) agree = agree && x == hs[0];
    check(agree, r, "Order::fast, " + std::to_string(N) + " ranks: every rank has the same gradients");
    char buf[96];
    std::snprintf(buf, sizeof buf, "Order::fast: gradients within 1e-5 of the rank-order sum (worst %.2e)", worst);
    check(worst <= 1e-5, r, buf);
  }
  return failures == 0 ? 0 : 1;
}

int mismatch(dist::MpiComm& comm) {
  auto cfg = remat_test::tiny_gpt("none");
  if (comm.rank() == 1) cfg.n_embd = 48;
  Tape<Cpu> tape;
  nn::GPT<Cpu> m(tape, cfg);
  try {
    dist::DataParallel<Cpu> dp(tape, m.named_parameters(), comm);
    check(comm.size() == 1, comm.rank(), "one rank: nothing to disagree with");
  } catch (const Error& e) {
    const std::string msg = e.what();
    check(comm.size() > 1 && msg.find("every rank must build the same model") != std::string::npos,
          comm.rank(), "ranks disagree on the model: " + msg);
  }
  return failures == 0 ? 0 : 1;
}

int throws(dist::MpiComm& comm) {
  const auto cfg = remat_test::tiny_gpt("block");
  Tape<Cpu> tape;
  nn::GPT<Cpu> m(tape, cfg);
  dist::DataParallel<Cpu> dp(tape, m.named_parameters(), comm);
  for (int step = 0; step < 3; ++step) {
    optim::zero_grad(m.parameters());
    auto [x, y] = remat_test::micro_batch(step, comm.rank(), kB, kT, cfg.vocab_size);
    if (step == 1 && comm.rank() == comm.size() - 1) y[3] = 1000;  // bad input on one rank
    T loss = m.loss(tape.tokens({kB, kT}, x), tape.tokens({kB, kT}, y));
    dp.backward(loss);
    if (comm.rank() == 0) std::printf("step %d done\n", step);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Cpu::set_num_threads(1);
  dist::MpiComm comm(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "bitwise") return bitwise(comm);
    if (mode == "mismatch") return mismatch(comm);
    if (mode == "throw") return throws(comm);
    std::fprintf(stderr, "usage: mpi_data_parallel bitwise|mismatch|throw\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), e.what());
    comm.abort(3);  // the others may wait in a collective for this rank: end them all
  }
  return 3;
}
