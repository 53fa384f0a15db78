// SPDX-License-Identifier: MIT
// A consumer of remat: one training step of a tiny GPT; exits non-zero if anything is off.
#include <remat/remat.hpp>

#include <cstdio>

int main() {
  remat::Tape<remat::Cpu> tape;
  remat::nn::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_embd = 16;
  c.n_head = 2;
  remat::nn::GPT<remat::Cpu> model(tape, c);
  auto idx = tape.tokens({1, 8}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto loss = model.loss(idx, tape.tokens({1, 8}, {2, 3, 4, 5, 6, 7, 8, 9}));
  tape.backward(loss);
  const bool ok = model.parameter("wte.weight").grad().defined() && loss.item() > 0.0f;
  std::printf("remat %s consumer: loss %.4f, %s\n", remat::version_string, loss.item(),
              remat::Cpu::describe().c_str());
  return ok ? 0 : 1;
}
