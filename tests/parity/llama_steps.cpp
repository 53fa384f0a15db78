// SPDX-License-Identifier: MIT
// The remat side of tests/parity/llama_parity.py: loads a Hugging Face Llama-family folder
// (io::read_llama), trains STEPS plain SGD steps on the token ids of IDS and prints each step's
// loss, one a line, with 9 significant digits.
//
//   llama_steps DIR IDS STEPS LR BATCH SEQ CHECKPOINT
//
// Step s reads ids [s B (T+1), (s+1) B (T+1)) as B rows of T+1: inputs the first T of each row,
// targets the last T. CHECKPOINT is a fixed strategy (none, block, every:N, sqrt, save_linear).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <remat/io/llama.hpp>
#include <remat/remat.hpp>

int main(int argc, char** argv) {
  using namespace remat;
  if (argc != 8) {
    std::fprintf(stderr, "usage: llama_steps DIR IDS STEPS LR BATCH SEQ CHECKPOINT\n");
    return 2;
  }
  try {
    const std::string dir = argv[1];
    std::ifstream in(argv[2]);
    std::vector<std::int32_t> ids;
    for (long v = 0; in >> v;) ids.push_back(static_cast<std::int32_t>(v));
    const int steps = std::atoi(argv[3]);
    const float lr = std::strtof(argv[4], nullptr);
    const std::int64_t B = std::atoll(argv[5]), T = std::atoll(argv[6]);
    const io::LlamaFiles files = io::read_llama(dir);
    nn::LlamaConfig c = files.config;
    c.checkpoint = nn::CheckpointStrategy::parse(argv[7]);
    Tape<Cpu> tape;
    nn::Llama<Cpu> model(tape, c);
    io::load_llama(files, model);
    optim::SGD<Cpu> sgd(model.parameters(), optim::SGDOptions{lr, 0.0f, 0.0f, false, optim::DecayOn::all});
    for (int s = 0; s < steps; ++s) {
      std::vector<std::int32_t> x, y;
      for (std::int64_t b = 0; b < B; ++b) {
        const std::size_t row = static_cast<std::size_t>((s * B + b) * (T + 1));
        REMAT_CHECK(row + static_cast<std::size_t>(T) < ids.size(), "llama_steps: ", ids.size(),
                    " ids are too few for step ", s);
        x.insert(x.end(), ids.begin() + static_cast<std::ptrdiff_t>(row), ids.begin() + static_cast<std::ptrdiff_t>(row + T));
        y.insert(y.end(), ids.begin() + static_cast<std::ptrdiff_t>(row + 1), ids.begin() + static_cast<std::ptrdiff_t>(row + T + 1));
      }
      const Tensor<Cpu> loss = model.loss(tape.tokens({B, T}, x), tape.tokens({B, T}, y));
      std::printf("%.9g\n", loss.item());
      tape.backward(loss);
      sgd.step();
      sgd.zero_grad();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama_steps: %s\n", e.what());
    return 1;
  }
  return 0;
}
