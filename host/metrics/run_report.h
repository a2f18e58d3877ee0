// A training run drawn from its output directory (`runner report OUTPUT_DIR`, and metrics:close()
// at the end of every recipe): the curves of metrics.jsonl against step, the evaluations (eval_*
// keys) as a table, the phases its notes mark, run.json's recipe, run id, start time, host and
// resolved config, the summary record's final numbers. Written as
// report.html (inline CSS and SVG, no script, nothing fetched) and report.md (the same facts as
// tables) beside metrics.jsonl. Plain C++, no LibTorch. docs/report.md says what is in it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "host/metrics/metrics.h"

namespace luatune {

// One metric against step: every step once (the last value logged for it wins, so a resumed run
// that logged a step twice draws its second value), steps ascending. Null (NaN) values are kept
// as NaN and not drawn.
struct RunCurve {
  std::string key;                                 // as logged: "loss", "eval_loss", "lr", ...
  std::vector<std::pair<int64_t, double>> points;  // (step, value)
};

struct RunReport {
  std::string jsonl_path;  // what was read
  std::string dir;         // its directory, where run.json is looked for
  // From run.json when present (else empty).
  std::string recipe, run_id, started, host, luatune_version, git_describe;
  int world_size = 0;  // 0: not recorded
  int resumes = 0;     // run.json "resumes" entries
  // The resolved config: run.json's, else metrics.jsonl's first line {"config": ...}; null if neither.
  nlohmann::ordered_json config;
  std::string config_source;  // "run.json", "metrics.jsonl" or ""
  // The last {"summary": {...}} record, numbers only, in the file's order.
  std::vector<std::pair<std::string, double>> summary;
  // {"table": ...} lines (Metrics::table), in the order logged; a title logged again replaces its table.
  std::vector<MetricTable> tables;
  std::vector<RunCurve> curves;  // every numeric key but step/time/elapsed, loss first (run_report_read)
  // The step records that carry a note ({"step": 151, "note": "LoRA"}), in the file's order: each
  // starts a phase that lasts until the next one (quickstart's pretraining and LoRA stages).
  std::vector<std::pair<int64_t, std::string>> phases;
  std::vector<std::pair<std::string, std::string>> hardware;  // {what, value}, as recorded
  int64_t records = 0;                                        // step records read
  int64_t bad_lines = 0;  // lines that were not JSON objects (a killed run's truncated last line)
  int64_t repeated = 0;   // (step, key) values logged again later (a resumed run): the last kept
  int64_t first_step = -1, last_step = -1;
  double wall_seconds = -1;  // last record's "time" minus the first's (-1: unknown)
  const RunCurve* curve(const std::string& key) const;  // nullptr when not logged
};

// Reads `jsonl_path` and the run.json beside it. A missing or unreadable file fails with one line
// naming the path (exit status 1); bad lines are counted, never fatal.
RunReport run_report_read(const std::string& jsonl_path);

std::string run_report_html(const RunReport& report);
std::string run_report_markdown(const RunReport& report);

// What `runner report PATH` reads: PATH/metrics.jsonl for a directory, PATH itself for a file. A
// directory without metrics.jsonl fails with one line saying what it holds instead: other JSONL
// files to name, a sweep (runner sweep --report), or no log at all (the recipe logged nothing).
std::string run_report_jsonl_of(const std::string& path);

// Writes both files (each to a temporary name, then renamed). `html_path` "": beside the JSONL,
// report.html for metrics.jsonl and NAME.report.html for NAME.jsonl. The
// Markdown goes beside the HTML with its extension replaced by .md. Returns the HTML's path.
std::string run_report_write(const std::string& jsonl_path, const std::string& html_path = "");

}  // namespace luatune
