// A loopback W&B server for tests (cpp-httplib on 127.0.0.1, a free port): the server side of
// UpsertBucket and file_stream as docs/wandb.md, "Protocol sources", describes them. It
// checks Basic auth and that every file's offsets follow on without gaps or repeats (a violation
// is recorded in errors(), for the test to fail on), keeps what each run received, and can be
// told to go away, answer with an error status (and Retry-After), or stop a run as the UI does.
// Used by test_wandb.cpp and by the fake_wandb_server program the recipe tests start.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace luatune {

struct FakeWandbRequest {
  double time = 0;  // steady-clock seconds when it arrived
  std::string path;
  std::multimap<std::string, std::string> headers;
  std::string body;
  int status = 0;  // what the fake answered
};

struct FakeWandbRun {
  std::string entity, project, id;
  int upserts = 0;
  nlohmann::json upsert_variables;   // the last UpsertBucket's variables
  std::vector<std::string> history;  // wandb-history.jsonl lines in order (raw JSON text)
  std::string summary;               // the last wandb-summary.json line
  std::vector<std::string> output;   // output.log lines
  bool complete = false;
  int exit_code = -1;
  int heartbeats = 0;
  int posts = 0;  // file_stream requests accepted
};

class FakeWandb {
 public:
  // Serves on 127.0.0.1 at `port` (0: any free port), accepting `api_key` only.
  explicit FakeWandb(std::string api_key, int port = 0);
  ~FakeWandb();
  FakeWandb(const FakeWandb&) = delete;
  FakeWandb& operator=(const FakeWandb&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Behaviour. go_down closes the port (connections are refused); come_up listens again on it.
  void go_down();
  void come_up();
  // The next n requests (whose path starts with path_prefix) get `status`, with Retry-After when given.
  void fail_next(int n, int status, const std::string& retry_after = "", const std::string& path_prefix = "");
  // file_stream replies {"stopped": true} once a run has this many history rows (-1: never).
  void stop_after_rows(int64_t n);
  // A run the server already holds `lines` history rows of (for resume).
  void preload(const std::string& entity, const std::string& project, const std::string& id, int64_t lines);

  // What arrived.
  std::vector<FakeWandbRequest> requests() const;
  std::vector<std::string> errors() const;  // protocol violations seen
  bool has_run(const std::string& id) const;
  FakeWandbRun run(const std::string& id) const;
  nlohmann::json dump() const;  // runs, errors and requests as JSON (the standalone server's file)

  // Called after each request is recorded (the standalone server writes its dump file here).
  void on_request(std::function<void()> fn);

 private:
  void start();
  void handle_graphql(const std::string& body, int* status, std::string* reply);
  void handle_file_stream(const std::string& entity, const std::string& project, const std::string& id,
                          const std::string& body, int* status, std::string* reply);

  std::string api_key_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::map<std::string, FakeWandbRun> runs_;
  std::vector<FakeWandbRequest> requests_;
  std::vector<std::string> errors_;
  int fail_count_ = 0, fail_status_ = 0;
  std::string fail_retry_after_, fail_prefix_;
  int64_t stop_after_ = -1;
  std::function<void()> on_request_;
};

}  // namespace luatune
