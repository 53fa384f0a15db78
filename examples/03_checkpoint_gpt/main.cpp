// SPDX-License-Identifier: MIT
// 03_checkpoint_gpt: trains the same small GPT on the same text with each checkpoint strategy
// and prints peak memory, step time and final loss side by side. The losses agree exactly:
// checkpointing changes memory and time, never the numbers.
//   Run: build/examples/03_checkpoint_gpt [steps] [threads] [layers]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <remat/remat.hpp>

using namespace remat;

namespace {
struct Row {
  std::string strategy;
  double step_ms = 0, peak_mib = 0, saved_mib = 0;
  float first_loss = 0, last_loss = 0;
};

Row train(const std::string& strategy, int steps, int layers, const std::string& text) {
  nn::GPTConfig c;
  c.vocab_size = 256;  // bytes
  c.block_size = 128;
  c.n_layer = layers;
  c.n_embd = 128;
  c.n_head = 4;
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, c);
  optim::AdamW<Cpu> opt(model.parameters(), {1e-3f});
  const int B = 8, T = 128;
  std::vector<std::int32_t> x(B * T), y(B * T);
  std::vector<double> times;
  Row r;
  r.strategy = strategy;
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const std::size_t at = (static_cast<std::size_t>(b) * 131 + step * 17 + t) % (text.size() - 1);
        x[b * T + t] = static_cast<unsigned char>(text[at]);
        y[b * T + t] = static_cast<unsigned char>(text[at + 1]);
      }
    reset_peak_memory<Cpu>();
    const auto t0 = std::chrono::steady_clock::now();
    auto loss = model.loss(tape.tokens({B, T}, x), tape.tokens({B, T}, y));
    tape.backward(loss);
    opt.step();
    opt.zero_grad();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const auto st = memory_stats<Cpu>();
    r.peak_mib = std::max(r.peak_mib, st.peak_total / 1048576.0);
    r.saved_mib = std::max(r.saved_mib, st.peak_of(Category::activations) / 1048576.0);
    if (step == 0) r.first_loss = loss.item();
    r.last_loss = loss.item();
  }
  std::sort(times.begin() + 1, times.end());  // the first step warms caches: leave it out
  r.step_ms = 1e3 * times[1 + (times.size() - 1) / 2];
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 30;
  set_num_threads(argc > 2 ? std::atoi(argv[2]) : 2);
  const int layers = argc > 3 ? std::atoi(argv[3]) : 8;
  std::string text;
  const char* lines[] = {
      "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
      "must be in want of a wife. ",
      "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
      "in my purse, I thought I would sail about a little and see the watery part of the world. ",
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
      "age of foolishness. ",
  };
  for (int i = 0; i < 40; ++i) text += lines[i % 3];

  std::printf("GPT: %d layers, d 128, 4 heads, seq 128, batch 8, byte vocab; %d AdamW steps; %s\n\n",
              layers, steps, Cpu::describe().c_str());
  std::printf("%-10s %14s %16s %10s %11s %11s\n", "strategy", "peak MiB", "saved act. MiB",
              "step ms", "first loss", "final loss");
  std::vector<Row> rows;
  for (const char* s : {"none", "block", "selective", "sqrt"}) {
    rows.push_back(train(s, steps, layers, text));
    const Row& r = rows.back();
    std::printf("%-10s %14.1f %16.1f %10.1f %11.4f %11.4f\n", r.strategy.c_str(), r.peak_mib,
                r.saved_mib, r.step_ms, r.first_loss, r.last_loss);
  }
  bool same = true;
  for (const Row& r : rows) same = same && r.last_loss == rows[0].last_loss;
  std::printf("\nfinal losses %s; checkpointing keeps %.0f%% of the plain peak (block)\n",
              same ? "identical across strategies" : "DIFFER (a bug: please report it)",
              100.0 * rows[1].peak_mib / rows[0].peak_mib);
  return same ? 0 : 1;
}
