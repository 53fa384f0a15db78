#pragma once
// SPDX-License-Identifier: MIT
// Structure-aware fuzz inputs (tests/fuzz/README.md, "Recipes"). An input that starts with the
// 4 bytes "RCP\0" is a recipe: its other bytes are read as choices (Recipe) that build a valid
// file (a safetensors file with N tensors, a GPT-2 with L layers and a config.json beside it, a
// snapshot, tokenizer files) and then make one field hostile: nesting at any value, sizes that
// overflow, ids out of range, duplicate keys, tensors missing or under two names, lying header
// lengths. Byte mutation alone rarely gets past a header's JSON; a recipe always does, so the
// fuzzer spends its time on the readers' checks. Each target also knows, for the hostile
// changes whose outcome is certain, that the file must be refused (a file missing a tensor is
// never accepted) or, for none, that it must load with exactly the values written.
// A recipe shorter than the choices it is asked for reads zeros past its end.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace remat_fuzz {

inline bool is_recipe(const std::uint8_t* data, std::size_t size) {
  return size >= 4 && std::memcmp(data, "RCP\0", 4) == 0;
}

/// The bytes of a recipe (after the magic), read as choices.
class Recipe {
 public:
  Recipe(const std::uint8_t* data, std::size_t size) : d_(data), n_(size) {}
  std::uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  /// A number in [0, n), from as many bytes as n needs (n > 0).
  std::uint64_t below(std::uint64_t n) {
    std::uint64_t v = 0;
    for (std::uint64_t m = n - 1; m > 0; m >>= 8) v = (v << 8) | byte();
    return v % n;
  }
  bool coin() { return (byte() & 1) != 0; }
  template <class T, std::size_t N>
  const T& pick(const T (&options)[N]) {
    return options[below(N)];
  }
  std::size_t used() const noexcept { return i_; }

 private:
  const std::uint8_t* d_;
  std::size_t n_, i_ = 0;
};

/// `levels` nested arrays (or objects {"a":...}) around `inner`: 170 KB for 85,000 levels.
inline std::string nest(std::size_t levels, bool objects, const std::string& inner) {
  std::string s;
  s.reserve(levels * (objects ? 6 : 2) + inner.size());
  for (std::size_t i = 0; i < levels; ++i) s += objects ? "{\"a\":" : "[";
  s += inner;
  for (std::size_t i = 0; i < levels; ++i) s += objects ? '}' : ']';
  return s;
}

/// A hostile JSON value where a number (or a string) belongs, and what it is.
struct Hostile {
  std::string text;
  std::size_t depth = 0;      // levels of nesting it adds (0: a scalar)
  bool integer = false;       // a non-negative integer (possibly valid where a size belongs)
};

inline Hostile hostile_value(Recipe& r) {
  static const std::size_t depths[] = {1, 2, 8, 62, 63, 64, 65, 200, 85000, 100000};
  static const char* const numbers[] = {
      "-1", "-0", "0.5", "1e400", "-1e400", "1e3", "18446744073709551615", "18446744073709551616",
      "9223372036854775807", "9223372036854775808", "4611686018427387904", "2147483648",
      "4294967296", "16777215", "65536", "549755813888"};
  static const char* const others[] = {"\"1\"", "null", "true", "[]", "{}", "\"\"", "\"F32\""};
  Hostile h;
  switch (r.below(3)) {
    case 0: {
      h.depth = r.pick(depths);
      const bool objects = r.coin();
      h.text = nest(h.depth, objects, r.coin() ? "1" : "");
      break;
    }
    case 1:
      h.text = r.pick(numbers);
      h.integer = h.text[0] != '-' && h.text.find_first_of(".e") == std::string::npos &&
                  h.text != "18446744073709551616";
      break;
    default:
      h.text = r.pick(others);
      if (h.text == "[]" || h.text == "{}") h.depth = 1;
  }
  return h;
}

/// A safetensors file as text pieces, so that any one piece can be replaced by a hostile one.
struct StEntry {
  std::string name;                // JSON string text, quotes included
  std::string dtype = "\"F32\"";   // JSON text
  std::vector<std::string> dims;   // JSON texts
  std::string shape;               // when not empty: replaces the dims' array
  std::string begin, end;          // JSON texts
  std::string offsets;             // when not empty: replaces [begin, end]
  std::string extra;               // appended fields: ,"x":...
  std::string whole;               // when not empty: the entry's whole value
};

