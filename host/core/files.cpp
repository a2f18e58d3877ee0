// File helpers (see files.h).
#include "host/core/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "host/core/error.h"

namespace luatune {

std::string file_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void file_write_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write '" + path + "': " + std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("cannot write '" + path + "': " + std::strerror(saved ? saved : errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    saved = errno;
    std::remove(tmp.c_str());
    fail("cannot move '" + tmp + "' to '" + path + "': " + std::strerror(saved));
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool dir_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void dir_create(const std::string& path) {
  if (path.empty()) fail("cannot create a directory with an empty name");
  // Each prefix that ends before a '/', then the whole path: made when missing, refused when a file.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string part = path.substr(0, end);
    struct stat st;
    if (::stat(part.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        fail("cannot create directory '" + path + "': '" + part + "' is a file, not a directory");
    } else if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      fail("cannot create directory '" + path + "': '" + part + "': " + std::strerror(errno));
    }
    if (end == std::string::npos) return;
  }
}

DirListing dir_listing(const std::string& dir) {
  DirListing out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    int64_t mtime = -1;
    if (::lstat((dir + "/" + name).c_str(), &st) == 0)
      mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    out.emplace_back(name, mtime);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string path_dirname(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string path_basename(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace luatune
