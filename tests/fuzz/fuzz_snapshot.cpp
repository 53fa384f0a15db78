// SPDX-License-Identifier: MIT
// Fuzz target: io::load_state (train_gpt --resume) into a small GPT with the optimizer the
// snapshot names (AdamW, SGD with momentum, or none): metadata parsed strictly, the config
// compared, tensors' shapes and the optimizer state's values checked. A snapshot that loads
// must give a usable state: step and data position >= 0, AdamW's step count >= 0, and a
// training step with its optimizer runs.

#include <remat/io/snapshot.hpp>
#include <remat/remat.hpp>

#include "fuzz_common.hpp"
#include "snapshot_config.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  remat::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace remat;
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  return remat_fuzz::guarded([&] {
    // train_gpt picks the optimizer from its flags; here, from the snapshot, so that a valid
    // one gets past the optimizer check (an unreadable file fails here, as it would below).
    std::string opt = "adamw";
    {
      const io::SafetensorsFile f = io::read_safetensors(path);
      const auto it = f.metadata.find("optimizer");
      if (it != f.metadata.end() && (it->second == "sgd" || it->second == "none")) opt = it->second;
    }
    Tape<Cpu> tape(3);
    nn::GPT<Cpu> model(tape, remat_fuzz::snapshot_config());
    const auto params = model.parameters();
    optim::AdamW<Cpu> adamw(params, {1e-3f});
    optim::SGD<Cpu> sgd(params, {1e-2f, 0.9f, 0.0f, true});
    optim::AdamW<Cpu>* a = opt == "adamw" ? &adamw : nullptr;
    optim::SGD<Cpu>* s = opt == "sgd" ? &sgd : nullptr;
    const io::TrainState st = io::load_state(path, model, a, s);
    if (st.step < 0 || st.data_position < 0 || adamw.steps() < 0)
      throw std::logic_error("load_state accepted a negative step, position or AdamW step count");
    // The loaded state is usable: one training step runs (the loss may be NaN: the weights
    // are the file's, and only the optimizer state is checked for finite values).
    const std::vector<std::int32_t> x = {1, 2, 3}, y = {2, 3, 4};
    const auto loss = model.loss(tape.tokens({1, 3}, x), tape.tokens({1, 3}, y));
    tape.backward(loss);
    if (a) a->step();
    if (s) s->step();
  });
}
