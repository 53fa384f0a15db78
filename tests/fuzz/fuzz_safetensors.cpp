// SPDX-License-Identifier: MIT
// Fuzz target: io::read_safetensors (the header length, the JSON header, shapes, dtypes,
// offsets, overlaps, F16/BF16 conversion). Beyond "no crash", a file the reader accepts must
// keep its promises: every tensor's values fit its shape, and the total is bounded by the file.

#include <remat/io/safetensors.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  return remat_fuzz::guarded([&] {
    const remat::io::SafetensorsFile f = remat::io::read_safetensors(path);
    std::uint64_t values = 0;
    for (const auto& [name, t] : f.tensors) {
      if (static_cast<std::int64_t>(t.data.size()) != t.shape.numel())
        throw std::logic_error("read_safetensors: tensor '" + name + "' has a value count that "
                               "differs from its shape");
      values += t.data.size();
    }
    // every value came from at least 2 bytes of data after the 8-byte length field
    if (size < 8 || 2 * values > size - 8)
      throw std::logic_error("read_safetensors: more values than the file's bytes can hold");
  });
}
