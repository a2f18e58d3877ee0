// JSONL input, one JSON value a line: the one reader behind every JSONL file luatune takes in
// (datasets and preference pairs, rejection-sampling prompts, eval tasks, metrics logs, sweep
// stores, `runner tokenize`'s stdin). Each line is checked in the same order: its length
// (kJsonlMaxLineBytes), UTF-8, nesting (host/core/json.h), then parsed; every refusal is one line
// "PATH:LINE: ...". Blank lines are skipped; a last line without its '\n' is read like any other.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace luatune {

// The longest line accepted, in bytes without its '\n': far above any record a dataset holds, low
// enough that a file with no newlines (a JSON array, a binary file) fails at its first line
// instead of being read whole into one string.
constexpr size_t kJsonlMaxLineBytes = size_t(64) << 20;  // 64 MiB

// What a bad line (too long, not UTF-8, nested too deep, not JSON) does.
enum class JsonlBad {
  fail,    // next() throws its one-line error
  skip,    // next() counts it (skipped()) and reads on: logs a killed run may have cut short
  report,  // next() returns it with error() set, for a reader whose own rules decide (skip_bad)
};

struct JsonlReadOptions {
  JsonlBad bad = JsonlBad::fail;
  // What a line must be, for "PATH:LINE: expected a JSON object, got '...' (not valid JSON ...)".
  std::string expected = "a JSON value";
  size_t max_line_bytes = kJsonlMaxLineBytes;
  // false: a blank line is a bad line (`runner tokenize` answers each input line with one line).
  bool skip_blank = true;
};

// Reads one file (or an open stream such as stdin) line by line; J is nlohmann::json or, where the
// order of keys matters, nlohmann::ordered_json.
//   JsonlReader in(path, {});
//   LT_CHECK(in.is_open(), "data: cannot open '" << path << "'");
//   while (in.next()) use(in.value(), in.line());
template <class J>
class JsonlReaderOf {
 public:
  JsonlReaderOf(const std::string& path, JsonlReadOptions options);
  // Reads `f`'s file descriptor directly (not closed here; nothing may have been read through `f`
  // before); `name` stands for the path in messages ("stdin").
  JsonlReaderOf(std::FILE* f, std::string name, JsonlReadOptions options);
  ~JsonlReaderOf();
  JsonlReaderOf(const JsonlReaderOf&) = delete;
  JsonlReaderOf& operator=(const JsonlReaderOf&) = delete;

  bool is_open() const { return fd_ >= 0; }
  const std::string& open_error() const { return open_error_; }  // "cannot open 'PATH': REASON"

  // The next line that is not blank: true with value() set, or with error() set under
  // JsonlBad::report; false at the end of the input. A read error throws "PATH:LINE: read error".
  bool next();

  J& value() { return value_; }  // discarded when error() is set
  const J& value() const { return value_; }
  int64_t line() const { return line_no_; }  // 1-based, counting blank lines
  std::string where() const { return path_ + ":" + std::to_string(line_no_); }
  // The line without its '\n' (and a '\r' before it); empty for a line too long to hold.
  std::string_view text() const { return text_; }
  // Why the line is bad: the whole "PATH:LINE: PROBLEM" message, or PROBLEM alone; "" when good.
  std::string error() const { return problem_.empty() ? "" : where() + ": " + problem_; }
  const std::string& problem() const { return problem_; }
  // No line follows this one (a line a crash cut short is always the last). Looks ahead, so on a
  // pipe it waits for the next line or the end: call it only where the answer is needed.
  bool last();
  bool ended_with_newline() const { return newline_; }
  int64_t skipped() const { return skipped_; }  // bad lines skipped (JsonlBad::skip)
  const std::string& path() const { return path_; }

 private:
  bool read_line();  // the next raw line into text_; false at the end
  bool fill();       // more bytes into buf_; false at the end
  std::string check_and_parse();

  int fd_ = -1;
  bool owns_ = false;
  std::string path_, open_error_;
  JsonlReadOptions o_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  std::string text_, problem_;
  bool too_long_ = false, newline_ = false;
  int64_t line_no_ = 0, skipped_ = 0;
  J value_;
};

using JsonlReader = JsonlReaderOf<nlohmann::json>;
using OJsonlReader = JsonlReaderOf<nlohmann::ordered_json>;

// Calls f(value, line) for each line of `path`; returns how many bad lines were skipped
// (JsonlBad::skip; JsonlBad::report counts as skip here). Fails "cannot open 'PATH': REASON".
int64_t jsonl_read(const std::string& path, const JsonlReadOptions& options,
                   const std::function<void(const nlohmann::json& value, int64_t line)>& f);

}  // namespace luatune
