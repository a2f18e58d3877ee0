// Hub cache lookups (see hub_cache.h; layout and sources in docs/hub_cache.md). Read-only: nothing
// here creates, downloads or follows anything but the cache's own refs/ and snapshots/.
#include "host/io/hub_cache.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/io/gguf_convert.h"

namespace luatune {

namespace fs = std::filesystem;

namespace {

// ============================================================================================
// The cache directory

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string home_dir() {
  std::string home = env_value("HOME");
  if (!home.empty()) return home;
  const passwd* pw = ::getpwuid(::getuid());  // as Python's expanduser does without HOME
  return pw && pw->pw_dir ? std::string(pw->pw_dir) : std::string();
}

std::string expand_user(const std::string& p) {
  if (p == "~") return home_dir();
  if (str_starts_with(p, "~/")) return home_dir() + p.substr(1);
  return p;
}

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

struct CacheDir {
  std::string path;
  std::string source;  // the variable that chose it, or "default"
};

// huggingface_hub's constants.py: HF_HUB_CACHE, else the legacy HUGGINGFACE_HUB_CACHE, else
// HF_HOME/hub, where HF_HOME defaults to $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
CacheDir cache_dir_find() {
  for (const char* var : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    std::string v = env_value(var);
    if (!v.empty()) return {strip_trailing_slashes(expand_user(v)), var};
  }
  std::string hf_home = env_value("HF_HOME");
  if (!hf_home.empty()) return {strip_trailing_slashes(expand_user(hf_home)) + "/hub", "HF_HOME"};
  std::string xdg = env_value("XDG_CACHE_HOME");
  if (!xdg.empty()) return {strip_trailing_slashes(expand_user(xdg)) + "/huggingface/hub", "XDG_CACHE_HOME"};
  return {home_dir() + "/.cache/huggingface/hub", "default"};
}

// A GGUF file's Hugging Face directory (gguf_convert, float32), made once per file under
// $LUATUNE_GGUF_CACHE, else $XDG_CACHE_HOME/luatune/gguf, else ~/.cache/luatune/gguf, in a folder named
// for the file and its path, size and modification time: an edited or replaced file converts again.
std::string gguf_converted(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("gguf: cannot read '" + path + "'");
  std::string root = env_value("LUATUNE_GGUF_CACHE");
  if (root.empty()) {
    std::string xdg = env_value("XDG_CACHE_HOME");
    root =
        (xdg.empty() ? home_dir() + "/.cache" : strip_trailing_slashes(expand_user(xdg))) + "/luatune/gguf";
  }
  std::error_code ec;
  const std::string real = fs::weakly_canonical(path, ec).string();
  const std::string key = real + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtime);
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a name, not a checksum
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  std::string name = path_basename(path);
  name = name.substr(0, name.size() - 5);  // less ".gguf"
  const std::string dir = root + "/" + name + "-" + hex;
  if (file_exists(dir + "/config.json")) return dir;  // gguf_convert puts a directory in place whole
  dir_create(root);
  std::fprintf(stderr, "gguf: converting %s into %s (once)\n", path.c_str(), dir.c_str());
  try {
    gguf_convert(path, dir);
  } catch (const Error&) {
    if (file_exists(dir + "/config.json")) return dir;  // another process converted it meanwhile
    throw;
  }
  return dir;
}

std::string cache_dir_text(const CacheDir& c) {
  if (c.source == "default") return "the default cache dir; set HF_HUB_CACHE or HF_HOME to look elsewhere";
  return "cache dir from " + c.source;
}

// ============================================================================================
// Names

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One part of a repo id as huggingface_hub's validate_repo_id accepts it: [\w.-]+ beginning and
// ending with a word character (ASCII here), no "--" or "..", not ending in ".git".
bool repo_part_ok(const std::string& s, size_t max_len) {
  if (s.empty() || s.size() > max_len || !word_char(s.front()) || !word_char(s.back())) return false;
  for (char c : s)
    if (!word_char(c) && c != '-' && c != '.') return false;
  return s.find("--") == std::string::npos && s.find("..") == std::string::npos && !str_ends_with(s, ".git");
}

// A revision: a branch, tag or commit hash ("refs/pr/1" included), never a path out of refs/.
bool revision_ok(const std::string& r) {
  if (r.empty() || r.front() == '/' || r.back() == '/') return false;
  for (char c : r)
    if (static_cast<unsigned char>(c) <= ' ' || c == '\\') return false;
  for (const std::string& part : str_split(r, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

struct HubName {
  std::string org;  // "" for a bare name
  std::string name;
  std::string revision;  // "" = main
  std::string repo_id() const { return org.empty() ? name : org + "/" + name; }
  std::string folder() const { return "models--" + (org.empty() ? name : org + "--" + name); }
};

// "org/name[@revision]" (bare_ok: also "name[@revision]").
bool hub_name_parse(const std::string& value, bool bare_ok, HubName* out) {
  const size_t at = value.find('@');
  const std::string repo = value.substr(0, at);
  HubName n;
  if (at != std::string::npos) {
    n.revision = value.substr(at + 1);
    if (!revision_ok(n.revision)) return false;
  }
  const size_t slash = repo.find('/');
  if (slash == std::string::npos) {
    if (!bare_ok) return false;
    n.name = repo;
  } else {
    n.org = repo.substr(0, slash);
    n.name = repo.substr(slash + 1);
    if (!repo_part_ok(n.org, 96)) return false;
  }
  if (!repo_part_ok(n.name, 96)) return false;
  *out = n;
  return true;
}

bool path_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// ============================================================================================
// The lookup

enum class Found { local, snapshot, missing, not_hub };

struct Lookup {
  Found found = Found::not_hub;
  std::string path;     // the local path or the snapshot directory
  std::string message;  // for missing / not_hub
};

std::string read_ref(const std::string& path) {
  return str_trim(file_read(path));
}

// The snapshot directories whose name starts with `prefix`.
std::vector<std::string> snapshots_matching(const std::string& snapshots, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(snapshots, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (str_starts_with(name, prefix) && dir_exists(it->path().string())) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Lookup lookup(const std::string& value) {
  Lookup r;
  if (!value.empty() && path_exists(value)) {
    r.found = Found::local;
    r.path = value;
    return r;
  }
  const CacheDir cache = cache_dir_find();
  HubName n;
  bool hub = hub_name_parse(value, false, &n);
  // A bare "name" (legacy repos without an org, models--gpt2) only when the cache holds it: a bare
  // word is more often a local directory that is not there.
  if (!hub && hub_name_parse(value, true, &n) && dir_exists(cache.path + "/" + n.folder())) hub = true;
  if (!hub) {
    r.message = "'" + value +
                "' does not exist (expected a local Hugging Face model directory, or a Hub model id "
                "org/name[@revision] in the Hugging Face cache)";
    return r;
  }

  const std::string repo_dir = cache.path + "/" + n.folder();
  const std::string snapshots = repo_dir + "/snapshots";
  const std::string rev = n.revision.empty() ? "main" : n.revision;
  std::string why;  // what is missing, "" when a snapshot was found
  std::string commit;
  if (!dir_exists(repo_dir)) {
    why = "no such directory";
  } else if (file_exists(repo_dir + "/refs/" + rev)) {
    commit = read_ref(repo_dir + "/refs/" + rev);
    if (commit.empty() || commit.find('/') != std::string::npos || commit == ".." ||
        !dir_exists(snapshots + "/" + commit))
      why = "refs/" + rev + " names commit '" + commit + "', but snapshots/" + commit + " is missing";
  } else if (n.revision.empty()) {
    why = "no refs/main";
  } else {
    std::vector<std::string> hits = snapshots_matching(snapshots, rev);
    if (hits.size() == 1) {
      commit = hits[0];
    } else if (hits.empty()) {
      why = "no refs/" + rev + " and no snapshots/" + rev + "*";
    } else {
      why = "'" + rev + "' is the start of " + std::to_string(hits.size()) + " snapshots (" +
            str_join(hits, ", ") + "); give more of the commit hash";
    }
  }
  const std::string dir = snapshots + "/" + commit;
  if (why.empty() && !file_exists(dir + "/config.json") && !file_exists(dir + "/tokenizer.json") &&
      !file_exists(dir + "/tokenizer_config.json"))
    why = "snapshots/" + commit + " holds no config.json, tokenizer.json or tokenizer_config.json";
  if (why.empty()) {
    r.found = Found::snapshot;
    r.path = dir;
    return r;
  }
  r.found = Found::missing;
  r.message =
      "'" + value +
      "' is not a local directory, and the Hugging Face cache has no usable snapshot of it (looked in " +
      repo_dir + ": " + why + "; " + cache_dir_text(cache) + "); fetch it with: huggingface-cli download " +
      n.repo_id() + (n.revision.empty() ? "" : " --revision " + n.revision);
  return r;
}

}  // namespace

// ============================================================================================
// Public

std::string hub_cache_dir() {
  return cache_dir_find().path;
}

std::string hub_cache_dir_source() {
  return cache_dir_find().source;
}

bool hub_name_shaped(const std::string& value) {
  HubName n;
  return hub_name_parse(value, false, &n);
}

std::string model_path_resolve(const std::string& name_or_path) {
  if (str_ends_with(name_or_path, ".gguf") && file_exists(name_or_path)) return gguf_converted(name_or_path);
  Lookup r = lookup(name_or_path);
  if (r.found == Found::local || r.found == Found::snapshot) return r.path;
  fail(r.message);
}

bool model_path_available(const std::string& name_or_path, std::string* why) {
  Lookup r = lookup(name_or_path);
  const bool ok = r.found == Found::local || r.found == Found::snapshot;
  if (why) *why = ok ? "" : r.message;
  return ok;
}

std::string model_path_from_hub(const std::string& value) {
  if (str_ends_with(value, ".gguf") && file_exists(value)) return gguf_converted(value);
  Lookup r = lookup(value);
  if (r.found == Found::snapshot) return r.path;
  if (r.found == Found::missing) fail(r.message);
  return value;
}

std::string hub_model_name_of(const std::string& dir) {
  // .../models--<org>--<name>/snapshots/<commit>
  std::vector<std::string> parts;
  for (const std::string& p : str_split(dir, '/'))
    if (!p.empty() && p != ".") parts.push_back(p);
  if (parts.size() < 3 || parts[parts.size() - 2] != "snapshots") return "";
  const std::string& folder = parts[parts.size() - 3];
  const std::string prefix = "models--";
  if (!str_starts_with(folder, prefix)) return "";
  std::string id = folder.substr(prefix.size());
  const size_t sep = id.find("--");  // "--" is not allowed inside an org or a name
  if (sep != std::string::npos) id = id.substr(0, sep) + "/" + id.substr(sep + 2);
  HubName n;
  return hub_name_parse(id, true, &n) ? id : "";
}

}  // namespace luatune
