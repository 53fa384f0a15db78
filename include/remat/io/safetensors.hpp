#pragma once
// SPDX-License-Identifier: MIT
// safetensors (https://huggingface.co/docs/safetensors) read and write: an 8-byte little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [b, e]}, ...,
// "__metadata__": {string: string}}, then the data. Everything in the header is validated
// (length, offsets inside the data, no overlaps, shape against byte size, dtype) before any
// tensor is read; the header is capped at 100 MB and parsed without a DOM (NOTE [hostile
// files] below). Needs nlohmann-json (Debian: nlohmann-json3-dev).

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

#include "remat/core/dtype.hpp"
#include "remat/core/error.hpp"
#include "remat/core/shape.hpp"
#include "remat/io/checked.hpp"
#include "remat/io/file.hpp"
#include "remat/io/json.hpp"

namespace remat {
namespace io {

/// One tensor of a safetensors file on the host: fp32 values in `data`, or (dtype bf16: a BF16
/// tensor read with Bf16::keep, or one to write as BF16) the bf16 values in `bf16_data`, as
/// stored, two bytes each.
struct HostTensor {
  Shape shape;
  std::vector<float> data;
  DType dtype = DType::f32;
  std::vector<bf16> bf16_data;
  HostTensor() = default;
  HostTensor(Shape s, std::vector<float> v) : shape(std::move(s)), data(std::move(v)) {}
  /// A bf16 tensor (named, not a constructor: a braced list of numbers would fit both).
  static HostTensor of_bf16(Shape s, std::vector<bf16> v) {
    HostTensor t;
    t.shape = std::move(s);
    t.dtype = DType::bf16;
    t.bf16_data = std::move(v);
    return t;
  }
  /// Value i as fp32 (a bf16 one widened, exactly).
  float value(std::size_t i) const { return dtype == DType::bf16 ? math::from_bf16(bf16_data[i]) : data[i]; }
  /// The values as fp32 (bf16 ones widened, exactly).
  std::vector<float> values() const {
    if (dtype != DType::bf16) return data;
    std::vector<float> out(bf16_data.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = math::from_bf16(bf16_data[i]);
    return out;
  }
};

/// t's values rounded to bf16 (nearest even, NaN kept: core/bf16.hpp), to write as BF16.
inline HostTensor rounded_to_bf16(const HostTensor& t) {
  HostTensor h = HostTensor::of_bf16(t.shape, std::vector<bf16>(t.data.size()));
  for (std::size_t i = 0; i < t.data.size(); ++i) h.bf16_data[i] = math::to_bf16(t.data[i]);
  return h;
}

namespace detail {
/// The first s.numel() floats of backend B's buffer p, as a host tensor of shape s: a padded
/// parameter's saved rows (NOTE [padded parameters] in nn/module.hpp) or a whole one.
template <class B>
HostTensor host_prefix(const float* p, const Shape& s) {
  HostTensor h{s, std::vector<float>(static_cast<std::size_t>(s.numel()))};
  if (!h.data.empty()) B::copy_to_host(h.data.data(), p, h.data.size() * sizeof(float));
  return h;
}
/// Copies v into the first v.size() floats of backend B's buffer dst and zeroes the rest of
/// its numel floats (the padding, NOTE [padded parameters]).
template <class B>
void copy_padded(float* dst, std::int64_t numel, const std::vector<float>& v) {
  if (!v.empty()) B::copy_from_host(dst, v.data(), v.size() * sizeof(float));
  if (numel > static_cast<std::int64_t>(v.size()))
    B::fill(dst + v.size(), numel - static_cast<std::int64_t>(v.size()), 0.0f);
}
/// copy_padded of a host tensor's values: F32 as they are, BF16 widened a chunk at a time
/// straight into dst (a bf16 file is widened once, into the parameter, never into a whole
/// fp32 copy on the host first).
template <class B>
void copy_padded(float* dst, std::int64_t numel, const HostTensor& t) {
  if (t.dtype != DType::bf16) return copy_padded<B>(dst, numel, t.data);
  const std::size_t n = t.bf16_data.size();
  std::vector<float> chunk(std::min<std::size_t>(n, 65536));
  for (std::size_t i = 0; i < n;) {
    const std::size_t k = std::min(n - i, chunk.size());
    for (std::size_t j = 0; j < k; ++j) chunk[j] = math::from_bf16(t.bf16_data[i + j]);
    B::copy_from_host(dst + i, chunk.data(), k * sizeof(float));
    i += k;
  }
  if (numel > static_cast<std::int64_t>(n)) B::fill(dst + n, numel - static_cast<std::int64_t>(n), 0.0f);
}
}  // namespace detail

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

/// What read_safetensors does with a BF16 tensor: widen it to fp32 (HostTensor::data), or keep
/// it as stored (HostTensor::bf16_data, dtype bf16: half the bytes, read straight from the file).
enum class Bf16 { widen, keep };

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

}  // namespace detail

/// The longest JSON header read_safetensors reads: 100 MB, the reference implementation's cap
/// (a real header is ~100 bytes a tensor: GPT-2 XL's 580 tensors take 60 KB).
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

/// What a safetensors header may hold (NOTE [hostile JSON] in io/json.hpp). The byte cap is the
/// reference implementation's; real headers nest 3 levels (top, tensor, shape), so 64 is ample;
/// a tensor is 6-12 values (its object, dtype, shape and dims, offsets), so 4 million values are
/// 300,000+ tensors (real checkpoints have at most a few thousand) and bound what the parse
/// builds whatever the header says (a 90 MB header of empty tensors, refused at the cap, peaks
/// at 270 MB with its text: tests/io/test_hostile_large.sh).
inline constexpr JsonLimits kSafetensorsHeaderLimits{kSafetensorsMaxHeader, 64, 4'000'000};

namespace detail {

/// A name from a file, cut for messages (a key can be megabytes long).
inline std::string shown(const std::string& s) {
  return s.size() <= 100 ? s : s.substr(0, 100) + "...(" + std::to_string(s.size()) + " bytes)";
}

/// One tensor entry of a header, checked (StHeader::finish).
struct StEntry {
  std::string name, dtype;
  Shape shape;
  std::uint64_t numel = 0, begin = 0, end = 0;
};

/// The header's SAX handler (io::scan_json): builds the tensor list and the metadata without a
/// DOM, checking every field as it arrives and every entry when its object ends, so an error
/// names the tensor and the field, and a value is described without recursion (a nested value
/// where a dimension belongs is "an array", at the depth it starts).
class StHeader {
 public:
  using json = nlohmann::json;
  StHeader(const std::string& path, std::uint64_t data_size, OtherDtypes other)
      : path_(path), data_size_(data_size), other_(other) {}

