// The loopback W&B server (see fake_wandb.h). Written from the protocol notes, independently of
// host/metrics/wandb_{http,graphql,file_stream}.cpp (and of libcurl's basic auth: its own base64
// below), so a mistake there is not mirrored here.
#include "tests/cpp/fake_wandb.h"

#include <httplib.h>

#include <chrono>
#include <regex>
#include <stdexcept>

namespace luatune {

namespace {

using json = nlohmann::json;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string base64(const std::string& in) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -6;
  for (unsigned char c : in) {
    val = (val << 8) + c;
    bits += 8;
    while (bits >= 0) {
      out += t[(val >> bits) & 0x3F];
      bits -= 6;
    }
  }
  if (bits > -6) out += t[((val << 8) >> (bits + 8)) & 0x3F];
  while (out.size() % 4) out += '=';
  return out;
}

std::string error_body(const std::string& message) {
  return json{{"errors", json::array({json{{"message", message}}})}}.dump();
}

}  // namespace

FakeWandb::FakeWandb(std::string api_key, int port) : api_key_(std::move(api_key)), port_(port) {
  start();
}

FakeWandb::~FakeWandb() {
  go_down();
}

void FakeWandb::start() {
  server_ = std::make_unique<httplib::Server>();
  server_->set_keep_alive_timeout(1);  // so go_down() does not wait long on an idle connection
  server_->Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
    FakeWandbRequest r;
    r.time = now_seconds();
    r.path = req.path;
    for (const auto& [k, v] : req.headers) r.headers.emplace(k, v);
    r.body = req.body;
    int status = 200;
    std::string reply = "{}";
    std::string retry_after;
    bool failed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_count_ > 0 && req.path.compare(0, fail_prefix_.size(), fail_prefix_) == 0) {
        fail_count_--;
        status = fail_status_;
        retry_after = fail_retry_after_;
        reply = error_body("fake: programmed failure");
        failed = true;
      }
    }
    if (!failed) {
      std::smatch m;
      static const std::regex stream(R"(^/files/([^/]+)/([^/]+)/([^/]+)/file_stream$)");
      if (req.get_header_value("Authorization") != "Basic " + base64("api:" + api_key_)) {
        status = 401;
        reply = error_body("fake: unauthorized");
      } else if (req.path == "/graphql") {
        handle_graphql(req.body, &status, &reply);
      } else if (std::regex_match(req.path, m, stream)) {
        handle_file_stream(m[1], m[2], m[3], req.body, &status, &reply);
      } else {
        status = 404;
        reply = error_body("fake: no such endpoint " + req.path);
      }
    }
    res.status = status;
    if (!retry_after.empty()) res.set_header("Retry-After", retry_after);
    res.set_content(reply, "application/json");
    r.status = status;
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(std::move(r));
      hook = on_request_;
    }
    if (hook) hook();
  });
  if (port_ == 0) {
    port_ = server_->bind_to_any_port("127.0.0.1");
  } else if (!server_->bind_to_port("127.0.0.1", port_)) {
    throw std::runtime_error("fake wandb: cannot listen on 127.0.0.1:" + std::to_string(port_));
  }
  if (port_ <= 0) throw std::runtime_error("fake wandb: cannot bind 127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() does nothing until the server runs, so go_down() right after start() must wait for it.
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void FakeWandb::go_down() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

void FakeWandb::come_up() {
  if (!server_) start();
}

void FakeWandb::fail_next(int n, int status, const std::string& retry_after, const std::string& path_prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_count_ = n;
  fail_status_ = status;
  fail_retry_after_ = retry_after;
  fail_prefix_ = path_prefix;
}

void FakeWandb::stop_after_rows(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  stop_after_ = n;
}

void FakeWandb::preload(const std::string& entity, const std::string& project, const std::string& id,
                        int64_t lines) {
  std::lock_guard<std::mutex> lock(mu_);
  FakeWandbRun& run = runs_[id];
  run.entity = entity;
  run.project = project;
  run.id = id;
  for (int64_t i = 0; i < lines; i++) run.history.push_back("{\"_step\":" + std::to_string(i) + "}");
}

void FakeWandb::on_request(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  on_request_ = std::move(fn);
}

// UpsertBucket: creates or updates the run named by `name`, under `entity` (default
// "fake-entity") and `project` (default "uncategorized"), and says how many history lines it has.
void FakeWandb::handle_graphql(const std::string& body, int* status, std::string* reply) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("operationName", "") != "UpsertBucket" ||
      j.value("query", "").find("upsertBucket(input:") == std::string::npos || !j.contains("variables")) {
    std::lock_guard<std::mutex> lock(mu_);
    errors_.push_back("graphql: not an UpsertBucket request: " + body.substr(0, 200));
    *status = 400;
    *reply = error_body("fake: expected UpsertBucket");
    return;
  }
  json vars = j["variables"];
  std::string id = vars.value("name", "");
  auto str_or = [&](const char* k, const std::string& d) {
    return vars.contains(k) && vars[k].is_string() && !vars[k].get<std::string>().empty()
               ? vars[k].get<std::string>()
               : d;
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (id.empty() || !vars.contains("config") || !vars["config"].is_string()) {
    errors_.push_back("graphql: UpsertBucket without name or with a non-string config");
    *status = 400;
    *reply = error_body("fake: bad variables");
    return;
  }
  FakeWandbRun& run = runs_[id];
  run.id = id;
  run.entity = str_or("entity", run.entity.empty() ? "fake-entity" : run.entity);
  run.project = str_or("project", run.project.empty() ? "uncategorized" : run.project);
  run.upserts++;
  run.upsert_variables = vars;
  json bucket = {
      {"id", "storage-" + id},
      {"name", id},
      {"displayName", vars.value("displayName", json(nullptr))},
      {"project", {{"id", "p1"}, {"name", run.project}, {"entity", {{"id", "e1"}, {"name", run.entity}}}}},
      {"historyLineCount", run.history.size()}};
  *reply = json{{"data", {{"upsertBucket", {{"bucket", bucket}, {"inserted", run.upserts == 1}}}}}}.dump();
}

