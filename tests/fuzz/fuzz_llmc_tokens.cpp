// SPDX-License-Identifier: MIT
// Fuzz target: data::read_llmc_bin (llm.c's tokenized .bin: a 256-int32 header, then uint16
// tokens), then a Batcher over what it returns, as train_gpt uses them.

#include <remat/data/tokens.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  return remat_fuzz::guarded([&] {
    const std::vector<std::int32_t> tokens = remat::data::read_llmc_bin(path);
    if (size < 1024 || tokens.size() != (size - 1024) / 2)
      throw std::logic_error("read_llmc_bin: token count differs from the file's size");
    for (const std::int32_t t : tokens)
      if (t < 0 || t > 65535) throw std::logic_error("read_llmc_bin: token outside uint16");
    // The batcher train_gpt builds over them: B and T from the data, a few batches (it wraps).
    const std::int64_t T = 1 + static_cast<std::int64_t>(size % 7), B = 1 + (size % 3);
    remat::data::Batcher batches(tokens, B, T);  // too few tokens: a remat::Error
    std::vector<std::int32_t> x, y;
    for (int i = 0; i < 4; ++i) {
      batches.next(x, y);
      if (static_cast<std::int64_t>(x.size()) != B * T || static_cast<std::int64_t>(y.size()) != B * T)
        throw std::logic_error("Batcher: a batch of the wrong size");
    }
  });
}
