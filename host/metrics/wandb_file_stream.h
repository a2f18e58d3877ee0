// W&B's file_stream protocol: what waits to be sent for a run, request bodies cut from the front
// of that queue (history rows, the summary and console lines with their line offsets, then
// {"complete": true, "exitcode": N}), and what a reply acknowledges. Request and reply as the
// official client sends and reads them: docs/wandb.md, "Protocol sources".
// Internal to host/metrics/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

namespace luatune {

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
// "/files/ENTITY/PROJECT/RUN_ID/file_stream", each part percent-encoded.
std::string wandb_file_stream_path(const std::string& entity, const std::string& project,
                                   const std::string& run_id);

}  // namespace luatune
