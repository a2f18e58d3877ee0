// JSON from outside luatune (datasets, config.json, tokenizer files, safetensors headers, stores
// on disk): parsed with a nesting limit. nlohmann's parser is iterative, but dump(), copies and
// comparisons recurse once per level, so a line of 100000 '[' would overflow the stack later, far
// from the file that caused it. Every reader of external JSON goes through here instead.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace luatune {

// The deepest nesting of arrays and objects accepted (HF files nest fewer than 10 levels).
constexpr int kJsonMaxDepth = 128;

// The line (counted from `first_line`) where `text` opens a level deeper than kJsonMaxDepth, or 0
// when it never does. Strings are skipped, so brackets inside them do not count.
int64_t json_too_deep_line(std::string_view text, int64_t first_line = 1);
// "PATH:LINE: JSON nested deeper than 128 levels ..." for `text` read from `path` at `first_line`,
// or "" when the nesting is within the limit.
std::string json_depth_error(std::string_view text, const std::string& path, int64_t first_line = 1);
// Fails with json_depth_error's message when `text` nests too deep.
void json_check_depth(std::string_view text, const std::string& path, int64_t first_line = 1);

// Parses `text` read from `path`; one-line errors: "PATH:LINE: JSON nested deeper than 128
// levels" or "PATH: not valid JSON (parse error at line L, column C: ...)".
nlohmann::json json_parse_checked(std::string_view text, const std::string& path);
nlohmann::ordered_json ojson_parse_checked(std::string_view text, const std::string& path);
// For files luatune wrote and reads back leniently (stores, spools, metrics): a discarded value
// (is_discarded()) when `text` is not valid JSON or nests too deep, never an exception.
nlohmann::json json_parse_or_discard(std::string_view text);
nlohmann::ordered_json ojson_parse_or_discard(std::string_view text);

// At most `limit` bytes of v as compact JSON (dump(-1)), cut at a UTF-8 boundary and ended with
// "..." when longer. Stops writing once past the limit, so its recursion is at most `limit` deep
// and its time is bounded whatever the value: the helper for values quoted in error messages.
std::string json_excerpt(const nlohmann::json& v, size_t limit = 60);
std::string json_excerpt(const nlohmann::ordered_json& v, size_t limit = 60);

}  // namespace luatune
