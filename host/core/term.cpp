// Terminal colour policy (see term.h).
#include "host/core/term.h"

#include <unistd.h>

#include <cstdlib>

namespace luatune {

bool term_no_color() {
  const char* v = std::getenv("NO_COLOR");
  return v && *v;
}

bool term_color(std::FILE* out) {
  return out && isatty(fileno(out)) == 1 && !term_no_color();
}

}  // namespace luatune
