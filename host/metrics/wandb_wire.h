// W&B's wire (formats.md 1.3-1.5): JSON with NaN/Infinity, one libcurl POST at a time, which
// statuses are final and how long to wait before the next attempt, the UpsertBucket request and
// reply, and file_stream request bodies cut from a queue of lines. No threads, no files: the sink
// (wandb.cpp) and `runner wandb-sync` (wandb_sync.cpp) drive it. Internal to host/metrics/.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace luatune {

// ============================================================================================
// Extended JSON: W&B accepts NaN, Infinity and -Infinity as bare tokens (nlohmann writes null).

std::string wandb_json_dump(const nlohmann::ordered_json& j);
nlohmann::ordered_json wandb_json_parse(const std::string& text);  // reads those tokens back as doubles

// ============================================================================================
// HTTP

struct WandbReply {
  long status = 0;  // 0: no HTTP answer (connection refused, timeout); error says why
  std::string body;
  std::string error;        // curl's reason when status is 0
  double retry_after = -1;  // seconds the server asked us to wait (Retry-After), -1 when absent
};

// One libcurl easy handle (keep-alive across requests), used by one thread at a time. Every
// request carries Authorization: Basic base64("api:KEY"); the key goes nowhere else.
class WandbHttp {
 public:
  WandbHttp(std::string base_url, const std::string& api_key, double timeout_s);
  ~WandbHttp();
  WandbHttp(const WandbHttp&) = delete;
  WandbHttp& operator=(const WandbHttp&) = delete;

  WandbReply post(const std::string& path, const std::string& json_body);
  // From any thread: the request in flight (and any later one) ends at once with status 0.
  void abort() { abort_ = true; }
  // base URL + path without credentials, for messages.
  std::string url(const std::string& path) const;

 private:
  std::string base_url_;
  double timeout_s_;
  void* curl_ = nullptr;     // CURL*
  void* headers_ = nullptr;  // curl_slist*
  std::atomic<bool> abort_{false};
};

std::string wandb_base64(const std::string& bytes);

enum class WandbVerdict { ok, retry, final };
// The official client's policy (formats.md 1.5): 2xx ok; 400, 401, 403, 404, 409, 410, 413, 422,
// 501 final (UpsertBucket retries 409); anything else, status 0 included, is retried.
WandbVerdict wandb_verdict(long status, bool upsert);
// min(max, min * 2^attempt * (1 + 0.25 * jitter01)), attempt counted from 0.
double wandb_backoff(int attempt, double min_s, double max_s, double jitter01);
// A Retry-After value: seconds ("2", "1.5") or an HTTP date; -1 when it is neither.
double wandb_retry_after(const std::string& value, double now_unix);
// "HTTP 503 Service Unavailable" or curl's reason ("Couldn't connect to server").
std::string wandb_reply_reason(const WandbReply& r);
std::string wandb_status_text(long status);  // 401 -> "Unauthorized"
// Why a final status ended the upload, for one notice: "401 Unauthorized from URL: the API key
// was refused (check WANDB_API_KEY or ~/.netrc)"; the server's own message when it sent one.
std::string wandb_refusal(const WandbReply& r, const std::string& url);

// ============================================================================================
// UpsertBucket

struct WandbRunInfo {
  std::string run_id, entity, project, name, group, job_type, notes, host;
  std::vector<std::string> tags;
  std::string config_json = "{}";  // the resolved config, a JSON object
  std::string storage_id;          // the server's id for the run once known (bucket.id)
};

// The GraphQL body {"query", "variables", "operationName"}: config sent as a JSON string of
// {"key": {"value": v}} per top-level key plus _wandb.cli_version; empty fields as null.
std::string wandb_upsert_body(const WandbRunInfo& run);

struct WandbBucket {
  std::string id, name, entity, project;
  int64_t history_line_count = 0;
};
// Reads data.upsertBucket.bucket; false with *error set (the server's GraphQL error message, or
// what was missing) when the reply has no bucket.
bool wandb_upsert_parse(const std::string& body, WandbBucket* out, std::string* error);

// ============================================================================================
// file_stream

constexpr size_t kWandbMaxRequestBytes = 10 << 20;  // the official client's request cap

// What waits to be sent for a run, and the server line number of each file's first waiting line.
// Owned by the one thread that sends (the sink moves new lines into it under its lock).
struct WandbQueue {
  std::deque<std::string> history;  // wandb-history.jsonl rows, as spooled
  int64_t history_offset = 0;
  std::deque<std::string> output;  // output.log lines, timestamp prefixed
  int64_t output_offset = 0;
  std::string summary;         // the whole summary object
  bool summary_dirty = false;  // changed since the server last acknowledged it
  bool complete = false;       // the run ended: send complete + exitcode after the rest
  int exit_code = 0;
  bool empty() const { return history.empty() && output.empty() && !summary_dirty && !complete; }
};

// One request cut from the front of a queue.
struct WandbChunk {
  std::string body;
  size_t history = 0, output = 0;  // lines taken
  bool summary = false, complete = false;
};

// Up to max_bytes from the front of q (at least one line when any waits); complete only rides on
// the request that empties the queue. An empty queue gives the heartbeat body "{}".
WandbChunk wandb_chunk(const WandbQueue& q, size_t max_bytes = kWandbMaxRequestBytes);
// After the server acknowledged `c`: drops what it carried and moves the offsets on.
void wandb_queue_ack(WandbQueue& q, const WandbChunk& c);
// True when a file_stream reply says the run was stopped from the UI ({"stopped": true}).
bool wandb_reply_stopped(const std::string& body);
std::string wandb_file_stream_path(const std::string& entity, const std::string& project,
                                   const std::string& run_id);

}  // namespace luatune
