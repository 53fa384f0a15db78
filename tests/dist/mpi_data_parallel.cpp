// SPDX-License-Identifier: MIT
// DataParallel under mpirun (ctest runs it with 1, 2, 3 and 4 ranks; tests/CMakeLists.txt).
//   mpi_data_parallel bitwise   N ranks with micro-batch b = one process with N micro-steps of b,
//                               bitwise, for none, block and save_linear checkpointing with dropout,
//                               over 3 AdamW steps; buckets issued during backward; Order::fast:
//                               ranks agree, within 1e-5 of the fixed-order sums; ZeRO-1 (sharded
//                               AdamW, clipping on) = unsharded, bitwise, its moments 1/N
//                               in the ledger
//   mpi_data_parallel mismatch  rank 1 builds another model: every rank gets the same error
//   mpi_data_parallel throw     the last rank throws in step 2: the job ends (Comm::abort)
//   mpi_data_parallel collectives  MpiComm itself: sums (both orders, buffers that do not split
//                               evenly), reduce-scatter, all-gather, broadcast, against the
//                               canonical pairwise sum each rank computes from everyone's data
// Prints one line per check; exit 0 when all hold. One thread per rank.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <remat/dist/data_parallel.hpp>
#include <remat/dist/mpi.hpp>
#include <remat/dist/sharded_adamw.hpp>
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
  std::uint64_t h = remat::detail::kHashSeed;
  for (const auto& p : m.parameters())
    h = remat::detail::hash_mix(h, remat::detail::hash_bytes(p.data<float>(), p.bytes()));
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
  {  // ZeRO-1: the same training with the optimizer state sharded, clipping active
    const auto cfg = remat_test::tiny_gpt("block");
    Tape<Cpu> ta, tb;
    nn::GPT<Cpu> a(ta, cfg), b(tb, cfg);
    auto oa_ = small_buckets(dist::Order::fixed), ob_ = oa_;
    ob_.shard_optimizer = true;
    dist::DataParallel<Cpu> da(ta, a.named_parameters(), comm, oa_), db(tb, b.named_parameters(), comm, ob_);
    optim::AdamWOptions ao;
    ao.lr = 1e-2f;
    ao.weight_decay = 0.1f;
    ao.decay_on = optim::DecayOn::matrices;  // decided per parameter, also in the shards
    optim::AdamW<Cpu> oa(a.parameters(), ao);
    dist::ShardedAdamW<Cpu> ob(db, ao);
    const std::int64_t before = memory_stats<Cpu>().live_of(Category::optimizer_state);
    bool same = true, clipped = true;
    for (int step = 0; step < 3; ++step) {
      oa.zero_grad();
      da.backward(remat_test::micro_loss(ta, a, step, r, kB, kT));
      const float na = da.clip_grad_norm(0.05f);
      oa.step();
      db.backward(remat_test::micro_loss(tb, b, step, r, kB, kT));
      const float nb = db.clip_grad_norm(0.05f);
      ob.step();
      clipped = clipped && na > 0.05f && std::memcmp(&na, &nb, 4) == 0;
      std::string first;
      if (!remat_test::bitwise_equal(a, b, false, &first)) {
        if (same) std::printf("rank %d: ZeRO-1 step %d: first difference in %s\n", r, step, first.c_str());
        same = false;
      }
    }
    check(clipped, r, "ZeRO-1: the clipped norm is the unsharded one, bitwise (clipping active)");
    check(same, r, "ZeRO-1, " + std::to_string(N) + " ranks: parameters after 3 steps bitwise = unsharded");
    std::size_t chunks = 0, numel = 0;
    for (int k = 0; k < db.buckets(); ++k) chunks += db.bucket_chunk(k), numel += db.bucket_numel(k);
    const std::int64_t state = memory_stats<Cpu>().live_of(Category::optimizer_state) - before;
    // the unsharded AdamW's two moments: flat buffers laid out as the parameters, each tensor
    // at a multiple of kFlatAlign floats (NOTE [flat buffers])
    std::int64_t flat = 0;
    for (const auto& p : a.parameters()) flat += flat_round(p.numel());
    const std::int64_t full = 8 * static_cast<std::int64_t>(numel);
    check(ob.state_bytes() == 8 * chunks && state == 8 * flat + static_cast<std::int64_t>(8 * chunks) &&
              chunks * static_cast<std::size_t>(N) < numel + static_cast<std::size_t>(N * db.buckets()) * 1024,
          r, "ZeRO-1: this rank's moments in the ledger: " + std::to_string(8 * chunks) + " bytes (unsharded " +
              std::to_string(full) + ", so 1/" + std::to_string(N) + " up to a 1024-float block per bucket)");
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
    std::uint64_t h = remat::detail::kHashSeed;
    for (std::size_t i = 0; i < a.parameters().size(); ++i) {
      const T ga = a.parameters()[i].grad(), gb = b.parameters()[i].grad();
      double scale = 1e-30;
      for (std::int64_t j = 0; j < gb.numel(); ++j) scale = std::max(scale, double(std::fabs(gb.data<float>()[j])));
      for (std::int64_t j = 0; j < ga.numel(); ++j)
        worst = std::max(worst, std::fabs(double(ga.data<float>()[j]) - gb.data<float>()[j]) / scale);
      h = remat::detail::hash_mix(h, remat::detail::hash_bytes(ga.data<float>(), ga.bytes()));
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

// Rank r's value i: distinct on every rank, with bits below the sum's precision.
float value(int r, std::size_t i) { return remat::rng::normal(99, static_cast<std::uint64_t>(r), i) * 1000.0f; }

int collectives(dist::MpiComm& comm) {
  const int N = comm.size(), r = comm.rank();
  // The canonical sum (NOTE [reduction order]) of every rank's value i, computed here.
  auto expected = [N](std::size_t i) {
    dist::PairwiseSum<float> s;
    auto add = [](float a, float b) { return a + b; };
    for (int q = 0; q < N; ++q) s.push(value(q, i), add);
    return s.finish(add);
  };
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(4099)}) {
    std::vector<float> buf(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = value(r, i);
    comm.allreduce_sum_now(buf.data(), n, dist::Order::fixed);
    bool same = true;
    for (std::size_t i = 0; i < n; ++i) {
      const float e = expected(i);
      same = same && std::memcmp(&buf[i], &e, 4) == 0;
    }
    check(same, r, "allreduce_sum fixed, " + std::to_string(n) + " floats on " + std::to_string(N) +
                       " ranks: bitwise the canonical pairwise sum");
    for (std::size_t i = 0; i < n; ++i) buf[i] = value(r, i);
    comm.allreduce_sum_now(buf.data(), n, dist::Order::fast);
    double worst = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::fabs(double(buf[i]) - expected(i)) / (1e-3 + std::fabs(double(expected(i)))));
    const auto hs = comm.all_gather_u64({remat::detail::hash_bytes(buf.data(), n * 4)});
    bool agree = true;
    for (auto h : hs) agree = agree && h == hs[0];
    check(agree && worst < 1e-5, r, "allreduce_sum fast, " + std::to_string(n) + " floats: ranks agree, close to it");
  }
  // reduce-scatter: N chunks of 333; chunk q is the sum of everyone's chunk q.
  const std::size_t chunk = 333;
  std::vector<float> in(chunk * static_cast<std::size_t>(N)), out(chunk);
  for (dist::Order o : {dist::Order::fixed, dist::Order::fast}) {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
    comm.reduce_scatter_sum(in.data(), out.data(), chunk, o)->wait();
    bool ok = true;
    for (std::size_t i = 0; i < chunk; ++i) {
      const float e = expected(static_cast<std::size_t>(r) * chunk + i);
      ok = ok && (o == dist::Order::fixed ? std::memcmp(&out[i], &e, 4) == 0
                                          : std::fabs(out[i] - e) <= 1e-5f * (1.0f + std::fabs(e)));
    }
    check(ok, r, std::string("reduce_scatter_sum ") + dist::order_name(o) + ": this rank's chunk summed");
  }
  // all-gather, in place and not.
  std::vector<float> mine(chunk), all(chunk * static_cast<std::size_t>(N));
  for (std::size_t i = 0; i < chunk; ++i) mine[i] = value(r, i);
  comm.all_gather(mine.data(), all.data(), chunk)->wait();
  bool ok = true;
  for (int q = 0; q < N; ++q)
    for (std::size_t i = 0; i < chunk; ++i) ok = ok && all[static_cast<std::size_t>(q) * chunk + i] == value(q, i);
  std::fill(all.begin(), all.end(), 0.0f);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * chunk));
  comm.all_gather(all.data() + r * chunk, all.data(), chunk)->wait();
  for (int q = 0; q < N; ++q)
    for (std::size_t i = 0; i < chunk; ++i) ok = ok && all[static_cast<std::size_t>(q) * chunk + i] == value(q, i);
  check(ok, r, "all_gather (and in place): every rank's chunk in rank order");
  // broadcast from the last rank; a root out of range is an error.
  std::vector<float> b(100, static_cast<float>(r));
  comm.broadcast(b.data(), b.size() * 4, N - 1);
  check(b[0] == static_cast<float>(N - 1) && b[99] == static_cast<float>(N - 1), r, "broadcast from the last rank");
  bool threw = false;
  try {
    comm.broadcast(b.data(), 4, N);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("expected a rank from 0") != std::string::npos;
  }
  check(threw, r, "broadcast from a rank that does not exist is an error");
  // sum_in_rank_order: rank q holds values 3q, 3q+1, 3q+2 of one global list; the sum is the
  // serial left-to-right sum of that list, the same double on every rank.
  std::vector<double> three, global;
  for (int q = 0; q < N; ++q)
    for (std::size_t i = 0; i < 3; ++i) {
      const double v = static_cast<double>(value(q, i)) * 1e-7 + (q + 1) * 1e9;
      global.push_back(v);
      if (q == r) three.push_back(v);
    }
  double serial = 0.0;
  for (double v : global) serial += v;
  const double got = comm.sum_in_rank_order(three);
  check(std::memcmp(&got, &serial, 8) == 0, r, "sum_in_rank_order: the serial sum of the global list");
  comm.barrier();
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
    if (mode == "collectives") return collectives(comm);
    std::fprintf(stderr, "usage: mpi_data_parallel bitwise|mismatch|throw|collectives\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), e.what());
    comm.abort(3);  // the others may wait in a collective for this rank: end them all
  }
  return 3;
}
