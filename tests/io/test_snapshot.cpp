// SPDX-License-Identifier: MIT
// Training-state snapshots: a process killed in the middle of writing one leaves the previous
// snapshot intact, and a run resumed from a snapshot reproduces the uninterrupted run bit for bit.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <remat/data/tokens.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/snapshot.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {
nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_embd = 16;
  c.n_head = 2;
  c.dropout = 0.1f;  // so the RNG position matters
  c.checkpoint = nn::CheckpointStrategy::parse("block");
  return c;
}

std::vector<std::int32_t> corpus() {
  std::vector<std::int32_t> t(400);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((i * 7 + i / 13) % 32);
  return t;
}

std::string file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Trains steps [from, to) (resuming from `resume` when given), snapshotting after `snap_at`.
std::vector<float> train(int from, int to, const std::string& resume, int snap_at,
                         const std::string& snap_path) {
  Tape<Cpu> tape(77);
  nn::GPT<Cpu> model(tape, config());
  optim::AdamW<Cpu> opt(model.parameters(), {1e-2f});
  data::Batcher batches(corpus(), 4, 8);
  if (!resume.empty()) {
    const auto st = io::load_state(resume, model, &opt, static_cast<optim::SGD<Cpu>*>(nullptr));
    REQUIRE(st.step == from);
    batches.set_position(st.data_position);
    tape.set_seed(st.rng_seed);
    tape.set_rng_offset(st.rng_offset);
  }
  std::vector<float> losses;
  std::vector<std::int32_t> x, y;
  for (int step = from; step < to; ++step) {
    batches.next(x, y);
    auto loss = model.loss(tape.tokens({4, 8}, x), tape.tokens({4, 8}, y));
    tape.backward(loss);
    optim::clip_grad_norm(model.parameters(), 1.0f);
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
    if (step + 1 == snap_at) {
      io::TrainState st;
      st.step = step + 1;
      st.data_position = batches.position();
      st.rng_seed = tape.seed();
      st.rng_offset = tape.rng_offset();
      io::save_state(snap_path, model, &opt, static_cast<optim::SGD<Cpu>*>(nullptr), st);
    }
  }
  return losses;
}
}  // namespace

TEST_CASE("a resumed run reproduces the uninterrupted one bit for bit", "[io][snapshot]") {
  const std::string snap = "remat_test_resume.safetensors";
  const auto full = train(0, 8, "", 4, snap);
  const auto resumed = train(4, 8, snap, -1, "");
  REQUIRE(resumed.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("step " << i + 5);
    CHECK(std::memcmp(&full[4 + i], &resumed[i], sizeof(float)) == 0);
  }
  std::remove(snap.c_str());
}

TEST_CASE("a padded vocabulary is stripped on save and zero-padded on load", "[io][snapshot]") {
  // NOTE [padded parameters]: weights and snapshots hold the vocabulary's 32 rows, whatever the
  // padding of the model that wrote them or reads them
  auto pc = config();
  pc.vocab_multiple = 24;  // 48 rows
  Tape<Cpu> tape(77);
  nn::GPT<Cpu> padded(tape, pc), plain(tape, config());
  optim::AdamW<Cpu> opt(padded.parameters(), {1e-2f});
  data::Batcher batches(corpus(), 4, 8);
  std::vector<std::int32_t> x, y;
  for (int step = 0; step < 2; ++step) {
    batches.next(x, y);
    tape.backward(padded.loss(tape.tokens({4, 8}, x), tape.tokens({4, 8}, y)));
    opt.step();
    opt.zero_grad();
  }
  const std::string weights = "remat_test_padded.safetensors";
  const std::string snap = "remat_test_padded_state.safetensors";
  io::save_gpt2(weights, padded);
  const io::Gpt2Weights w = io::read_gpt2(weights);
  CHECK(w.tensors.at("wte.weight").shape == Shape{32, 16});
  CHECK(io::gpt2_config(w.tensors, weights).vocab_size == 32);
  // b's first rows are a's, bit for bit, and the rest of b is 0
  const auto same_rows = [](const Tensor<Cpu>& a, const Tensor<Cpu>& b) {
    const auto av = a.to_vector(), bv = b.to_vector();
    REQUIRE(bv.size() >= av.size());
    for (std::size_t i = 0; i < bv.size(); ++i) {
      INFO(i);
      if (i < av.size()) CHECK(std::memcmp(&av[i], &bv[i], 4) == 0);
      else CHECK(bv[i] == 0.0f);
    }
  };
  io::load_gpt2(w.tensors, plain, weights);
  same_rows(plain.wte.weight, padded.wte.weight);
  nn::GPT<Cpu> again(tape, pc);
  Cpu::fill(again.wte.weight.mutable_data<float>(), again.wte.weight.numel(), 1.0f);
  io::load_gpt2(w.tensors, again, weights);  // the padding's 1s become 0s
  same_rows(plain.wte.weight, again.wte.weight);

  io::TrainState st;
  st.step = 2;
  io::save_state(snap, padded, &opt, static_cast<optim::SGD<Cpu>*>(nullptr), st);
  CHECK(io::read_safetensors(snap).tensors.at("adamw.v.wte.weight").shape == Shape{32, 16});
  // into an unpadded model: the same state; into a padded one with 1s in the padding: zeros
  nn::GPT<Cpu> u(tape, config()), q(tape, pc);
  optim::AdamW<Cpu> uo(u.parameters(), {1e-2f}), qo(q.parameters(), {1e-2f});
  io::load_state(snap, u, &uo, static_cast<optim::SGD<Cpu>*>(nullptr));
  Cpu::fill(q.wte.weight.mutable_data<float>(), q.wte.weight.numel(), 1.0f);
  io::load_state(snap, q, &qo, static_cast<optim::SGD<Cpu>*>(nullptr));
  same_rows(u.wte.weight, padded.wte.weight);
  same_rows(u.wte.weight, q.wte.weight);
  const std::int64_t n32 = 32 * 16, n48 = 48 * 16;
  const auto [um, uv] = uo.moments(0);
  const auto [pm, pv] = opt.moments(0);
  const auto [qm, qv] = qo.moments(0);
  CHECK(std::memcmp(um, pm, n32 * 4) == 0);
  CHECK(std::memcmp(uv, pv, n32 * 4) == 0);
  CHECK(std::memcmp(qm, pm, n48 * 4) == 0);
  CHECK(std::memcmp(qv, pv, n48 * 4) == 0);
  // the next step of each: the padded resume is the padded run bit for bit
  batches.next(x, y);
  float losses[3];
  int k = 0;
  const std::uint64_t offset = tape.rng_offset();  // the same dropout masks for each
  for (auto* m : {&padded, &q, &u}) {
    tape.set_rng_offset(offset);
    const auto loss = m->loss(tape.tokens({4, 8}, x), tape.tokens({4, 8}, y));
    losses[k++] = loss.item();
  }
  CHECK(std::memcmp(&losses[0], &losses[1], 4) == 0);
  CHECK(losses[2] == Approx(losses[0]).epsilon(1e-5));
  std::remove(weights.c_str());
  std::remove(snap.c_str());
}

