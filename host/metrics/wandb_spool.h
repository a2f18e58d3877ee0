// A W&B run's spool, DIR/run-ID/: the durable record a run writes whether or not the server
// answers, and what `runner wandb-sync` uploads from.
//   run.json       the run's settings and resolved config (never the API key, nor a
//                  user:password@ from the base URL)
//   history.jsonl  one row a line, exactly as sent to wandb-history.jsonl
//   summary.json   the latest summary object
//   output.log     console lines, timestamp prefixed, as sent to output.log
//   state.json     what the server acknowledged (rewritten atomically), and the exit code
// Each file is created 0600 (the owner's alone) whatever the umask; whole files are written to a
// temporary and renamed.
// Internal to host/metrics/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "host/metrics/wandb_wire.h"

namespace luatune {

struct WandbState {
  int64_t history_acked = 0;  // history.jsonl lines the server acknowledged (from the first)
  int64_t output_acked = 0;   // output.log lines likewise
  bool summary_acked = false;
  int64_t history_base = 0;                 // the server's line number of history.jsonl's first line
  std::string storage_id, entity, project;  // the server's answers to UpsertBucket
  bool complete = false;                    // the server acknowledged {"complete": true}
  bool closed = false;                      // the run ended (a killed run never gets here)
  int exit_code = 0;                        // when closed
};

WandbState wandb_state_read(const std::string& run_dir);  // defaults when there is no state.json
void wandb_state_write(const std::string& run_dir, const WandbState& state);

// Resume and `wandb-sync`: the server says it holds `server_lines` history lines. When that falls
// within what the spool holds, the lines below it count as acknowledged (an acknowledgement lost
// in transit); otherwise the first unacknowledged spool line goes to line `server_lines`.
void wandb_state_reconcile(WandbState& state, int64_t spool_lines, int64_t server_lines);

void wandb_run_json_write(const std::string& run_dir, const WandbRunInfo& run, const std::string& base_url);
WandbRunInfo wandb_run_json_read(const std::string& run_dir, std::string* base_url);

// The complete lines of a spool file ("" or a missing file: none); a last line without its
// newline (the process died mid-write) is left out.
std::vector<std::string> wandb_spool_lines(const std::string& path);

// The two append-only files, kept open: each append is one fwrite + fflush, cheap enough for the
// training thread. Callers serialize appends.
class WandbSpool {
 public:
  // Creates run_dir (fails naming it when it cannot); `resume` appends to what is there, else
  // the run's files start afresh.
  WandbSpool(std::string run_dir, bool resume);
  ~WandbSpool();
  WandbSpool(const WandbSpool&) = delete;
  WandbSpool& operator=(const WandbSpool&) = delete;

  void append_history(const std::string& row);
  void append_output(const std::string& line);
  // summary.json by write-then-rename, without fsync: it is rewritten often and is whole either way.
  void write_summary(const std::string& json);
  void close();

  const std::string& dir() const { return dir_; }
  int64_t history_lines() const { return history_lines_; }
  int64_t output_lines() const { return output_lines_; }

 private:
  std::FILE* open_append(const std::string& name, bool resume, int64_t* lines);
  void append(std::FILE* f, const std::string& name, const std::string& line);

  std::string dir_;
  std::FILE* history_ = nullptr;
  std::FILE* output_ = nullptr;
  int64_t history_lines_ = 0, output_lines_ = 0;
};

}  // namespace luatune
