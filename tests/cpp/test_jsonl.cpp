// The JSONL reader (host/io/jsonl.h): values with their line numbers, blank lines skipped, a last
// line without '\n', CRLF, and the one-line errors for a line that is not JSON, not UTF-8, nested
// too deep or too long; the tolerant mode that skips and counts them, and the reporting mode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "host/io/jsonl.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
  fs::path dir = fs::temp_directory_path() / ("luatune_test_jsonl_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

struct Read {
  std::vector<std::pair<int64_t, json>> lines;
  int64_t skipped = 0;
};

Read read_all(const std::string& path, JsonlReadOptions o = {}) {
  Read r;
  r.skipped = jsonl_read(path, o, [&](const json& v, int64_t line) { r.lines.emplace_back(line, v); });
  return r;
}

}  // namespace

TEST(Jsonl, ReadsValuesWithLineNumbersSkippingBlankLines) {
  std::string p = write_file("ok.jsonl", "{\"a\":1}\n\n   \t\n[2,3]\r\n\"x\"\n");
  Read r = read_all(p);
  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[0], (std::pair<int64_t, json>{1, json{{"a", 1}}}));
  EXPECT_EQ(r.lines[1], (std::pair<int64_t, json>{4, json{2, 3}}));  // CRLF: the '\r' is not part of it
  EXPECT_EQ(r.lines[2], (std::pair<int64_t, json>{5, json("x")}));
  EXPECT_EQ(r.skipped, 0);
  EXPECT_TRUE(read_all(write_file("empty.jsonl", "")).lines.empty());
  EXPECT_TRUE(read_all(write_file("blank.jsonl", "\n\n")).lines.empty());
}

TEST(Jsonl, ReadsALastLineWithoutItsNewline) {
  std::string p = write_file("tail.jsonl", "1\n2");
  Read r = read_all(p);
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[1].first, 2);
  EXPECT_EQ(r.lines[1].second, 2);
  JsonlReader in(p, {});
  ASSERT_TRUE(in.next());
  EXPECT_TRUE(in.ended_with_newline());
  EXPECT_FALSE(in.last());
  ASSERT_TRUE(in.next());
  EXPECT_FALSE(in.ended_with_newline());
  EXPECT_TRUE(in.last());
  EXPECT_FALSE(in.next());
  JsonlReader ended(write_file("ended.jsonl", "1\n"), {});
  ASSERT_TRUE(ended.next());
  EXPECT_TRUE(ended.last());  // the '\n' was the file's last byte
}

TEST(Jsonl, ErrorsNameTheFileAndLine) {
  std::string p = write_file("bad.jsonl", "{\"a\":1}\n\nhello world\n");
  EXPECT_EQ(
      error_of([&] { read_all(p); }),
      p + ":3: expected a JSON value, got 'hello world' (not valid JSON at column 1: syntax error while "
          "parsing value - invalid literal; last read: 'h')");
  JsonlReadOptions o;
  o.expected = "a JSON object";
  std::string cut = write_file("cut.jsonl", "{\"step\":1}\n{\"step\":4,\"loss\":2.");
  EXPECT_EQ(
      error_of([&] { read_all(cut, o); }),
      cut +
          ":2: expected a JSON object, got '{\"step\":4,\"loss\":2.' (not valid JSON at column 20: syntax "
          "error while parsing value - invalid number; expected digit after '.'; last read: '2.')");
  // A long line is quoted by its first 60 bytes.
  std::string longer = write_file("long_bad.jsonl", std::string(100, 'x') + "\n");
  EXPECT_NE(error_of([&] { read_all(longer); }).find("got '" + std::string(60, 'x') + "...' (not valid JSON"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { read_all("no/such.jsonl"); }),
            "cannot open 'no/such.jsonl': No such file or directory");
}

TEST(Jsonl, RefusesInvalidUtf8NamingTheByte) {
  // A lone continuation byte; an overlong '/' (C0 AF) and a surrogate (ED A0 80) too.
  std::string p = write_file("utf8.jsonl", "{\"t\":\"ok\"}\n{\"t\":\"\x80\"}\n");
  EXPECT_EQ(error_of([&] { read_all(p); }), p + ":2: invalid UTF-8 at byte 7 (JSONL is UTF-8 text)");
  std::string overlong = write_file("overlong.jsonl", "\"\xC0\xAF\"\n");
  EXPECT_EQ(error_of([&] { read_all(overlong); }),
            overlong + ":1: invalid UTF-8 at byte 2 (JSONL is UTF-8 text)");
  std::string surrogate = write_file("surrogate.jsonl", "\"a\xED\xA0\x80\"\n");
  EXPECT_EQ(error_of([&] { read_all(surrogate); }),
            surrogate + ":1: invalid UTF-8 at byte 3 (JSONL is UTF-8 text)");
  Read ok = read_all(write_file("utf8_ok.jsonl", "\"h\xC3\xA9llo \xF0\x9F\x98\x80\"\n"));
  ASSERT_EQ(ok.lines.size(), 1u);
  EXPECT_EQ(ok.lines[0].second, "h\xC3\xA9llo \xF0\x9F\x98\x80");
}

