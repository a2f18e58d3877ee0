// The hardware report's document, read once into plain structs (types checked, rows sorted) and
// the number formats, title line and summary both renderers share. Internal to
// host/hw/report*.cpp: the public interface is report.h. report.cpp reads and formats;
// report_markdown.cpp and report_html.cpp render.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

using HwNum = std::optional<double>;  // absent, null or non-finite: rendered "-" (Markdown), "—" (HTML)

// One catalog GPU (a "rows" entry).
struct HwReportRow {
  std::string gpu;
  std::string kind;  // "measured", "projected", "planned" or "" (not given)
  std::optional<bool> fits;
  HwNum memory_gb, price_per_hour, predicted_peak_gb, max_micro_batch;
  HwNum tokens_per_s, hours, cost_usd, usd_per_mtok, eval_loss, accuracy;
  std::string price_source, price_date;
  std::vector<std::string> advice;

  // Only a row that says "measured" is drawn solid: a row of unknown kind is never passed off
  // as a measurement.
  bool measured() const { return kind == "measured"; }
};

// One run timed on a real device (a "measured" entry).
struct HwReportRun {
  std::string device, gpu;
  HwNum tokens_per_s, step_time_s, mfu, peak_memory_gb, tokens, seconds, gpu_hours, cost_usd, usd_per_mtok;
  HwNum eval_loss, accuracy, utilization, power_w;
};

struct HwReportDoc {
  std::string title, recipe, date;
  std::string model_name, model_method;
  HwNum model_parameters, model_trainable;
  std::vector<HwReportRow> rows;  // sorted: fits first, then by cost ascending, rows without cost after
  std::vector<HwReportRun> measured;
  std::vector<std::pair<std::string, std::string>> formulas;  // {name, text}: MFU, projection, memory first
  std::vector<std::string> notes;
  std::string config;  // the resolved config as indented JSON, "" when absent

  bool any_eval_loss() const;
  bool any_accuracy() const;
};

// Reads and checks `report` (report.h has the schema); fails with "hw.report: ..." naming the field.
HwReportDoc hw_report_read(const nlohmann::json& report);

// ============================================================================================
// Number formats (both renderers; missing values are the caller's dash)

std::string hw_fmt_thousands(double v, int decimals);  // 12345.678, 2 -> "12,345.68"
std::string hw_fmt_gb(double v);                       // 80 -> "80", 23.14 -> "23.1"
std::string hw_fmt_tokens_per_s(double v);             // 12345.6 -> "12,346", 45.67 -> "45.7"
std::string hw_fmt_hours(double v);                    // 1.234 -> "1.23", 12.34 -> "12.3", 1234 -> "1,234"
std::string hw_fmt_usd(double v);                      // 1234.5 -> "1,234.50", 0.004 -> "<0.01"
std::string hw_fmt_loss(double v);                     // 1.23456 -> "1.2346"
std::string hw_fmt_percent(double fraction);           // 0.612 -> "61.2%"
std::string hw_fmt_count(double v);                    // 8.03e9 -> "8.03B", 4.2e7 -> "42M"
std::string hw_fmt_duration(double seconds);           // 950 -> "15m50s", 7260 -> "2h01m"

// The measured-runs table's number columns, in order, and those some run of `doc` has (a CPU smoke
// run has no power draw, a short one no eval): both renderers show only those.
struct HwRunField {
  const char* header;
  HwNum HwReportRun::*value;
  std::string (*fmt)(double);
};
std::vector<const HwRunField*> hw_run_fields_shown(const HwReportDoc& doc);

// ============================================================================================
// The line under the title and the summary paragraph, written once for both formats: `text`
// escapes plain text, `strong` escapes and emphasises, `code` escapes and sets it as code.
struct HwMarkup {
  std::function<std::string(const std::string&)> text, strong, code;
};
// The parts of the line under the title, each present only when the document has it: "Model
// <strong name> (8.03B parameters, 42M trainable, METHOD)", "recipe <code name>", the date.
std::vector<std::string> hw_report_about(const HwReportDoc& doc, const HwMarkup& m);
std::string hw_report_summary(const HwReportDoc& doc, const HwMarkup& m);

// What each kind means, for the legend under the main table (Markdown and HTML).
extern const char* const hw_kind_meaning_measured;
extern const char* const hw_kind_meaning_projected;
extern const char* const hw_kind_meaning_planned;

}  // namespace luatune