struct StFile {
  std::vector<StEntry> entries;
  std::vector<std::pair<std::string, std::string>> metadata;  // JSON texts: key, value
  bool metadata_object = true;
  std::string metadata_whole;  // when not empty: the __metadata__ value
  std::string top_extra;       // appended to the top object: ,"k":v
  bool replace_header = false;
  std::string header_whole;    // when replace_header: the whole header text
  std::string data;
  bool has_length = false;
  std::uint64_t length = 0;    // the length field, when has_length (else the header's)
  std::size_t cut = 0;         // bytes cut from the end of the file

  std::string header() const {
    if (replace_header) return header_whole;
    std::string h = "{";
    bool first = true;
    const auto sep = [&] {
      if (!first) h += ",";
      first = false;
    };
    for (const StEntry& e : entries) {
      sep();
      h += e.name + ":";
      if (!e.whole.empty()) {
        h += e.whole;
        continue;
      }
      std::string shape = e.shape;
      if (shape.empty()) {
        shape = "[";
        for (std::size_t i = 0; i < e.dims.size(); ++i) shape += (i ? "," : "") + e.dims[i];
        shape += "]";
      }
      h += "{\"dtype\":" + e.dtype + ",\"shape\":" + shape + ",\"data_offsets\":" +
           (e.offsets.empty() ? "[" + e.begin + "," + e.end + "]" : e.offsets) + e.extra + "}";
    }
    if (!metadata.empty() || !metadata_whole.empty()) {
      sep();
      h += "\"__metadata__\":";
      if (!metadata_whole.empty()) {
        h += metadata_whole;
      } else {
        h += "{";
        for (std::size_t i = 0; i < metadata.size(); ++i)
          h += (i ? "," : "") + metadata[i].first + ":" + metadata[i].second;
        h += "}";
      }
    }
    return h + top_extra + "}";
  }

  std::string bytes() const {
    const std::string h = header();
    const std::uint64_t n = has_length ? length : h.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
    out += h;
    out += data;
    out.resize(out.size() > cut ? out.size() - cut : 0);
    return out;
  }
};

inline std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

/// Appends a tensor of fp32 values to a StFile (offsets after the data so far).
inline void add_f32(StFile& f, const std::string& name, const std::vector<std::int64_t>& shape,
                    const std::vector<float>& values) {
  StEntry e;
  e.name = json_string(name);
  for (const std::int64_t d : shape) e.dims.push_back(std::to_string(d));
  e.begin = std::to_string(f.data.size());
  f.data.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  e.end = std::to_string(f.data.size());
  f.entries.push_back(std::move(e));
}

/// What a hostile change did, for the target's checks and REMAT_FUZZ_VERBOSE.
struct Change {
  std::string what = "none";  // a description
  bool must_refuse = false;   // the file must not load
};