// file_stream: each file's offset must be where the server's copy ends (history, output.log) or
// 0 (the one-line summary); anything else is recorded as an error.
void FakeWandb::handle_file_stream(const std::string& entity, const std::string& project,
                                   const std::string& id, const std::string& body, int* status,
                                   std::string* reply) {
  json j = json::parse(body, nullptr, false);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runs_.find(id);
  if (it == runs_.end() || it->second.entity != entity || it->second.project != project) {
    errors_.push_back("file_stream: unknown run " + entity + "/" + project + "/" + id);
    *status = 404;
    *reply = error_body("fake: run not found");
    return;
  }
  if (j.is_discarded() || !j.is_object()) {
    errors_.push_back("file_stream: body is not a JSON object: " + body.substr(0, 200));
    *status = 400;
    *reply = error_body("fake: bad body");
    return;
  }
  FakeWandbRun& run = it->second;
  run.posts++;
  if (j.empty()) run.heartbeats++;
  if (j.contains("files")) {
    for (auto f = j["files"].begin(); f != j["files"].end(); ++f) {
      const std::string& name = f.key();
      int64_t offset = f.value().value("offset", int64_t(-1));
      const json& content = f.value()["content"];
      if (name == "wandb-summary.json") {
        if (offset != 0 || content.size() != 1)
          errors_.push_back("summary: offset " + std::to_string(offset));
        if (!content.empty()) run.summary = content.back().get<std::string>();
        continue;
      }
      std::vector<std::string>* lines = name == "wandb-history.jsonl" ? &run.history
                                        : name == "output.log"        ? &run.output
                                                                      : nullptr;
      if (!lines) {
        errors_.push_back("file_stream: unexpected file " + name);
        continue;
      }
      if (offset != static_cast<int64_t>(lines->size())) {
        errors_.push_back(name + ": offset " + std::to_string(offset) + " where " +
                          std::to_string(lines->size()) + " lines are held (" +
                          (offset < static_cast<int64_t>(lines->size()) ? "repeat" : "gap") + ")");
        continue;
      }
      for (const auto& line : content) lines->push_back(line.get<std::string>());
    }
  }
  if (j.value("complete", false)) {
    run.complete = true;
    run.exit_code = j.value("exitcode", -1);
  }
  bool stop = stop_after_ >= 0 && static_cast<int64_t>(run.history.size()) >= stop_after_;
  *reply = stop ? R"({"stopped": true})" : R"({"exitcode": null, "limits": {}})";
}

std::vector<FakeWandbRequest> FakeWandb::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::vector<std::string> FakeWandb::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

bool FakeWandb::has_run(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_.count(id) > 0;
}

FakeWandbRun FakeWandb::run(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runs_.find(id);
  return it == runs_.end() ? FakeWandbRun() : it->second;
}

json FakeWandb::dump() const {
  std::lock_guard<std::mutex> lock(mu_);
  json runs = json::object();
  for (const auto& [id, r] : runs_) {
    runs[id] = {{"entity", r.entity},       {"project", r.project},
                {"upserts", r.upserts},     {"variables", r.upsert_variables},
                {"history", r.history},     {"summary", r.summary},
                {"output", r.output},       {"complete", r.complete},
                {"exit_code", r.exit_code}, {"heartbeats", r.heartbeats}};
  }
  json requests = json::array();
  for (const auto& r : requests_) {
    json headers = json::object();
    for (const auto& [k, v] : r.headers) headers[k] = v;
    requests.push_back({{"path", r.path}, {"status", r.status}, {"headers", headers}, {"body", r.body}});
  }
  return {{"runs", runs}, {"errors", errors_}, {"requests", requests}};
}

}  // namespace luatune
