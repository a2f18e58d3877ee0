// Errors: every user-facing failure in host/ is a luatune::Error whose message says what was
// expected and, where useful, a hint. UsageError marks bad command lines and configs (exit 2).
// Bindings turn these (and LibTorch's c10::Error) into Lua errors at one choke point.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace luatune {

// Exit statuses of a run (the runner's, and what metric sinks report when they close).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;  // stopped by SIGINT/SIGTERM (after saving, host/train/stop.h)

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A usage or configuration error: the user asked for something that cannot be run (exit status 2).
class UsageError : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside luatune (fail_internal, LT_ASSERT): a bug, not the user's mistake. The
// runner shows a traceback for these; a plain Error reads as one line (docs/recipes.md, Errors).
class InternalError : public Error {
 public:
  using Error::Error;
};

// Throws Error(message); with a hint, the message ends in "\n  HINT: hint".
[[noreturn]] void fail(const std::string& message, const std::string& hint = "");
[[noreturn]] void fail_usage(const std::string& message, const std::string& hint = "");
// Internal invariant broken: the message carries the C++ file:line and says it is a bug.
[[noreturn]] void fail_internal(const char* file, int line, const std::string& message);

// Whether `e` is an allocation failure: std::bad_alloc, LibTorch's CPU "not enough memory" or
// its CUDA "out of memory".
bool error_is_out_of_memory(const std::exception& e);
// Call inside a catch block: an allocation failure is rethrown as Error "WHAT: out of memory
// (DETAIL)", so the message names what was being allocated; anything else is rethrown unchanged.
[[noreturn]] void rethrow_out_of_memory(const std::string& what);

}  // namespace luatune

// LT_CHECK(cond, "expected " << n << " items"): user-facing check, message built with <<.
#define LT_CHECK(cond, msg)                \
  do {                                     \
    if (!(cond)) {                         \
      std::ostringstream lt_check_os_;     \
      lt_check_os_ << msg;                 \
      ::luatune::fail(lt_check_os_.str()); \
    }                                      \
  } while (0)

// LT_ASSERT(cond, msg): an internal invariant; failing it is a luatune bug, reported with file:line.
#define LT_ASSERT(cond, msg)                                             \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::ostringstream lt_assert_os_;                                  \
      lt_assert_os_ << msg;                                              \
      ::luatune::fail_internal(__FILE__, __LINE__, lt_assert_os_.str()); \
    }                                                                    \
  } while (0)
