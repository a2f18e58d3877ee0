// The run report (see run_report.h): metrics.jsonl and run.json read once into a RunReport, then
// rendered as HTML (line charts from host/core/svg_chart.h) and as Markdown tables.
#include "host/metrics/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/core/svg_chart.h"
#include "host/io/jsonl.h"
#include "host/metrics/metrics.h"

namespace luatune {

namespace {

using ojson = nlohmann::ordered_json;

// A chart's curves drawn with more points than this are drawn as this many bucket means.
constexpr size_t kMaxChartPoints = 1000;
// Rows of sampled points per curve in the Markdown.
constexpr size_t kMarkdownSamples = 10;
// Charts beyond the main four (loss, learning rate, gradient norm, throughput).
constexpr size_t kMaxExtraCharts = 16;

// Keys of a step record that are not metrics.
bool is_bookkeeping(const std::string& k) {
  return k == "step" || k == "time" || k == "elapsed" || k == "note";
}

// Counts and per-step timings that a chart would only repeat (tokens_per_s says it better).
bool is_uncharted(const std::string& k) {
  return k == "tokens" || k == "target_tokens" || k == "step_time";
}

std::string stem_of(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

std::string json_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// "lora.r" -> value text, depth first in the config's order.
void flatten(const ojson& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out.emplace_back(prefix, json_text(j));
  }
}

// A {"table": {"title", "columns", "rows"}} record: strings only, each row as long as the columns.
bool read_table(const ojson& j, MetricTable* t) {
  if (!j.contains("title") || !j["title"].is_string() || !j.contains("columns") || !j["columns"].is_array() ||
      !j.contains("rows") || !j["rows"].is_array())
    return false;
  t->title = j["title"].get<std::string>();
  for (const ojson& c : j["columns"]) {
    if (!c.is_string()) return false;
    t->columns.push_back(c.get<std::string>());
  }
  for (const ojson& row : j["rows"]) {
    if (!row.is_array() || row.size() != t->columns.size()) return false;
    t->rows.emplace_back();
    for (const ojson& cell : row) {
      if (!cell.is_string()) return false;
      t->rows.back().push_back(cell.get<std::string>());
    }
  }
  return !t->columns.empty();
}

}  // namespace

const RunCurve* RunReport::curve(const std::string& key) const {
  for (const RunCurve& c : curves)
    if (c.key == key) return &c;
  return nullptr;
}

// ============================================================================================
// Reading

std::string run_report_jsonl_of(const std::string& path) {
  if (!dir_exists(path)) return path;
  const std::string metrics = (std::filesystem::path(path) / "metrics.jsonl").string();
  if (file_exists(metrics)) return metrics;
  // No metrics.jsonl: say what the directory is instead (every shipped recipe that logs writes one).
  std::vector<std::string> logs;
  for (const auto& [name, mtime] : dir_listing(path))
    if (str_ends_with(name, ".jsonl") && name != "trials.jsonl") logs.push_back(name);
  const std::string head = "report: no metrics file '" + metrics + "'";
  if (file_exists(path + "/trials.jsonl"))
    fail(head + " (" + path + " is a sweep's directory)",
         "runner sweep --report DIR tables its trials; runner report DIR/TRIAL draws one of them");
  if (!logs.empty())
    fail(head + "; it holds " + str_join(logs, ", "),
         "name the log to draw: runner report " + path + "/" + logs[0]);
  fail(head + " (metrics.open{jsonl = OUTPUT_DIR .. \"/metrics.jsonl\"} writes it)");
}

RunReport run_report_read(const std::string& jsonl_path) {
  if (!file_exists(jsonl_path) || dir_exists(jsonl_path))
    fail("report: no metrics file '" + jsonl_path +
         "' (metrics.open{jsonl = OUTPUT_DIR .. \"/metrics.jsonl\"} writes it)");
  RunReport r;
  r.jsonl_path = jsonl_path;
  r.dir = path_dirname(jsonl_path);

  // key -> step -> value; keys in the order they first appear.
  std::vector<std::string> order;
  std::map<std::string, std::map<int64_t, double>> values;
  ojson jsonl_config, jsonl_hardware;
  double t0 = INFINITY, t1 = -INFINITY;
  // Damaged lines (a run killed mid-write cuts its last one short) are skipped and counted.
  JsonlReadOptions jo;
  jo.bad = JsonlBad::skip;
  OJsonlReader in(jsonl_path, jo);
  if (!in.is_open()) fail("report: " + in.open_error());
  while (in.next()) {
    const ojson& j = in.value();
    if (!j.is_object()) {
      r.bad_lines++;
      continue;
    }
    if (j.contains("step")) {
      const ojson& s = j["step"];
      if (!s.is_number() || s.get<double>() < 0) {
        r.bad_lines++;
        continue;
      }
      int64_t step = static_cast<int64_t>(s.get<double>());
      r.records++;
      if (j.contains("note") && j["note"].is_string() && !j["note"].get<std::string>().empty())
        r.phases.emplace_back(step, j["note"].get<std::string>());
      r.first_step = r.first_step < 0 ? step : std::min(r.first_step, step);
      r.last_step = std::max(r.last_step, step);
      if (j.contains("time") && j["time"].is_number()) {
        double t = j["time"].get<double>();
        t0 = std::min(t0, t), t1 = std::max(t1, t);
      }
      for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        if (is_bookkeeping(k) || !(it.value().is_number() || it.value().is_null())) continue;
        auto& per_step = values[k];
        if (per_step.empty()) order.push_back(k);
        double v = it.value().is_null() ? NAN : it.value().get<double>();
        if (!per_step.emplace(step, v).second) {
          per_step[step] = v;  // logged again (a resumed run): the last value wins
          r.repeated++;
        }
      }
    } else if (j.contains("summary") && j["summary"].is_object()) {
      r.summary.clear();
      for (auto it = j["summary"].begin(); it != j["summary"].end(); ++it)
        if (it.value().is_number()) r.summary.emplace_back(it.key(), it.value().get<double>());
    } else if (j.contains("table") && j["table"].is_object()) {
      MetricTable t;
      if (!read_table(j["table"], &t)) {
        r.bad_lines++;
        continue;
      }
      auto same =
          std::find_if(r.tables.begin(), r.tables.end(), [&](const auto& x) { return x.title == t.title; });
      if (same != r.tables.end())
        *same = std::move(t);
      else
        r.tables.push_back(std::move(t));
    } else if (j.contains("config")) {
      if (jsonl_config.is_null()) jsonl_config = j["config"];
      // metrics.open's record of what the config's device resolved to (host/metrics/metrics.h)
      if (j.contains("hardware") && j["hardware"].is_object()) jsonl_hardware = j["hardware"];
    } else {
      r.bad_lines++;
    }
  }
  r.bad_lines += in.skipped();
  if (t1 >= t0) r.wall_seconds = t1 - t0;

