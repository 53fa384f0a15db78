// SPDX-License-Identifier: MIT
// The training loop's library parts (include/remat/train/, issue 26 item 6): the validation
// loss (the mean of the batches' losses computed by hand, nothing recorded, the same double on
// any rank count), its fixed batches and their split over ranks; the step with re-planning;
// sampling through a callable; the report lines; writes with a fallback; the loop's schedule.

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <remat/remat.hpp>
#include <remat/train/evaluate.hpp>
#include <remat/train/generate.hpp>
#include <remat/train/loop.hpp>
#include <remat/train/output.hpp>
#include <remat/train/progress.hpp>
#include <remat/train/step.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using namespace remat;

namespace {

nn::GPTConfig val_gpt_config() {
  nn::GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_embd = 16;
  c.n_head = 2;
  c.dropout = 0.1f;  // evaluation must not draw masks
  c.checkpoint = nn::CheckpointStrategy::parse("block");
  return c;
}

std::vector<std::int32_t> val_tokens(std::size_t n, std::int32_t vocab) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>((i * 7 + i / 5) % static_cast<std::size_t>(vocab));
  return t;
}

// ranks in threads of one process: the one collective mean_loss uses (all_gather_u64), with
// a barrier; the others are not needed here.
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), slots_(static_cast<std::size_t>(n)) {}
  std::vector<std::uint64_t> gather(int rank, const std::vector<std::uint64_t>& mine) {
    std::unique_lock<std::mutex> lock(m_);
    const int gen = generation_;
    slots_[static_cast<std::size_t>(rank)] = mine;
    if (++arrived_ == n_) {
      result_.clear();
      for (const auto& s : slots_) result_.insert(result_.end(), s.begin(), s.end());
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
    return result_;
  }

 private:
  int n_, arrived_ = 0, generation_ = 0;
  std::vector<std::vector<std::uint64_t>> slots_;
  std::vector<std::uint64_t> result_;
  std::mutex m_;
  std::condition_variable cv_;
};

class ThreadComm final : public dist::Comm {
 public:
  ThreadComm(ThreadGroup& g, int rank, int size) : g_(g), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<dist::Request> allreduce_sum(float*, std::size_t, dist::Order) override { return unused(); }
  std::unique_ptr<dist::Request> reduce_scatter_sum(const float*, float*, std::size_t, dist::Order) override {
    return unused();
  }
  std::unique_ptr<dist::Request> all_gather(const float*, float*, std::size_t) override { return unused(); }
  void broadcast(void*, std::size_t, int) override { unused(); }
  std::vector<std::uint64_t> all_gather_u64(const std::vector<std::uint64_t>& mine) override {
    return g_.gather(rank_, mine);
  }
  void barrier() override { g_.gather(rank_, {}); }
  void abort(int) noexcept override {}

 private:
  static std::unique_ptr<dist::Request> unused() {
    throw Error("ThreadComm: only all_gather_u64 is implemented");
  }
  ThreadGroup& g_;
  int rank_, size_;
};

