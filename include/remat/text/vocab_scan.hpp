// SPDX-License-Identifier: MIT
// Reading a tokenizer file's JSON (text/tokenizer.hpp, NOTE [Tokenizer files]): the first
// pass that names the token of an id that is not a number, however deep it nests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../io/json.hpp"

namespace remat::text {

namespace detail {

/// The first pass over a tokenizer file (io::scan_json, before its DOM is built): refuses an id
/// that is an array or an object at once, naming its token, however deep it nests. `vocab_at`:
/// the keys down to the vocabulary ({} in vocab.json, {"model", "vocab"} in tokenizer.json).
class VocabScan {
 public:
  using json = nlohmann::json;
  VocabScan(std::vector<std::string> vocab_at, const char* who, const std::string& source)
      : vocab_at_(std::move(vocab_at)), who_(who), source_(source) {}

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(json::number_integer_t) { return scalar(); }
  bool number_unsigned(json::number_unsigned_t) { return scalar(); }
  bool number_float(json::number_float_t, const json::string_t&) { return scalar(); }
  bool string(json::string_t&) { return scalar(); }
  bool start_object() { return open(true); }
  bool key(json::string_t& k) {
    frames_.back().key = k;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array() { return open(false); }
  bool end_array() { return close(); }

 private:
  struct Frame {
    bool object;
    std::string key;
  };
  bool scalar() { return true; }
  bool open(bool object) {
    const std::size_t n = vocab_at_.size();
    bool id = frames_.size() == n + 1 && frames_[n].object;  // a value of the vocabulary object
    for (std::size_t i = 0; id && i < n; ++i) id = frames_[i].object && frames_[i].key == vocab_at_[i];
    if (id)
      throw Error(::remat::detail::cat(who_, ": token ", io::json_brief(json(frames_[n].key)), " in '", source_,
                                       "' has ", object ? "an object" : "an array",
                                       " as its id (expected an integer)"));
    frames_.push_back({object, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  std::vector<std::string> vocab_at_;
  const char* who_;
  const std::string& source_;
  std::vector<Frame> frames_;
};

}  // namespace detail

}  // namespace remat::text