  // Loss first, then the learning rate, gradient norm and throughput, then the rest as logged.
  static const char* const kFirst[] = {"loss",         "eval_loss",        "lr", "learning_rate", "grad_norm",
                                       "tokens_per_s", "tokens_per_second"};
  std::stable_sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    auto rank = [](const std::string& k) {
      for (size_t i = 0; i < std::size(kFirst); i++)
        if (k == kFirst[i]) return static_cast<int>(i);
      return static_cast<int>(std::size(kFirst));
    };
    return rank(a) < rank(b);
  });
  for (const std::string& k : order) {
    RunCurve c;
    c.key = k;
    c.points.assign(values[k].begin(), values[k].end());
    r.curves.push_back(std::move(c));
  }

  // run.json (host/train/run_dir.h): who made the directory, and the config it resolved.
  std::string run_json = (std::filesystem::path(r.dir) / "run.json").string();
  ojson run = file_exists(run_json) ? ojson_parse_or_discard(file_read(run_json)) : ojson();
  auto str = [&](const char* key) {
    return run.is_object() && run.contains(key) && run[key].is_string() ? run[key].get<std::string>()
                                                                        : std::string();
  };
  if (run.is_object()) {
    r.recipe = str("recipe");
    r.run_id = str("run_id");
    r.started = str("started");
    r.host = str("host");
    r.luatune_version = str("luatune");
    r.git_describe = str("git_describe");
    if (run.contains("world_size") && run["world_size"].is_number())
      r.world_size = run["world_size"].get<int>();
    if (run.contains("resumes") && run["resumes"].is_array())
      r.resumes = static_cast<int>(run["resumes"].size());
    if (run.contains("config") && run["config"].is_object()) {
      r.config = run["config"];
      r.config_source = "run.json";
    }
  }
  if (r.config.is_null() && jsonl_config.is_object()) {
    r.config = jsonl_config;
    r.config_source = path_basename(jsonl_path);
  }

  // Hardware, as far as the files record it: run.json's host, the device the run used and its GPU
  // (or CPU) by name (metrics.jsonl's hardware record; a run from before it has the config's device
  // word only, shown as such), the config's dtype, shard and quantize, the peak memory measured.
  if (!r.host.empty()) r.hardware.emplace_back("host", r.host);
  auto text_of = [](const ojson& o, const char* key) {
    return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
  };
  const std::string used = text_of(jsonl_hardware, "device"), name = text_of(jsonl_hardware, "name");
  const std::string asked =
      r.config.is_object() && r.config.contains("device") ? json_text(r.config["device"]) : "";
  if (!used.empty()) {
    r.hardware.emplace_back("device",
                            used + (!asked.empty() && asked != used ? " (config: " + asked + ")" : ""));
    if (!name.empty()) r.hardware.emplace_back(str_starts_with(used, "cuda") ? "GPU" : "CPU", name);
  }
  if (r.world_size > 0) r.hardware.emplace_back("world size (ranks)", std::to_string(r.world_size));
  if (r.config.is_object())
    for (const char* key : {"device", "dtype", "shard", "quantize"}) {
      if (!std::strcmp(key, "device") && !used.empty()) continue;  // shown above, resolved
      if (r.config.contains(key) && !r.config[key].is_null() && json_text(r.config[key]) != "")
        r.hardware.emplace_back(std::string(key) + " (config)", json_text(r.config[key]));
    }
  if (const RunCurve* mem = r.curve("peak_memory_gb")) {
    double peak = -1;
    for (const auto& p : mem->points)
      if (std::isfinite(p.second)) peak = std::max(peak, p.second);
    if (peak >= 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.2f GB", peak);
      r.hardware.emplace_back("peak device memory", buf);
    }
  }
  return r;
}

