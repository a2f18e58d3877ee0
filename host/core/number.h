// Whole numbers held in doubles (Lua numbers, JSON numbers, config values): one test for "is this
// an integer" wherever a double becomes an int64_t or is written as one. Counts (step, tokens) read
// 480 in metrics.jsonl or a plan, not 480.0, and 1e300 or NaN never reaches a cast to int64_t,
// which would be undefined.
#pragma once

#include <cmath>

namespace luatune {

// 2^53: every integer of smaller magnitude is a double, and no two of them share one. From 2^53 on
// a double no longer says which integer was meant (2^53 + 1 rounds to 2^53).
constexpr double kNumberExactLimit = 9007199254740992.0;

// Whether `v` is a whole number a double holds exactly: no fraction and |v| < 2^53. NaN and the
// infinities are not; -0.0 is (it is 0). A float that happens to be whole (a loss of 2.0) is, and
// reads 2 in JSON, the same number.
inline bool number_is_whole(double v) {
  return v == std::floor(v) && std::fabs(v) < kNumberExactLimit;
}

}  // namespace luatune
