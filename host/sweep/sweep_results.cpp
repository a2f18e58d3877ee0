// What a finished trial amounts to: its numbers (metrics.jsonl and summary.json in its directory),
// its status from how the process ended, the error its log ends with; then the ordering of
// trials by the metric, the Pareto front, and the Markdown tables (results.md, `runner sweep
// --report`, sweep.table).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "host/core/enum_names.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/io/jsonl.h"
#include "host/sweep/sweep_engine.h"

namespace luatune {

namespace {

using json = nlohmann::json;

// Numbers of a JSON object, nested objects flattened with dots; null is how the JSONL sink writes
// NaN. Strings, booleans and arrays are not metrics.
void collect_numbers(const json& j, const std::string& prefix, std::map<std::string, double>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_number())
      out[key] = it->get<double>();
    else if (it->is_null())
      out[key] = std::nan("");
    else if (it->is_object())
      collect_numbers(*it, key, out);
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (auto& line : str_split(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

}  // namespace

// ============================================================================================
// A trial's numbers and status

std::map<std::string, double> sweep_read_metrics(const std::string& dir) {
  std::map<std::string, double> out;
  std::string path = dir + "/metrics.jsonl";
  if (file_exists(path)) {
    std::map<std::string, double> summary;
    JsonlReadOptions o;
    o.bad = JsonlBad::skip;  // a line cut short by a crash
    JsonlReader in(path, o);
    if (!in.is_open()) fail(in.open_error());
    while (in.next()) {
      json& j = in.value();
      if (!j.is_object()) continue;
      if (j.contains("summary") && j["summary"].is_object()) {
        collect_numbers(j["summary"], "", summary);
      } else if (j.contains("step")) {
        j.erase("time");  // the sink's wall-clock stamps, not results
        j.erase("elapsed");
        collect_numbers(j, "", out);
      }
    }
    for (const auto& [k, v] : summary) out[k] = v;
  }
  path = dir + "/summary.json";
  if (file_exists(path)) {
    json j = json_parse_or_discard(file_read(path));
    if (j.is_object()) collect_numbers(j, "", out);
  }
  return out;
}

std::string sweep_log_error(const std::string& log_text) {
  std::vector<std::string> lines = lines_of(log_text);
  const size_t kMax = 5;
  for (size_t i = lines.size(); i-- > 0;) {
    if (!str_starts_with(lines[i], "error: ")) continue;
    std::vector<std::string> msg;
    for (size_t j = i;
         j < lines.size() && msg.size() < kMax && !str_starts_with(lines[j], "stack traceback:"); j++)
      if (!str_trim(lines[j]).empty()) msg.push_back(lines[j]);
    return str_join(msg, "\n");
  }
  std::vector<std::string> tail;
  for (size_t i = lines.size(); i-- > 0 && tail.size() < kMax;)
    if (!str_trim(lines[i]).empty()) tail.insert(tail.begin(), lines[i]);
  return str_join(tail, "\n");
}

std::string sweep_error_line(const std::string& error) {
  std::vector<std::string> lines;
  for (const auto& line : lines_of(error)) {
    std::string l = str_trim(line);
    if (l.empty() || str_starts_with(l, "HINT:") || str_starts_with(l, "warning: ")) continue;
    lines.push_back(lines.empty() && str_starts_with(l, "error: ") ? l.substr(7) : l);
  }
  // "config: 1 problem in lora_finetune's config:" introduces the problems: they are the reason.
  if (lines.size() > 1 && lines.front().back() == ':') lines.erase(lines.begin());
  return str_join(lines, "; ");
}

bool sweep_log_oom(const std::string& log_text) {
  std::string low = log_text;
  std::transform(low.begin(), low.end(), low.begin(), ::tolower);
  for (const char* s : {"out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc"})
    if (low.find(s) != std::string::npos) return true;
  return false;
}

const EnumName<SweepStatus> kSweepStatuses[] = {
    {SweepStatus::ok, "ok"},           {SweepStatus::failed, "failed"},       {SweepStatus::oom, "oom"},
    {SweepStatus::timeout, "timeout"}, {SweepStatus::no_metric, "no_metric"}, {SweepStatus::nan, "nan"}};

const char* sweep_status_name(SweepStatus s) {
  return enum_name(kSweepStatuses, s);
}

SweepStatus sweep_status_parse(const std::string& name) {
  if (const auto* row = enum_row(kSweepStatuses, name)) return row->value;
  fail("sweep: unknown trial status '" + name + "' (expected " + enum_names_list(kSweepStatuses) + ")");
}

void sweep_classify(SweepTrial& t, const std::string& metric, int exit_code, bool timed_out,
                    const std::string& log_text) {
  t.exit_code = exit_code;
  t.metric.reset();
  auto it = t.metrics.find(metric);
  if (it != t.metrics.end())
    t.metric = it->second;
  else if (metric == "seconds")
    t.metric = t.seconds;
  t.error.clear();
  if (timed_out) {
    t.status = SweepStatus::timeout;
    t.error = "stopped by the sweep's timeout after " + str_from_number(std::round(t.seconds)) + "s";
  } else if (exit_code != 0) {
    t.status = sweep_log_oom(log_text) ? SweepStatus::oom : SweepStatus::failed;
    t.error = sweep_log_error(log_text);
    if (exit_code > 128 && t.error.empty())
      t.error = "killed by signal " + std::to_string(exit_code - 128) +
                (exit_code - 128 == 9 ? " (SIGKILL: the kernel's OOM killer, or someone)" : "");
  } else if (!t.metric) {
    t.status = SweepStatus::no_metric;
    t.error = "the trial exited 0 but wrote no '" + metric + "' (metrics.jsonl, summary.json)";
  } else if (!std::isfinite(*t.metric)) {
    t.status = SweepStatus::nan;
    t.error = metric + " is " + str_from_number(*t.metric);
  } else {
    t.status = SweepStatus::ok;
  }
}

// ============================================================================================
// Order and the Pareto front

void sweep_sort(std::vector<SweepTrial>& trials, SweepGoal goal) {
  std::stable_sort(trials.begin(), trials.end(), [goal](const SweepTrial& a, const SweepTrial& b) {
    bool aok = a.status == SweepStatus::ok, bok = b.status == SweepStatus::ok;
    if (aok != bok) return aok;
    if (aok && *a.metric != *b.metric)
      return goal == SweepGoal::minimize ? *a.metric < *b.metric : *a.metric > *b.metric;
    return a.index < b.index;
  });
}

std::vector<bool> sweep_pareto(const std::vector<std::vector<double>>& points,
                               const std::vector<SweepGoal>& goals) {
  auto valid = [&](const std::vector<double>& p) {
    if (p.size() != goals.size()) return false;
    for (double v : p)
      if (!std::isfinite(v)) return false;
    return true;
  };
  // a dominates b: at least as good everywhere, better somewhere (maximized objectives negated).
  auto dominates = [&](const std::vector<double>& a, const std::vector<double>& b) {
    bool better = false;
    for (size_t k = 0; k < goals.size(); k++) {
      double x = goals[k] == SweepGoal::minimize ? a[k] : -a[k];
      double y = goals[k] == SweepGoal::minimize ? b[k] : -b[k];
      if (x > y) return false;
      better = better || x < y;
    }
    return better;
  };
  std::vector<bool> front(points.size(), false);
  for (size_t i = 0; i < points.size(); i++) {
    if (!valid(points[i])) continue;
    front[i] = true;
    for (size_t j = 0; j < points.size() && front[i]; j++)
      if (j != i && valid(points[j]) && dominates(points[j], points[i])) front[i] = false;
  }
  return front;
}

// ============================================================================================
// Markdown

std::string sweep_show_metric(double v) {
  double a = std::fabs(v);
  if (!std::isfinite(v) || (v == std::floor(v) && a < 1e15)) return str_from_number(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, a >= 1e-3 && a < 1e6 ? "%.4f" : "%.4e", v);
  return buf;
}

static std::string show_metric(const std::optional<double>& v) {
  return v ? sweep_show_metric(*v) : "";
}

std::string sweep_show_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f" : "%.0f", s);
  return buf;
}

std::string sweep_markdown_table(const std::vector<std::string>& headers,
                                 const std::vector<std::vector<std::string>>& rows) {
  // A column whose filled cells are all numbers is right-aligned.
  std::vector<MdColumn> cols;
  for (size_t c = 0; c < headers.size(); c++) {
    bool numeric = false, text = false;
    for (const auto& r : rows) {
      if (c >= r.size() || r[c].empty() || r[c] == "-") continue;
      double v;
      (str_to_number(r[c], &v) ? numeric : text) = true;
    }
    cols.push_back({md_cell(headers[c]), numeric && !text});
  }
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    cells.emplace_back();
    for (const std::string& s : r) cells.back().push_back(md_cell(s));
  }
  return md_table(cols, cells);
}

std::string sweep_results_markdown(const SweepInfo& info, std::vector<SweepTrial> trials) {
  sweep_sort(trials, info.goal);
  std::map<SweepStatus, int> counts;
  for (const auto& t : trials) counts[t.status]++;
  std::vector<std::string> parts;
  for (const auto& [status, n] : counts) parts.push_back(std::to_string(n) + " " + sweep_status_name(status));
  std::ostringstream os;
  os << "# Sweep " << info.name << "\n\n";
  os << "Recipe `" << info.recipe << "`, metric `" << info.metric << "` (" << sweep_goal_name(info.goal)
     << "): " << trials.size() << " of " << info.planned << " trials finished"
     << (parts.empty() ? "" : ": " + str_join(parts, ", ")) << ".\n";
  if (!trials.empty() && trials.front().status == SweepStatus::ok) {
    const SweepTrial& b = trials.front();
    std::vector<std::string> vals;
    for (const auto& [k, v] : b.values) vals.push_back(k + "=" + sweep_show(v));
    os << "Best: " << b.name << ", " << info.metric << " " << show_metric(b.metric) << " ("
       << str_join(vals, " ") << ").\n";
  }
  std::vector<std::string> headers = {"rank", "trial"};
  headers.insert(headers.end(), info.keys.begin(), info.keys.end());
  headers.push_back(info.metric);
  headers.insert(headers.end(), info.columns.begin(), info.columns.end());
  headers.push_back("status");
  headers.push_back("seconds");
  std::vector<std::vector<std::string>> rows;
  int rank = 0;
  for (const auto& t : trials) {
    std::vector<std::string> r = {t.status == SweepStatus::ok ? std::to_string(++rank) : "-", t.name};
    for (const auto& key : info.keys) {
      std::string shown;
      for (const auto& [k, v] : t.values)
        if (k == key) shown = sweep_show(v);
      r.push_back(shown);
    }
    r.push_back(show_metric(t.metric));
    for (const auto& c : info.columns) {
      auto it = t.metrics.find(c);
      r.push_back(it != t.metrics.end() ? show_metric(it->second)
                  : c == "seconds"      ? sweep_show_seconds(t.seconds)
                                        : "");
    }
    r.push_back(sweep_status_name(t.status));
    r.push_back(sweep_show_seconds(t.seconds));
    rows.push_back(std::move(r));
  }
  os << "\n" << sweep_markdown_table(headers, rows);
  bool heading = false;
  for (const auto& t : trials) {
    if (t.status == SweepStatus::ok) continue;
    if (!heading) os << "\nNot ok:\n";
    heading = true;
    std::string first = t.error.substr(0, t.error.find('\n'));
    os << "- " << t.name << " (" << sweep_status_name(t.status);
    if (t.exit_code != 0) os << ", exit " << t.exit_code;
    os << "): " << first << "\n";
  }
  return os.str();
}

std::string sweep_report(const std::string& dir) {
  SweepInfo info = sweep_info_read(dir);
  std::vector<SweepTrial> trials;
  for (auto& [index, t] : sweep_read_trials(dir))
    if (index <= info.planned) trials.push_back(std::move(t));
  return sweep_results_markdown(info, std::move(trials));
}

}  // namespace luatune
