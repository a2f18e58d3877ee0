// Error construction helpers (see error.h).
#include "host/core/error.h"

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
  throw Error(os.str());
}

}  // namespace luatune
