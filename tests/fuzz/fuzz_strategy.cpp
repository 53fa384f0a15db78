// SPDX-License-Identifier: MIT
// Fuzz target: the text parsers behind train_gpt's --checkpoint and --memory-limit and a
// snapshot's checkpoint_strategy metadata: nn::CheckpointStrategy::parse and parse_bytes.
// Properties: what parse accepts prints (str) as text that parses to the same strategy; every:N
// takes decimal digits only; parse_bytes accepts only counts from 1 byte to below 2^63, written
// as digits, an optional fraction, an optional blank and a unit (no signs, exponents or hex).

#include <remat/nn/gpt.hpp>
#include <remat/remat.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace remat;
  const std::string text = remat_fuzz::as_string(data, size);
  remat_fuzz::guarded([&] {
    const nn::CheckpointStrategy c = nn::CheckpointStrategy::parse(text);
    const nn::CheckpointStrategy again = nn::CheckpointStrategy::parse(c.str());
    if (again.kind != c.kind || again.every != c.every || again.budget_bytes != c.budget_bytes ||
        again.str() != c.str())
      throw std::logic_error("CheckpointStrategy: parse(str()) differs from the parsed strategy");
    if (c.kind == nn::CheckpointStrategy::Kind::every &&
        text.find_first_not_of("0123456789", 6) != std::string::npos)
      throw std::logic_error("CheckpointStrategy: every:N accepted a count that is not decimal digits");
    for (std::int64_t L = 1; L <= 48; L += 47)
      if (c.group(L) < 0) throw std::logic_error("CheckpointStrategy: negative group size");
  });
  remat_fuzz::guarded([&] {
    const std::int64_t b = parse_bytes(text, "fuzz");
    if (b < 1) throw std::logic_error("parse_bytes: accepted a count below 1 byte");
    if (text.empty() || text[0] < '0' || text[0] > '9' ||
        text.find_first_not_of("0123456789. KMGTiB") != std::string::npos)
      throw std::logic_error("parse_bytes: accepted text outside digits, '.', ' ' and a unit");
  });
  return 0;
}
