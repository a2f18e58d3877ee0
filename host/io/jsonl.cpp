// The JSONL reader (see jsonl.h): buffered reads, a line at a time, each checked for length,
// UTF-8 and nesting before it is parsed.
#include "host/io/jsonl.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "host/core/error.h"
#include "host/core/json.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

constexpr size_t kReadChunk = size_t(1) << 20;  // bytes per fread

// "64 MiB" for whole MiB, else "100 bytes" (the tests' small limits).
std::string size_text(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// The first 60 bytes of a valid UTF-8 line, cut at a character boundary, for "got '...'".
std::string line_excerpt(std::string_view s) {
  constexpr size_t kLimit = 60;
  if (s.size() <= kLimit) return std::string(s);
  size_t cut = kLimit;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;
  return std::string(s.substr(0, cut)) + "...";
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 20: DETAIL" as
// "column 20: DETAIL" (a line is one line: its line number says nothing).
std::string parse_detail(const std::string& what) {
  size_t at = what.find("column ");
  return at == std::string::npos ? what : what.substr(at);
}

}  // namespace

template <class J>
JsonlReaderOf<J>::JsonlReaderOf(const std::string& path, JsonlReadOptions options)
    : owns_(true), path_(path), o_(std::move(options)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) open_error_ = "cannot open '" + path + "': " + std::strerror(errno);
}

template <class J>
JsonlReaderOf<J>::JsonlReaderOf(std::FILE* f, std::string name, JsonlReadOptions options)
    : fd_(f ? ::fileno(f) : -1), owns_(false), path_(std::move(name)), o_(std::move(options)) {
  if (fd_ < 0) open_error_ = "cannot read '" + path_ + "'";
}

template <class J>
JsonlReaderOf<J>::~JsonlReaderOf() {
  if (fd_ >= 0 && owns_) ::close(fd_);
}

template <class J>
bool JsonlReaderOf<J>::fill() {
  if (eof_) return false;
  if (buf_.empty()) buf_.resize(kReadChunk);
  // read(2), not fread: on a pipe it returns what is there, so `runner tokenize` answers a line
  // before the next one arrives.
  ssize_t n;
  do {
    n = ::read(fd_, buf_.data(), buf_.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) fail(path_ + ":" + std::to_string(line_no_ + 1) + ": read error: " + std::strerror(errno));
  if (n == 0) {
    eof_ = true;
    return false;
  }
  pos_ = 0;
  end_ = static_cast<size_t>(n);
  return true;
}

template <class J>
bool JsonlReaderOf<J>::read_line() {
  text_.clear();
  too_long_ = newline_ = false;
  size_t length = 0;
  bool any = false;
  for (;;) {
    if (pos_ == end_ && !fill()) break;
    any = true;
    const char* start = buf_.data() + pos_;
    const void* nl = std::memchr(start, '\n', end_ - pos_);
    size_t n = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : end_ - pos_;
    length += n;
    if (!too_long_ && length > o_.max_line_bytes) {
      too_long_ = true;  // the rest of the line is read past, never held
      std::string().swap(text_);
    }
    if (!too_long_) text_.append(start, n);
    pos_ += n;
    if (nl) {
      pos_++;
      newline_ = true;
      break;
    }
  }
  if (!any) return false;
  line_no_++;
  if (!too_long_ && !text_.empty() && text_.back() == '\r') text_.pop_back();
  return true;
}

template <class J>
bool JsonlReaderOf<J>::last() {
  return !newline_ || (pos_ == end_ && !fill());
}

template <class J>
std::string JsonlReaderOf<J>::check_and_parse() {
  if (too_long_)
    return "line longer than " + size_text(o_.max_line_bytes) +
           " (luatune's limit for a JSONL line; see docs/limits.md)";
  size_t bad = utf8_invalid_at(text_);
  if (bad != std::string_view::npos)
    return "invalid UTF-8 at byte " + std::to_string(bad + 1) + " (JSONL is UTF-8 text)";
  std::string deep = json_depth_error(text_, path_, line_no_);
  if (!deep.empty()) return deep.substr(where().size() + 2);
  try {
    value_ = J::parse(text_);
  } catch (const nlohmann::json::parse_error& e) {
    return "expected " + o_.expected + ", got '" + line_excerpt(text_) + "' (not valid JSON at " +
           parse_detail(e.what()) + ")";
  }
  return "";
}

template <class J>
bool JsonlReaderOf<J>::next() {
  LT_CHECK(fd_ >= 0, open_error_);
  for (;;) {
    if (!read_line()) return false;
    if (o_.skip_blank && !too_long_ && text_.find_first_not_of(" \t\r") == std::string::npos) continue;
    problem_ = check_and_parse();
    if (problem_.empty()) return true;
    value_ = J(J::value_t::discarded);
    if (o_.bad == JsonlBad::fail) fail(error());
    if (o_.bad == JsonlBad::report) return true;
    skipped_++;
  }
}

template class JsonlReaderOf<nlohmann::json>;
template class JsonlReaderOf<nlohmann::ordered_json>;

namespace {

template <class J>
int64_t read_all(const std::string& path, JsonlReadOptions o,
                 const std::function<void(const J&, int64_t)>& f) {
  if (o.bad == JsonlBad::report) o.bad = JsonlBad::skip;
  JsonlReaderOf<J> in(path, std::move(o));
  if (!in.is_open()) fail(in.open_error());
  while (in.next()) f(in.value(), in.line());
  return in.skipped();
}

}  // namespace

int64_t jsonl_read(const std::string& path, const JsonlReadOptions& options,
                   const std::function<void(const nlohmann::json& value, int64_t line)>& f) {
  return read_all<nlohmann::json>(path, options, f);
}

}  // namespace luatune
