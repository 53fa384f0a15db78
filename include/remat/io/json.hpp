#pragma once
// SPDX-License-Identifier: MIT
// JSON from files (safetensors headers, config.json, tokenizer files), parsed within limits.
// Needs nlohmann-json (Debian: nlohmann-json3-dev).
//
// NOTE [hostile JSON]: a file decides how deep its JSON nests and how many values it holds, and
// nlohmann's DOM costs ~16-100 bytes a value however small the text (`{}` is 2 bytes of text and
// ~80 of DOM), so a 48 MB header of `[{},{},...]` took 1.6 GiB, and code that recurses over a
// value (dump(), a copy) overflows the stack at ~85,000 levels. Every reader therefore
//   1. refuses text over its byte cap (the caller checks the file size before reading it),
//   2. scans the text once with a SAX handler (JsonScan) that keeps no values: depth <=
//      max_depth, at most max_values values, no key twice in one object (a second value would
//      silently replace the first), syntax errors with their byte offset, and the place in the
//      document (a JSON pointer, "/w/shape/0") of a problem,
//   3. then either builds a DOM (parse_json_document, parse_json: files of a few MB, config.json
//      and tokenizer files) or hands the scan's events to its own handler (scan_json: a
//      safetensors header, up to 100 MB, builds only its tensor list, never a DOM);
// and error messages describe file values with json_brief(), which never recurses.
// NOTE [DOM out of memory]: nlohmann's destructor of an array or object allocates (it moves the
// children to a heap stack to avoid recursion), so a bad_alloc while a DOM is built, unwinding
// through the destructor of the half-built DOM, could throw again inside a noexcept destructor:
// std::terminate, exit 134. parse_json builds the DOM with its own handler that catches
// bad_alloc at each value, and before the build it reserves a graveyard: room for one json (16
// bytes, untouched until used, so no RSS) per value the scan counted. When memory runs out, the
// half-built DOM is buried (bury_json): every value is moved into the graveyard, each parent
// emptied as its children leave, so every value is destroyed with no children and no
// destructor allocates. Only then is remat::OutOfMemory thrown. A DOM that loads is returned in
// a JsonDocument, whose destructor buries it the same way: a reader that runs out of memory
// while it holds the DOM unwinds through that destructor safely (a plain nlohmann::json from
// parse_json does not). (Freeing a byte reserve before nlohmann's destructor was not enough:
// glibc's heap growth and its dynamic mmap threshold ask for more than the bytes freed, and a
// tokenizer.json aborted at 7 of 53 address-space limits: tests/io/test_hostile_large.sh.)

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "remat/core/error.hpp"

namespace remat {
namespace io {

/// What parse_json and scan_json accept. The defaults suit a safetensors header; each reader
/// states its own limits and why.
struct JsonLimits {
  std::uint64_t max_bytes = 100'000'000;  // the safetensors reference caps headers at 100 MB
  int max_depth = 64;                     // real files nest 2-6 levels
  std::uint64_t max_values = 4'000'000;   // scalars, arrays and objects, each counted once
};

/// A short description of a JSON value for error messages that never recurses: a scalar as
/// JSON (a string cut at 40 characters), an array or object by its kind and size.
inline std::string json_brief(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::array:
      return ::remat::detail::cat("an array of ", v.size(), v.size() == 1 ? " element" : " elements");
    case nlohmann::json::value_t::object:
      return ::remat::detail::cat("an object of ", v.size(), v.size() == 1 ? " key" : " keys");
    case nlohmann::json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();  // a cut may split a character:
      const auto quoted = [](const std::string& t) {              // shown as U+FFFD
        return nlohmann::json(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      };
      return s.size() <= 40 ? quoted(s) : quoted(s.substr(0, 40)) + "...";
    }
    case nlohmann::json::value_t::binary:
      return "binary data";
    default:
      return v.dump();  // null, a boolean or a number: no children
  }
}

namespace detail {

/// A SAX sink that takes nothing (parse_json's scan).
struct JsonNoSink {
  using json = nlohmann::json;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool start_object() { return true; }
  bool key(json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array() { return true; }
  bool end_array() { return true; }
};

/// The value types nlohmann's SAX interface speaks, for the handlers below.
struct SaxTypes {
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;
};

/// The scan of NOTE [hostile JSON] 2: a SAX handler that checks the limits, keeps only the keys
/// of the objects being read (for duplicates) and the path to the current value (for messages),
/// and passes each event on to `sink` (which may throw remat::Error; its messages are its own).
/// A problem of the scan itself throws "<who>: the <what> '<source>' cannot be used: <why>".
template <class Sink>
class JsonScan : public SaxTypes {
 public:

  JsonScan(const JsonLimits& l, Sink& sink, const char* who, const char* what, const std::string& source)
      : limits_(l), sink_(sink), who_(who), what_(what), source_(source) {}

  std::uint64_t values() const noexcept { return values_; }

  bool null() { return value() && sink_.null(); }
  bool boolean(bool b) { return value() && sink_.boolean(b); }
  bool number_integer(number_integer_t v) { return value() && sink_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return value() && sink_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return value() && sink_.number_float(v, s); }
  bool string(string_t& s) { return value() && sink_.string(s); }
  bool binary(binary_t&) { return fail("it holds binary data (expected JSON text)"); }
  bool start_object(std::size_t) {
    open(false);
    keys_.emplace_back();
    return sink_.start_object();
  }
  bool key(string_t& k) {
    if (!keys_.back().insert(k).second)
      fail(::remat::detail::cat("the key ", quote(k), " appears twice in one object at ", where(),
                                " (expected each key once: which value is meant?)"));
    frames_.back().key = k.size() <= 40 ? k : k.substr(0, 40) + "...";
    return sink_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    frames_.pop_back();
    return sink_.end_object();
  }
  bool start_array(std::size_t) {
    open(true);
    return sink_.start_array();
  }
  bool end_array() {
    frames_.pop_back();
    return sink_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    return fail(::remat::detail::cat("it is not valid JSON: ", e.what()));
  }

  /// Where the scan is, as a JSON pointer ("/w/shape/0"; "/" for the top), cut after 8 levels.
  std::string where() const {
    if (frames_.empty()) return "/";
    std::string p;
    std::size_t shown = 0;
    for (const Frame& f : frames_) {
      if (++shown > 8) return p + "/... (" + std::to_string(frames_.size()) + " levels)";
      p += "/";
      if (f.array) p += f.index ? std::to_string(f.index - 1) : "0";
      else for (const char c : f.key) p += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    }
    return p;
  }

 private:
  struct Frame {
    bool array;
    std::uint64_t index = 0;  // arrays: 1 + the index of the current element (0: none yet)
    std::string key;          // objects: the current key (cut at 40 bytes)
  };
  static std::string quote(const std::string& s) {
    return json_brief(nlohmann::json(s.size() <= 60 ? s : s.substr(0, 60)));
  }
  [[noreturn]] bool fail(const std::string& why) const {
    throw Error(::remat::detail::cat(who_, ": the ", what_, " '", source_, "' cannot be used: ", why));
  }
  bool value() {
    if (++values_ > limits_.max_values)
      fail(::remat::detail::cat("it holds more than ", limits_.max_values,
                                " JSON values (a real one holds far fewer)"));
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  void open(bool array) {
    value();
    if (frames_.size() >= static_cast<std::size_t>(limits_.max_depth))
      fail(::remat::detail::cat("it nests deeper than ", limits_.max_depth, " levels at ", where(),
                                " (a real one nests a few)"));
    frames_.push_back(Frame{array, 0, {}});
  }

  JsonLimits limits_;
  Sink& sink_;
  const char* who_;
  const char* what_;
  const std::string& source_;
  std::uint64_t values_ = 0;
  std::vector<Frame> frames_;
  std::vector<std::unordered_set<std::string>> keys_;
};

/// Builds the DOM of text the scan accepted (NOTE [DOM out of memory]): like nlohmann's own DOM
/// parser, with every allocation's bad_alloc caught and turned into a stop.
class JsonBuild : public SaxTypes {
 public:

  explicit JsonBuild(json& root) : root_(root) {}
  bool out_of_memory = false;

