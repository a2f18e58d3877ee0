// Whole-file reads and atomic writes: write to a temporary beside the target, flush, then rename,
// so a crash or a full disk never leaves a half-written output under the final name.
#pragma once

#include <string>

namespace luatune {

std::string file_read(const std::string& path);  // fails naming the path when unreadable
void file_write_atomic(const std::string& path, const std::string& bytes);
bool file_exists(const std::string& path);
bool dir_exists(const std::string& path);
std::string path_dirname(const std::string& path);   // "a/b.lua" -> "a"; "b.lua" -> "."
std::string path_basename(const std::string& path);  // "a/b.lua" -> "b.lua"

}  // namespace luatune
