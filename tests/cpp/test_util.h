// Helpers shared by the C++ unit tests: error messages, temporary directories and files, output
// captured in memory, counting and finding text, environment variables.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "host/core/error.h"

namespace luatune {

// The message of the luatune::Error `fn` throws, or "(no error)" when it returns normally; tests
// pin the one-line messages with it.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A path under the system temp directory for one test of this process, luatune_test_<name>_<pid>,
// removed first if an earlier run left it; `create` also makes it an empty directory.
inline std::string test_temp_dir(const std::string& name, bool create = false) {
  std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("luatune_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  if (create) std::filesystem::create_directories(p);
  return p.string();
}

// A fresh directory under the system temp directory (mkdtemp), removed with everything in it when
// the object goes. Converts to its path.
struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "luatune_test_XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("cannot make a directory from " + templ);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  operator std::string() const { return path; }
};

// A FILE* writing into memory, standing in for stdout, stderr or a terminal.
struct Capture {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ~Capture() {
    std::fclose(f);
    std::free(buf);
  }
  Capture() = default;
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  std::string text() {  // what was written so far
    std::fflush(f);
    return std::string(buf, len);
  }
};

// Writes `text` to `path` as it is (binary mode), replacing the file.
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// How many times `what` occurs in `text`, not overlapping.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) n++;
  return n;
}

// Passes when each of `parts` occurs in `text`: EXPECT_TRUE(contains_all(html, {"<svg", "</svg>"})).
// A failure names every part that is missing, then shows the text.
inline ::testing::AssertionResult contains_all(const std::string& text,
                                               std::initializer_list<std::string> parts) {
  std::string missing;
  for (const std::string& part : parts)
    if (text.find(part) == std::string::npos) missing += "missing: " + part + "\n";
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << missing << "in:\n" << text;
}

// Sets (or, with nullptr, unsets) an environment variable for one test, then puts it back.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvGuard() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace luatune
