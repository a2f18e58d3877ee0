// The hardware report as Markdown: title, summary, the GPU table (fits first, cheapest first),
// the measured runs, advice for GPUs that do not fit, price sources, formulas, notes and config.
// Cells are escaped for Markdown tables and for the raw HTML a Markdown viewer would pass through
// (GPU names come from user-editable catalogs).
#include <nlohmann/json.hpp>

#include <functional>
#include <sstream>

#include "host/core/strings.h"
#include "host/hw/report.h"
#include "host/hw/report_doc.h"

namespace luatune {

namespace {

const char* const kDash = "-";

std::string md_strong(const std::string& s) {
  return "**" + md_text(s) + "**";
}

std::string cell(const HwNum& v, std::string (*fmt)(double)) {
  return v ? fmt(*v) : kDash;
}

std::string fits_cell(const HwReportRow& r) {
  return !r.fits ? kDash : *r.fits ? "yes" : "**no**";
}

std::string main_table(const HwReportDoc& doc) {
  bool loss = doc.any_eval_loss(), acc = doc.any_accuracy();
  std::vector<MdColumn> cols = {{"GPU", false},
                                {"memory GB", true},
                                {"fits", false},
                                {"max micro-batch", true},
                                {"predicted peak GB", true},
                                {"tokens/s", true},
                                {"hours", true},
                                {"cost $", true},
                                {"$/1M tok", true}};
  if (loss) cols.push_back({"eval loss", true});
  if (acc) cols.push_back({"accuracy", true});
  cols.push_back({"kind", false});
  std::vector<std::vector<std::string>> rows;
  for (const HwReportRow& r : doc.rows) {
    std::vector<std::string> row = {md_text(r.gpu),
                                    cell(r.memory_gb, hw_fmt_gb),
                                    fits_cell(r),
                                    r.max_micro_batch ? hw_fmt_thousands(*r.max_micro_batch, 0) : kDash,
                                    cell(r.predicted_peak_gb, hw_fmt_gb),
                                    cell(r.tokens_per_s, hw_fmt_tokens_per_s),
                                    cell(r.hours, hw_fmt_hours),
                                    cell(r.cost_usd, hw_fmt_usd),
                                    cell(r.usd_per_mtok, hw_fmt_usd)};
    if (loss) row.push_back(cell(r.eval_loss, hw_fmt_loss));
    if (acc) row.push_back(cell(r.accuracy, hw_fmt_percent));
    row.push_back(r.kind.empty() ? kDash : r.measured() ? "**measured**" : r.kind);
    rows.push_back(row);
  }
  return md_table(cols, rows);
}

std::string measured_table(const HwReportDoc& doc) {
  std::vector<const HwRunField*> shown = hw_run_fields_shown(doc);
  std::vector<MdColumn> cols = {{"device", false}, {"GPU", false}};
  for (const HwRunField* f : shown) cols.push_back({f->header, true});
  std::vector<std::vector<std::string>> rows;
  for (const HwReportRun& run : doc.measured) {
    std::vector<std::string> row = {run.device.empty() ? kDash : md_text(run.device),
                                    run.gpu.empty() ? kDash : md_text(run.gpu)};
    for (const HwRunField* f : shown) row.push_back(cell(run.*f->value, f->fmt));
    rows.push_back(row);
  }
  return md_table(cols, rows);
}

std::string md_code(const std::string& s) {
  return "`" + md_text(s) + "`";
}

}  // namespace

std::string hw_report_markdown(const nlohmann::json& report) {
  HwReportDoc doc = hw_report_read(report);
  std::ostringstream os;
  os << "# " << md_text(doc.title.empty() ? "Hardware comparison" : doc.title) << "\n\n";
  const HwMarkup markup{md_text, md_strong, md_code};
  std::vector<std::string> about = hw_report_about(doc, markup);
  if (!about.empty()) os << str_join(about, " · ") << "\n\n";
  os << hw_report_summary(doc, markup) << "\n\n";

  os << "## GPUs\n\n" << main_table(doc) << "\n";
  os << "kind: **measured** = " << hw_kind_meaning_measured << "; projected = " << hw_kind_meaning_projected
     << "; planned = " << hw_kind_meaning_planned << ". Rows that fit come first, cheapest first.\n";

  if (!doc.measured.empty()) os << "\n## Measured runs\n\n" << measured_table(doc);

  bool heading = false;
  for (const HwReportRow& r : doc.rows) {
    if (!r.fits || *r.fits) continue;
    if (!heading) os << "\n## GPUs that do not fit\n\n";
    heading = true;
    os << "- " << md_strong(r.gpu);
    if (r.predicted_peak_gb && r.memory_gb)
      os << ": needs " << hw_fmt_gb(*r.predicted_peak_gb) << " GB, has " << hw_fmt_gb(*r.memory_gb) << " GB";
    os << ".";
    for (const std::string& a : r.advice) os << " " << md_text(a);
    os << "\n";
  }
  heading = false;
  for (const HwReportRow& r : doc.rows) {
    if ((r.fits && !*r.fits) || r.advice.empty()) continue;
    if (!heading) os << "\n## Advice\n\n";
    heading = true;
    os << "- " << md_strong(r.gpu) << ":";
    for (const std::string& a : r.advice) os << " " << md_text(a);
    os << "\n";
  }

  std::vector<std::vector<std::string>> prices;
  for (const HwReportRow& r : doc.rows)
    if (r.price_per_hour || !r.price_source.empty() || !r.price_date.empty())
      prices.push_back({md_text(r.gpu), cell(r.price_per_hour, hw_fmt_usd),
                        r.price_source.empty() ? kDash : md_text(r.price_source),
                        r.price_date.empty() ? kDash : md_text(r.price_date)});
  if (!prices.empty())
    os << "\n## Prices\n\n"
       << md_table({{"GPU", false}, {"$/hour", true}, {"source", false}, {"date", false}}, prices);

  if (!doc.formulas.empty()) {
    os << "\n## Formulas\n\n";
    for (const auto& [key, text] : doc.formulas)
      os << "- " << md_strong(key) << ": " << md_text(text) << "\n";
  }
  if (!doc.notes.empty()) {
    os << "\n## Notes\n\n";
    for (const std::string& n : doc.notes) os << "- " << md_text(n) << "\n";
  }
  // A fenced block shows its text as is, so the config is not escaped; only a fence inside it
  // could end the block early, and JSON text has no line starting with backticks.
  if (!doc.config.empty()) os << "\n## Config\n\n```json\n" << doc.config << "\n```\n";
  return os.str();
}

}  // namespace luatune
