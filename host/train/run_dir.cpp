// Output directories and checkpoint directories (see run_dir.h and docs/checkpoints.md).
#include "host/train/run_dir.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/core/version.h"

namespace luatune {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool is_step_name(const std::string& name) {
  if (name.size() != 12 || name.compare(0, 5, "step-") != 0) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string utc_now(const char* format) {
  time_t t = time(nullptr);
  tm parts;
  gmtime_r(&t, &parts);
  char buf[64];
  strftime(buf, sizeof buf, format, &parts);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// A JSON file's value, or null when it is missing, unreadable, not JSON or nested too deep.
json read_json_or_null(const std::string& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return nullptr;
  try {
    json j = json_parse_or_discard(file_read(file));
    return j.is_discarded() ? json() : j;
  } catch (const std::exception&) {
    return nullptr;
  }
}

json read_manifest(const std::string& dir) {
  return read_json_or_null(dir + "/trainer.json");
}

void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out[prefix] = j;
  }
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%07lld", static_cast<long long>(step));
  return buf;
}

std::string checkpoint_rank_file(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "rank-%05d.safetensors", rank);
  return buf;
}

bool checkpoint_complete(const std::string& dir, std::string* why) {
  auto say = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  json meta = read_manifest(dir);
  if (!meta.is_object()) return say("no readable trainer.json");
  std::error_code ec;
  if (meta.contains("files") && meta["files"].is_object()) {
    for (auto it = meta["files"].begin(); it != meta["files"].end(); ++it) {
      const std::string f = dir + "/" + it.key();
      if (!fs::is_regular_file(f, ec)) return say(it.key() + " is missing");
      if (it.value().is_number_integer() &&
          static_cast<int64_t>(fs::file_size(f, ec)) != it.value().get<int64_t>())
        return say(it.key() + " has " + std::to_string(fs::file_size(f, ec)) + " bytes, the manifest says " +
                   std::to_string(it.value().get<int64_t>()));
    }
    return true;
  }
  // Written before manifests listed their files: the state file, or one file per rank when sharded.
  if (meta.contains("layout")) {
    const int world = meta.value("world_size", 1);
    for (int r = 0; r < world; r++) {
      const std::string name = checkpoint_rank_file(r);
      if (!fs::is_regular_file(dir + "/" + name, ec)) return say(name + " is missing");
    }
    return true;
  }
  if (!fs::is_regular_file(dir + "/state.safetensors", ec)) return say("state.safetensors is missing");
  return true;
}

std::vector<CheckpointEntry> checkpoints_list(const std::string& root, std::vector<std::string>* incomplete) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_step_name(name) || !e.is_directory(ec)) continue;
    const std::string path = e.path().string();
    if (!checkpoint_complete(path)) {
      if (incomplete) incomplete->push_back(path);
      continue;
    }
    json meta = read_manifest(path);
    out.push_back({std::stoll(name.substr(5)), path, meta.value("run_id", std::string())});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  if (incomplete) std::sort(incomplete->begin(), incomplete->end());
  return out;
}

json checkpoint_file_sizes(const std::string& dir) {
  json files = json::object();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "trainer.json" || !e.is_regular_file(ec)) continue;
    files[name] = static_cast<int64_t>(e.file_size(ec));
  }
  return files;
}

void checkpoint_publish(const std::string& tmp, const std::string& final_dir) {
  std::error_code ec;
  const std::string old = final_dir + ".old-" + std::to_string(::getpid());
  fs::remove_all(old, ec);
  bool replaced = false;
  if (fs::exists(final_dir, ec)) {
    fs::rename(final_dir, old, ec);
    LT_CHECK(!ec, final_dir << ": cannot move the checkpoint it replaces aside (" << ec.message() << ")");
    replaced = true;
  }
  fs::rename(tmp, final_dir, ec);
  LT_CHECK(!ec, final_dir << ": cannot rename the new checkpoint into place (" << ec.message() << ")");
  if (replaced) fs::remove_all(old, ec);
}

int checkpoints_clean_leftovers(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  std::vector<fs::path> gone;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= 12 || !is_step_name(name.substr(0, 12))) continue;
    const std::string rest = name.substr(12);
    bool stale = false;
    if (rest == ".tmp-zero" || rest.compare(0, 5, ".old-") == 0) {
      stale = true;
    } else if (rest.compare(0, 5, ".tmp-") == 0) {
      const std::string digits = rest.substr(5);
      long pid = digits.empty() || digits.size() > 9 ? 0 : std::strtol(digits.c_str(), nullptr, 10);
      stale = pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) || pid == ::getpid();
    }
    if (stale) gone.push_back(e.path());
  }
  for (const auto& p : gone) fs::remove_all(p, ec);
  return static_cast<int>(gone.size());
}

std::string run_id_new() {
  return utc_now("%Y%m%dT%H%M%SZ") + "-" + host_name() + "-" + std::to_string(::getpid());
}

json run_json_new(const RunInfo& info) {
  json j = json::object();
  j["run_id"] = info.run_id;
  j["started"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
  j["luatune"] = version_luatune();
  if (!info.git_describe.empty()) j["git_describe"] = info.git_describe;
  j["host"] = host_name();
  j["pid"] = static_cast<int64_t>(::getpid());
  j["world_size"] = info.world_size;
  if (!info.recipe.empty()) j["recipe"] = info.recipe;
  if (info.has_seed) j["seed"] = info.seed;
  j["config"] = info.config;
  return j;
}

namespace {

std::map<std::string, std::string>& claims() {
  static std::map<std::string, std::string> m;
  return m;
}

std::string dir_key(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir), ec);
  return ec ? dir : p.string();
}

}  // namespace

