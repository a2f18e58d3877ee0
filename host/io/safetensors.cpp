// safetensors reader and writer (see safetensors.h). The reader maps each file once and hands out
// CPU tensors that view the mapping; the writer streams one tensor at a time into a temporary file
// and renames it into place. Format facts: docs/hf_models.md, "safetensors" and "Sharded checkpoints".
#include "host/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"

// The data buffer is little-endian and we view it in place, so a big-endian host would need a
// byte-swapping copy that nobody has asked for yet.
#if defined(__BYTE_ORDER__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "luatune's safetensors code assumes a little-endian host");
#endif

namespace luatune {

using ojson = nlohmann::ordered_json;  // keeps the header's key order

namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;  // the Rust library's MAX_HEADER_SIZE

// ---------------------------------------------------------------------------------------------
// dtypes

struct Dtype {
  const char* name;                    // safetensors spelling
  std::optional<at::ScalarType> type;  // nullopt: a sub-byte dtype, which luatune does not read
};

// Every dtype the format defines, in its enum order.
const std::vector<Dtype>& dtypes() {
  static const std::vector<Dtype> table = {
      {"BOOL", at::kBool},
      {"F4", std::nullopt},
      {"F6_E2M3", std::nullopt},
      {"F6_E3M2", std::nullopt},
      {"U8", at::kByte},
      {"I8", at::kChar},
      {"F8_E5M2", at::kFloat8_e5m2},
      {"F8_E4M3", at::kFloat8_e4m3fn},
      {"F8_E8M0", at::kFloat8_e8m0fnu},
      {"F8_E4M3FNUZ", at::kFloat8_e4m3fnuz},
      {"F8_E5M2FNUZ", at::kFloat8_e5m2fnuz},
      {"I16", at::kShort},
      {"U16", at::kUInt16},
      {"F16", at::kHalf},
      {"BF16", at::kBFloat16},
      {"I32", at::kInt},
      {"U32", at::kUInt32},
      {"F32", at::kFloat},
      {"C64", at::kComplexFloat},
      {"F64", at::kDouble},
      {"I64", at::kLong},
      {"U64", at::kUInt64},
  };
  return table;
}

// The dtype named `name`, or a one-line reason why luatune cannot read it.
std::optional<at::ScalarType> dtype_lookup(const std::string& name, std::string* why) {
  std::vector<std::string> known;
  for (const Dtype& d : dtypes()) {
    if (name == d.name) {
      if (d.type) return d.type;
      *why = "dtype '" + name + "' is not supported: luatune reads no sub-byte dtypes";
      return std::nullopt;
    }
    known.push_back(d.name);
  }
  *why = "unknown dtype '" + name + "' (known: " + str_join(known, ", ") + ")";
  return std::nullopt;
}

// "[2, -3]": a JSON array as messages print shapes and offsets; any other value as JSON.
std::string json_text(const ojson& v) {
  if (!v.is_array()) return v.dump();
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i].dump();
  return out + "]";
}

// ---------------------------------------------------------------------------------------------
// JSON with duplicate keys rejected: nlohmann keeps one of two equal keys silently, so a callback
// tracks the keys of every open object and remembers the first repeat.
struct DuplicateKey {
  std::string key, parent;  // parent: the enclosing key at the top level ("" for the top object)
};

ojson json_parse_unique(const char* begin, const char* end, std::optional<DuplicateKey>* dup) {
  std::vector<std::set<std::string>> open;
  std::string top_key;
  auto cb = [&](int, ojson::parse_event_t event, ojson& parsed) {
    if (event == ojson::parse_event_t::object_start) open.emplace_back();
    if (event == ojson::parse_event_t::object_end && !open.empty()) open.pop_back();
    if (event == ojson::parse_event_t::key && !open.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second && !*dup) *dup = DuplicateKey{key, open.size() == 1 ? "" : top_key};
      if (open.size() == 1) top_key = key;
    }
    return true;
  };
  return ojson::parse(begin, end, cb);
}

std::string json_error_text(const std::exception& e) {
  std::string s = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
  if (!s.empty() && s[0] == '[') s = s.substr(std::min(s.size(), s.find("] ") + 2));
  return s.substr(0, s.find('\n'));
}

}  // namespace

at::ScalarType safetensors_dtype_parse(const std::string& name) {
  std::string why;
  std::optional<at::ScalarType> t = dtype_lookup(name, &why);
  if (!t) fail(why);
  return *t;
}