// ============================================================================================
// What both renderers show

namespace {

struct Chart {
  std::string title, y_label;
  std::vector<const RunCurve*> curves;
};

const char* const kColours[] = {"#2b6cb0", "#dd6b20", "#805ad5", "#319795", "#b7791f", "#d53f8c", "#38a169"};

// Loss and eval loss share a chart; then learning rate, gradient norm, throughput; then one chart
// per other metric (eval perplexity, distillation losses, peak memory, ...).
std::vector<Chart> charts_of(const RunReport& r) {
  std::vector<Chart> out;
  std::vector<std::string> used;
  auto take = [&](Chart c, std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (const RunCurve* cv = r.curve(k)) {
        c.curves.push_back(cv);
        used.push_back(k);
      }
    if (!c.curves.empty()) out.push_back(std::move(c));
  };
  take({"Loss", "loss", {}}, {"loss", "eval_loss"});
  take({"Learning rate", "learning rate", {}}, {"lr", "learning_rate"});
  take({"Gradient norm", "grad norm (before clipping)", {}}, {"grad_norm"});
  take({"Throughput", "tokens/s", {}}, {"tokens_per_s", "tokens_per_second"});
  size_t extra = 0;
  for (const RunCurve& c : r.curves) {
    if (std::find(used.begin(), used.end(), c.key) != used.end() || is_uncharted(c.key)) continue;
    if (extra++ >= kMaxExtraCharts) break;
    out.push_back({c.key, c.key, {&c}});
  }
  return out;
}

// At most `max` points: consecutive buckets of equal size averaged (steps too), first and last kept
// in place by construction of the bucket bounds.
std::vector<std::pair<double, double>> chart_points(const RunCurve& c, size_t max) {
  std::vector<std::pair<double, double>> finite;
  for (const auto& [s, v] : c.points)
    if (std::isfinite(v)) finite.emplace_back(static_cast<double>(s), v);
  if (finite.size() <= max) return finite;
  std::vector<std::pair<double, double>> out;
  for (size_t b = 0; b < max; b++) {
    size_t lo = b * finite.size() / max, hi = (b + 1) * finite.size() / max;
    double sx = 0, sy = 0;
    for (size_t i = lo; i < hi; i++) sx += finite[i].first, sy += finite[i].second;
    out.emplace_back(sx / static_cast<double>(hi - lo), sy / static_cast<double>(hi - lo));
  }
  return out;
}

bool any_downsampled(const std::vector<Chart>& charts) {
  for (const Chart& c : charts)
    for (const RunCurve* cv : c.curves)
      if (cv->points.size() > kMaxChartPoints) return true;
  return false;
}

// The last finite value of a curve, with its step.
bool last_value(const RunCurve& c, int64_t* step, double* v) {
  for (auto it = c.points.rbegin(); it != c.points.rend(); ++it)
    if (std::isfinite(it->second)) {
      *step = it->first, *v = it->second;
      return true;
    }
  return false;
}

struct FinalRow {
  std::string name, value, from;
};

// The summary record's numbers, then the last logged value of each charted curve the summary
// does not already give.
std::vector<FinalRow> final_rows(const RunReport& r, const std::vector<Chart>& charts) {
  std::vector<FinalRow> rows;
  for (const auto& [k, v] : r.summary) rows.push_back({k, metrics_format_value(k, v), "summary"});
  for (const Chart& c : charts)
    for (const RunCurve* cv : c.curves) {
      bool in_summary = false;
      for (const auto& kv : r.summary) in_summary = in_summary || kv.first == cv->key;
      int64_t step = 0;
      double v = 0;
      if (!in_summary && last_value(*cv, &step, &v))
        rows.push_back({cv->key, metrics_format_value(cv->key, v), "step " + std::to_string(step)});
    }
  return rows;
}

// Evenly spaced indices into n points, first and last included.
std::vector<size_t> sample_indices(size_t n, size_t k) {
  std::vector<size_t> idx;
  if (n == 0) return idx;
  if (n <= k) {
    for (size_t i = 0; i < n; i++) idx.push_back(i);
    return idx;
  }
  for (size_t i = 0; i < k; i++) {
    size_t j = (i * (n - 1) + (k - 1) / 2) / (k - 1);
    if (idx.empty() || j != idx.back()) idx.push_back(j);
  }
  return idx;
}

// Rows of evaluation tables beyond this are sampled evenly, the first and last kept.
constexpr size_t kMaxEvalRows = 20;

// The phase a step falls in: the note of the last phase starting at or before it ("" if none).
std::string phase_at(const RunReport& r, int64_t step) {
  std::string name;
  for (const auto& [from, note] : r.phases)
    if (from <= step) name = note;
  return name;
}

struct PhaseRow {
  std::string name, steps;
};

// Each phase with its steps: from its note's step to the step before the next phase's (the last
// one to the run's last step).
std::vector<PhaseRow> phase_rows(const RunReport& r) {
  std::vector<PhaseRow> rows;
  for (size_t i = 0; i < r.phases.size(); i++) {
    const int64_t from = r.phases[i].first;
    const int64_t to = i + 1 < r.phases.size() ? std::max(from, r.phases[i + 1].first - 1) : r.last_step;
    rows.push_back({r.phases[i].second, from == to
                                            ? "step " + std::to_string(from)
                                            : "steps " + std::to_string(from) + "–" + std::to_string(to)});
  }
  return rows;
}

// The evaluations: one row per step at which an eval_* value was logged, one column per eval_* key
// (a cell "" where that key was not logged then), the phase first when the run has phases.
struct EvalTable {
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> rows;  // step, [phase,] values
  size_t total_rows = 0;                       // before sampling
};

EvalTable eval_table(const RunReport& r) {
  EvalTable t;
  std::map<int64_t, std::map<std::string, double>> at;
  for (const RunCurve& c : r.curves) {
    if (!metrics_is_eval_key(c.key)) continue;
    t.keys.push_back(c.key);
    for (const auto& [step, v] : c.points)
      if (std::isfinite(v)) at[step][c.key] = v;
  }
  std::vector<std::vector<std::string>> all;
  for (const auto& [step, values] : at) {
    std::vector<std::string> row{std::to_string(step)};
    if (!r.phases.empty()) row.push_back(phase_at(r, step));
    for (const std::string& k : t.keys) {
      auto v = values.find(k);
      row.push_back(v == values.end() ? "" : metrics_format_value(k, v->second));
    }
    all.push_back(std::move(row));
  }
  t.total_rows = all.size();
  for (size_t i : sample_indices(all.size(), kMaxEvalRows)) t.rows.push_back(all[i]);
  return t;
}

std::string title_of(const RunReport& r) {
  std::string name = r.recipe.empty() ? "" : stem_of(r.recipe);
  if (name.empty() && r.config.is_object() && r.config.contains("output_dir"))
    name = path_basename(json_text(r.config["output_dir"]));
  if (name.empty()) name = path_basename(r.dir);
  std::string stem = stem_of(r.jsonl_path);
  if (stem != "metrics") name += " (" + stem + ")";
  return "Run report: " + name;
}

// "run ID", "started T", "steps 1-100", "12m05s wall clock", "luatune V (git G)"
std::vector<std::string> about_of(const RunReport& r) {
  std::vector<std::string> about;
  if (!r.run_id.empty()) about.push_back("run " + r.run_id);
  if (!r.started.empty()) about.push_back("started " + r.started);
  if (r.first_step >= 0)
    about.push_back(r.first_step == r.last_step
                        ? "step " + std::to_string(r.last_step)
                        : "steps " + std::to_string(r.first_step) + "–" + std::to_string(r.last_step));
  if (r.wall_seconds > 0) about.push_back(metrics_format_duration(r.wall_seconds) + " wall clock");
  if (!r.luatune_version.empty())
    about.push_back("luatune " + r.luatune_version +
                    (r.git_describe.empty() ? "" : " (" + r.git_describe + ")"));
  return about;
}

std::vector<std::string> notes_of(const RunReport& r, const std::vector<Chart>& charts) {
  std::vector<std::string> notes;
  if (r.bad_lines > 0)
    notes.push_back(std::to_string(r.bad_lines) + " line" + (r.bad_lines == 1 ? " was" : "s were") +
                    " skipped in " + path_basename(r.jsonl_path) +
                    ": not a JSON record (a run killed while writing leaves a truncated last line)");
  if (r.repeated > 0)
    notes.push_back(
        std::to_string(r.repeated) + " value" + (r.repeated == 1 ? " was" : "s were") +
        " logged again for a step already logged (a resumed run): the last value of each step is shown");
  if (r.resumes > 0)
    notes.push_back("resumed " + std::to_string(r.resumes) + " time" + (r.resumes == 1 ? "" : "s") +
                    " (run.json)");
  if (any_downsampled(charts))
    notes.push_back("curves of more than " + std::to_string(kMaxChartPoints) + " steps are drawn as " +
                    std::to_string(kMaxChartPoints) + " means of consecutive steps");
  const EvalTable evals = eval_table(r);
  if (evals.rows.size() < evals.total_rows)
    notes.push_back("the evaluations table shows " + std::to_string(evals.rows.size()) + " of its " +
                    std::to_string(evals.total_rows) + " rows, spread evenly over the run");
  if (r.records == 0) notes.push_back("no step was logged");
  if (r.config.is_null()) notes.push_back("no config recorded (neither run.json nor a config line)");
  return notes;
}

const char* const kStyle = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;color:#1a202c;
  margin:24px auto;max-width:1100px;padding:0 16px;background:#fff}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e2e8f0;padding-bottom:4px}
.about{color:#4a5568;margin:0 0 12px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:4px 10px;border-bottom:1px solid #e2e8f0;text-align:left}
th{background:#f7fafc;font-weight:600;font-size:13px}.num{text-align:right;font-variant-numeric:tabular-nums}
td.key{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px}td.value{word-break:break-all}
svg.chart{max-width:100%;height:auto;display:block;margin:4px 0 12px}
table.text td{white-space:pre-wrap;vertical-align:top}
figure{margin:0}figcaption{font-weight:600;margin:16px 0 0}.notes li{color:#4a5568}
)css";

}  // namespace

// ============================================================================================
// HTML

std::string run_report_html(const RunReport& r) {
  const std::string title = title_of(r);
  const std::vector<Chart> charts = charts_of(r);
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>" << svg_escape(title)
     << "</title><style>" << kStyle << "</style></head><body>\n";
  os << "<h1>" << svg_escape(title) << "</h1>\n";
  std::vector<std::string> about = about_of(r);
  if (!about.empty()) {
    os << "<p class=\"about\">";
    for (size_t i = 0; i < about.size(); i++) os << (i ? " · " : "") << svg_escape(about[i]);
    os << "</p>\n";
  }

  std::vector<FinalRow> finals = final_rows(r, charts);
  if (!finals.empty()) {
    os << "<h2>Final numbers</h2>\n<table class=\"final\"><thead><tr><th>metric</th><th "
          "class=\"num\">value</th>"
          "<th>from</th></tr></thead><tbody>";
    for (const FinalRow& f : finals)
      os << "<tr><td class=\"key\">" << svg_escape(f.name) << "</td><td class=\"num\">" << svg_escape(f.value)
         << "</td><td>" << svg_escape(f.from) << "</td></tr>";
    os << "</tbody></table>\n";
  }

  const EvalTable evals = eval_table(r);
  if (!evals.rows.empty()) {
    os << "<h2>Evaluations</h2>\n<table class=\"evals\"><thead><tr><th class=\"num\">step</th>"
       << (r.phases.empty() ? "" : "<th>phase</th>");
    for (const std::string& k : evals.keys) os << "<th class=\"num\">" << svg_escape(k) << "</th>";
    os << "</tr></thead><tbody>";
    for (const auto& row : evals.rows) {
      os << "<tr>";
      for (size_t i = 0; i < row.size(); i++) {
        const bool text = !r.phases.empty() && i == 1;
        os << (text ? "<td>" : "<td class=\"num\">") << svg_escape(row[i]) << "</td>";
      }
      os << "</tr>";
    }
    os << "</tbody></table>\n";
  }
  for (const MetricTable& t : r.tables) {
    os << "<h2>" << svg_escape(t.title) << "</h2>\n<table class=\"text\"><thead><tr>";
    for (const std::string& c : t.columns) os << "<th>" << svg_escape(c) << "</th>";
    os << "</tr></thead><tbody>";
    for (const auto& row : t.rows) {
      os << "<tr>";
      for (const std::string& cell : row) os << "<td>" << svg_escape(cell) << "</td>";
      os << "</tr>";
    }
    os << "</tbody></table>\n";
  }
  if (!r.phases.empty()) {
    os << "<h2>Phases</h2>\n<table "
          "class=\"phases\"><thead><tr><th>phase</th><th>steps</th></tr></thead><tbody>";
    for (const PhaseRow& p : phase_rows(r))
      os << "<tr><td>" << svg_escape(p.name) << "</td><td>" << svg_escape(p.steps) << "</td></tr>";
    os << "</tbody></table>\n";
  }

  os << "<h2>Curves</h2>\n";
  if (charts.empty()) os << "<p>No metric was logged against a step.</p>\n";
  for (size_t ci = 0; ci < charts.size(); ci++) {
    const Chart& c = charts[ci];
    SvgLineChart chart;
    chart.title = c.title;
    chart.x_label = "step";
    chart.x_integer = true;
    chart.x_from = static_cast<double>(r.first_step);  // every chart over the run's steps
    chart.x_to = static_cast<double>(r.last_step);
    chart.y_label = c.y_label;
    // The loss chart's two series take the first two colours; each other chart a colour of its own.
    for (size_t i = 0; i < c.curves.size(); i++) {
      size_t colour = ci == 0 ? i : ci + 1;
      chart.series.push_back({c.curves[i]->key, kColours[colour % std::size(kColours)],
                              chart_points(*c.curves[i], kMaxChartPoints)});
    }
    os << "<figure><figcaption>" << svg_escape(c.title) << "</figcaption>" << svg_line_chart(chart)
       << "</figure>\n";
  }

  if (!r.hardware.empty()) {
    os << "<h2>Hardware</h2>\n<table class=\"hardware\"><tbody>";
    for (const auto& [k, v] : r.hardware)
      os << "<tr><th>" << svg_escape(k) << "</th><td>" << svg_escape(v) << "</td></tr>";
    os << "</tbody></table>\n";
  }

  if (r.config.is_object()) {
    std::vector<std::pair<std::string, std::string>> flat;
    flatten(r.config, "", flat);
    os << "<h2>Config</h2>\n<p class=\"about\">resolved, from " << svg_escape(r.config_source)
       << "</p>\n<table class=\"config\"><thead><tr><th>key</th><th>value</th></tr></thead><tbody>";
    for (const auto& [k, v] : flat)
      os << "<tr><td class=\"key\">" << svg_escape(k) << "</td><td class=\"value\">" << svg_escape(v)
         << "</td></tr>";
    os << "</tbody></table>\n";
  }

  std::vector<std::string> notes = notes_of(r, charts);
  if (!notes.empty()) {
    os << "<h2>Notes</h2>\n<ul class=\"notes\">";
    for (const std::string& n : notes) os << "<li>" << svg_escape(n) << "</li>";
    os << "</ul>\n";
  }
  os << "<p class=\"about\">from " << svg_escape(r.jsonl_path) << " · runner report OUTPUT_DIR</p>\n";
  os << "</body></html>\n";
  return os.str();
}

// ============================================================================================
// Markdown

std::string run_report_markdown(const RunReport& r) {
  const std::vector<Chart> charts = charts_of(r);
  std::ostringstream os;
  os << "# " << title_of(r) << "\n\n";
  std::vector<std::string> about = about_of(r);
  if (!about.empty()) os << str_join(about, " · ") << "\n\n";

  std::vector<FinalRow> finals = final_rows(r, charts);
  if (!finals.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const FinalRow& f : finals) rows.push_back({md_cell(f.name), f.value, f.from});
    os << "## Final numbers\n\n" << md_table({{"metric"}, {"value", true}, {"from"}}, rows) << "\n";
  }

  const EvalTable evals = eval_table(r);
  if (!evals.rows.empty()) {
    std::vector<MdColumn> columns{{"step", true}};
    if (!r.phases.empty()) columns.push_back({"phase"});
    for (const std::string& k : evals.keys) columns.push_back({md_cell(k), true});
    std::vector<std::vector<std::string>> rows;
    for (const auto& row : evals.rows) {
      rows.push_back({});
      for (const std::string& cell : row) rows.back().push_back(md_cell(cell));
    }
    os << "## Evaluations\n\n" << md_table(columns, rows) << "\n";
  }
  for (const MetricTable& t : r.tables) {
    std::vector<MdColumn> columns;
    for (const std::string& c : t.columns) columns.push_back({md_cell(c)});
    std::vector<std::vector<std::string>> rows;
    for (const auto& row : t.rows) {
      rows.push_back({});
      for (const std::string& cell : row) rows.back().push_back(md_text(cell));
    }
    os << "## " << md_text(t.title) << "\n\n" << md_table(columns, rows) << "\n";
  }
  if (!r.phases.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const PhaseRow& p : phase_rows(r)) rows.push_back({md_cell(p.name), p.steps});
    os << "## Phases\n\n" << md_table({{"phase"}, {"steps"}}, rows) << "\n";
  }