  std::vector<StEntry> entries;
  std::map<std::string, std::string> metadata;

  bool null() { return scalar("null"); }
  bool boolean(bool b) { return scalar(b ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) { return scalar(std::to_string(v)); }
  bool number_unsigned(json::number_unsigned_t v) {
    if (skip_ == 0 && at_ == At::shape) return dimension(v);
    if (skip_ == 0 && at_ == At::offsets) return offset(v);
    return scalar(std::to_string(v));
  }
  bool number_float(json::number_float_t, const json::string_t& text) {
    return scalar(text.size() <= 40 ? text : text.substr(0, 40) + "...");
  }
  bool string(json::string_t& s) {
    if (skip_ == 0 && at_ == At::entry && field_ == Field::dtype) {
      e_.dtype = s.size() <= 16 ? s : s.substr(0, 16) + "...";
      has_dtype_ = true;
      return true;
    }
    if (skip_ == 0 && at_ == At::metadata) {
      metadata[key_] = std::move(s);
      return true;
    }
    return scalar(json_brief(json(s.size() <= 41 ? s : s.substr(0, 41))));
  }
  bool start_object() { return open("an object", false); }
  bool start_array() { return open("an array", true); }
  bool key(json::string_t& k) {
    if (skip_ > 0) return true;
    if (at_ == At::top) {
      e_ = StEntry{};
      e_.name = std::move(k);
      has_dtype_ = has_shape_ = has_offsets_ = false;
    } else if (at_ == At::metadata) {
      key_ = std::move(k);
    } else {  // At::entry
      field_ = k == "dtype" ? Field::dtype : k == "shape" ? Field::shape
             : k == "data_offsets" ? Field::offsets : Field::other;
    }
    return true;
  }
  bool end_object() {
    if (skip_ > 0) return --skip_, true;
    if (at_ == At::entry) finish();
    at_ = at_ == At::top ? At::done : At::top;
    return true;
  }
  bool end_array() {
    if (skip_ > 0) return --skip_, true;
    if (at_ == At::offsets)
      REMAT_CHECK(n_offsets_ == 2, "remat::io::read_safetensors: ", where(), " has ", n_offsets_,
                  n_offsets_ == 1 ? " value" : " values", " in field 'data_offsets' (expected [begin, end])");
    at_ = At::entry;
    return true;
  }

 private:
  enum class At { start, top, metadata, entry, shape, offsets, done };
  enum class Field { dtype, shape, offsets, other };

  std::string where() const { return "tensor '" + shown(e_.name) + "' of '" + path_ + "'"; }
  bool metadata_now() const { return at_ == At::top && e_.name == "__metadata__"; }

  // A value that is not a container, `brief` describing it for messages.
  bool scalar(const std::string& brief) {
    // ignored: inside an ignored value, a metadata value that is not a string (as before), or
    // an entry's unknown field
    if (skip_ > 0 || at_ == At::metadata || (at_ == At::entry && field_ == Field::other)) return true;
    bad(brief);
  }
  // Starts an object or an array.
  bool open(const char* brief, bool array) {
    if (skip_ > 0) return ++skip_, true;
    if (at_ == At::start) {
      REMAT_CHECK(!array, "remat::io::read_safetensors: the header of '", path_, "' is an array, "
                  "not a JSON object {\"name\": {\"dtype\", \"shape\", \"data_offsets\"}, ...}");
      at_ = At::top;
    } else if (at_ == At::top && !array) {
      at_ = metadata_now() ? At::metadata : At::entry;
      field_ = Field::other;
    } else if (at_ == At::metadata || (at_ == At::entry && field_ == Field::other)) {
      skip_ = 1;  // a nested metadata value or an unknown field: ignored (the scan bounds it)
    } else if (at_ == At::entry && array && field_ == Field::shape) {
      REMAT_CHECK(!has_shape_, "remat::io::read_safetensors: ", where(), " has two fields 'shape'");
      has_shape_ = true;
      at_ = At::shape;
    } else if (at_ == At::entry && array && field_ == Field::offsets) {
      has_offsets_ = true;
      n_offsets_ = 0;
      at_ = At::offsets;
    } else {
      bad(brief);
    }
    return true;
  }
  // A value of the wrong kind where the header has a fixed schema.
  [[noreturn]] void bad(const std::string& found) const {
    const char* op = "remat::io::read_safetensors: ";
    if (at_ == At::start)
      throw Error(::remat::detail::cat(op, "the header of '", path_, "' is ", found, ", not a JSON "
                                       "object {\"name\": {\"dtype\", \"shape\", \"data_offsets\"}, ...}"));
    if (metadata_now())
      throw Error(::remat::detail::cat(op, "__metadata__ of '", path_, "' is ", found,
                                       ", not an object (expected {\"key\": \"value\", ...})"));
    if (at_ == At::top)
      throw Error(::remat::detail::cat(op, where(), " is ", found, ", not an object: it lacks dtype, "
                                       "shape or data_offsets [begin, end]"));
    // a nested value is named in parentheses: "a bad dimension (an array)"
    const std::string f = found.rfind("an ", 0) == 0 ? "(" + found + ")" : found;
    if (at_ == At::shape)
      throw Error(::remat::detail::cat(op, where(), " has a bad dimension ", f, " in field "
                                       "'shape' (expected integers >= 0)"));
    if (at_ == At::offsets)
      throw Error(::remat::detail::cat(op, where(), " has a bad value ", f, " in field "
                                       "'data_offsets' (expected [begin, end], integers with 0 <= "
                                       "begin <= end)"));
    const char* field = field_ == Field::dtype ? "dtype" : field_ == Field::shape ? "shape" : "data_offsets";
    throw Error(::remat::detail::cat(op, where(), " has field '", field, "' ", found,
                                     field_ == Field::dtype ? " (expected a string: F32, F16 or BF16)"
                                     : field_ == Field::shape ? " (expected an array of integers >= 0)"
                                                              : " (expected [begin, end])"));
  }
  bool dimension(std::uint64_t d) {
    REMAT_CHECK(e_.shape.rank() < Shape::kMaxRank, "remat::io::read_safetensors: ", where(),
                " has more than ", Shape::kMaxRank, " dimensions in field 'shape' (at most ",
                Shape::kMaxRank, ")");
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      bad(std::to_string(d));
    e_.shape.push_back(static_cast<std::int64_t>(d));
    return true;
  }
  bool offset(std::uint64_t v) {
    REMAT_CHECK(n_offsets_ < 2, "remat::io::read_safetensors: ", where(), " has more than 2 "
                "values in field 'data_offsets' (expected [begin, end])");
    (n_offsets_++ == 0 ? e_.begin : e_.end) = v;
    return true;
  }
  // The checks of one tensor entry, against the data's real size, before any memory for it.
  void finish() {
    const char* op = "read_safetensors";
    REMAT_CHECK(has_dtype_ && has_shape_ && has_offsets_, "remat::io::read_safetensors: ", where(),
                " lacks dtype, shape or data_offsets [begin, end] (it has no '",
                !has_dtype_ ? "dtype" : !has_shape_ ? "shape" : "data_offsets", "')");
    const std::uint64_t esize = other_ == OtherDtypes::list ? st_any_dtype_size(e_.dtype)
                                                            : st_dtype_size(e_.dtype);
    REMAT_CHECK(esize > 0, "remat::io::read_safetensors: ", where(), " has dtype ", e_.dtype,
                other_ == OtherDtypes::list ? " (expected a safetensors dtype: F32, F16, BF16, "
                                              "F64, BOOL, U8, I8, I16, U16, I32, U32, I64, U64, "
                                              "F8_E4M3 or F8_E5M2)"
                                            : " (expected F32, F16 or BF16)");
    // Shape::numel_fits: the product of the nonzero dimensions, times 8 bytes, fits int64,
    // whatever their order ([0, 2^62] and [2^62, 0] are both refused: the dimensions alone would
    // overflow a stride), so the element and byte counts below cannot wrap (a wrap could match
    // 0 bytes).
    REMAT_CHECK(e_.shape.numel_fits(), "remat::io::read_safetensors: ", where(), " has field "
                "'shape' ", e_.shape.str(), " whose element count overflows (expected a product of "
                "the dimensions that fits the ", data_size_, " bytes of data; the file is corrupt "
                "or crafted)");
    e_.numel = static_cast<std::uint64_t>(e_.shape.numel());
    const std::uint64_t nbytes = checked_mul(e_.numel, esize, op, where(), "the byte count of 'shape'");
    REMAT_CHECK(e_.begin <= e_.end && e_.end <= data_size_, "remat::io::read_safetensors: ", where(),
                " has data_offsets [", e_.begin, ", ", e_.end, "] outside the ", data_size_,
                " bytes of data (the header lies, or the file is truncated)");
    REMAT_CHECK(e_.end - e_.begin == nbytes, "remat::io::read_safetensors: ", where(), " has shape ",
                e_.shape.str(), " ", e_.dtype, " (", nbytes, " bytes) but data_offsets span ",
                e_.end - e_.begin, " bytes");
    entries.push_back(std::move(e_));
  }

  const std::string& path_;
  std::uint64_t data_size_;
  OtherDtypes other_;
  At at_ = At::start;
  Field field_ = Field::other;
  std::uint64_t skip_ = 0;  // > 0: inside a value that is ignored, this many levels deep
  StEntry e_;               // the entry being read
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  int n_offsets_ = 0;
  std::string key_;         // the metadata key being read
};

/// Where the tensor data comes from: a regular file, read where each tensor lies (pread), or
/// the rest of a pipe or terminal, read to its end into memory.
class StData {
 public:
  StData(const std::string& path, int fd, std::uint64_t base, std::vector<char> buffered)
      : path_(path), fd_(fd), base_(base), buf_(std::move(buffered)) {}
  /// Copies data bytes [at, at + n) to dst (inside the data: the header was checked).
  void read(std::uint64_t at, char* dst, std::uint64_t n) const {
    if (fd_ < 0) {
      if (n) std::memcpy(dst, buf_.data() + at, static_cast<std::size_t>(n));
      return;
    }
    while (n > 0) {
      const ::ssize_t r = ::pread(fd_, dst, static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30)),
                                  static_cast<off_t>(base_ + at));
      if (r < 0 && errno == EINTR) continue;
      REMAT_CHECK(r > 0, "remat::io::read_safetensors: cannot read '", path_, "' at byte ", base_ + at,
                  ": ", r < 0 ? std::strerror(errno) : "end of file",
                  " (did it change while being read?)");
      dst += r;
      at += static_cast<std::uint64_t>(r);
      n -= static_cast<std::uint64_t>(r);
    }
  }

