// The hardware report's document read into structs: every field's type checked with the field
// named in the error (the document comes from Lua, so list positions are 1-based like the Lua
// table the recipe built), rows sorted, and the number formats, the line under the title and the
// summary paragraph that the Markdown and HTML renderers share.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "host/core/error.h"
#include "host/hw/report_doc.h"

namespace luatune {

namespace {

using json = nlohmann::json;

const char* type_name(const json& j) {
  return j.type_name();
}

std::string str_field(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return "";
  const json& v = obj[key];
  LT_CHECK(v.is_string(), "hw.report: " << where << "." << key << " must be a string, got " << type_name(v));
  return v.get<std::string>();
}

// Null and non-finite numbers count as absent: a recipe that has no figure writes nil, and a NaN
// would only print as "nan" in a cell.
HwNum num_field(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
  const json& v = obj[key];
  LT_CHECK(v.is_number(), "hw.report: " << where << "." << key << " must be a number, got " << type_name(v));
  double d = v.get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

// Notes, advice and formulas are meant to be strings; anything else is shown as its JSON text
// rather than refused, since it is prose for a reader.
std::string as_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::vector<std::string> text_list(const json& obj, const char* key, const std::string& where) {
  std::vector<std::string> out;
  if (!obj.contains(key) || obj[key].is_null()) return out;
  const json& v = obj[key];
  if (v.is_string()) return {v.get<std::string>()};
  LT_CHECK(v.is_array(), "hw.report: " << where << key << " must be a list of strings, got " << type_name(v));
  for (const json& item : v) out.push_back(as_text(item));
  return out;
}

HwReportRow read_row(const json& r, size_t index) {
  std::string where = "rows[" + std::to_string(index + 1) + "]";
  LT_CHECK(r.is_object(), "hw.report: " << where << " must be an object, got " << type_name(r));
  LT_CHECK(r.contains("gpu") && !r["gpu"].is_null(), "hw.report: " << where << " has no \"gpu\"");
  HwReportRow row;
  row.gpu = str_field(r, "gpu", where);
  row.kind = str_field(r, "kind", where);
  LT_CHECK(row.kind.empty() || row.kind == "measured" || row.kind == "projected" || row.kind == "planned",
           "hw.report: " << where << ".kind must be \"measured\", \"projected\" or \"planned\", got \""
                         << row.kind << "\"");
  if (r.contains("fits") && !r["fits"].is_null()) {
    LT_CHECK(r["fits"].is_boolean(),
             "hw.report: " << where << ".fits must be a boolean, got " << type_name(r["fits"]));
    row.fits = r["fits"].get<bool>();
  }
  row.memory_gb = num_field(r, "memory_gb", where);
  row.price_per_hour = num_field(r, "price_per_hour", where);
  row.predicted_peak_gb = num_field(r, "predicted_peak_gb", where);
  row.max_micro_batch = num_field(r, "max_micro_batch", where);
  row.tokens_per_s = num_field(r, "tokens_per_s", where);
  row.hours = num_field(r, "hours", where);
  row.cost_usd = num_field(r, "cost_usd", where);
  row.usd_per_mtok = num_field(r, "usd_per_mtok", where);
  row.eval_loss = num_field(r, "eval_loss", where);
  row.accuracy = num_field(r, "accuracy", where);
  row.price_source = str_field(r, "price_source", where);
  row.price_date = str_field(r, "price_date", where);
  row.advice = text_list(r, "advice", where + ".");
  return row;
}

HwReportRun read_run(const json& m, size_t index) {
  std::string where = "measured[" + std::to_string(index + 1) + "]";
  LT_CHECK(m.is_object(), "hw.report: " << where << " must be an object, got " << type_name(m));
  HwReportRun run;
  run.device = str_field(m, "device", where);
  run.gpu = str_field(m, "gpu", where);
  run.tokens_per_s = num_field(m, "tokens_per_s", where);
  run.step_time_s = num_field(m, "step_time_s", where);
  run.mfu = num_field(m, "mfu", where);
  run.peak_memory_gb = num_field(m, "peak_memory_gb", where);
  run.tokens = num_field(m, "tokens", where);
  run.seconds = num_field(m, "seconds", where);
  run.gpu_hours = num_field(m, "gpu_hours", where);
  run.cost_usd = num_field(m, "cost_usd", where);
  run.usd_per_mtok = num_field(m, "usd_per_mtok", where);
  run.eval_loss = num_field(m, "eval_loss", where);
  run.accuracy = num_field(m, "accuracy", where);
  run.utilization = num_field(m, "utilization", where);
  run.power_w = num_field(m, "power_w", where);
  return run;
}

// Fits first (unknown next, not fitting last); within each, by cost ascending with rows that
// have no cost after. Stable, so equal rows keep the catalog's order.
void sort_rows(std::vector<HwReportRow>& rows) {
  auto fit_rank = [](const HwReportRow& r) { return !r.fits ? 1 : *r.fits ? 0 : 2; };
  std::stable_sort(rows.begin(), rows.end(), [&](const HwReportRow& a, const HwReportRow& b) {
    if (fit_rank(a) != fit_rank(b)) return fit_rank(a) < fit_rank(b);
    if (a.cost_usd.has_value() != b.cost_usd.has_value()) return a.cost_usd.has_value();
    return a.cost_usd && *a.cost_usd < *b.cost_usd;
  });
}

std::string printf_str(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

// ============================================================================================
// Reading

HwReportDoc hw_report_read(const json& report) {
  LT_CHECK(report.is_object(), "hw.report: the document must be an object, got " << type_name(report));
  HwReportDoc doc;
  doc.title = str_field(report, "title", "document");
  doc.recipe = str_field(report, "recipe", "document");
  doc.date = str_field(report, "date", "document");
  if (report.contains("model") && !report["model"].is_null()) {
    const json& m = report["model"];
    LT_CHECK(m.is_object(), "hw.report: model must be an object, got " << type_name(m));
    doc.model_name = str_field(m, "name", "model");
    doc.model_method = str_field(m, "method", "model");
    doc.model_parameters = num_field(m, "parameters", "model");
    doc.model_trainable = num_field(m, "trainable", "model");
  }

  LT_CHECK(report.contains("rows") && report["rows"].is_array(),
           "hw.report: \"rows\" must be a list (one entry per GPU), got "
               << (report.contains("rows") ? type_name(report["rows"]) : "nothing"));
  const json& rows = report["rows"];
  for (size_t i = 0; i < rows.size(); i++) doc.rows.push_back(read_row(rows[i], i));
  sort_rows(doc.rows);

  if (report.contains("measured") && !report["measured"].is_null()) {
    const json& ms = report["measured"];
    // An empty Lua table arrives as {} (an object): it means no runs, not a wrong type.
    bool empty_object = ms.is_object() && ms.empty();
    LT_CHECK(ms.is_array() || empty_object, "hw.report: \"measured\" must be a list, got " << type_name(ms));
    for (size_t i = 0; ms.is_array() && i < ms.size(); i++) doc.measured.push_back(read_run(ms[i], i));
  }

  if (report.contains("formulas") && !report["formulas"].is_null()) {
    const json& f = report["formulas"];
    LT_CHECK(f.is_object(), "hw.report: \"formulas\" must be an object, got " << type_name(f));
    // The three the planner writes first, under names a reader knows; any others as their keys.
    const std::pair<const char*, const char*> known[] = {
        {"mfu", "MFU"}, {"projection", "Projection rule"}, {"memory", "Memory model"}};
    for (const auto& [key, name] : known)
      if (f.contains(key)) doc.formulas.emplace_back(name, as_text(f[key]));
    for (auto it = f.begin(); it != f.end(); ++it)  // nlohmann orders keys, so the rest are sorted
      if (it.key() != "mfu" && it.key() != "projection" && it.key() != "memory")
        doc.formulas.emplace_back(it.key(), as_text(it.value()));
  }
  doc.notes = text_list(report, "notes", "");
  if (report.contains("config") && !report["config"].is_null() && !report["config"].empty())
    doc.config = report["config"].dump(2);
  return doc;
}

bool HwReportDoc::any_eval_loss() const {
  return std::any_of(rows.begin(), rows.end(), [](const HwReportRow& r) { return r.eval_loss.has_value(); });
}
bool HwReportDoc::any_accuracy() const {
  return std::any_of(rows.begin(), rows.end(), [](const HwReportRow& r) { return r.accuracy.has_value(); });
}

// ============================================================================================
// Number formats

std::string hw_fmt_thousands(double v, int decimals) {
  std::string s = printf_str(decimals == 0 ? "%.0f" : decimals == 1 ? "%.1f" : "%.2f", std::fabs(v));
  size_t dot = s.find('.');
  std::string whole = s.substr(0, dot), frac = dot == std::string::npos ? "" : s.substr(dot);
  std::string out;
  for (size_t i = 0; i < whole.size(); i++) {
    if (i > 0 && (whole.size() - i) % 3 == 0) out += ',';
    out += whole[i];
  }
  bool zero = s.find_first_not_of("0.") == std::string::npos;
  return (v < 0 && !zero ? "-" : "") + out + frac;
}

std::string hw_fmt_gb(double v) {
  return v == std::floor(v) ? hw_fmt_thousands(v, 0) : hw_fmt_thousands(v, 1);
}

std::string hw_fmt_tokens_per_s(double v) {
  return std::fabs(v) >= 100 ? hw_fmt_thousands(v, 0) : printf_str("%.1f", v);
}

std::string hw_fmt_hours(double v) {
  double a = std::fabs(v);
  return a < 10 ? printf_str("%.2f", v) : a < 100 ? printf_str("%.1f", v) : hw_fmt_thousands(v, 0);
}

// Two decimals, as prices are quoted; a positive amount under a cent says so instead of "0.00".
std::string hw_fmt_usd(double v) {
  if (v > 0 && v < 0.005) return "<0.01";
  return hw_fmt_thousands(v, 2);
}

std::string hw_fmt_loss(double v) {
  return printf_str("%.4f", v);
}

std::string hw_fmt_percent(double fraction) {
  return printf_str("%.1f", fraction * 100) + "%";
}

std::string hw_fmt_count(double v) {
  struct Unit {
    double scale;
    const char* suffix;
  };
  for (Unit u : {Unit{1e12, "T"}, Unit{1e9, "B"}, Unit{1e6, "M"}, Unit{1e3, "K"}}) {
    if (std::fabs(v) < u.scale) continue;
    std::string s = printf_str("%.3g", v / u.scale);
    return s + u.suffix;
  }
  return printf_str("%.0f", v);
}

std::string hw_fmt_duration(double seconds) {
  auto n = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[48];
  if (n < 60)
    std::snprintf(buf, sizeof buf, "%llds", n);
  else if (n < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", n / 60, n % 60);
  else  // whole minutes past the hour: rounded first, so 7199 s is "2h00m", not "1h60m"
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (n + 30) / 3600, (n + 30) % 3600 / 60);
  return buf;
}

std::vector<const HwRunField*> hw_run_fields_shown(const HwReportDoc& doc) {
  static const HwRunField fields[] = {
      {"tokens/s", &HwReportRun::tokens_per_s, hw_fmt_tokens_per_s},
      {"step s", &HwReportRun::step_time_s, [](double v) { return hw_fmt_thousands(v, 2); }},
      {"MFU", &HwReportRun::mfu, hw_fmt_percent},
      {"peak GB", &HwReportRun::peak_memory_gb, hw_fmt_gb},
      {"tokens", &HwReportRun::tokens, [](double v) { return hw_fmt_thousands(v, 0); }},
      {"time", &HwReportRun::seconds, hw_fmt_duration},
      {"GPU-hours", &HwReportRun::gpu_hours, hw_fmt_hours},
      {"cost $", &HwReportRun::cost_usd, hw_fmt_usd},
      {"$/1M tok", &HwReportRun::usd_per_mtok, hw_fmt_usd},
      {"eval loss", &HwReportRun::eval_loss, hw_fmt_loss},
      {"accuracy", &HwReportRun::accuracy, hw_fmt_percent},
      {"GPU util", &HwReportRun::utilization, hw_fmt_percent},
      {"power W", &HwReportRun::power_w, [](double v) { return hw_fmt_thousands(v, 0); }},
  };
  std::vector<const HwRunField*> shown;
  for (const HwRunField& f : fields)
    if (std::any_of(doc.measured.begin(), doc.measured.end(),
                    [&](const HwReportRun& r) { return (r.*f.value).has_value(); }))
      shown.push_back(&f);
  return shown;
}

// ============================================================================================
// Summary

const char* const hw_kind_meaning_measured = "timed on this GPU by a real run";
const char* const hw_kind_meaning_projected =
    "scaled from a measured run by the projection rule (see Formulas), not run on this GPU";
const char* const hw_kind_meaning_planned = "memory model only: fits or not, no time or cost";

std::vector<std::string> hw_report_about(const HwReportDoc& doc, const HwMarkup& m) {
  std::vector<std::string> parts;
  if (!doc.model_name.empty()) {
    std::string model = "Model " + m.strong(doc.model_name);
    std::vector<std::string> about;
    if (doc.model_parameters) about.push_back(hw_fmt_count(*doc.model_parameters) + " parameters");
    if (doc.model_trainable) about.push_back(hw_fmt_count(*doc.model_trainable) + " trainable");
    if (!doc.model_method.empty()) about.push_back(m.text(doc.model_method));
    for (size_t i = 0; i < about.size(); i++)
      model += (i ? ", " : " (") + about[i] + (i + 1 == about.size() ? ")" : "");
    parts.push_back(model);
  }
  if (!doc.recipe.empty()) parts.push_back("recipe " + m.code(doc.recipe));
  if (!doc.date.empty()) parts.push_back(m.text(doc.date));
  return parts;
}

std::string hw_report_summary(const HwReportDoc& doc, const HwMarkup& m) {
  std::ostringstream os;
  const HwReportRow* cheapest = nullptr;
  const HwReportRow* fastest = nullptr;
  size_t fit = 0, unfit = 0;
  for (const HwReportRow& r : doc.rows) {
    bool fits = r.fits.value_or(false);
    fit += fits;
    unfit += r.fits.has_value() && !fits;
    if (fits && r.cost_usd && (!cheapest || *r.cost_usd < *cheapest->cost_usd)) cheapest = &r;
    if (fits && r.hours && (!fastest || *r.hours < *fastest->hours)) fastest = &r;
  }
  // "(1.20 h, projected)": the figures that exist and the row's kind, so a projection never reads as a
  // measurement.
  auto detail = [](const HwReportRow& r, bool with_hours, bool with_cost) {
    std::vector<std::string> parts;
    if (with_hours && r.hours) parts.push_back(hw_fmt_hours(*r.hours) + " h");
    if (with_cost && r.cost_usd) parts.push_back("$" + hw_fmt_usd(*r.cost_usd));
    parts.push_back(r.kind.empty() ? "kind not given" : r.kind);
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return " (" + out + ")";
  };
  if (doc.rows.empty()) return m.text("The document lists no GPUs.");
  if (cheapest) {
    os << m.strong("Best value:") << m.text(" ") << m.strong(cheapest->gpu)
       << m.text(" fits and costs $" + hw_fmt_usd(*cheapest->cost_usd) + detail(*cheapest, true, false) +
                 ". ");
  } else if (fit == 0 && unfit > 0) {
    os << m.strong("No GPU in the list fits this job") << m.text(" (see the advice below). ");
  } else if (fit == 0) {
    os << m.text("No row says whether the job fits. ");
  } else {
    os << m.text("No GPU that fits has a cost: nothing was measured to project time from. ");
  }
  if (fastest && fastest != cheapest) {
    os << m.strong("Fastest:") << m.text(" ") << m.strong(fastest->gpu)
       << m.text(" at " + hw_fmt_hours(*fastest->hours) + " h" + detail(*fastest, false, true) + ". ");
  } else if (fastest) {
    os << m.text("It is also the fastest. ");
  }
  if (doc.measured.empty()) {
    os << m.text("Nothing was measured: every row is a memory plan. ");
  } else {
    os << m.strong("Measured on:") << m.text(" ");
    for (size_t i = 0; i < doc.measured.size(); i++) {
      const HwReportRun& run = doc.measured[i];
      std::string name = run.device.empty() ? run.gpu : run.device;
      if (!run.gpu.empty() && !run.device.empty() && run.gpu != run.device) name += " (" + run.gpu + ")";
      os << m.text((i ? "; " : "") + (name.empty() ? std::string("unnamed device") : name) +
                   (run.tokens_per_s ? " at " + hw_fmt_tokens_per_s(*run.tokens_per_s) + " tokens/s" : ""));
    }
    os << m.text(". ");
  }
  os << m.text(std::to_string(fit) + " of " + std::to_string(doc.rows.size()) + " GPUs fit" +
               (unfit == 1 ? "; 1 does not."
                : unfit    ? "; " + std::to_string(unfit) + " do not."
                           : "."));
  return os.str();
}

}  // namespace luatune