  os << "## Curves\n\n";
  if (charts.empty()) os << "No metric was logged against a step.\n\n";
  for (const Chart& c : charts)
    for (const RunCurve* cv : c.curves) {
      size_t n = 0;
      for (const auto& p : cv->points) n += std::isfinite(p.second) ? 1 : 0;
      os << "### " << md_cell(cv->key) << " (" << n << " point" << (n == 1 ? "" : "s") << ")\n\n";
      std::vector<std::pair<int64_t, double>> finite;
      for (const auto& p : cv->points)
        if (std::isfinite(p.second)) finite.push_back(p);
      std::vector<std::vector<std::string>> rows;
      for (size_t i : sample_indices(finite.size(), kMarkdownSamples))
        rows.push_back({std::to_string(finite[i].first), metrics_format_value(cv->key, finite[i].second)});
      os << md_table({{"step", true}, {md_cell(cv->key), true}}, rows) << "\n";
    }

  // Two columns of text: the hardware and the config.
  auto pairs_table = [](const char* key, const std::vector<std::pair<std::string, std::string>>& pairs) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [k, v] : pairs) rows.push_back({md_cell(k), md_cell(v)});
    return md_table({{key}, {"value"}}, rows);
  };
  if (!r.hardware.empty()) os << "## Hardware\n\n" << pairs_table("what", r.hardware) << "\n";
  if (r.config.is_object()) {
    std::vector<std::pair<std::string, std::string>> flat;
    flatten(r.config, "", flat);
    os << "## Config\n\nresolved, from " << r.config_source << "\n\n" << pairs_table("key", flat) << "\n";
  }
  std::vector<std::string> notes = notes_of(r, charts);
  if (!notes.empty()) {
    os << "## Notes\n\n";
    for (const std::string& n : notes) os << "- " << n << "\n";
    os << "\n";
  }
  os << "From " << r.jsonl_path << "; the charts are in the HTML report beside this file.\n";
  return os.str();
}

// ============================================================================================
// Files

std::string run_report_write(const std::string& jsonl_path, const std::string& html_path) {
  RunReport r = run_report_read(jsonl_path);
  std::string html = html_path;
  if (html.empty()) {
    std::string stem = stem_of(jsonl_path);
    html =
        (std::filesystem::path(r.dir) / (stem == "metrics" ? "report.html" : stem + ".report.html")).string();
  }
  std::filesystem::path md = std::filesystem::path(html).replace_extension(".md");
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(html).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_write_atomic(html, run_report_html(r));
  file_write_atomic(md.string(), run_report_markdown(r));
  return html;
}

}  // namespace luatune
