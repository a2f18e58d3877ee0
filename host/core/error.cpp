// Error construction helpers (see error.h).
#include "host/core/error.h"

#include <c10/util/Exception.h>

#include <new>

namespace luatune {

static std::string with_hint(const std::string& message, const std::string& hint) {
  return hint.empty() ? message : message + "\n  HINT: " + hint;
}

void fail(const std::string& message, const std::string& hint) {
  throw Error(with_hint(message, hint));
}

void fail_usage(const std::string& message, const std::string& hint) {
  throw UsageError(with_hint(message, hint));
}

void fail_internal(const char* file, int line, const std::string& message) {
  std::ostringstream os;
  os << "internal error at " << file << ":" << line << ": " << message
     << " (this is a luatune bug; please report it)";
  throw InternalError(os.str());
}

bool error_is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  if (!c10_error) return false;
  const std::string& m = c10_error->msg();
  for (const char* s : {"not enough memory", "can't allocate memory", "out of memory"})
    if (m.find(s) != std::string::npos) return true;
  return false;
}

void rethrow_out_of_memory(const std::string& what) {
  try {
    throw;
  } catch (const std::exception& e) {
    if (!error_is_out_of_memory(e)) throw;
    std::string detail = "std::bad_alloc";
    if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
      detail = c10_error->what_without_backtrace();
      detail = detail.substr(0, detail.find('\n'));  // LibTorch's first line: the bytes it asked for
      // From the allocator's name on, past "[enforce fail at alloc_cpu.cpp:75] err == 0. ".
      size_t from = detail.find("DefaultCPUAllocator");
      if (from != std::string::npos) detail = detail.substr(from);
    }
    throw Error(what + ": out of memory (" + detail + ")");
  }
}

}  // namespace luatune
