// Helpers shared by the C++ unit tests.
#pragma once

#include <cstdlib>
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

// Sets (or, with nullptr, unsets) an environment variable for one test, then puts it back.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvGuard() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace luatune
