// SPDX-License-Identifier: MIT
// Fuzz target: io::read_safetensors (the header length, the JSON header, shapes, dtypes,
// offsets, overlaps, F16/BF16 conversion). Beyond "no crash", a file the reader accepts must
// keep its promises: every tensor's values fit its shape, and the total is bounded by the file.
// A recipe input ("RCP\0", recipe.hpp) builds a valid file of up to 5 tensors (F32, F16, BF16;
// rank 0-3) and metadata, then makes one field hostile (hostile_st_change): a file the change
// must make invalid is never accepted, and an unchanged one loads with exactly its values.

#include <cmath>

#include <remat/io/safetensors.hpp>

#include "fuzz_common.hpp"
#include "recipe.hpp"

namespace {

struct Expected {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// The raw mode's promises, for any file the reader accepts.
void check_promises(const remat::io::SafetensorsFile& f, std::size_t size) {
  std::uint64_t values = 0;
  for (const auto& [name, t] : f.tensors) {
    const std::size_t n = t.dtype == remat::DType::bf16 ? t.bf16_data.size() : t.data.size();
    if (static_cast<std::int64_t>(n) != t.shape.numel())
      throw std::logic_error("read_safetensors: tensor '" + name + "' has a value count that "
                             "differs from its shape");
    values += n;
  }
  // every value came from at least 2 bytes of data after the 8-byte length field
  if (size < 8 || 2 * values > size - 8)
    throw std::logic_error("read_safetensors: more values than the file's bytes can hold");
}

void run_recipe(const std::uint8_t* data, std::size_t size) {
  remat_fuzz::Recipe r(data + 4, size - 4);
  const bool hostile = r.below(4) != 0;
  remat_fuzz::StFile file;
  std::vector<Expected> expected;
  const std::uint64_t n = r.below(6);
  for (std::uint64_t i = 0; i < n; ++i) {
    static const char* const dtypes[] = {"F32", "F32", "F16", "BF16"};
    const std::string dt = r.pick(dtypes);
    Expected x;
    x.name = "t" + std::to_string(i);
    const std::uint64_t rank = r.below(4);
    std::uint64_t numel = 1;
    for (std::uint64_t k = 0; k < rank; ++k) {
      x.shape.push_back(static_cast<std::int64_t>(r.below(4)));
      numel *= static_cast<std::uint64_t>(x.shape.back());
    }
    remat_fuzz::StEntry e;
    e.name = remat_fuzz::json_string(x.name);
    e.dtype = "\"" + dt + "\"";
    for (const std::int64_t d : x.shape) e.dims.push_back(std::to_string(d));
    e.begin = std::to_string(file.data.size());
    for (std::uint64_t k = 0; k < numel; ++k) {
      if (dt == "F32") {
        std::uint32_t bits = 0;
        for (int b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(r.byte()) << (8 * b);
        float v;
        std::memcpy(&v, &bits, 4);
        x.values.push_back(v);
        file.data.append(reinterpret_cast<const char*>(&bits), 4);
      } else {
        const std::uint16_t h = static_cast<std::uint16_t>(r.byte() | (r.byte() << 8));
        float v;
        if (dt == "F16") {
          v = remat::io::detail::half_to_float(h);
        } else {
          const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
          std::memcpy(&v, &bits, 4);
        }
        x.values.push_back(v);
        file.data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    e.end = std::to_string(file.data.size());
    file.entries.push_back(std::move(e));
    expected.push_back(std::move(x));
  }
  const std::uint64_t m = r.below(3);
  for (std::uint64_t i = 0; i < m; ++i)
    file.metadata.emplace_back(remat_fuzz::json_string("k" + std::to_string(i)),
                               remat_fuzz::json_string(std::string(i + 1, 'v')));
  const remat_fuzz::Change change = hostile ? remat_fuzz::hostile_st_change(file, r) : remat_fuzz::Change{};
  if (remat_fuzz::verbose()) std::fprintf(stderr, "  recipe: %zu tensors, %s\n", expected.size(), change.what.c_str());
  const std::string bytes = file.bytes();
  const std::string& path =
      remat_fuzz::mem_file().write(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  remat_fuzz::guarded([&] {
    remat::io::SafetensorsFile f;
    try {
      f = remat::io::read_safetensors(path);
    } catch (const remat::Error& e) {
      if (change.what == "none")
        throw std::logic_error(std::string("read_safetensors refused a valid file: ") + e.what());
      throw;
    }
    check_promises(f, bytes.size());
    if (change.must_refuse)
      throw std::logic_error("read_safetensors accepted a file with " + change.what);
    if (change.what != "none") return;
    if (f.tensors.size() != expected.size() || f.metadata.size() != m)
      throw std::logic_error("read_safetensors: a valid file came back with other tensors or metadata");
    for (const Expected& x : expected) {
      const auto it = f.tensors.find(x.name);
      if (it == f.tensors.end() || it->second.shape.vec() != x.shape ||
          it->second.data.size() != x.values.size() ||
          (!x.values.empty() && std::memcmp(it->second.data.data(), x.values.data(), 4 * x.values.size()) != 0))
        throw std::logic_error("read_safetensors: tensor '" + x.name + "' of a valid file came back different");
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (remat_fuzz::is_recipe(data, size)) {
    run_recipe(data, size);
    return 0;
  }
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  // BF16 tensors widened, or (an odd size) kept as stored
  const auto bf = size % 2 ? remat::io::Bf16::keep : remat::io::Bf16::widen;
  return remat_fuzz::guarded([&] {
    check_promises(remat::io::read_safetensors(path, remat::io::OtherDtypes::error, bf), size);
  });
}
