#pragma once
// SPDX-License-Identifier: MIT
// Token data for training: llm.c's tokenized .bin files, raw text as bytes, and a batcher that
// takes batches exactly as llm.c's loader does, so runs are reproducible across tools.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/io/atomic_file.hpp"
#include "remat/io/file.hpp"

namespace remat {
namespace data {

inline constexpr std::int32_t kLlmcMagic = 20240520;

/// Tokens of an llm.c .bin file: a header of 256 int32 (magic 20240520, version 1, token
/// count, rest unused), then the tokens as uint16. The header is read and checked against the
/// file's size first; only then is the token table sized (by the count the size confirmed) and
/// the tokens read into it, so the file is never in memory twice. A pipe is read whole first
/// (it has no size to check).
inline std::vector<std::int32_t> read_llmc_bin(const std::string& path) {
  const char* what = "read_llmc_bin";
  const std::uint64_t size = io::file_size(path, what);
  const bool stream = size == io::kNoSizeCap;
  std::vector<char> piped;  // a pipe's or a terminal's bytes, read to their end
  if (stream) piped = io::read_file(path, what);
  const std::uint64_t n_bytes = stream ? piped.size() : size;
  REMAT_CHECK(n_bytes >= 1024, "remat::data::read_llmc_bin: '", path, "' has ", n_bytes,
              " bytes, less than the 1024-byte header (truncated, or not an llm.c .bin file)");
  std::ifstream f;
  if (!stream) {
    f.open(path, std::ios::binary);
    REMAT_CHECK(f.good(), "remat::data::read_llmc_bin: cannot open '", path,
                "' (does the file exist and is it readable?)");
  }
  // Copies file bytes [at, at + n) to dst.
  const auto read = [&](std::uint64_t at, void* dst, std::uint64_t n) {
    if (stream) {
      std::memcpy(dst, piped.data() + at, static_cast<std::size_t>(n));
      return;
    }
    REMAT_CHECK(f.seekg(static_cast<std::streamoff>(at)) &&
                    f.read(static_cast<char*>(dst), static_cast<std::streamsize>(n)) &&
                    f.gcount() == static_cast<std::streamsize>(n),
                "remat::data::read_llmc_bin: cannot read the ", n, " bytes at ", at, " of '", path,
                "' (did it change while being read?)");
  };
  std::int32_t header[256];
  read(0, header, sizeof header);
  REMAT_CHECK(header[0] == kLlmcMagic, "remat::data::read_llmc_bin: '", path, "' has magic ",
              header[0], ", expected ", kLlmcMagic, " (is it an llm.c tokenized .bin file?)");
  REMAT_CHECK(header[1] == 1, "remat::data::read_llmc_bin: '", path, "' has version ", header[1],
              ", expected 1 (uint16 tokens)");
  REMAT_CHECK(header[2] >= 0, "remat::data::read_llmc_bin: '", path, "' has a negative token count");
  const std::uint64_t n = static_cast<std::uint64_t>(header[2]);  // < 2^31: 1024 + 2n cannot wrap
  REMAT_CHECK(n_bytes == 1024 + 2 * n, "remat::data::read_llmc_bin: '", path, "' declares ", n,
              " tokens (", 1024 + 2 * n, " bytes with the header) but has ", n_bytes,
              " bytes (truncated or corrupt)");
  std::vector<std::int32_t> tokens;
  std::vector<std::uint16_t> chunk;
  try {
    tokens.resize(static_cast<std::size_t>(n));  // n: confirmed by the file's size
    chunk.resize(static_cast<std::size_t>(std::min<std::uint64_t>(n, 1 << 16)));
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(::remat::detail::cat("remat::data::read_llmc_bin: '", path, "' has ", n,
                                           " tokens, more than the host memory can hold as int32"));
  }
  for (std::uint64_t i = 0; i < n; i += chunk.size()) {
    const std::uint64_t k = std::min<std::uint64_t>(n - i, chunk.size());
    read(1024 + 2 * i, chunk.data(), 2 * k);
    for (std::uint64_t j = 0; j < k; ++j) tokens[static_cast<std::size_t>(i + j)] = chunk[static_cast<std::size_t>(j)];
  }
  return tokens;
}

/// Writes tokens (each < 65536) as an llm.c .bin file.
inline void write_llmc_bin(const std::string& path, const std::vector<std::int32_t>& tokens) {
  std::int32_t header[256] = {};
  header[0] = kLlmcMagic;
  header[1] = 1;
  header[2] = static_cast<std::int32_t>(tokens.size());
  io::AtomicFile f(path, "write_llmc_bin");
  f.write(header, sizeof header);
  std::vector<std::uint16_t> t(tokens.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    REMAT_CHECK(tokens[i] >= 0 && tokens[i] < 65536, "remat::data::write_llmc_bin: token ",
                tokens[i], " does not fit uint16");
    t[i] = static_cast<std::uint16_t>(tokens[i]);
  }
  f.write(t.data(), t.size() * 2);
  f.commit();
}

/// Bytes as tokens (vocabulary 256).
inline std::vector<std::int32_t> bytes_as_tokens(std::string_view bytes) {
  std::vector<std::int32_t> t(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) t[i] = static_cast<unsigned char>(bytes[i]);
  return t;
}

/// The bytes of a file as tokens (vocabulary 256).
inline std::vector<std::int32_t> read_text_bytes(const std::string& path) {
  const std::vector<char> buf = io::read_file(path, "read_text_bytes");
  return bytes_as_tokens(std::string_view(buf.data(), buf.size()));
}

/// Batches as llm.c's loader takes them: B*T+1 consecutive tokens from the position; inputs are
/// the first B*T, targets the last B*T; then the position advances by B*T, and returns to 0
/// when the next batch would run past the end.
class Batcher {
 public:
  Batcher(std::vector<std::int32_t> tokens, std::int64_t B, std::int64_t T)
      : tokens_(std::move(tokens)), B_(B), T_(T) {
    REMAT_CHECK(B > 0 && T > 0, "remat::data::Batcher: batch ", B, " and sequence ", T,
                " must be positive");
    REMAT_CHECK(static_cast<std::int64_t>(tokens_.size()) >= B * T + 1, "remat::data::Batcher: ",
                tokens_.size(), " tokens are too few for one batch of ", B, " x ", T,
                " (expected at least B*T+1 = ", B * T + 1, ")");
  }
  /// Fills x and y (B*T each) with the next batch.
  void next(std::vector<std::int32_t>& x, std::vector<std::int32_t>& y) {
    const std::int64_t n = B_ * T_;
    if (pos_ + n + 1 > static_cast<std::int64_t>(tokens_.size())) pos_ = 0;
    x.assign(tokens_.begin() + pos_, tokens_.begin() + pos_ + n);
    y.assign(tokens_.begin() + pos_ + 1, tokens_.begin() + pos_ + n + 1);
    pos_ += n;
  }
  std::int64_t position() const noexcept { return pos_; }
  void set_position(std::int64_t p) {
    REMAT_CHECK(p >= 0 && p < static_cast<std::int64_t>(tokens_.size()),
                "remat::data::Batcher: position ", p, " is outside the ", tokens_.size(), " tokens");
    pos_ = p;
  }
  const std::vector<std::int32_t>& tokens() const noexcept { return tokens_; }

 private:
  std::vector<std::int32_t> tokens_;
  std::int64_t B_, T_, pos_ = 0;
};

}  // namespace data
}  // namespace remat