TEST_CASE("a process killed while writing a snapshot leaves the previous one intact",
          "[io][snapshot]") {
  const std::string snap = "remat_test_atomic.safetensors";
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, config());
  io::TrainState st;
  st.step = 1;
  io::save_state(snap, model, static_cast<optim::AdamW<Cpu>*>(nullptr),
                 static_cast<optim::SGD<Cpu>*>(nullptr), st);
  const std::string before = file_bytes(snap);
  REQUIRE(before.size() > 1000);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the child changes the weights and dies halfway through writing them
    for (const auto& p : model.parameters()) Cpu::fill(p.data<float>(), p.numel(), 3.0f);
    st.step = 2;
    io::save_state(snap, model, static_cast<optim::AdamW<Cpu>*>(nullptr),
                   static_cast<optim::SGD<Cpu>*>(nullptr), st, [] { ::raise(SIGKILL); });
    ::_exit(0);  // not reached
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(file_bytes(snap) == before);  // the snapshot under its name is the old one, whole
  Tape<Cpu> t2;
  nn::GPT<Cpu> loaded(t2, config());
  const auto got = io::load_state(snap, loaded, static_cast<optim::AdamW<Cpu>*>(nullptr),
                                  static_cast<optim::SGD<Cpu>*>(nullptr));
  CHECK(got.step == 1);
  // The child's temporary file is left behind, half written; it never replaced the snapshot.
  const std::string leftover = snap + ".tmp." + std::to_string(child);
  CHECK(file_bytes(leftover).size() < before.size());
  // The next write of the same snapshot removes it (NOTE [stale temporaries]).
  io::save_state(snap, loaded, static_cast<optim::AdamW<Cpu>*>(nullptr),
                 static_cast<optim::SGD<Cpu>*>(nullptr), got);
  CHECK_FALSE(std::ifstream(leftover).good());
  std::remove(leftover.c_str());
  std::remove(snap.c_str());
}

TEST_CASE("snapshots refuse the wrong optimizer and non-snapshot files", "[io][snapshot][errors]") {
  const std::string snap = "remat_test_opt.safetensors";
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, config());
  optim::AdamW<Cpu> adam(model.parameters(), {});
  optim::SGD<Cpu> sgd(model.parameters(), {});
  io::save_state(snap, model, &adam, static_cast<optim::SGD<Cpu>*>(nullptr), io::TrainState{});
  REQUIRE_THROWS_WITH(io::load_state(snap, model, static_cast<optim::AdamW<Cpu>*>(nullptr), &sgd),
                      REMAT_CONTAINS("was saved with optimizer 'adamw', resuming with 'sgd'"));
  io::write_safetensors(snap, {{"x", {Shape{1}, {1.0f}}}});
  REQUIRE_THROWS_WITH(io::load_state(snap, model, &adam, static_cast<optim::SGD<Cpu>*>(nullptr)),
                      REMAT_CONTAINS("is not a remat snapshot"));
  std::remove(snap.c_str());
}