// mean_loss of `losses` (batch k's loss is losses[k]) on `ranks` ranks; every rank's result.
std::vector<double> mean_on_ranks(const std::vector<double>& losses, int ranks) {
  ThreadGroup group(ranks);
  std::vector<double> out(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r, ranks);
      out[static_cast<std::size_t>(r)] = train::mean_loss(
          comm, static_cast<std::int64_t>(losses.size()),
          [&](std::int64_t k) { return losses[static_cast<std::size_t>(k)]; });
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("the validation loss is the mean of the batches' losses computed by hand",
          "[train][validation]") {
  Tape<Cpu> tape(7);
  const nn::GPTConfig c = val_gpt_config();
  nn::GPT<Cpu> model(tape, c);
  const std::int64_t B = 2, T = 8, K = 3;
  const std::vector<std::int32_t> tokens = val_tokens(static_cast<std::size_t>(K * B * T + 5), 13);
  train::ValidationSet set(tokens, B, T, K);
  // by hand: batch k is tokens [k B T, k B T + B T] shifted by one for the targets
  double sum = 0.0;
  for (std::int64_t k = 0; k < K; ++k) {
    const auto at = tokens.begin() + k * B * T;
    const std::vector<std::int32_t> x(at, at + B * T), y(at + 1, at + B * T + 1);
    NoGrad ng;
    sum += model.loss(tape.tokens({B, T}, x), tape.tokens({B, T}, y), false).item();
  }
  const double by_hand = sum / static_cast<double>(K);
  tape.clear();
  const std::uint64_t offset = tape.rng_offset();
  int calls = 0;
  bool grad_was_on = false;
  dist::LocalComm comm;
  const double v = train::evaluate(comm, set, [&](const std::vector<std::int32_t>& x,
                                                  const std::vector<std::int32_t>& y) {
    ++calls;
    grad_was_on = grad_was_on || grad_enabled();
    return model.loss(tape.tokens({B, T}, x), tape.tokens({B, T}, y), false).item();
  });
  CHECK(v == by_hand);
  CHECK(calls == K);
  // nothing recorded, no gradient, no random number drawn, grad mode back on
  CHECK_FALSE(grad_was_on);
  CHECK(grad_enabled());
  CHECK(tape.num_nodes() == 0);
  CHECK(tape.saved_bytes() == 0);
  CHECK(tape.rng_offset() == offset);
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    CHECK_FALSE(p.grad().defined());
  }
  // the same model trained one step: the loss moves, and the evaluation after it sees the change
  optim::SGD<Cpu> sgd(model.parameters(), optim::SGDOptions{0.5f});
  std::vector<std::int32_t> x, y;
  set.get(0, x, y);
  optim::train_step(sgd, [&] { return model.loss(tape.tokens({B, T}, x), tape.tokens({B, T}, y)); });
  const double after = train::evaluate(comm, set, [&](const std::vector<std::int32_t>& xb,
                                                      const std::vector<std::int32_t>& yb) {
    return model.loss(tape.tokens({B, T}, xb), tape.tokens({B, T}, yb), false).item();
  });
  CHECK(after != v);
}

