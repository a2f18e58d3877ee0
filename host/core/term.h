// Terminal output: how wide a line may be, and whether ANSI colour may be written. Colour is only for a
// terminal, and never when NO_COLOR is set to a non-empty value (https://no-color.org). Cursor movement that
// redraws a progress line ('\r', erase to end of line) is not colour and does not ask here.
#pragma once

#include <cstdio>

namespace luatune {

bool term_no_color();             // NO_COLOR is set and not empty
bool term_color(std::FILE* out);  // `out` is a terminal and !term_no_color()
// Columns to fit text to: $COLUMNS (40..1000), else `out`'s terminal width (>= 40), else 100.
int term_width(std::FILE* out);

}  // namespace luatune