TEST(Jsonl, RefusesOverlongLinesWithoutHoldingThem) {
  JsonlReadOptions o;
  o.max_line_bytes = 100;
  std::string p = write_file("overlong_line.jsonl", "1\n\"" + std::string(200, 'a') + "\"\n3\n");
  EXPECT_EQ(error_of([&] { read_all(p, o); }),
            p + ":2: line longer than 100 bytes (luatune's limit for a JSONL line; see docs/limits.md)");
  o.bad = JsonlBad::skip;  // the reader goes on at the next line
  Read r = read_all(p, o);
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[1], (std::pair<int64_t, json>{3, json(3)}));
  EXPECT_EQ(r.skipped, 1);
  // A line exactly at the limit is fine; the default limit reads as MiB.
  std::string at = write_file("at_limit.jsonl", "\"" + std::string(98, 'a') + "\"\n");
  o.bad = JsonlBad::fail;
  EXPECT_EQ(read_all(at, o).lines.size(), 1u);
  EXPECT_EQ(kJsonlMaxLineBytes, size_t(64) << 20);
}

TEST(Jsonl, RefusesDeepNestingWithTheSharedLimit) {
  std::string p = write_file("deep.jsonl", "1\n" + std::string(200, '[') + std::string(200, ']') + "\n");
  EXPECT_EQ(
      error_of([&] { read_all(p); }),
      p + ":2: JSON nested deeper than 128 levels (luatune's limit for JSON input; see docs/limits.md)");
}

TEST(Jsonl, TolerantModeSkipsAndCountsBadLines) {
  // A log a killed run cut short: a line that is not JSON, one not UTF-8 and a torn last line.
  std::string p =
      write_file("log.jsonl", "{\"step\":1}\nnot json\n{\"step\":2}\n\"\xFF\"\n{\"step\":3}\n{\"st");
  JsonlReadOptions o;
  o.bad = JsonlBad::skip;
  Read r = read_all(p, o);
  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[2], (std::pair<int64_t, json>{5, json{{"step", 3}}}));
  EXPECT_EQ(r.skipped, 3);
}

TEST(Jsonl, ReportModeHandsBadLinesToTheCaller) {
  std::string p = write_file("report.jsonl", "{\"a\":1}\nnope\n{\"b\":2}");
  JsonlReadOptions o;
  o.bad = JsonlBad::report;
  OJsonlReader in(p, o);
  ASSERT_TRUE(in.is_open());
  ASSERT_TRUE(in.next());
  EXPECT_EQ(in.error(), "");
  ASSERT_TRUE(in.next());
  EXPECT_EQ(in.line(), 2);
  EXPECT_EQ(in.text(), "nope");
  EXPECT_TRUE(in.value().is_discarded());
  EXPECT_EQ(in.error().rfind(p + ":2: expected a JSON value, got 'nope' (not valid JSON at column", 0), 0u)
      << in.error();
  EXPECT_EQ(in.where() + ": " + in.problem(), in.error());
  ASSERT_TRUE(in.next());
  EXPECT_EQ(in.value().begin().key(), "b");
  EXPECT_FALSE(in.next());
  EXPECT_EQ(in.skipped(), 0);
}

TEST(Jsonl, BlankLinesCanBeBadLines) {
  // runner tokenize answers line for line, so a blank line there is not skipped.
  std::string p = write_file("blank_bad.jsonl", "\"a\"\n\n");
  JsonlReadOptions o;
  o.skip_blank = false;
  o.expected = "a JSON string";
  EXPECT_EQ(
      error_of([&] { read_all(p, o); }).rfind(p + ":2: expected a JSON string, got '' (not valid JSON", 0),
      0u);
}

TEST(Jsonl, ReadsAStreamLineByLine) {
  std::string p = write_file("stream.jsonl", "1\n2\n");
  std::FILE* f = std::fopen(p.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  JsonlReader in(f, "stdin", {});
  std::vector<int64_t> got;
  while (in.next()) got.push_back(in.value().get<int64_t>());
  std::fclose(f);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(in.where(), "stdin:2");
}
