// SPDX-License-Identifier: MIT
// File-reader properties no test pinned down before the mutation pass (issue 9, point 8;
// tests/mutation/README.md).

#include <cstdio>
#include <fstream>

#include <remat/data/tokens.hpp>

#include "support/catch.hpp"

using namespace remat;

TEST_CASE("an llm.c .bin file with bytes past its declared tokens is refused", "[io][mutation]") {
  const std::string path = "remat_test_mutation_long.bin";
  data::write_llmc_bin(path, {1, 2, 3, 4});
  REQUIRE(data::read_llmc_bin(path) == std::vector<std::int32_t>{1, 2, 3, 4});
  {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f.write("\x05\x00", 2);  // a fifth token the header does not declare
  }
  REQUIRE_THROWS_WITH(data::read_llmc_bin(path), REMAT_CONTAINS("declares 4 tokens"));
  std::remove(path.c_str());
}