  bool null() { return put(json(nullptr)) != nullptr; }
  bool boolean(bool b) { return put(json(b)) != nullptr; }
  bool number_integer(number_integer_t v) { return put(json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return put(json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t&) { return put(json(v)) != nullptr; }
  bool string(string_t& s) {
    try {
      return put(json(std::move(s))) != nullptr;
    } catch (const std::bad_alloc&) {
      return oom();
    }
  }
  bool binary(binary_t&) { return false; }  // the scan refused it
  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool key(string_t& k) {
    try {
      key_ = k;
      return true;
    } catch (const std::bad_alloc&) {
      return oom();
    }
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  bool oom() {
    out_of_memory = true;
    return false;
  }
  // Places v in the container being built (or as the root); the new value, or null.
  json* put(json&& v) {
    try {
      if (stack_.empty()) {
        root_ = std::move(v);
        return &root_;
      }
      json& top = *stack_.back();
      if (top.is_array()) {
        auto& a = top.get_ref<json::array_t&>();
        a.push_back(std::move(v));
        return &a.back();
      }
      auto& slot = top.get_ref<json::object_t&>()[key_];
      slot = std::move(v);
      return &slot;
    } catch (const std::bad_alloc&) {
      oom();
      return nullptr;
    }
  }
  bool open(json::value_t t) {
    try {
      json* v = put(json(t));
      if (!v) return false;
      stack_.push_back(v);  // a child's address: stable until its parent grows, after it ends
      return true;
    } catch (const std::bad_alloc&) {
      return oom();
    }
  }
  json& root_;
  std::vector<json*> stack_;
  std::string key_;
};

/// Destroys `v` without allocating (NOTE [DOM out of memory]): breadth first, each value moves
/// into `graveyard` (whose capacity, reserved beforehand, must hold every value of `v`) and
/// leaves its parent empty; then the graveyard's values, none with children, are destroyed.
/// Values beyond the capacity (none, when it is the scan's count) are destroyed as nlohmann does.
inline void bury_json(nlohmann::json& v, std::vector<nlohmann::json>& graveyard) noexcept {
  graveyard.clear();
  if (graveyard.capacity() == 0) return;
  graveyard.push_back(std::move(v));  // within capacity: no allocation
  const auto room = [&] { return graveyard.size() < graveyard.capacity(); };
  for (std::size_t i = 0; i < graveyard.size(); ++i) {
    nlohmann::json& x = graveyard[i];  // stays valid: push_back never reallocates here
    if (x.is_array()) {
      auto& children = x.get_ref<nlohmann::json::array_t&>();
      for (auto& c : children)
        if (room()) graveyard.push_back(std::move(c));
      children.clear();  // moved-from children are null: nothing to allocate
    } else if (x.is_object()) {
      auto& children = x.get_ref<nlohmann::json::object_t&>();
      for (auto& c : children)
        if (room()) graveyard.push_back(std::move(c.second));
      children.clear();
    }
  }
  graveyard.clear();
}

/// The scan's part of the work common to parse_json and scan_json; the sink's errors pass
/// through, a bad_alloc is remat::OutOfMemory.
template <class Sink>
std::uint64_t scan_text(std::string_view text, const JsonLimits& limits, Sink& sink, const char* who,
                        const char* what, const std::string& source) {
  if (text.size() > limits.max_bytes)
    throw Error(::remat::detail::cat(who, ": the ", what, " '", source, "' cannot be used: it has ",
                                     text.size(), " bytes, more than the ", limits.max_bytes,
                                     " allowed (a real one is far smaller)"));
  try {
    JsonScan<Sink> scan(limits, sink, who, what, source);
    if (!nlohmann::json::sax_parse(text.begin(), text.end(), &scan))
      throw Error(::remat::detail::cat(who, ": the ", what, " '", source, "' cannot be used: it is "
                                       "not valid JSON"));
    return scan.values();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(::remat::detail::cat(who, ": out of host memory while parsing the ", what,
                                           " '", source, "' (", text.size(), " bytes of JSON)"));
  } catch (const std::exception& e) {
    throw Error(::remat::detail::cat(who, ": the ", what, " '", source, "' cannot be used: it is "
                                     "not valid JSON: ", e.what()));
  }
}

}  // namespace detail

/// A DOM destroyed without allocating (NOTE [DOM out of memory]): parse_json_document's result.
/// nlohmann's own destructor allocates, so a DOM destroyed while memory has run out (unwinding
/// from an OutOfMemory in the reader that uses it) could end in std::terminate; this one buries
/// its values in a graveyard reserved when it was parsed.
class JsonDocument {
 public:
  nlohmann::json dom;

  JsonDocument() = default;
  JsonDocument(JsonDocument&&) noexcept = default;
  JsonDocument& operator=(JsonDocument&& o) noexcept {
    detail::bury_json(dom, graveyard_);
    dom = std::move(o.dom);
    graveyard_ = std::move(o.graveyard_);
    return *this;
  }
  JsonDocument(const JsonDocument&) = delete;
  JsonDocument& operator=(const JsonDocument&) = delete;
  ~JsonDocument() { detail::bury_json(dom, graveyard_); }

 private:
  std::vector<nlohmann::json> graveyard_;  // capacity: every value of dom, untouched until used
  friend JsonDocument parse_json_document(std::string_view, const JsonLimits&, const char*,
                                          const char*, const std::string&);
};

/// Parses `text` within `limits` into a DOM (NOTE [hostile JSON], NOTE [DOM out of memory]).
/// Errors read "<who>: the <what> '<source>' cannot be used: <why>", e.g.
/// "remat::io::read_gpt2: the config.json '/m/config.json' cannot be used: it nests deeper than
/// 64 levels at /n_head/0/0/0/0/0/0/0/... (65 levels) (a real one nests a few)". `who` is the
/// reader ("remat::io::read_gpt2"), `what` names the kind of file. Running out of memory is
/// remat::OutOfMemory, never std::terminate, and the document is destroyed without allocating.
inline JsonDocument parse_json_document(std::string_view text, const JsonLimits& limits,
                                        const char* who, const char* what, const std::string& source) {
  detail::JsonNoSink none;
  const std::uint64_t values = detail::scan_text(text, limits, none, who, what, source);
  const auto oom = [&] {
    return OutOfMemory(::remat::detail::cat(who, ": out of host memory while parsing the ", what,
                                            " '", source, "' (", text.size(), " bytes of JSON, ",
                                            values, " values)"));
  };
  JsonDocument doc;
  try {  // the graveyard: room for every value, should memory run out (NOTE [DOM out of memory])
    doc.graveyard_.reserve(static_cast<std::size_t>(values) + 1);
  } catch (const std::bad_alloc&) {
    throw oom();
  }
  detail::JsonBuild build(doc.dom);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &build);
  } catch (const std::bad_alloc&) {  // in nlohmann's own parser (its state stack, a number)
    build.out_of_memory = true;
  }
  if (!ok || build.out_of_memory) {
    detail::bury_json(doc.dom, doc.graveyard_);  // no allocation; the DOM's memory is free again
    std::vector<nlohmann::json>().swap(doc.graveyard_);
    if (build.out_of_memory) throw oom();
    throw Error(::remat::detail::cat(who, ": the ", what, " '", source, "' cannot be used: it is not valid JSON"));
  }
  return doc;
}

/// parse_json_document's DOM alone, for callers that keep it as a plain nlohmann::json (its
/// destructor allocates: a reader that may run out of memory while the DOM lives should keep
/// the JsonDocument instead).
inline nlohmann::json parse_json(std::string_view text, const JsonLimits& limits, const char* who,
                                 const char* what, const std::string& source) {
  JsonDocument doc = parse_json_document(text, limits, who, what, source);
  return std::move(doc.dom);
}

/// Scans `text` within `limits` (NOTE [hostile JSON]) and passes every event to `sink`, an
/// object with nlohmann's SAX methods minus parse_error and binary (null(), boolean(b),
/// number_integer(i), number_unsigned(u), number_float(d, text), string(s), start_object(),
/// key(k), end_object(), start_array(), end_array()), each returning true or throwing a
/// remat::Error of its own. For readers that build their own structure from a large file
/// instead of a DOM. Running out of memory is remat::OutOfMemory.
template <class Sink>
void scan_json(std::string_view text, const JsonLimits& limits, Sink& sink, const char* who,
               const char* what, const std::string& source) {
  (void)detail::scan_text(text, limits, sink, who, what, source);
}

}  // namespace io
}  // namespace remat