std::string safetensors_dtype_name(at::ScalarType t) {
  for (const Dtype& d : dtypes())
    if (d.type && *d.type == t) return d.name;
  fail(std::string("dtype ") + c10::toString(t) + " has no safetensors equivalent");
}

// ---------------------------------------------------------------------------------------------
// The mapping. MAP_PRIVATE with PROT_WRITE: tensors are writable like any other, and a write
// copies the page instead of reaching the file. Under strict overcommit (vm.overcommit_memory=2)
// a private writable mapping is charged in full; the default heuristic mode does not mind.
// A file truncated in place while mapped would fault (SIGBUS) on access; our writer never does that
// (it renames a new file over the old name, and the mapping keeps the old one).
class SafetensorsMapping {
 public:
  explicit SafetensorsMapping(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot read safetensors '" + path + "': " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail("cannot read safetensors '" + path + "': not a regular file");
    }
    size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      int saved = errno;
      ::close(fd);
      if (p == MAP_FAILED) fail("cannot map safetensors '" + path + "': " + std::strerror(saved));
      data = static_cast<uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~SafetensorsMapping() {
    if (data) ::munmap(data, size);
  }
  SafetensorsMapping(const SafetensorsMapping&) = delete;
  SafetensorsMapping& operator=(const SafetensorsMapping&) = delete;

  uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t data_start = 0;  // 8 + header length: where the byte buffer begins
};

// ---------------------------------------------------------------------------------------------
// SafetensorsFile: open and validate

namespace {

// Reads one header entry; every failure names the file and the tensor.
SafetensorsEntry entry_parse(const std::string& path, const std::string& name, const ojson& v) {
  auto bad = [&](const std::string& what) {
    fail("cannot read safetensors '" + path + "': tensor '" + name + "': " + what);
  };
  if (!v.is_object())
    bad(std::string("expected an object with dtype, shape and data_offsets, found ") + v.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(std::string("missing '") + key + "'");
  SafetensorsEntry e;
  e.name = name;

  const ojson& dtype = v["dtype"];
  if (!dtype.is_string()) bad(std::string("'dtype' must be a string, found ") + dtype.type_name());
  e.dtype_name = dtype.get<std::string>();
  std::string why;
  std::optional<at::ScalarType> t = dtype_lookup(e.dtype_name, &why);
  if (!t) bad(why);
  e.dtype = *t;

  const ojson& shape = v["shape"];
  if (!shape.is_array()) bad(std::string("'shape' must be an array of integers, found ") + shape.type_name());
  for (const ojson& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned())
      bad("negative dimension " + d.dump() + " in shape " + json_text(shape));
    if (!d.is_number_unsigned()) bad("'shape' must be an array of integers, found " + json_text(shape));
    if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad("dimension " + d.dump() + " is too large");
    e.shape.push_back(d.get<int64_t>());
  }

  const ojson& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad("'data_offsets' must be [begin, end] with non-negative integers, found " + json_text(offsets));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end) bad("data_offsets " + json_text(offsets) + " have begin after end");

