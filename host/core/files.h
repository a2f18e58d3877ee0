// Whole-file reads and atomic writes: write to a temporary beside the target, flush, then rename,
// so a crash or a full disk never leaves a half-written output under the final name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

std::string file_read(const std::string& path);  // fails naming the path when unreadable
void file_write_atomic(const std::string& path, const std::string& bytes);
bool file_exists(const std::string& path);
bool dir_exists(const std::string& path);
// Makes the directory `path` and those above it that are missing, as `mkdir -p` does; one that
// exists already is fine. Fails in one line naming the path: "cannot create directory 'out/a/b':
// 'out/a' is a file, not a directory", or the system's reason ("Permission denied").
void dir_create(const std::string& path);
std::string path_dirname(const std::string& path);   // "a/b.lua" -> "a"; "b.lua" -> "."
std::string path_basename(const std::string& path);  // "a/b.lua" -> "b.lua"

// A directory's entries (not recursive), each name with its modification time in nanoseconds,
// sorted by name; none when there is no such directory. Two listings are equal when nothing in it
// was created, removed, renamed or rewritten in between.
using DirListing = std::vector<std::pair<std::string, int64_t>>;
DirListing dir_listing(const std::string& dir);

}  // namespace luatune