TEST_CASE("validation batches are llm.c's, from the start, and must be there", "[train][validation]") {
  std::vector<std::int32_t> t(25);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>(i);
  CHECK(train::ValidationSet::available(25, 2, 4) == 3);  // 3 x 8 + 1 = 25
  CHECK(train::ValidationSet::available(24, 2, 4) == 2);
  CHECK(train::ValidationSet::available(8, 2, 4) == 0);
  CHECK(train::ValidationSet::available(0, 2, 4) == 0);
  train::ValidationSet set(t, 2, 4, 3);
  std::vector<std::int32_t> x, y;
  set.get(2, x, y);
  CHECK(x == std::vector<std::int32_t>{16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(y == std::vector<std::int32_t>{17, 18, 19, 20, 21, 22, 23, 24});
  remat_test::require_error([&] { train::ValidationSet(t, 2, 4, 4); },
                            {"25 tokens hold 3 batch(es) of 2 x 4", "fewer than the 4", "33 tokens"});
  remat_test::require_error([&] { set.get(3, x, y); }, {"batch 3 of 3"});
}

TEST_CASE("validation batches are split over ranks in contiguous shares, in rank order",
          "[train][validation]") {
  for (std::int64_t count = 0; count <= 9; ++count)
    for (int ranks = 1; ranks <= 4; ++ranks) {
      std::int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const train::Share s = train::share_of(count, r, ranks);
        CHECK(s.begin == next);
        CHECK(s.end - s.begin >= count / ranks);
        CHECK(s.end - s.begin <= count / ranks + 1);
        next = s.end;
      }
      CHECK(next == count);
    }
}

TEST_CASE("the validation loss is the same double on 1 to 4 ranks", "[train][validation]") {
  // losses whose sum depends on the order of the additions: any other order than k's (per-rank
  // partial sums first, pairwise) gives another double
  const std::vector<double> losses{1e16, 1.0, -1e16, 3.0, 0.7, 1e-3, 2.5e15, -2.5e15, 5.0};
  double in_order = 0.0;
  for (double l : losses) in_order += l;
  const double expected = in_order / static_cast<double>(losses.size());
  for (int ranks = 1; ranks <= 4; ++ranks) {
    INFO(ranks << " rank(s)");
    for (const double v : mean_on_ranks(losses, ranks)) CHECK(v == expected);
  }
  // the control: summed per rank of 2, then combined, the result differs (so the equality above
  // says something)
  double first = 0.0, second = 0.0;
  for (std::size_t k = 0; k < 5; ++k) first += losses[k];
  for (std::size_t k = 5; k < losses.size(); ++k) second += losses[k];
  CHECK((first + second) / static_cast<double>(losses.size()) != expected);
}

TEST_CASE("a step that runs out of memory is dropped and run again after a re-plan",
          "[train][step]") {
  Tape<Cpu> tape(3);
  const Tensor<Cpu> w = tape.randn({4}, 1.0f, 1, true, Category::parameters);
  const std::vector<Tensor<Cpu>> params{w};
  int attempts = 0, replans = 0;
  const float l = train::step_with_replanning(tape, params, [&] {
    ++attempts;
    tape.backward(sum(w * w));  // a gradient the failed attempt leaves behind
    if (attempts < 3) throw OutOfMemory("test: out of memory");
    return 2.5f;
  }, [&](const OutOfMemory& e) {
    CHECK(std::string(e.what()) == "test: out of memory");
    CHECK_FALSE(w.grad().defined());  // dropped before the re-plan
    ++replans;
    return true;
  });
  CHECK(l == 2.5f);
  CHECK(attempts == 3);
  CHECK(replans == 2);
  // a re-plan that gives up, and one past the limit, let the OutOfMemory through
  CHECK_THROWS_AS(train::step_with_replanning(tape, params, [&]() -> float { throw OutOfMemory("x"); },
                                              [](const OutOfMemory&) { return false; }),
                  OutOfMemory);
  replans = 0;
  CHECK_THROWS_AS(train::step_with_replanning(tape, params, [&]() -> float { throw OutOfMemory("x"); },
                                              [&](const OutOfMemory&) { return ++replans > 0; }, 2),
                  OutOfMemory);
  CHECK(replans == 2);
}

TEST_CASE("generate draws through any model's callable, in its context window", "[train][sample]") {
  // temperature 0: always the most likely id among the drawable ones
  const std::vector<float> logits{0.1f, 2.0f, 0.3f, 9.0f};
  CHECK(train::sample_token(logits.data(), 4, 0.0f, 1, 0) == 3);
  CHECK(train::sample_token(logits.data(), 3, 0.0f, 1, 0) == 1);  // id 3 is not drawable
  // a "model" whose most likely next id is (last + 1) % 5, over 6 logits (one padded)
  std::vector<std::size_t> windows;
  auto model = [&](const std::vector<std::int32_t>& window) {
    windows.push_back(window.size());
    std::vector<float> out(6, 0.0f);
    out[static_cast<std::size_t>((window.back() + 1) % 5)] = 50.0f;
    out[5] = 100.0f;  // padding: never drawn
    return out;
  };
  train::SampleOptions o;
  o.temperature = 0.5f;
  o.context = 3;
  o.drawable = 5;
  const auto ids = train::generate(model, {4}, 6, o, [] { return true; });
  CHECK(ids == std::vector<std::int32_t>{0, 1, 2, 3, 4, 0});
  CHECK(windows == std::vector<std::size_t>{1, 2, 3, 3, 3, 3});
  int left = 2;
  CHECK(train::generate(model, {4}, 6, o, [&] { return left-- > 0; }).size() == 2);
  CHECK(grad_enabled());
}

TEST_CASE("the report lines carry the validation loss when there is one", "[train][progress]") {
  train::StepReport r;
  r.step = 10;
  r.steps = 20;
  r.loss = 3.25;
  r.lr = 3e-4;
  r.step_s = 0.5;
  r.tokens_per_s = 1000.0;
  r.peak_bytes = 1048576;
  r.peak_saved_bytes = 1024;
  const std::string plain = train::json_line(r);
  CHECK(plain == "{\"step\":10,\"loss\":3.25,\"lr\":0.0003,\"step_s\":0.500000,\"tokens_per_s\":1000.0,"
                 "\"peak_bytes\":1048576,\"peak_saved_bytes\":1024}");
  CHECK(train::progress_line(r, 65.0, false) ==
        "step 10/20 | loss 3.2500 | 1000 tok/s | peak 1.0 MiB | ETA 00:01:05");
  r.val_loss = 3.5;
  r.replanned = "say \"hi\"";
  r.extra_json = ",\"ranks\":2";
  CHECK(train::json_line(r) ==
        "{\"step\":10,\"loss\":3.25,\"val_loss\":3.5,\"lr\":0.0003,\"step_s\":0.500000,"
        "\"tokens_per_s\":1000.0,\"peak_bytes\":1048576,\"peak_saved_bytes\":1024,\"ranks\":2,"
        "\"replanned\":\"say \\\"hi\\\"\"}");
  CHECK(train::progress_line(r, 0.0, true) ==
        "step 10/20 | loss 3.2500 | val 3.5000 | lr 0.0003 | 1000 tok/s | peak 1.0 MiB | ETA "
        "00:00:00 | re-planned");
}

TEST_CASE("a write that fails at its path goes to the fallbacks and says why", "[train][output]") {
  const std::string dir = "train_output_test_" + std::to_string(::getpid());
  const std::string path = dir + "/never/out.bin";  // a folder that does not exist
  std::vector<std::string> tried;
  std::string why;
  const std::string at = train::write_with_fallback(path, "remat_tests", [&](const std::string& p) {
    tried.push_back(p);
    if (p == path) throw Error("no such folder");
  }, why);
  CHECK(why == "no such folder");
  CHECK(at == path + ".rescued-" + std::to_string(::getpid()));
  CHECK(tried.size() == 2);
  remat_test::require_error([&] {
    train::write_with_fallback(path, "remat_tests", [](const std::string&) { throw Error("full"); }, why);
  }, {"remat_tests: could not write '" + path + "' anywhere", "remat_tests-"});
  remat_test::require_error([&] { train::check_output_path("my_tool: the output", "."); },
                            {"my_tool: the output '.' is a directory"});
  remat_test::require_error([&] { train::check_output_path("my_tool: the output", path); },
                            {"my_tool: the output '" + path + "': the folder", "does not exist"});
  CHECK(train::folder_of("a/b/c") == "a/b");
  CHECK(train::folder_of("c") == ".");
  CHECK(train::folder_of("/c") == "/");
}

TEST_CASE("the loop evaluates after every val_every steps and the last, snapshots every N",
          "[train][loop]") {
  train::LoopOptions loop{10, 4, true, 3};
  loop.check("test");
  std::vector<int> evals, snaps;
  for (int done = 1; done <= 10; ++done) {
    if (loop.evaluates_after(done)) evals.push_back(done);
    if (loop.snapshots_after(done)) snaps.push_back(done);
  }
  CHECK(evals == std::vector<int>{4, 8, 10});
  CHECK(snaps == std::vector<int>{3, 6, 9});
  loop.val_every = 0;
  CHECK_FALSE(loop.evaluates_after(4));
  CHECK(loop.evaluates_after(10));  // the last step only
  loop.validate = false;
  CHECK_FALSE(loop.evaluates_after(10));
  remat_test::require_error([] { train::LoopOptions{10, -1, true, 0}.check("my_loop"); },
                            {"my_loop: LoopOptions::val_every is -1"});
  remat_test::require_error([] { train::LoopOptions{10, 5, false, 0}.check("my_loop"); },
                            {"LoopOptions::validate is false"});
  remat_test::require_error([] { train::LoopOptions{10, 0, false, -2}.check("my_loop"); },
                            {"LoopOptions::snapshot_every is -2"});
}
