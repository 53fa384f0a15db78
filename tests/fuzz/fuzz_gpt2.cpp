// SPDX-License-Identifier: MIT
// Fuzz target: GPT-2 weights as train_gpt --init-from takes them: read_gpt2 (read_safetensors
// listing other dtypes, the GPT-2 names, n_head from the metadata), the config from the shapes
// (gpt2_config, with the metadata's n_head or --heads from the input's size), a model built
// from that config, load_gpt2, and one training step's forward and backward on a few tokens
// (the original crash of issue 9 was in the embedding's copy).

#include <remat/io/gpt2.hpp>
#include <remat/remat.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  remat::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace remat;
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  return remat_fuzz::guarded([&] {
    // read_gpt2: the GPT-2 names, other dtypes listed (and refused for parameters), n_head
    // from the metadata when the input has one
    const io::Gpt2Weights g = io::read_gpt2(path);
    const auto& w = g.tensors;
    const std::int64_t heads = g.n_head > 0 ? g.n_head : static_cast<std::int64_t>(size % 3);  // 0: d/64
    nn::GPTConfig c = io::gpt2_config(w, path, heads);
    // gpt2_config promises every parameter is in the file: the model is no larger than it.
    std::uint64_t in_file = 0;
    for (const auto& [name, t] : w) in_file += t.data.size();
    std::uint64_t needed = 0;
    for (const auto& [name, shape] : io::gpt2_shapes(c))
      needed += static_cast<std::uint64_t>(shape.numel());
    if (needed > in_file)
      throw std::logic_error("gpt2_config: the model needs more values than the file holds");
    Tape<Cpu> tape(7);
    nn::GPT<Cpu> model(tape, c);
    io::load_gpt2(w, model, path);
    const std::int64_t T = std::min<std::int64_t>(c.block_size, 3);
    std::vector<std::int32_t> x(static_cast<std::size_t>(T)), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(c.vocab_size));
      y[i] = static_cast<std::int32_t>((i + 1) % static_cast<std::size_t>(c.vocab_size));
    }
    const auto loss = model.loss(tape.tokens({1, T}, x), tape.tokens({1, T}, y));
    tape.backward(loss);
    (void)loss.item();  // may be NaN or inf: the weights are the file's
  });
}
