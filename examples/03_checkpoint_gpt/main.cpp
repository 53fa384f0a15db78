// SPDX-License-Identifier: MIT
// 03_checkpoint_gpt: trains the same small GPT on the same text with each checkpoint strategy
// and prints peak memory, step time and final loss side by side (and draws them in
// checkpoint_gpt.svg), then none and block again in bf16 (nn::GPTConfig::precision). The
// losses agree exactly within a precision: checkpointing changes memory and time, never the
// numbers.
//   Run: build/examples/03_checkpoint_gpt [steps] [threads] [layers] [plot.svg]
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
  std::string strategy;  // with "/bf16" for the bf16 rows
  double step_ms = 0, peak_mib = 0, saved_mib = 0;
  float first_loss = 0, last_loss = 0;
};

Row train(const std::string& strategy, DType precision, int steps, int layers,
          const std::string& text) {
  nn::GPTConfig c;
  c.vocab_size = 256;  // bytes
  c.block_size = 128;
  c.n_layer = layers;
  c.n_embd = 128;
  c.n_head = 4;
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  c.precision = precision;
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, c);
  optim::AdamW<Cpu> opt(model.parameters(), {1e-3f});
  const int B = 8, T = 128;
  std::vector<std::int32_t> x(B * T), y(B * T);
  std::vector<double> times;
  Row r;
  r.strategy = precision == DType::bf16 ? strategy + "/bf16" : strategy;
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

// A bar chart of the peaks per strategy (total and saved activations), as a dependency-free SVG.
void write_svg(const std::string& path, const std::vector<Row>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  double top = 1;
  for (const Row& r : rows) top = std::max(top, r.peak_mib);
  const int W = 120 * static_cast<int>(rows.size()) + 120, H = 300, base = 250;
  std::fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' font-size='12'>\n", W, H);
  std::fprintf(f, "<text x='10' y='18' font-size='14'>peak memory per checkpoint strategy (MiB)</text>\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const int x = 60 + 120 * static_cast<int>(i);
    const double h1 = 200 * r.peak_mib / top, h2 = 200 * r.saved_mib / top;
    std::fprintf(f, "<rect x='%d' y='%.1f' width='40' height='%.1f' fill='#4878a8'/>\n", x, base - h1, h1);
    std::fprintf(f, "<rect x='%d' y='%.1f' width='40' height='%.1f' fill='#e0913a'/>\n", x + 42, base - h2, h2);
    std::fprintf(f, "<text x='%d' y='%.1f'>%.0f</text><text x='%d' y='%.1f'>%.0f</text>\n", x + 4,
                 base - h1 - 4, r.peak_mib, x + 46, base - h2 - 4, r.saved_mib);
    std::fprintf(f, "<text x='%d' y='%d'>%s</text><text x='%d' y='%d'>%.0f ms/step</text>\n", x, base + 18,
                 r.strategy.c_str(), x, base + 34, r.step_ms);
  }
  std::fprintf(f, "<rect x='%d' y='30' width='10' height='10' fill='#4878a8'/><text x='%d' y='40'>total peak</text>\n", W - 150, W - 135);
  std::fprintf(f, "<rect x='%d' y='46' width='10' height='10' fill='#e0913a'/><text x='%d' y='56'>saved activations</text>\n", W - 150, W - 135);
  std::fprintf(f, "</svg>\n");
  std::fclose(f);
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
  std::printf("%-11s %14s %16s %10s %11s %11s\n", "strategy", "peak MiB", "saved act. MiB",
              "step ms", "first loss", "final loss");
  std::vector<Row> rows;
  const std::pair<const char*, DType> runs[] = {{"none", DType::f32},        {"block", DType::f32},
                                                {"save_linear", DType::f32}, {"sqrt", DType::f32},
                                                {"none", DType::bf16},       {"block", DType::bf16}};
  for (const auto& [s, precision] : runs) {
    rows.push_back(train(s, precision, steps, layers, text));
    const Row& r = rows.back();
    std::printf("%-11s %14.1f %16.1f %10.1f %11.4f %11.4f\n", r.strategy.c_str(), r.peak_mib,
                r.saved_mib, r.step_ms, r.first_loss, r.last_loss);
  }
  bool same = true;  // within each precision: rows 0-3 fp32, 4-5 bf16
  for (std::size_t i = 0; i < rows.size(); ++i)
    same = same && rows[i].last_loss == rows[i < 4 ? 0 : 4].last_loss;
  std::printf("\nfinal losses %s; checkpointing keeps %.0f%% of the plain peak (block); bf16 "
              "keeps %.0f%% of fp32's saved activations (none)\n",
              same ? "identical across strategies (fp32, and bf16)" : "DIFFER (a bug: please report it)",
              100.0 * rows[1].peak_mib / rows[0].peak_mib, 100.0 * rows[4].saved_mib / rows[0].saved_mib);
  const std::string svg = argc > 4 ? argv[4] : "checkpoint_gpt.svg";
  write_svg(svg, rows);
  std::printf("plot: %s\n", svg.c_str());
  return same ? 0 : 1;
}
