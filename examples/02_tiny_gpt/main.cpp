// SPDX-License-Identifier: MIT
// 02_tiny_gpt: trains a small GPT on a built-in text with AdamW and prints the loss, the step
// time and the exact memory ledger.   Run: build/examples/02_tiny_gpt [steps] [threads]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <remat/remat.hpp>

int main(int argc, char** argv) {
  using namespace remat;
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  set_num_threads(argc > 2 ? std::atoi(argv[2]) : 2);
  const std::string text =
      "the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
      "all that glitters is not gold. the early bird catches the worm. ";
  nn::GPTConfig c;
  c.vocab_size = 256;  // bytes
  c.block_size = 64;
  c.n_layer = 4;
  c.n_embd = 128;
  c.n_head = 4;
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, c);
  optim::AdamW<Cpu> opt(model.parameters(), {3e-3f});
  std::printf("GPT: %lld parameters (%.1f MiB), %s\n", static_cast<long long>(model.num_parameters()),
              model.num_parameters() * 4 / 1048576.0, Cpu::describe().c_str());

  const int B = 8, T = 64;
  std::vector<std::int32_t> x(B * T), y(B * T);
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < B; ++b)  // windows at spread-out offsets of the (repeated) text
      for (int t = 0; t < T; ++t) {
        const std::size_t at = (static_cast<std::size_t>(b) * 37 + step * 11 + t) % text.size();
        x[b * T + t] = static_cast<unsigned char>(text[at]);
        y[b * T + t] = static_cast<unsigned char>(text[(at + 1) % text.size()]);
      }
    const auto t0 = std::chrono::steady_clock::now();
    auto loss = model.loss(tape.tokens({B, T}, x), tape.tokens({B, T}, y));
    tape.backward(loss);
    optim::clip_grad_norm(model.parameters(), 1.0f);
    opt.step();
    opt.zero_grad();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step % 10 == 0 || step == steps - 1)
      std::printf("step %3d  loss %.4f  %.1f ms\n", step, loss.item(), dt * 1e3);
  }
  std::printf("\nmemory ledger (exact bytes the allocator handed out):\n%s",
              memory_stats<Cpu>().table().c_str());
  return 0;
}
