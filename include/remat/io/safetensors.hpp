#pragma once
// SPDX-License-Identifier: MIT
// safetensors (https://huggingface.co/docs/safetensors) read and write: an 8-byte little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [b, e]}, ...,
// "__metadata__": {string: string}}, then the data. Everything in the header is validated
// (length, offsets inside the data, no overlaps, shape against byte size, dtype) before any
// tensor is read. Needs nlohmann-json (Debian: nlohmann-json3-dev).

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remat/core/error.hpp"
#include "remat/core/shape.hpp"
#include "remat/io/checked.hpp"

namespace remat {
namespace io {

/// One tensor of a safetensors file, converted to fp32 on the host.
struct HostTensor {
  Shape shape;
  std::vector<float> data;
};

struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;  // the optional __metadata__ object
  // Tensors of a dtype remat does not convert (BOOL, I64, ...), name -> dtype, with their header
  // validated but no data read; only filled under OtherDtypes::list.
  std::map<std::string, std::string> other_dtypes;
};

/// What read_safetensors does with a tensor of a valid safetensors dtype other than F32, F16
/// or BF16 (Hugging Face files carry BOOL attention masks, I64 position ids): an error, or
/// listed in SafetensorsFile::other_dtypes (header checked, data not read) for the caller to
/// decide whether it needs it.
enum class OtherDtypes { error, list };

namespace detail {

/// Bytes per element of the dtypes remat converts to fp32; 0 for any other.
inline std::size_t st_dtype_size(const std::string& dt) {
  if (dt == "F32") return 4;
  if (dt == "F16" || dt == "BF16") return 2;
  return 0;
}

/// Bytes per element of every dtype the safetensors format defines; 0 for an unknown name.
inline std::size_t st_any_dtype_size(const std::string& dt) {
  if (st_dtype_size(dt)) return st_dtype_size(dt);
  if (dt == "BOOL" || dt == "U8" || dt == "I8" || dt == "F8_E4M3" || dt == "F8_E5M2") return 1;
  if (dt == "I16" || dt == "U16") return 2;
  if (dt == "I32" || dt == "U32") return 4;
  if (dt == "I64" || dt == "U64" || dt == "F64") return 8;
  return 0;
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      std::uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// The bytes of a pipe (or a terminal) read to its end: there is no size to check first, so
/// the buffer grows as the data comes, as `cat` would read it.
inline std::vector<char> read_stream(const std::string& path, const char* what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REMAT_CHECK(f != nullptr, "remat::io::", what, ": cannot open '", path, "': ", std::strerror(errno),
              " (is it readable?)");
  std::vector<char> buf;
  char chunk[65536];
  try {
    for (;;) {
      const std::size_t n = std::fread(chunk, 1, sizeof chunk, f);
      buf.insert(buf.end(), chunk, chunk + n);
      if (n < sizeof chunk) break;
    }
  } catch (const std::exception&) {
    std::fclose(f);
    throw OutOfMemory(::remat::detail::cat("remat::io::", what, ": '", path, "' gave more than ",
                                           buf.size(), " bytes, more than the host memory can hold"));
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  REMAT_CHECK(!failed, "remat::io::", what, ": reading '", path, "' failed after ", buf.size(), " bytes");
  return buf;
}

/// The bytes of a file. The size of a regular file comes from stat(), so a directory or a
/// device (whose "size" can be anything) is refused before memory is reserved; a pipe or a
/// terminal (e.g. /dev/stdin) is read to its end.
inline std::vector<char> read_file(const std::string& path, const char* what) {
  struct ::stat sb {};
  REMAT_CHECK(::stat(path.c_str(), &sb) == 0, "remat::io::", what, ": cannot open '", path, "': ",
              std::strerror(errno), " (does the file exist and is it readable?)");
  REMAT_CHECK(!S_ISDIR(sb.st_mode), "remat::io::", what, ": '", path,
              "' is a directory, not a regular file (expected a file)");
  if (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode)) return read_stream(path, what);
  if (S_ISCHR(sb.st_mode)) {
    // A terminal reads like a pipe (to end of input, Ctrl-D); another device (/dev/zero,
    // /dev/urandom) never ends, so it is refused.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    const bool tty = fd >= 0 && ::isatty(fd);
    if (fd >= 0) ::close(fd);
    if (tty) return read_stream(path, what);
  }
  REMAT_CHECK(S_ISREG(sb.st_mode), "remat::io::", what, ": '", path,
              "' is a device, not a regular file (expected a file, a pipe or a terminal)");
  std::ifstream f(path, std::ios::binary);
  REMAT_CHECK(f.good(), "remat::io::", what, ": cannot open '", path,
              "' (does the file exist and is it readable?)");
  const std::uint64_t n = static_cast<std::uint64_t>(sb.st_size);
  std::vector<char> buf;
  try {
    buf.resize(static_cast<std::size_t>(n));
  } catch (const std::exception&) {
    throw OutOfMemory(::remat::detail::cat("remat::io::", what, ": '", path, "' has ", n,
                                           " bytes, more than the host memory can hold"));
  }
  REMAT_CHECK(f.read(buf.data(), static_cast<std::streamsize>(n)) && f.gcount() ==
                  static_cast<std::streamsize>(n),
              "remat::io::", what, ": cannot read the ", n, " bytes of '", path,
              "' (did it change while being read?)");
  return buf;
}

}  // namespace detail

namespace detail {
inline SafetensorsFile read_safetensors_unchecked(const std::string& path, OtherDtypes other);
}  // namespace detail

/// Reads and validates a safetensors file; F32, F16 and BF16 tensors come back as fp32, and a
/// tensor of another dtype is an error, or (OtherDtypes::list) listed in `other_dtypes`.
/// NOTE [hostile files]: every size in the header (header length, dimensions, their product,
/// byte counts, offsets) is checked, with overflow detected, against the file's real size before
/// any tensor memory is reserved, so a small file cannot ask for more memory than it holds.
/// Every failure is a remat::Error naming the file, the tensor and the field: no std::
/// exception (json parse errors, length_error, bad_alloc) escapes.
inline SafetensorsFile read_safetensors(const std::string& path,
                                       OtherDtypes other = OtherDtypes::error) {
  try {
    return detail::read_safetensors_unchecked(path, other);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(::remat::detail::cat("remat::io::read_safetensors: out of host memory while "
                                           "reading '", path, "' (is the file larger than memory?)"));
  } catch (const std::exception& e) {
    throw Error(::remat::detail::cat("remat::io::read_safetensors: '", path, "' could not be read: ",
                                     e.what(), " (corrupt or not a safetensors file)"));
  }
}

namespace detail {
inline SafetensorsFile read_safetensors_unchecked(const std::string& path, OtherDtypes other) {
  const char* op = "read_safetensors";
  const std::vector<char> buf = detail::read_file(path, op);
  REMAT_CHECK(buf.size() >= 8, "remat::io::read_safetensors: '", path, "' has ", buf.size(),
              " bytes; a safetensors file has at least 8 (the header length): truncated?");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(buf[static_cast<std::size_t>(i)]);
  REMAT_CHECK(n <= buf.size() - 8, "remat::io::read_safetensors: '", path, "' says its header has ",
              n, " bytes but only ", buf.size() - 8, " follow the length field (truncated, or not "
              "a safetensors file)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(buf.begin() + 8, buf.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const std::exception& e) {
    throw Error(::remat::detail::cat("remat::io::read_safetensors: the header of '", path,
                                     "' is not valid JSON: ", e.what()));
  }
  REMAT_CHECK(header.is_object(), "remat::io::read_safetensors: the header of '", path,
              "' is not a JSON object");
  const std::uint64_t data_size = buf.size() - 8 - n;
  const char* data = buf.data() + 8 + n;
  SafetensorsFile out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      REMAT_CHECK(v.is_object(), "remat::io::read_safetensors: __metadata__ of '", path,
                  "' is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) out.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = "tensor '" + name + "' of '" + path + "'";
    REMAT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") &&
                    v.contains("data_offsets") && v["dtype"].is_string() &&
                    v["shape"].is_array() && v["data_offsets"].is_array() &&
                    v["data_offsets"].size() == 2,
                "remat::io::read_safetensors: ", where, " lacks dtype, shape or data_offsets [begin, end]");
    const std::string dt = v["dtype"].get<std::string>();
    // A dtype remat does not convert is still checked (shape, offsets, overlaps) when listed.
    const bool converted = detail::st_dtype_size(dt) > 0;
    const std::uint64_t esize = other == OtherDtypes::list ? detail::st_any_dtype_size(dt)
                                                           : detail::st_dtype_size(dt);
    REMAT_CHECK(esize > 0, "remat::io::read_safetensors: ", where, " has dtype ", dt,
                other == OtherDtypes::list ? " (expected a safetensors dtype: F32, F16, BF16, "
                                             "F64, BOOL, U8, I8, I16, U16, I32, U32, I64, U64, "
                                             "F8_E4M3 or F8_E5M2)"
                                           : " (expected F32, F16 or BF16)");
    HostTensor t;
    REMAT_CHECK(v["shape"].size() <= static_cast<std::size_t>(Shape::kMaxRank),
                "remat::io::read_safetensors: ", where, " has ", v["shape"].size(),
                " dimensions in field 'shape' (at most ", Shape::kMaxRank, ")");
    for (const auto& d : v["shape"]) {
      REMAT_CHECK(d.is_number_unsigned() &&
                      d.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                  "remat::io::read_safetensors: ", where, " has a bad dimension ", d.dump(),
                  " in field 'shape' (expected integers >= 0)");
      t.shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
    }
    // Shape::numel_fits: the product of the dimensions, times 8 bytes, fits in int64; so the
    // element count and the byte count below cannot wrap (a wrapped product could match 0 bytes).
    REMAT_CHECK(t.shape.numel_fits(), "remat::io::read_safetensors: ", where, " has field 'shape' ",
                t.shape.str(), " whose element count overflows (expected a product of the "
                "dimensions that fits the ", data_size, " bytes of data; the file is corrupt or crafted)");
    const std::uint64_t numel = static_cast<std::uint64_t>(t.shape.numel());
    const std::uint64_t nbytes = checked_mul(numel, esize, op, where, "the byte count of 'shape'");
    const auto& off = v["data_offsets"];
    REMAT_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                "remat::io::read_safetensors: ", where, " has non-integer data_offsets ", off.dump(),
                " (expected [begin, end] with 0 <= begin <= end)");
    const std::uint64_t b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    REMAT_CHECK(b <= e && e <= data_size, "remat::io::read_safetensors: ", where,
                " has data_offsets [", b, ", ", e, "] outside the ", data_size,
                " bytes of data (the header lies, or the file is truncated)");
    REMAT_CHECK(e - b == nbytes, "remat::io::read_safetensors: ", where, " has shape ",
                t.shape.str(), " ", dt, " (", nbytes, " bytes) but data_offsets span ",
                e - b, " bytes");
    ranges.emplace_back(b, e);
    if (!converted) {  // listed, not read
      out.other_dtypes.emplace(name, dt);
      continue;
    }
    t.data.resize(static_cast<std::size_t>(numel));  // numel * esize <= data_size: bounded by the file
    const char* src = data + b;
    if (dt == "F32") {
      if (numel) std::memcpy(t.data.data(), src, static_cast<std::size_t>(nbytes));
    } else {
      for (std::uint64_t i = 0; i < numel; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        if (dt == "F16") {
          t.data[static_cast<std::size_t>(i)] = detail::half_to_float(h);
        } else {
          const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
          std::memcpy(&t.data[static_cast<std::size_t>(i)], &bits, 4);
        }
      }
    }
    out.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    REMAT_CHECK(ranges[i].first >= ranges[i - 1].second, "remat::io::read_safetensors: tensors of '",
                path, "' overlap: bytes [", ranges[i].first, ", ", ranges[i].second,
                ") start inside [", ranges[i - 1].first, ", ", ranges[i - 1].second, ")");
  return out;
}
}  // namespace detail

/// Writes fp32 tensors (name, shape, values) and string metadata; atomically: to a temporary
/// file beside `path`, flushed and synced, then renamed over it, so a crash never leaves a
/// half-written file under `path`. `after_half` (tests) runs once half of the data is written.
inline void write_safetensors(const std::string& path,
                              const std::vector<std::pair<std::string, HostTensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              void (*after_half)() = nullptr);

}  // namespace io
}  // namespace remat

#include "remat/io/atomic_file.hpp"

namespace remat {
namespace io {

inline void write_safetensors(const std::string& path,
                              const std::vector<std::pair<std::string, HostTensor>>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              void (*after_half)()) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    REMAT_CHECK(static_cast<std::int64_t>(t.data.size()) == t.shape.numel(),
                "remat::io::write_safetensors: tensor '", name, "' has shape ", t.shape.str(),
                " but ", t.data.size(), " values");
    const std::uint64_t bytes = t.data.size() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape.vec()}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');  // align the data to 8 bytes
  AtomicFile f(path, "write_safetensors");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(h.size()) >> (8 * i));
  f.write(len, 8);
  f.write(h.data(), h.size());
  std::uint64_t written = 0;
  bool halted = false;
  for (const auto& kv : tensors) {
    f.write(kv.second.data.data(), kv.second.data.size() * 4);
    written += kv.second.data.size() * 4;
    if (after_half && !halted && 2 * written >= at) {
      halted = true;
      after_half();
    }
  }
  f.commit();
}

}  // namespace io
}  // namespace remat
