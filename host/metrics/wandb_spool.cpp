// The spool of a W&B run (see wandb_spool.h): append-only history and console files, the
// summary, run.json and state.json. Every file is the owner's alone (0600): they hold the run's
// config, metrics and console output.
#include "host/metrics/wandb_spool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/metrics/wandb_settings.h"

namespace luatune {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Whole-file writes as file_write_atomic (host/core/files.h) does them, write to a temporary
// beside the target then rename, but created 0600 whatever the umask. `sync`: fsync before the
// rename (state.json and run.json; the summary is rewritten too often for that).
void spool_write_file(const std::string& path, const std::string& bytes, bool sync) {
  // A temporary name of our own per call, so two writers never share one.
  static std::atomic<unsigned> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;  // O_EXCL: never through a planted link
  int fd = ::open(tmp.c_str(), flags, 0600);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = ::open(tmp.c_str(), flags, 0600);
  LT_CHECK(fd >= 0, "wandb: cannot write '" << path << "': " << std::strerror(errno));
  int saved = 0;  // the first errno
  auto check = [&](bool ok) {
    if (!ok && saved == 0) saved = errno ? errno : EIO;
  };
  check(::fchmod(fd, 0600) == 0);  // exactly 0600, even under a umask like 0277
  for (size_t done = 0; saved == 0 && done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    check(n > 0);
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (sync && saved == 0) check(::fsync(fd) == 0);
  check(::close(fd) == 0);
  if (saved == 0) check(std::rename(tmp.c_str(), path.c_str()) == 0);
  if (saved != 0) {
    ::unlink(tmp.c_str());
    fail("wandb: writing '" + path + "' failed: " + std::strerror(saved));
  }
}

}  // namespace

// ============================================================================================
// state.json and run.json

WandbState wandb_state_read(const std::string& run_dir) {
  WandbState st;
  std::string path = run_dir + "/state.json";
  if (!file_exists(path)) return st;
  ojson j = ojson::parse(file_read(path), nullptr, false);
  LT_CHECK(!j.is_discarded() && j.is_object(), "wandb: '" << path << "' is not a JSON object");
  ojson acked = j.value("acked", ojson::object());
  st.history_acked = acked.value("wandb-history.jsonl", int64_t(0));
  st.output_acked = acked.value("output.log", int64_t(0));
  st.summary_acked = acked.value("wandb-summary.json", 0) > 0;
  st.history_base = j.value("history_base", int64_t(0));
  st.storage_id = j.value("storage_id", "");
  st.entity = j.value("entity", "");
  st.project = j.value("project", "");
  st.complete = j.value("complete", false);
  auto code = j.find("exit_code");
  st.closed = code != j.end() && code->is_number_integer();
  st.exit_code = st.closed ? code->get<int>() : 0;
  return st;
}

void wandb_state_write(const std::string& run_dir, const WandbState& st) {
  ojson j = ojson::object();
  j["acked"] = {{"wandb-history.jsonl", st.history_acked},
                {"wandb-summary.json", st.summary_acked ? 1 : 0},
                {"output.log", st.output_acked}};
  j["history_base"] = st.history_base;
  j["storage_id"] = st.storage_id;
  j["entity"] = st.entity;
  j["project"] = st.project;
  j["complete"] = st.complete;
  j["exit_code"] = st.closed ? ojson(st.exit_code) : ojson(nullptr);
  spool_write_file(run_dir + "/state.json", j.dump(2) + "\n", true);
}

void wandb_state_reconcile(WandbState& st, int64_t spool_lines, int64_t server_lines) {
  int64_t held = server_lines - st.history_base;  // spool lines the server holds, if aligned
  if (held >= st.history_acked && held <= spool_lines)
    st.history_acked = held;
  else
    st.history_base = server_lines - st.history_acked;
}

// run.json's text fields, in the order they are written; "host" follows "tags", as it always has.
const std::pair<const char*, std::string WandbRunInfo::*> kRunTextFields[] = {
    {"entity", &WandbRunInfo::entity}, {"project", &WandbRunInfo::project},
    {"run_id", &WandbRunInfo::run_id}, {"name", &WandbRunInfo::name},
    {"group", &WandbRunInfo::group},   {"job_type", &WandbRunInfo::job_type},
    {"notes", &WandbRunInfo::notes}};

void wandb_run_json_write(const std::string& run_dir, const WandbRunInfo& run, const std::string& base_url) {
  ojson j = ojson::object();
  j["base_url"] = wandb_url_redacted(base_url);  // never a user:password@
  for (const auto& [key, field] : kRunTextFields) j[key] = run.*field;
  j["tags"] = run.tags;
  j["host"] = run.host;
  j["config"] = wandb_json_parse(run.config_json.empty() ? "{}" : run.config_json);
  spool_write_file(run_dir + "/run.json", wandb_json_dump(j) + "\n", true);
}

WandbRunInfo wandb_run_json_read(const std::string& run_dir, std::string* base_url) {
  std::string path = run_dir + "/run.json";
  ojson j;
  try {
    j = wandb_json_parse(file_read(path));
  } catch (const nlohmann::json::exception& e) {
    fail("wandb: '" + path + "' is not valid JSON: " + e.what());
  }
  LT_CHECK(j.is_object() && j.value("run_id", "") != "", "wandb: '" << path << "' has no run_id");
  WandbRunInfo run;
  for (const auto& [key, field] : kRunTextFields) run.*field = j.value(key, "");
  run.host = j.value("host", "");
  if (j.contains("tags") && j["tags"].is_array())
    for (const auto& t : j["tags"])
      if (t.is_string()) run.tags.push_back(t.get<std::string>());
  run.config_json = j.contains("config") ? wandb_json_dump(j["config"]) : "{}";
  // A spool written before userinfo was stripped may still hold one: it goes no further.
  *base_url = wandb_url_redacted(j.value("base_url", "https://api.wandb.ai"));
  while (!base_url->empty() && base_url->back() == '/') base_url->pop_back();
  return run;
}

// ============================================================================================
// Spool files

std::vector<std::string> wandb_spool_lines(const std::string& path) {
  std::vector<std::string> lines;
  if (!file_exists(path)) return lines;
  std::string text = file_read(path);
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  return lines;  // text after the last newline is a line cut short: left out
}

WandbSpool::WandbSpool(std::string run_dir, bool resume) : dir_(std::move(run_dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  LT_CHECK(!ec && dir_exists(dir_),
           "wandb: cannot create the spool directory '" << dir_ << "': " << ec.message());
  if (!resume)
    for (const char* name : {"history.jsonl", "output.log", "summary.json", "state.json"})
      fs::remove(dir_ + "/" + name, ec);
  history_ = open_append("history.jsonl", resume, &history_lines_);
  output_ = open_append("output.log", resume, &output_lines_);
}

WandbSpool::~WandbSpool() {
  if (history_) std::fclose(history_);
  if (output_) std::fclose(output_);
}

std::FILE* WandbSpool::open_append(const std::string& name, bool resume, int64_t* lines) {
  std::string path = dir_ + "/" + name;
  *lines = 0;
  if (resume && file_exists(path)) {
    // A line cut short by a crash is dropped, so the next append starts a whole line.
    std::string text = file_read(path);
    size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (keep != text.size()) {
      std::error_code ec;
      fs::resize_file(path, keep, ec);
    }
    for (size_t i = 0; i < keep; i++) *lines += text[i] == '\n';
  }
  // 0600 when created; an older spool's file (or one made under another umask) is narrowed too.
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  std::FILE* f = fd >= 0 && ::fchmod(fd, 0600) == 0 ? ::fdopen(fd, "a") : nullptr;
  if (!f) {
    int saved = errno;
    if (fd >= 0) ::close(fd);
    fail("wandb: cannot open '" + path + "' for writing: " + std::strerror(saved));
  }
  return f;
}

void WandbSpool::append(std::FILE* f, const std::string& name, const std::string& line) {
  LT_CHECK(f, "wandb: the spool file " << dir_ << "/" << name << " is closed");
  bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fputc('\n', f) != EOF &&
            std::fflush(f) == 0;
  LT_CHECK(ok, "wandb: writing " << dir_ << "/" << name << " failed: " << std::strerror(errno));
}

void WandbSpool::append_history(const std::string& row) {
  append(history_, "history.jsonl", row);
  history_lines_++;
}

void WandbSpool::append_output(const std::string& line) {
  append(output_, "output.log", line);
  output_lines_++;
}

void WandbSpool::write_summary(const std::string& json) {
  spool_write_file(dir_ + "/summary.json", json + "\n", false);
}

void WandbSpool::close() {
  if (history_) std::fclose(history_);
  if (output_) std::fclose(output_);
  history_ = output_ = nullptr;
}

}  // namespace luatune