  uint64_t bytes = c10::elementSize(e.dtype);
  for (int64_t d : e.shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      bad("shape " + json_text(shape) + " is too large");
  if (e.end - e.begin != bytes)
    bad("data_offsets " + json_text(offsets) + " hold " + std::to_string(e.end - e.begin) +
        " bytes, expected " + std::to_string(bytes) + " for shape " + json_text(shape) + " of " +
        e.dtype_name);
  return e;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto bad = [&](const std::string& what) { fail("cannot read safetensors '" + path + "': " + what); };
  auto f = std::make_shared<SafetensorsFile>();
  f->path_ = path;
  f->map_ = std::make_shared<SafetensorsMapping>(path);
  const uint64_t size = f->map_->size;
  const uint8_t* p = f->map_->data;

  if (size < 8) bad("the file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, p, 8);  // little-endian u64, as the host
  if (n > kMaxHeaderBytes)
    bad("header length " + std::to_string(n) + " is over the limit of " + std::to_string(kMaxHeaderBytes) +
        " bytes (not a safetensors file?)");
  if (n > size - 8)
    bad("header length " + std::to_string(n) + " runs past the end of the " + std::to_string(size) +
        "-byte file");
  const char* header = reinterpret_cast<const char*>(p + 8);
  if (n == 0 || header[0] != '{') bad("the header does not start with '{' (not a safetensors file?)");
  f->map_->data_start = 8 + n;

  if (json_too_deep_line(std::string_view(header, n)) > 0)
    bad("the header nests JSON deeper than " + std::to_string(kJsonMaxDepth) +
        " levels (not a safetensors file?)");
  ojson h;
  std::optional<DuplicateKey> dup;
  try {
    h = json_parse_unique(header, header + n, &dup);
  } catch (const nlohmann::json::exception& e) {
    bad("the header is not valid JSON (" + json_error_text(e) + ")");
  }
  if (!h.is_object()) bad(std::string("the header is a JSON ") + h.type_name() + ", expected an object");
  if (dup && dup->parent.empty()) bad("tensor '" + dup->key + "' appears twice in the header");
  if (dup)
    bad((dup->parent == "__metadata__" ? "'__metadata__'" : "tensor '" + dup->parent + "'") + ": key '" +
        dup->key + "' appears twice");

  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object())
        bad(std::string("'__metadata__' must be an object of strings, found ") + v.type_name());
      for (const auto& [key, value] : v.items()) {
        if (!value.is_string())
          bad("'__metadata__' value of '" + key + "' must be a string, found " + value.type_name());
        f->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    f->index_[name] = f->entries_.size();
    f->entries_.push_back(entry_parse(path, name, v));
  }

  // The byte buffer must be covered exactly: sorted by offset, each range starts where the last
  // ended, from 0 to the end of the file.
  std::vector<const SafetensorsEntry*> order;
  for (const SafetensorsEntry& e : f->entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  auto range = [](const SafetensorsEntry* e) {
    return "[" + std::to_string(e->begin) + ", " + std::to_string(e->end) + "]";
  };
  for (const SafetensorsEntry* e : order) {
    if (e->begin < covered)
      bad("tensor '" + e->name + "': data_offsets " + range(e) + " overlap tensor '" + prev->name + "' " +
          range(prev));
    if (e->begin > covered)
      bad("tensor '" + e->name + "': data_offsets " + range(e) + " leave bytes [" + std::to_string(covered) +
          ", " + std::to_string(e->begin) + ") of the data buffer unused (a hole)");
    if (e->end > covered) prev = e;
    covered = std::max(covered, e->end);
  }
  const uint64_t data_bytes = size - f->map_->data_start;
  if (covered > data_bytes)
    bad("the file is truncated: tensor '" + prev->name + "' ends at byte " + std::to_string(covered) +
        " of the data buffer, which has " + std::to_string(data_bytes) + " bytes");
  if (covered < data_bytes)
    bad(std::to_string(data_bytes - covered) + " trailing bytes after the last tensor (the data buffer has " +
        std::to_string(data_bytes) + " bytes, tensors cover " + std::to_string(covered) + ")");
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  LT_CHECK(e, "safetensors '" << path_ << "' has no tensor '" << name << "'");
  uint8_t* p = map_->data + map_->data_start + e->begin;
  at::TensorOptions options = at::TensorOptions().dtype(e->dtype).device(at::kCPU);
  // LibTorch's from_blob accepts any address, but its CPU kernels read elements through typed
  // pointers, which is undefined behaviour (and a fault on some CPUs) when misaligned. Files from
  // HF's writer (and ours) are aligned: the header is padded to 8 and tensors sorted by alignment.
  // A file that is not gets a copy for each misaligned tensor.
  if (reinterpret_cast<uintptr_t>(p) % c10::elementSize(e->dtype) != 0) {
    at::Tensor copy = at::empty(e->shape, options);
    std::memcpy(copy.data_ptr(), p, e->end - e->begin);
    return copy;
  }
  std::shared_ptr<SafetensorsMapping> keep = map_;  // the tensor's deleter holds the mapping alive
  return at::from_blob(
      p, e->shape, [keep](void*) {}, options);
}

void SafetensorsReader::drop_pages(const std::string& name) const {
  auto it = where_.find(name);
  LT_CHECK(it != where_.end(), path_ << ": no tensor '" << name << "'");
  const SafetensorsFile& f = *files_[it->second];
  const SafetensorsEntry* e = f.find(name);
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(f.map_->data + f.map_->data_start + e->begin);
  uintptr_t end = reinterpret_cast<uintptr_t>(f.map_->data + f.map_->data_start + e->end);
  begin = (begin + page - 1) / page * page;  // inward: a page shared with a neighbour stays
  end = end / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// ---------------------------------------------------------------------------------------------
// SafetensorsReader: one file, or a directory with an index and shards

namespace {

const char* kIndexSuffix = ".safetensors.index.json";

std::string path_join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  std::string single, index;
  if (file_exists(path)) {
    (str_ends_with(path, kIndexSuffix) ? index : single) = path;
  } else if (dir_exists(path)) {
    if (file_exists(path_join(path, "model.safetensors.index.json"))) {
      index = path_join(path, "model.safetensors.index.json");
    } else if (file_exists(path_join(path, "model.safetensors"))) {
      single = path_join(path, "model.safetensors");
    } else {
      std::vector<std::string> others;
      for (const auto& de : std::filesystem::directory_iterator(path))
        if (str_ends_with(de.path().filename().string(), ".safetensors"))
          others.push_back(de.path().filename().string());
      std::sort(others.begin(), others.end());
      fail("no checkpoint in directory '" + path +
           "': looked for model.safetensors.index.json and model.safetensors" +
           (others.empty() ? std::string()
                           : " (found " + str_join(others, ", ") + "; pass a file path to read one)"));
    }
  } else {
    fail("cannot read checkpoint '" + path + "': no such file or directory");
  }

  if (!single.empty()) {
    files_.push_back(SafetensorsFile::open(single));
    for (size_t i = 0; i < files_[0]->entries().size(); ++i) where_[files_[0]->entries()[i].name] = 0;
    return;
  }

  // The index: {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}.
  auto bad = [&](const std::string& what) { fail("cannot read checkpoint index '" + index + "': " + what); };
  std::string text = file_read(index);
  if (int64_t line = json_too_deep_line(text))
    bad("line " + std::to_string(line) + ": JSON nested deeper than " + std::to_string(kJsonMaxDepth) +
        " levels");
  ojson j;
  std::optional<DuplicateKey> dup;
  try {
    j = json_parse_unique(text.data(), text.data() + text.size(), &dup);
  } catch (const nlohmann::json::exception& e) {
    bad("not valid JSON (" + json_error_text(e) + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    bad("expected an object with a 'weight_map' object");
  if (dup)
    bad("key '" + dup->key + "' appears twice" + (dup->parent.empty() ? "" : " in '" + dup->parent + "'"));

  const std::string dir = path_dirname(index);
  std::map<std::string, size_t> shard_index;  // shard file name -> index in files_
  for (const auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string())
      bad("tensor '" + name + "': the shard must be a file name, found " + shard.dump());
    const std::string file = shard.get<std::string>();
    if (file.empty() || file[0] == '/' || file == ".." || file.find("../") != std::string::npos)
      bad("tensor '" + name + "': shard '" + file + "' must be a file name relative to the index");
    auto it = shard_index.find(file);
    if (it == shard_index.end()) {
      const std::string shard_path = path_join(dir, file);
      if (!file_exists(shard_path))
        bad("tensor '" + name + "' is in shard '" + file + "', but '" + shard_path + "' does not exist");
      it = shard_index.emplace(file, files_.size()).first;
      files_.push_back(SafetensorsFile::open(shard_path));
    }
    if (!files_[it->second]->find(name))
      bad("tensor '" + name + "' is listed in shard '" + file + "', but '" + files_[it->second]->path() +
          "' has no such tensor");
    where_[name] = it->second;
  }
  // Every tensor of every shard must be where the index says, and only there.
  for (size_t i = 0; i < files_.size(); ++i) {
    for (const SafetensorsEntry& e : files_[i]->entries()) {
      auto it = where_.find(e.name);
      if (it == where_.end())
        bad("tensor '" + e.name + "' in '" + files_[i]->path() + "' is not in the weight_map");
      if (it->second != i)
        bad("tensor '" + e.name + "' is in both '" + files_[it->second]->path() + "' and '" +
            files_[i]->path() + "'");
    }
  }
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

bool SafetensorsReader::contains(const std::string& name) const {
  return where_.count(name) != 0;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    std::string near = str_nearest(name, names());
    fail("checkpoint '" + path_ + "' has no tensor '" + name + "'" +
         (near.empty() ? "" : " (did you mean '" + near + "'?)"));
  }
  return *files_[it->second]->find(name);
}

const std::string& SafetensorsReader::file_of(const std::string& name) const {
  entry(name);  // fails with the checkpoint's name when absent
  return files_[where_.at(name)]->path();
}

at::Tensor SafetensorsReader::tensor(const std::string& name) const {
  entry(name);
  return files_[where_.at(name)]->tensor(name);
}

uint64_t SafetensorsReader::total_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files_)
    for (const SafetensorsEntry& e : f->entries()) total += e.end - e.begin;
  return total;
}

}  // namespace luatune
