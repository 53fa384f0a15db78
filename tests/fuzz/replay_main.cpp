// SPDX-License-Identifier: MIT
// Runs a fuzz target's entry point on files, without libFuzzer (any compiler): ctest uses it to
// replay the seeds and every input that ever crashed (tests/fuzz/regressions/<target>/).
// Usage: replay_<target> FILE_OR_DIR...   Exit 0 when every input ran; a finding aborts (or
// throws out of main), as it would under the fuzzer. An empty directory is fine; a missing
// path is an error. Two checks beyond the target's own:
//   - an input FILE with a FILE.expect beside it must end with an outcome (the target's
//     "accepted" or "remat::Error: <message>") that contains every line of FILE.expect: a
//     regression made of a recipe (recipe.hpp) still builds the file it was made for;
//   - an input must not raise the process's peak resident memory by more than 256 MiB (a
//     15-byte vocab.json that sized a 515 MiB table before its error was not a crash, but
//     is a finding).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/proc_status.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" const char* remat_fuzz_last_outcome();

namespace {

using remat_test::reset_peak_rss;
using remat_test::status_kib;

constexpr long kMaxGrowthMib = 256;

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.' && e.path().extension() != ".expect")
          files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: '%s' is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    const bool measured = reset_peak_rss();
    const long rss0 = status_kib("VmRSS:");
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const long growth_mib = (status_kib("VmHWM:") - rss0) / 1024;
    if (measured && rss0 > 0 && growth_mib > kMaxGrowthMib) {
      std::fprintf(stderr, "replay: FINDING: %s (%zu bytes) raised the peak RSS by %ld MiB, more than "
                   "%ld MiB (a small file must not make a reader allocate that much)\n", f.c_str(),
                   bytes.size(), growth_mib, kMaxGrowthMib);
      return 1;
    }
    std::ifstream expect(f.string() + ".expect");
    const std::string outcome = remat_fuzz_last_outcome();
    for (std::string line; std::getline(expect, line);)
      if (!line.empty() && outcome.find(line) == std::string::npos) {
        std::fprintf(stderr, "replay: FINDING: %s ended with\n  %.1000s\nwhich lacks '%s' (%s.expect): "
                     "the regression no longer builds the file it was made for, or the reader no "
                     "longer refuses it\n", f.c_str(), outcome.c_str(), line.c_str(), f.c_str());
        return 1;
      }
  }
  std::printf("replay: %zu inputs ran without a finding\n", files.size());
  return 0;
}