void output_dir_register(const std::string& dir, const std::string& run_id) {
  claims()[dir_key(dir)] = run_id;
}

bool output_dir_owner(const std::string& dir, std::string* run_id) {
  auto it = claims().find(dir_key(dir));
  if (it == claims().end()) return false;
  if (run_id) *run_id = it->second;
  return true;
}

namespace {

// What luatune's recipes and helpers write directly into an output_dir (docs/checkpoints.md lists
// them): a new output a recipe writes there belongs here too, or a fresh run replaces it unasked.
const char* const kRunOutputs[] = {
    "metrics.jsonl",                // every run's metric log
    "report.html",                  // every run's report
    "report.md",                    // ... and its Markdown twin
    "model/",                       // a fine-tuned or pruned model
    "adapter/",                     // a PEFT adapter
    "merged/",                      // qlora_finetune merge=true
    "model.gguf",                   // gguf=
    "reference_logps.safetensors",  // dpo's cached reference
    "summary.json",                 // the pruning recipes
    "results.json",                 // wanda_sparsegpt
    "results.md",                   // wanda_sparsegpt, a sweep
    "sweep.json",                   // a sweep
    "trials.jsonl",                 // a sweep's finished trials
    "pareto.md",                    // sweep_pruning
    "profile.json",                 // hw_compare
    "report.json",                  // hw_compare's report
};

// Whether dir/checkpoints holds a step directory, complete or not: another run's work either way.
bool has_checkpoints(const std::string& dir) {
  std::error_code ec;
  const std::string root = dir + "/checkpoints";
  if (!fs::is_directory(root, ec)) return false;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (is_step_name(e.path().filename().string())) return true;
  return false;
}

}  // namespace

std::vector<std::string> output_dir_run_outputs(const std::string& dir, OutputDirScope scope) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  if (has_checkpoints(dir)) found.push_back("checkpoints/");
  if (scope != OutputDirScope::checkpoints && fs::exists(dir + "/run.json", ec)) found.push_back("run.json");
  if (scope == OutputDirScope::outputs) {
    for (const std::string name : kRunOutputs)
      if (fs::exists(dir + "/" + name, ec)) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string output_dir_claim(const std::string& dir, bool overwrite, const json& run_json, bool main,
                             OutputDirScope scope) {
  std::error_code ec;
  std::string moved;
  if (main)
    checkpoints_clean_leftovers(dir + "/checkpoints");  // a killed save's temporaries are nobody's work
  std::vector<std::string> held = output_dir_run_outputs(dir, scope);
  // The other ranks check while the first one writes its run.json: that one is not another run's.
  if (!main) held.erase(std::remove(held.begin(), held.end(), "run.json"), held.end());
  const bool taken = !held.empty();
  if (taken && !overwrite) {
    const std::string aside = "start afresh with overwrite=true (moves everything in it to " + dir +
                              "/previous-<time>/, deletes nothing)";
    const std::string what =
        "output_dir: " + dir + " holds another run's outputs (" + str_join(held, ", ") + ")";
    if (has_checkpoints(dir)) fail_usage(what + "; continue that run with resume=true, or " + aside);
    fail_usage(what + " and no checkpoint; " + aside + ", or write over them with resume=true");
  }
  output_dir_register(dir, run_json.value("run_id", std::string()));
  if (!main) return "";
  if (taken) {
    moved = dir + "/previous-" + utc_now("%Y%m%dT%H%M%SZ");
    for (int n = 2; fs::exists(moved, ec); n++)
      moved = dir + "/previous-" + utc_now("%Y%m%dT%H%M%SZ") + "-" + std::to_string(n);
    fs::create_directories(moved, ec);
    LT_CHECK(!ec, moved << ": cannot create (" << ec.message() << ")");
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().compare(0, 9, "previous-") != 0) entries.push_back(e.path());
    for (const auto& p : entries) {
      fs::rename(p, fs::path(moved) / p.filename(), ec);
      LT_CHECK(!ec, p.string() << ": cannot move it to " << moved << " (" << ec.message() << ")");
    }
  }
  fs::create_directories(dir, ec);
  LT_CHECK(fs::is_directory(dir), dir << ": cannot create the output directory (" << ec.message() << ")");
  file_write_atomic(dir + "/run.json", run_json.dump(2) + "\n");
  return moved;
}

void run_json_note_resume(const std::string& dir, const json& resume_entry, const json& fallback) {
  json j = read_json_or_null(dir + "/run.json");
  if (!j.is_object()) j = fallback;
  json entry = resume_entry;
  entry["time"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
  entry["host"] = host_name();
  entry["pid"] = static_cast<int64_t>(::getpid());
  if (!j.contains("resumes") || !j["resumes"].is_array()) j["resumes"] = json::array();
  j["resumes"].push_back(entry);
  file_write_atomic(dir + "/run.json", j.dump(2) + "\n");
}

std::vector<std::string> config_changed_keys(const json& before, const json& after,
                                             const std::vector<std::string>& ignore) {
  std::map<std::string, json> a, b;
  flatten(before, "", a);
  flatten(after, "", b);
  std::set<std::string> keys;
  for (const auto& kv : a) keys.insert(kv.first);
  for (const auto& kv : b) keys.insert(kv.first);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (std::find(ignore.begin(), ignore.end(), k) != ignore.end()) continue;
    auto ia = a.find(k), ib = b.find(k);
    if (ia == a.end() || ib == b.end() || ia->second != ib->second) out.push_back(k);
  }
  return out;
}

}  // namespace luatune