/// One hostile change to a valid StFile, of the kinds every safetensors-based target shares:
/// a hostile value at a field (nested, huge, negative, of the wrong type), a duplicate key,
/// a lying length field, truncated data, overlapping offsets, too many dimensions, a header
/// that is not an object.
inline Change hostile_st_change(StFile& f, Recipe& r) {
  Change c;
  const std::size_t n = f.entries.size();
  StEntry* e = n ? &f.entries[r.below(n)] : nullptr;
  switch (r.below(9)) {
    case 0: {  // a hostile value at a field
      const Hostile v = hostile_value(r);
      const std::uint64_t where = r.below(8);
      if (e && where == 0 && !e->dims.empty()) {
        e->dims[r.below(e->dims.size())] = v.text;
        c.what = "a hostile dimension " + v.text.substr(0, 40);
        c.must_refuse = !v.integer || 3 + v.depth > 64;
      } else if (e && where == 1) {
        (r.coin() ? e->begin : e->end) = v.text;
        c.what = "a hostile data offset " + v.text.substr(0, 40);
        c.must_refuse = !v.integer;
      } else if (e && where == 2) {
        e->dtype = v.text;
        c.what = "a hostile dtype " + v.text.substr(0, 40);
        c.must_refuse = v.text != "\"F32\"";
      } else if (e && where == 3) {
        e->whole = v.text;
        c.what = "a hostile tensor entry " + v.text.substr(0, 40);
        c.must_refuse = true;
      } else if (e && where == 4) {
        const bool shape = r.coin();
        (shape ? e->shape : e->offsets) = v.text;
        c.what = std::string("a hostile ") + (shape ? "shape " : "data_offsets ") + v.text.substr(0, 40);
        c.must_refuse = !shape || (v.text != "[]" && v.text != "[1]");  // valid for one value
      } else if (e && where == 5) {
        e->extra = ",\"x\":" + v.text;
        c.what = "a hostile unknown field " + v.text.substr(0, 40);
        c.must_refuse = 2 + v.depth > 64;
      } else if (where == 6) {
        f.metadata.emplace_back("\"k\"", v.text);
        c.what = "a hostile metadata value " + v.text.substr(0, 40);
        c.must_refuse = 2 + v.depth > 64;
      } else {
        f.top_extra = ",\"__metadata__x\":" + v.text;
        c.what = "a hostile top-level value " + v.text.substr(0, 40);
        c.must_refuse = true;  // not an object: not a tensor
      }
      break;
    }
    case 1: {  // a key twice
      c.must_refuse = true;
      const std::uint64_t where = r.below(3);
      if (e && where == 0) {
        f.entries.push_back(*e);
        c.what = "a tensor name twice";
      } else if (e && where == 1) {
        e->extra = ",\"dtype\":" + e->dtype;
        c.what = "dtype twice in one entry";
      } else {
        f.metadata.emplace_back("\"k\"", "\"1\"");
        f.metadata.emplace_back("\"k\"", "\"2\"");
        c.what = "a metadata key twice";
      }
      break;
    }
    case 2: {  // the length field lies
      static const std::uint64_t lengths[] = {151'000'000, 100'000'001, ~std::uint64_t{0},
                                              std::uint64_t{1} << 63, 0};
      f.has_length = true;
      const std::uint64_t real = f.header().size();
      switch (r.below(4)) {
        case 0:
          f.length = r.pick(lengths);
          break;
        case 1:
          f.length = real + f.data.size() + 1 + r.below(16);  // past the end of the file
          break;
        case 2:
          f.length = real > 0 ? real - 1 - r.below(real) : 0;  // the header cut short
          break;
        default:
          f.length = real + 1 + r.below(8);  // into the data
      }
      c.what = "header length " + std::to_string(f.length) + " (the header has " + std::to_string(real) + ")";
      c.must_refuse = f.length > real + f.data.size() || f.length > 100'000'000 || f.length < real;
      break;
    }
    case 3:  // truncated data
      if (!f.data.empty()) {
        f.cut = 1 + r.below(f.data.size());
        c.what = "the data cut by " + std::to_string(f.cut) + " bytes";
        c.must_refuse = true;
      }
      break;
    case 4:  // overlapping offsets: an entry's data moved to start 1-3 bytes early
      if (e && !e->dims.empty() && e->begin != "0" && e->begin != e->end) {
        const std::uint64_t b = std::stoull(e->begin), x = 1 + r.below(3);
        if (b >= x) {
          e->begin = std::to_string(b - x);
          e->end = std::to_string(std::stoull(e->end) - x);
          c.what = "tensor data moved " + std::to_string(x) + " bytes into the one before";
          c.must_refuse = true;
        }
      }
      break;
    case 5:  // a huge dimension beside a zero one, in either order
      if (e) {
        const char* big = r.coin() ? "4611686018427387904" : "2305843009213693952";
        e->dims = r.coin() ? std::vector<std::string>{"0", big} : std::vector<std::string>{big, "0"};
        e->end = e->begin;
        c.what = "shape [0, 2^61+] in some order";
        c.must_refuse = true;
      }
      break;
    case 6:  // more than 6 dimensions
      if (e) {
        e->dims.assign(7 + r.below(3), "1");
        c.what = "7+ dimensions";
        c.must_refuse = true;
      }
      break;
    case 7: {  // not an object
      static const char* const headers[] = {"[]", "[{}]", "\"x\"", "1", "null", "", " ", "{", "{}}"};
      f.replace_header = true;
      f.header_whole = r.pick(headers);
      c.what = "the header is " + f.header_whole;
      c.must_refuse = f.header_whole != "{}";  // {} is valid (the data is left unread)
      break;
    }
    default: {  // a name with a NUL, invalid UTF-8, or long
      if (e) {
        static const char* const names[] = {"\"a\\u0000b\"", "\"\xff\"", "\"\\ud800\"", ""};
        e->name = r.pick(names);
        if (e->name.empty()) e->name = "\"" + std::string(2000, 'n') + "\"";
        c.what = "a strange tensor name";
        c.must_refuse = e->name == "\"\xff\"" || e->name == "\"\\ud800\"";
      }
    }
  }
  return c;
}

}  // namespace remat_fuzz
