// file_stream request bodies and replies (see wandb_file_stream.h).
#include "host/metrics/wandb_file_stream.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

#include "host/core/error.h"
#include "host/metrics/wandb_http.h"
#include "host/metrics/wandb_json.h"

namespace luatune {

namespace {

// Appends `"name":{"offset":N,"content":[...]}` with lines [0, count) of `lines`.
template <class Lines>
void append_file(std::string& body, const char* name, int64_t offset, const Lines& lines, size_t count) {
  if (body.back() != '{') body += ',';
  body += '"';
  body += name;
  body += "\":{\"offset\":" + std::to_string(offset) + ",\"content\":[";
  for (size_t i = 0; i < count; i++) {
    if (i) body += ',';
    body += wandb_json_quote(lines[i]);
  }
  body += "]}";
}

// How many lines from the front fit in `budget` bytes (escaping adds a little; counted roughly
// with 10% and the quotes), taking at least one when `force`.
template <class Lines>
size_t lines_that_fit(const Lines& lines, size_t* budget, bool force) {
  size_t n = 0;
  while (n < lines.size()) {
    size_t cost = lines[n].size() + lines[n].size() / 10 + 3;
    if (cost > *budget && !(force && n == 0)) break;
    *budget = cost > *budget ? 0 : *budget - cost;
    n++;
  }
  return n;
}

}  // namespace

std::string wandb_file_stream_path(const std::string& entity, const std::string& project,
                                   const std::string& run_id) {
  return "/files/" + wandb_url_escape(entity) + "/" + wandb_url_escape(project) + "/" +
         wandb_url_escape(run_id) + "/file_stream";
}

WandbChunk wandb_chunk(const WandbQueue& q, size_t max_bytes) {
  WandbChunk c;
  size_t budget = max_bytes > 4096 ? max_bytes - 4096 : max_bytes;  // room for the envelope
  if (q.summary_dirty) {
    c.summary = true;
    budget -= std::min(budget, q.summary.size() + q.summary.size() / 10 + 3);
  }
  c.history = lines_that_fit(q.history, &budget, !c.summary);
  c.output = lines_that_fit(q.output, &budget, !c.summary && c.history == 0);
  c.complete = q.complete && c.history == q.history.size() && c.output == q.output.size();

  std::string body = "{\"files\":{";
  if (c.history) append_file(body, "wandb-history.jsonl", q.history_offset, q.history, c.history);
  if (c.summary) append_file(body, "wandb-summary.json", 0, std::vector<std::string>{q.summary}, 1);
  if (c.output) append_file(body, "output.log", q.output_offset, q.output, c.output);
  body += '}';
  // A run stopped by SIGINT/SIGTERM (it saved a checkpoint to resume from) says it was preempted.
  if (c.complete && q.exit_code == kExitInterrupted) body += ",\"preempting\":true";
  if (c.complete) body += ",\"complete\":true,\"exitcode\":" + std::to_string(q.exit_code);
  body += '}';
  // Nothing at all to say: the heartbeat, an empty object (the Go client's).
  c.body = (c.history || c.summary || c.output || c.complete) ? body : "{}";
  return c;
}

void wandb_queue_ack(WandbQueue& q, const WandbChunk& c) {
  q.history.erase(q.history.begin(), q.history.begin() + static_cast<std::ptrdiff_t>(c.history));
  q.history_offset += static_cast<int64_t>(c.history);
  q.output.erase(q.output.begin(), q.output.begin() + static_cast<std::ptrdiff_t>(c.output));
  q.output_offset += static_cast<int64_t>(c.output);
  if (c.summary) q.summary_dirty = false;
  if (c.complete) q.complete = false;
}

bool wandb_reply_stopped(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto it = j.find("stopped");
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace luatune
