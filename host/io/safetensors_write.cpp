// safetensors writer (see safetensors.h): one file streamed tensor by tensor into a temporary
// beside its final name, and sharded checkpoint directories with their index written last.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/io/safetensors.h"

namespace luatune {

namespace fs = std::filesystem;

namespace {

// A file written under a temporary name and renamed into place by commit(); destroyed without a
// commit (an exception on the way), it removes the temporary.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path)
      : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot write safetensors '" + path_ + "': " + std::strerror(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      // write(2) moves at most ~2 GiB per call on Linux; ask for 1 GiB at a time.
      ssize_t k = ::write(fd_, p, std::min<uint64_t>(n, 1ull << 30));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) fail("cannot write safetensors '" + path_ + "': " + std::strerror(k < 0 ? errno : EIO));
      p += k;
      n -= static_cast<uint64_t>(k);
    }
  }

  // fsync before the rename so that after a crash the final name holds either the old file or the
  // complete new one, never an empty one; it costs one flush of what we just wrote.
  void commit() {
    if (::fsync(fd_) != 0) fail("cannot write safetensors '" + path_ + "': " + std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("cannot write safetensors '" + path_ + "': " + std::strerror(errno));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail("cannot move '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

uint64_t tensor_bytes(const at::Tensor& t) {
  return static_cast<uint64_t>(t.numel()) * t.element_size();
}

// Names unique, not the metadata key, tensors defined: checked before any byte is written.
void names_check(const std::string& what, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    LT_CHECK(name != "__metadata__", what << ": '__metadata__' is reserved and cannot name a tensor");
    LT_CHECK(seen.insert(name).second, what << ": tensor '" << name << "' is given twice");
    LT_CHECK(t.defined(), what << ": tensor '" << name << "' was released");
  }
}

bool is_checkpoint_file(const std::string& file, const std::string& base) {
  if (file == base + ".safetensors" || file == base + ".safetensors.index.json") return true;
  // base-00001-of-00003.safetensors
  const std::string tail = "-00000-of-00000.safetensors";
  if (file.size() != base.size() + tail.size() || !str_starts_with(file, base)) return false;
  for (size_t i = 0; i < tail.size(); ++i) {
    char c = file[base.size() + i];
    if (tail[i] == '0' ? !(c >= '0' && c <= '9') : c != tail[i]) return false;
  }
  return true;
}

}  // namespace

void safetensors_save_file(const std::string& path,
                           const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  const std::string what = "cannot write safetensors '" + path + "'";
  names_check(what, tensors);

  // HF's order: alignment (element size) descending, then name. With the header padded to 8, every
  // tensor then starts at an address aligned to its element size, which the reader relies on.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int64_t sa = tensors[a].second.element_size(), sb = tensors[b].second.element_size();
    return sa != sb ? sa > sb : tensors[a].first < tensors[b].first;
  });

  nlohmann::ordered_json header;
  header["__metadata__"] = nlohmann::ordered_json::object();
  if (!metadata.count("format")) header["__metadata__"]["format"] = "pt";  // transformers requires it
  for (const auto& [k, v] : metadata) header["__metadata__"][k] = v;
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(t.scalar_type());
    } catch (const Error& e) {
      fail(what + ": tensor '" + name + "': " + e.what());
    }
    uint64_t n = tensor_bytes(t);
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data then starts 8-aligned
  const uint64_t header_len = text.size();

  AtomicFile out(path);
  out.write(&header_len, 8);  // little-endian host (checked in safetensors.cpp)
  out.write(text.data(), text.size());
  for (size_t i : order) {
    // One tensor at a time on the CPU, contiguous, with lazy conjugation/negation resolved.
    at::Tensor t = tensors[i].second.detach().resolve_conj().resolve_neg().to(at::kCPU).contiguous();
    out.write(t.data_ptr(), tensor_bytes(t));
  }
  out.commit();
}

std::vector<std::string> safetensors_save_dir(const std::string& dir,
                                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                              const SafetensorsWriteOptions& options) {
  const std::string& base = options.basename;
  const std::string what = "cannot write checkpoint '" + dir + "'";
  LT_CHECK(!base.empty() && base.find('/') == std::string::npos,
           what << ": basename '" << base << "' must be a plain file name");
  LT_CHECK(options.max_shard_bytes > 0, what << ": max_shard_bytes must be positive");
  names_check(what, tensors);
  std::error_code ec;
  fs::create_directories(dir, ec);
  LT_CHECK(dir_exists(dir), what << ": cannot create the directory (" << ec.message() << ")");

  // Shards in the caller's order (layers stay together): a new shard when the next tensor would
  // overflow this one; a tensor over the limit alone gets a shard of its own.
  std::vector<std::vector<size_t>> shards;
  uint64_t total = 0, in_shard = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t n = tensor_bytes(tensors[i].second);
    if (shards.empty() || in_shard + n > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += n;
    total += n;
  }
  LT_CHECK(shards.size() <= 99999,
           what << ": " << shards.size() << " shards is over the 99999 the names allow");

  const std::string index_name = base + ".safetensors.index.json";
  const std::string index_path = (fs::path(dir) / index_name).string();
  std::vector<std::string> written;
  if (shards.size() <= 1) {
    // Written before the old index goes: until then a reader still sees the complete old shards.
    written.push_back((fs::path(dir) / (base + ".safetensors")).string());
    safetensors_save_file(written.back(), tensors, options.metadata);
  } else {
    // The old index goes first: new shards may reuse its shard names, and an index over a mix of
    // old and new shards would load without complaint after a crash in the middle.
    fs::remove(index_path, ec);
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    std::map<std::string, std::string> sorted_map;
    for (size_t s = 0; s < shards.size(); ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      const std::string file = base + name;
      std::vector<std::pair<std::string, at::Tensor>> part;
      for (size_t i : shards[s]) {
        part.push_back(tensors[i]);
        sorted_map[tensors[i].first] = file;
      }
      written.push_back((fs::path(dir) / file).string());
      safetensors_save_file(written.back(), part, options.metadata);
    }
    for (const auto& [k, v] : sorted_map) weight_map[k] = v;
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    file_write_atomic(index_path, index.dump(2) + "\n");
    written.push_back(index_path);
  }

  // Stale files of an earlier save under the same basename (other shard counts, the single file,
  // the index) would mislead a reader; anything else in the directory is left alone.
  // The index goes first, so no reader meets an index whose shards are half gone.
  std::set<std::string> keep;
  for (const std::string& p : written) keep.insert(fs::path(p).filename().string());
  if (!keep.count(index_name)) fs::remove(index_path, ec);
  for (const auto& de : fs::directory_iterator(dir)) {
    const std::string file = de.path().filename().string();
    if (de.is_regular_file() && is_checkpoint_file(file, base) && !keep.count(file))
      fs::remove(de.path(), ec);
  }
  return written;
}

}  // namespace luatune
