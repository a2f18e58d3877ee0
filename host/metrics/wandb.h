// Weights & Biases over its own HTTP protocol (docs/wandb.md, "Protocol sources"), through
// libcurl, the way the official client does it: the GraphQL mutation UpsertBucket creates (or
// resumes) the run with its config, then file_stream carries wandb-history.jsonl rows with
// consecutive offsets, wandb-summary.json, output.log (console lines), heartbeats and the final
// {"complete": true, "exitcode": N}.
//
// The training thread never waits on the network: write() appends the row to the run's spool
// directory (DIR/run-ID/, the durable record) and queues it; a sender thread batches what is
// queued every transmit interval, retries with exponential backoff and jitter (Retry-After
// honoured) under the client's rules for which statuses are final, and keeps unsent rows until the
// server returns. A final status (401, 403, 404, ...) prints one clear notice and the run goes on
// logging locally. Offline mode writes the spool only; `runner wandb-sync DIR` uploads it later
// (and finishes what an interrupted upload left). A response with "stopped": true marks the run
// stopped (MetricSink::stopped), so the recipe can end its loop cleanly.
//
// The API key (WANDB_API_KEY, else the password of the base URL's host in $NETRC or ~/.netrc) is
// sent only in the Authorization header: never printed, never written to the spool or a log. A
// user:password@ in the base URL is dropped on reading (W&B's own client ignores it too: its key
// header wins); a plain http:// URL to a non-loopback host gets a one-line warning. docs/wandb.md.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace luatune {

class MetricSink;

struct WandbOptions {
  // What the recipe says (metrics.open{wandb = ...}); an empty field falls back to the environment
  // variable named beside it, then to the default.
  std::string project;            // WANDB_PROJECT
  std::string entity;             // WANDB_ENTITY; empty: the server picks the key owner's default
  std::string name;               // display name; WANDB_NAME
  std::string group;              // WANDB_RUN_GROUP
  std::string job_type;           // WANDB_JOB_TYPE
  std::string notes;              // WANDB_NOTES
  std::vector<std::string> tags;  // WANDB_TAGS (comma-separated)
  std::string mode;               // online | offline | disabled (dryrun = offline); WANDB_MODE; online
  std::string run_id;             // WANDB_RUN_ID; else (resume) the id spooled in `dir`; else 8 new [a-z0-9]
  std::string base_url;           // WANDB_BASE_URL; https://api.wandb.ai
  std::string dir;                // spool root, the run's files in dir/run-ID/; WANDB_DIR; ./wandb
  std::string default_dir;        // the spool root when neither `dir` nor WANDB_DIR says ("" = ./wandb);
                                  // metrics.open puts it beside the recipe's JSONL file
  std::string api_key;            // WANDB_API_KEY; else $NETRC or ~/.netrc for the base URL's host
  std::string config_json;        // the resolved config, a JSON object ("" = {})
  bool resume = false;            // continue the run (same id) after its last history line

  // Pacing and retries. Negative = the default, or the environment setting named beside it (the
  // official client's names).
  double transmit_interval = -1;   // WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL; 5 s between file_stream posts
  double heartbeat_interval = -1;  // WANDB_HEARTBEAT_SECONDS; 30 s: an empty post when nothing else went
  double retry_wait_min = -1;      // WANDB_X_FILE_STREAM_RETRY_WAIT_MIN_SECONDS; 2 s
  double retry_wait_max = -1;      // WANDB_X_FILE_STREAM_RETRY_WAIT_MAX_SECONDS; 60 s
  double http_timeout = -1;        // WANDB_HTTP_TIMEOUT; 30 s a request
  double finish_timeout = -1;      // WANDB_X_FINISH_TIMEOUT; 60 s: close() waits this long for the
                                   // server, then says what is left for `runner wandb-sync`
  std::FILE* notices = stderr;     // where "wandb: ..." notices go (always from the training thread)
};

// True when the options (after the environment) name a project and the mode is not disabled.
bool wandb_enabled(const WandbOptions& options);

// The sink; nullptr when !wandb_enabled. Errors (a spool directory that cannot be written, a
// malformed setting) raise; network trouble never does.
std::unique_ptr<MetricSink> wandb_sink_new(const WandbOptions& options);

// `runner wandb-sync [--trust-spool-host] PATH`: uploads every spooled run under PATH (a run
// directory DIR/run-ID, or a directory holding such runs), sending only what the server has not
// acknowledged, then complete with the run's recorded exit code. The key goes only to the
// configured server (WANDB_BASE_URL, else https://api.wandb.ai): a run whose run.json names
// another host is refused, unless trust_spool_host, which sends it (and the key) to that host.
// Progress and refusal lines go to `out`, one a run; warnings (plain http, an ignored
// user:password@) to `notices`, each once. Returns the exit status (0 when every run was uploaded).
int wandb_sync(const std::string& path, std::FILE* out, bool trust_spool_host = false,
               std::FILE* notices = stderr);

}  // namespace luatune