 private:
  const std::string& path_;
  int fd_;
  std::uint64_t base_;
  std::vector<char> buf_;
};

/// Reads exactly n bytes from a stream (fd at its current position); fewer at its end.
inline std::uint64_t read_some(int fd, char* dst, std::uint64_t n) {
  std::uint64_t done = 0;
  while (done < n) {
    const ::ssize_t r = ::read(fd, dst + done, static_cast<std::size_t>(std::min<std::uint64_t>(n - done, 1u << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<std::uint64_t>(r);
  }
  return done;
}

inline SafetensorsFile read_safetensors_unchecked(const std::string& path, OtherDtypes other, Bf16 bf);

}  // namespace detail

/// Reads and validates a safetensors file; F32, F16 and BF16 tensors come back as fp32 (BF16
/// ones as bf16 under Bf16::keep), and a tensor of another dtype is an error, or
/// (OtherDtypes::list) listed in `other_dtypes`.
/// NOTE [hostile files]: the file is read in order of trust. The 8-byte header length is
/// checked against kSafetensorsMaxHeader and the file's size before the header is read; the
/// header is parsed within kSafetensorsHeaderLimits without a DOM (NOTE [hostile JSON] in
/// io/json.hpp); every size in it (dimensions, their product, byte counts, offsets) is checked,
/// with overflow detected, against the data's real size, and the tensors for overlaps; only
/// then is each tensor read, straight into its fp32 vector, so a small file cannot ask for more
/// memory than it holds and the file is never in memory twice (a pipe's data is read to its
/// end first: it has no size to check). Every failure is a remat::Error naming the file, the
/// tensor and the field: no std:: exception (json parse errors, length_error, bad_alloc)
/// escapes, and running out of memory is remat::OutOfMemory.
inline SafetensorsFile read_safetensors(const std::string& path,
                                       OtherDtypes other = OtherDtypes::error,
                                       Bf16 bf = Bf16::widen) {
  try {
    return detail::read_safetensors_unchecked(path, other, bf);
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
inline SafetensorsFile read_safetensors_unchecked(const std::string& path, OtherDtypes other, Bf16 bf) {
  const std::uint64_t size = file_size(path, "read_safetensors");  // kNoSizeCap: a stream
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  REMAT_CHECK(fd >= 0, "remat::io::read_safetensors: cannot open '", path, "': ", std::strerror(errno),
              " (does the file exist and is it readable?)");
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  const bool stream = size == kNoSizeCap;
  unsigned char len[8];
  const std::uint64_t got = read_some(fd, reinterpret_cast<char*>(len), 8);
  REMAT_CHECK(got == 8 && (stream || size >= 8), "remat::io::read_safetensors: '", path, "' has ",
              stream ? got : size, " bytes; a safetensors file has at least 8 (the header length): "
              "truncated?");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  REMAT_CHECK(n <= kSafetensorsMaxHeader, "remat::io::read_safetensors: '", path, "' says its header "
              "has ", n, " bytes, more than the ", kSafetensorsMaxHeader, " a safetensors header may "
              "have (the reference implementation's limit; corrupt, or not a safetensors file)");
  REMAT_CHECK(stream || n <= size - 8, "remat::io::read_safetensors: '", path, "' says its header has ",
              n, " bytes but only ", size - 8, " follow the length field (truncated, or not "
              "a safetensors file)");
  std::string header(static_cast<std::size_t>(n), '\0');
  const std::uint64_t hgot = read_some(fd, header.data(), n);
  REMAT_CHECK(hgot == n, "remat::io::read_safetensors: '", path, "' says its header has ", n,
              " bytes but only ", hgot, " follow the length field (truncated, ",
              stream ? "or not a safetensors file)" : "or it changed while being read)");
  std::vector<char> buffered;  // a stream's data, read to its end: it has no size to check first
  if (stream) {
    char chunk[65536];
    for (std::uint64_t r; (r = read_some(fd, chunk, sizeof chunk)) > 0;) buffered.insert(buffered.end(), chunk, chunk + r);
  }
  const std::uint64_t data_size = stream ? buffered.size() : size - 8 - n;
  StHeader h(path, data_size, other);
  scan_json(header, kSafetensorsHeaderLimits, h, "remat::io::read_safetensors", "header of", path);
  std::string().swap(header);  // the tensors are checked: the text is not needed any more
  std::sort(h.entries.begin(), h.entries.end(),
            [](const StEntry& a, const StEntry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  for (std::size_t i = 1; i < h.entries.size(); ++i)
    REMAT_CHECK(h.entries[i].begin >= h.entries[i - 1].end, "remat::io::read_safetensors: tensors '",
                shown(h.entries[i - 1].name), "' and '", shown(h.entries[i].name), "' of '", path,
                "' overlap: bytes [", h.entries[i].begin, ", ", h.entries[i].end, ") start inside [",
                h.entries[i - 1].begin, ", ", h.entries[i - 1].end, ")");
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  const StData data(path, stream ? -1 : fd, 8 + n, std::move(buffered));
  std::vector<std::uint16_t> half;
  for (StEntry& e : h.entries) {
    if (!st_dtype_size(e.dtype)) {  // listed, not read
      out.other_dtypes.emplace(std::move(e.name), e.dtype);
      continue;
    }
    if (e.dtype == "BF16" && bf == Bf16::keep) {  // as stored: two bytes a value
      HostTensor t = HostTensor::of_bf16(e.shape, std::vector<bf16>(static_cast<std::size_t>(e.numel)));
      data.read(e.begin, reinterpret_cast<char*>(t.bf16_data.data()), e.end - e.begin);
      out.tensors.emplace(std::move(e.name), std::move(t));
      continue;
    }
    HostTensor t{e.shape, std::vector<float>(static_cast<std::size_t>(e.numel))};  // bounded by the file
    if (e.dtype == "F32") {
      data.read(e.begin, reinterpret_cast<char*>(t.data.data()), e.end - e.begin);
    } else {  // F16 or BF16, converted in chunks
      const bool f16 = e.dtype == "F16";
      half.resize(static_cast<std::size_t>(std::min<std::uint64_t>(e.numel, 65536)));
      for (std::uint64_t i = 0; i < e.numel;) {
        const std::uint64_t k = std::min<std::uint64_t>(e.numel - i, half.size());
        data.read(e.begin + 2 * i, reinterpret_cast<char*>(half.data()), 2 * k);
        for (std::uint64_t j = 0; j < k; ++j) {
          const std::uint16_t h = half[static_cast<std::size_t>(j)];
          t.data[static_cast<std::size_t>(i + j)] = f16 ? half_to_float(h) : math::from_bf16(bf16{h});
        }
        i += k;
      }
    }
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}
}  // namespace detail

/// Writes tensors (name, shape, values: F32, or BF16 for a HostTensor of dtype bf16) and string
/// metadata; atomically: to a temporary
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
  auto bytes_of = [](const HostTensor& t) {
    return t.dtype == DType::bf16 ? t.bf16_data.size() * 2 : t.data.size() * 4;
  };
  for (const auto& [name, t] : tensors) {
    const bool half = t.dtype == DType::bf16;
    REMAT_CHECK(t.dtype == DType::f32 || half, "remat::io::write_safetensors: tensor '", name,
                "' is ", dtype_name(t.dtype), " (expected f32 or bf16)");
    const std::size_t n = half ? t.bf16_data.size() : t.data.size();
    REMAT_CHECK(static_cast<std::int64_t>(n) == t.shape.numel() && (half ? t.data.empty() : t.bf16_data.empty()),
                "remat::io::write_safetensors: tensor '", name, "' has shape ", t.shape.str(),
                " but ", n, " ", dtype_name(t.dtype), " values",
                (half ? !t.data.empty() : !t.bf16_data.empty()) ? " and values of the other type too" : "");
    const std::uint64_t bytes = bytes_of(t);
    header[name] = {{"dtype", half ? "BF16" : "F32"}, {"shape", t.shape.vec()}, {"data_offsets", {at, at + bytes}}};
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
    const HostTensor& t = kv.second;
    if (t.dtype == DType::bf16) f.write(t.bf16_data.data(), bytes_of(t));
    else f.write(t.data.data(), bytes_of(t));
    written += bytes_of(t);
    if (after_half && !halted && 2 * written >= at) {
      halted = true;
      after_half();
    }
  }
  f.commit();
}

}  // namespace io
}  // namespace remat
