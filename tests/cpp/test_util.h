// Helpers shared by the C++ unit tests.
#pragma once

#include <functional>
#include <string>

#include "host/core/error.h"

namespace luatune {

// The message of the luatune::Error `fn` throws, or "(no error)" when it returns normally; tests
// pin the one-line messages with it.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace luatune
