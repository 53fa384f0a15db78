#pragma once
// SPDX-License-Identifier: MIT
// Error-path checks shared by the reader tests: a call must throw remat::Error (never another
// std:: exception) whose text names every given part.

#include <initializer_list>
#include <string>
#include <typeinfo>

#include <remat/core/error.hpp>

#include "support/catch.hpp"

namespace remat_test {

/// Runs f and requires a remat::Error whose text has every part; returns the text ("" when the
/// check failed).
template <class Fn>
std::string require_error(Fn&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL("no exception");
  } catch (const remat::Error& e) {
    const std::string what = e.what();
    INFO(what);
    for (const std::string& p : parts) CHECK(what.find(p) != std::string::npos);
    return what;
  } catch (const std::exception& e) {
    FAIL("a " << typeid(e).name() << " escaped instead of remat::Error: " << e.what());
  }
  return "";
}

}  // namespace remat_test
