// Terminal width and colour policy (see term.h).
#include "host/core/term.h"

#include <sys/ioctl.h>
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

int term_width(std::FILE* out) {
  if (const char* env = std::getenv("COLUMNS"); env && *env) {
    char* end = nullptr;
    long cols = std::strtol(env, &end, 10);
    if (*end == 0 && cols >= 40 && cols <= 1000) return static_cast<int>(cols);
  }
  winsize ws{};
  if (out && isatty(fileno(out)) == 1 && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
    return ws.ws_col;
  return 100;
}

}  // namespace luatune
