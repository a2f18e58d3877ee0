// The hardware report as one self-contained HTML page: inline CSS, three inline SVG bar charts
// drawn here (time, predicted peak memory against each GPU's memory, cost), and the same tables
// as the Markdown with fits/kind badges. No script, no font, no image, no link to anything
// outside the file, so it renders the same offline, in a mail client and in headless Chromium.
// Escaping, ticks, colours and legend swatches are shared with the run report (host/core/svg_chart.h).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "host/core/svg_chart.h"
#include "host/hw/report.h"
#include "host/hw/report_doc.h"

namespace luatune {

namespace {

const char* const kDash = "—";

std::string strong(const std::string& s) {
  return "<strong>" + svg_escape(s) + "</strong>";
}

std::string code(const std::string& s) {
  return "<code>" + svg_escape(s) + "</code>";
}

// A label that fits the chart's name column: at most `max` bytes, cut on a UTF-8 character
// boundary, with an ellipsis. The full name stays in the row's <title> tooltip.
std::string shorten(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max - 1;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;
  return s.substr(0, cut) + "…";
}

// ============================================================================================
// Charts

// Colours: one hue per quantity; measured bars solid, projected bars the hatch pattern of the
// same hue (light fill, dark stripes), so the two read apart in print and in grey scale too.
struct Hue {
  const char* dark;
  const char* light;
};
const Hue kTimeHue = {"#2b6cb0", "#bee3f8"};
const Hue kCostHue = {"#b7791f", "#fefcbf"};
const char* const kFitColour = "#38a169";
const char* const kNoFitColour = "#e53e3e";

// Layout in SVG units (the page scales the whole figure down on a narrow window).
const double kWidth = 960, kLabelRight = 190, kBarLeft = 200, kBarWidth = 540;
const double kTop = 48, kRowHeight = 28, kBarHeight = 18, kBottom = 52;

std::string hatch_pattern(const std::string& id, const Hue& hue) {
  return "<pattern id=\"" + id +
         "\" patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\" patternTransform=\"rotate(45)\">"
         "<rect width=\"8\" height=\"8\" fill=\"" +
         hue.light +
         "\"/>"
         "<rect width=\"3\" height=\"8\" fill=\"" +
         hue.dark + "\"/></pattern>";
}

// A bar chart's frame: <svg>, legend, grid with ticks and the axis title; `rows` rows of bars go
// between kTop and the axis. Returns {opening + grid, scale}; the caller adds bars and "</svg>".
struct Frame {
  std::string svg;
  double axis_max;
  double x(double v) const { return kBarLeft + kBarWidth * std::min(v, axis_max) / axis_max; }
};

Frame chart_frame(const std::string& label, size_t rows, double max_value, const std::string& axis_title,
                  const std::string& defs, const std::string& legend) {
  double plot_h = std::max<size_t>(rows, 1) * kRowHeight;
  double height = kTop + plot_h + kBottom;
  double step = svg_nice_step(max_value > 0 ? max_value : 1, 5);
  Frame f;
  f.axis_max = std::ceil((max_value > 0 ? max_value : 1) / step - 1e-9) * step;
  std::ostringstream os;
  os << "<svg class=\"chart\" viewBox=\"0 0 " << svg_num(kWidth) << " " << svg_num(height) << "\" width=\""
     << svg_num(kWidth) << "\" height=\"" << svg_num(height) << "\" role=\"img\" aria-label=\""
     << svg_escape(label) << "\" font-family=\"system-ui, sans-serif\" font-size=\"13\">";
  os << "<title>" << svg_escape(label) << "</title><defs>" << defs << "</defs>";
  os << "<g class=\"legend\">" << legend << "</g>";
  for (double v = 0; v <= f.axis_max + step / 2; v += step) {
    double x = f.x(v);
    os << "<line x1=\"" << svg_num(x) << "\" y1=\"" << svg_num(kTop - 6) << "\" x2=\"" << svg_num(x)
       << "\" y2=\"" << svg_num(kTop + plot_h) << "\" stroke=\"" << (v == 0 ? svg_muted : svg_track)
       << "\"/>";
    os << "<text x=\"" << svg_num(x) << "\" y=\"" << svg_num(kTop + plot_h + 18)
       << "\" text-anchor=\"middle\" fill=\"" << svg_muted << "\">" << svg_tick_label(v, step) << "</text>";
  }
  os << "<text x=\"" << svg_num(kBarLeft + kBarWidth / 2) << "\" y=\"" << svg_num(kTop + plot_h + 40)
     << "\" text-anchor=\"middle\" fill=\"" << svg_ink << "\" font-weight=\"600\">" << svg_escape(axis_title)
     << "</text>";
  f.svg = os.str();
  return f;
}

double row_y(size_t i) {
  return kTop + i * kRowHeight;
}

// The GPU name at the left of row i, with the full name as a tooltip.
std::string row_label(size_t i, const HwReportRow& r) {
  std::ostringstream os;
  os << "<text x=\"" << svg_num(kLabelRight) << "\" y=\"" << svg_num(row_y(i) + kRowHeight / 2 + 4)
     << "\" text-anchor=\"end\" fill=\"" << svg_ink << "\"><title>" << svg_escape(r.gpu) << "</title>"
     << svg_escape(shorten(r.gpu, 26)) << "</text>";
  return os.str();
}

std::string text_at(double x, double y, const std::string& text, const char* colour) {
  std::ostringstream os;
  os << "<text x=\"" << svg_num(x) << "\" y=\"" << svg_num(y) << "\" fill=\"" << colour << "\">"
     << svg_escape(text) << "</text>";
  return os.str();
}

// Text on row i's baseline (a bar's value, or why there is no bar).
std::string row_note(size_t i, double x, const std::string& text, const char* colour) {
  return text_at(x, row_y(i) + kRowHeight / 2 + 4, text, colour);
}

// Why a row has no time or cost bar.
std::string no_bar_reason(const HwReportRow& r) {
  if (r.fits && !*r.fits) return kDash + std::string(" does not fit");
  if (r.kind == "planned") return kDash + std::string(" planned: memory only");
  return kDash + std::string(" no figure");
}

// Time or cost: one bar per row, measured solid, anything else hatched; rows without the value
// show a dash and the reason instead of a bar.
std::string value_chart(const HwReportDoc& doc, const std::string& id, const Hue& hue,
                        HwNum HwReportRow::*value, const std::string& title, const std::string& axis_title,
                        const std::function<std::string(double)>& fmt) {
  double max_value = 0;
  for (const HwReportRow& r : doc.rows)
    if (r.*value) max_value = std::max(max_value, *(r.*value));
  std::string hatch = "hatch-" + id;
  std::string legend =
      svg_legend_item(kBarLeft, hue.dark, "measured") +
      svg_legend_item(kBarLeft + 110, "url(#" + hatch + ")", "projected", hue.dark) +
      text_at(kBarLeft + 220, 20, kDash + std::string(" no bar: planned, or does not fit"), svg_muted);
  Frame f = chart_frame(title, doc.rows.size(), max_value, axis_title, hatch_pattern(hatch, hue), legend);
  std::ostringstream os;
  os << f.svg;
  for (size_t i = 0; i < doc.rows.size(); i++) {
    const HwReportRow& r = doc.rows[i];
    os << "<g class=\"row " << (r.measured() ? "measured" : r.kind.empty() ? "unknown" : r.kind) << "\">";
    os << row_label(i, r);
    HwNum v = r.*value;
    if (!v) {
      os << row_note(i, kBarLeft + 6, no_bar_reason(r), svg_muted) << "</g>";
      continue;
    }
    double x1 = f.x(*v), y = row_y(i) + (kRowHeight - kBarHeight) / 2;
    os << "<rect class=\"bar " << (r.measured() ? "measured" : "projected") << "\" x=\"" << svg_num(kBarLeft)
       << "\" y=\"" << svg_num(y) << "\" width=\"" << svg_num(std::max(1.0, x1 - kBarLeft)) << "\" height=\""
       << svg_num(kBarHeight) << "\" fill=\"" << (r.measured() ? hue.dark : "url(#" + hatch + ")")
       << "\" stroke=\"" << hue.dark << "\"/>";
    std::string tag = r.measured() ? "measured" : r.kind.empty() ? "kind not given" : r.kind;
    os << row_note(i, x1 + 6, fmt(*v) + " · " + tag, svg_ink) << "</g>";
  }
  os << "</svg>";
  return os.str();
}

// Predicted peak memory against each GPU's memory: a grey track to the GPU's capacity with a
// dark tick at its end, and the predicted peak over it, green when it fits, red when not, grey
// when the row does not say.
std::string memory_chart(const HwReportDoc& doc) {
  double max_value = 0;
  for (const HwReportRow& r : doc.rows)
    max_value = std::max({max_value, r.memory_gb.value_or(0), r.predicted_peak_gb.value_or(0)});
  std::string legend = svg_legend_item(kBarLeft, kFitColour, "predicted peak, fits") +
                       svg_legend_item(kBarLeft + 170, kNoFitColour, "predicted peak, does not fit") +
                       svg_legend_item(kBarLeft + 385, svg_track, "GPU memory", svg_muted) + "<rect x=\"" +
                       svg_num(kBarLeft + 500) + "\" y=\"6\" width=\"3\" height=\"18\" fill=\"" + svg_ink +
                       "\"/>" + text_at(kBarLeft + 510, 20, "capacity", svg_ink);
  Frame f = chart_frame("Predicted peak memory vs GPU memory", doc.rows.size(), max_value,
                        "memory (GB): predicted peak vs the GPU's capacity", "", legend);
  std::ostringstream os;
  os << f.svg;
  for (size_t i = 0; i < doc.rows.size(); i++) {
    const HwReportRow& r = doc.rows[i];
    bool fits = r.fits.value_or(true);
    os << "<g class=\"row " << (r.fits ? (fits ? "fits" : "nofit") : "unknown") << "\">" << row_label(i, r);
    double y = row_y(i) + (kRowHeight - kBarHeight) / 2;
    double right = kBarLeft;
    if (r.memory_gb) {
      double x = f.x(*r.memory_gb);
      os << "<rect class=\"capacity\" x=\"" << svg_num(kBarLeft) << "\" y=\"" << svg_num(y) << "\" width=\""
         << svg_num(x - kBarLeft) << "\" height=\"" << svg_num(kBarHeight) << "\" fill=\"" << svg_track
         << "\"/>";
      right = x;
    }
    if (r.predicted_peak_gb) {
      double x = f.x(*r.predicted_peak_gb);
      const char* colour = !r.fits ? svg_muted : *r.fits ? kFitColour : kNoFitColour;  // grey: fit unknown
      os << "<rect class=\"bar peak\" x=\"" << svg_num(kBarLeft) << "\" y=\"" << svg_num(y + 4)
         << "\" width=\"" << svg_num(std::max(1.0, x - kBarLeft)) << "\" height=\"" << svg_num(kBarHeight - 8)
         << "\" fill=\"" << colour << "\"/>";
      right = std::max(right, x);
    }
    if (r.memory_gb) {
      double x = f.x(*r.memory_gb);
      os << "<rect class=\"marker\" x=\"" << svg_num(x - 1.5) << "\" y=\"" << svg_num(y - 3)
         << "\" width=\"3\" height=\"" << svg_num(kBarHeight + 6) << "\" fill=\"" << svg_ink << "\"/>";
    }
    if (!r.memory_gb && !r.predicted_peak_gb) {
      os << row_note(i, kBarLeft + 6, kDash + std::string(" no memory figures"), svg_muted) << "</g>";
      continue;
    }
    std::string text = (r.predicted_peak_gb ? hw_fmt_gb(*r.predicted_peak_gb) : std::string(kDash)) + " of " +
                       (r.memory_gb ? hw_fmt_gb(*r.memory_gb) : std::string(kDash)) + " GB";
    if (r.fits) text += *r.fits ? " · fits" : " · does not fit";
    os << row_note(i, right + 8, text, r.fits && !*r.fits ? kNoFitColour : svg_ink) << "</g>";
  }
  os << "</svg>";
  return os.str();
}

// ============================================================================================
// Tables

std::string td(const HwNum& v, std::string (*fmt)(double)) {
  return "<td class=\"num\">" + (v ? svg_escape(fmt(*v)) : std::string(kDash)) + "</td>";
}

std::string fits_badge(const HwReportRow& r) {
  if (!r.fits) return kDash;
  return *r.fits ? "<span class=\"badge fit\">✓ fits</span>"
                 : "<span class=\"badge nofit\">✗ does not fit</span>";
}

std::string kind_badge(const std::string& kind) {
  if (kind.empty()) return kDash;
  return "<span class=\"badge kind-" + svg_escape(kind) + "\">" + svg_escape(kind) + "</span>";
}

std::string main_table(const HwReportDoc& doc) {
  bool loss = doc.any_eval_loss(), acc = doc.any_accuracy();
  std::ostringstream os;
  os << "<table class=\"gpus\"><thead><tr><th>GPU</th><th class=\"num\">memory GB</th><th>fits</th>"
        "<th class=\"num\">max micro-batch</th><th class=\"num\">predicted peak GB</th>"
        "<th class=\"num\">tokens/s</th><th class=\"num\">hours</th><th class=\"num\">cost $</th>"
        "<th class=\"num\">$/1M tok</th>"
     << (loss ? "<th class=\"num\">eval loss</th>" : "") << (acc ? "<th class=\"num\">accuracy</th>" : "")
     << "<th>kind</th></tr></thead><tbody>";
  for (const HwReportRow& r : doc.rows) {
    os << "<tr class=\"" << (r.fits && !*r.fits ? "nofit" : "fit") << (r.measured() ? " measured" : "")
       << "\">"
       << "<td>" << svg_escape(r.gpu) << "</td>" << td(r.memory_gb, hw_fmt_gb) << "<td>" << fits_badge(r)
       << "</td>" << td(r.max_micro_batch, [](double v) { return hw_fmt_thousands(v, 0); })
       << td(r.predicted_peak_gb, hw_fmt_gb) << td(r.tokens_per_s, hw_fmt_tokens_per_s)
       << td(r.hours, hw_fmt_hours) << td(r.cost_usd, hw_fmt_usd) << td(r.usd_per_mtok, hw_fmt_usd);
    if (loss) os << td(r.eval_loss, hw_fmt_loss);
    if (acc) os << td(r.accuracy, hw_fmt_percent);
    os << "<td>" << kind_badge(r.kind) << "</td></tr>";
  }
  os << "</tbody></table>";
  return os.str();
}

std::string measured_table(const HwReportDoc& doc) {
  std::vector<const HwRunField*> shown = hw_run_fields_shown(doc);
  std::ostringstream os;
  os << "<table class=\"runs\"><thead><tr><th>device</th><th>GPU</th>";
  for (const HwRunField* f : shown) os << "<th class=\"num\">" << svg_escape(f->header) << "</th>";
  os << "</tr></thead><tbody>";
  for (const HwReportRun& run : doc.measured) {
    os << "<tr><td>" << (run.device.empty() ? kDash : svg_escape(run.device)) << "</td><td>"
       << (run.gpu.empty() ? kDash : svg_escape(run.gpu)) << "</td>";
    for (const HwRunField* f : shown) os << td(run.*f->value, f->fmt);
    os << "</tr>";
  }
  os << "</tbody></table>";
  return os.str();
}

const char* const kStyle = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;color:#1a202c;
  margin:24px auto;max-width:1100px;padding:0 16px;background:#fff}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e2e8f0;padding-bottom:4px}
.about{color:#4a5568;margin:0 0 12px}.summary{background:#f7fafc;border-left:4px solid #2b6cb0;padding:10px 14px}
table{border-collapse:collapse;width:100%;margin:8px 0}th,td{padding:5px 8px;border-bottom:1px solid #e2e8f0;text-align:left}
th{background:#f7fafc;font-weight:600;font-size:13px;vertical-align:bottom}td{white-space:nowrap}
.num{text-align:right;font-variant-numeric:tabular-nums}
tr.nofit td{color:#718096}tr.measured td:first-child{font-weight:600}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;white-space:nowrap}
.badge.fit{background:#c6f6d5;color:#22543d}.badge.nofit{background:#fed7d7;color:#822727}
.kind-measured{background:#2b6cb0;color:#fff}.kind-projected{background:#ebf8ff;color:#2b6cb0;border:1px dashed #2b6cb0}
.kind-planned{background:#edf2f7;color:#4a5568}.legend-text{color:#4a5568;font-size:13px}
svg.chart{max-width:100%;height:auto;display:block;margin:4px 0 12px}
figure{margin:0}figcaption{font-weight:600;margin:16px 0 0}
.wide{overflow-x:auto}.runs td:first-child{white-space:normal}
pre{background:#f7fafc;padding:10px;overflow:auto;font-size:12px}li{margin:2px 0}
)css";

}  // namespace

std::string hw_report_html(const nlohmann::json& report) {
  HwReportDoc doc = hw_report_read(report);
  std::string title = doc.title.empty() ? "Hardware comparison" : doc.title;
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>" << svg_escape(title)
     << "</title><style>" << kStyle << "</style></head><body>\n";
  os << "<h1>" << svg_escape(title) << "</h1>\n";

  const HwMarkup markup{svg_escape, strong, code};
  std::vector<std::string> about = hw_report_about(doc, markup);
  if (!about.empty()) {
    os << "<p class=\"about\">";
    for (size_t i = 0; i < about.size(); i++) os << (i ? " · " : "") << about[i];
    os << "</p>\n";
  }
  os << "<p class=\"summary\">" << hw_report_summary(doc, markup) << "</p>\n";

  // Wide tables scroll inside their box on a narrow window instead of widening the page.
  os << "<h2>GPUs</h2>\n<div class=\"wide\">" << main_table(doc) << "</div>\n";
  os << "<p class=\"legend-text\">" << kind_badge("measured") << " " << svg_escape(hw_kind_meaning_measured)
     << " &nbsp; " << kind_badge("projected") << " " << svg_escape(hw_kind_meaning_projected) << " &nbsp; "
     << kind_badge("planned") << " " << svg_escape(hw_kind_meaning_planned)
     << ". Rows that fit come first, cheapest first.</p>\n";

  os << "<h2>Charts</h2>\n";
  os << "<figure><figcaption>Time per GPU (hours)</figcaption>"
     << value_chart(doc, "time", kTimeHue, &HwReportRow::hours, "Time per GPU", "time (hours, wall clock)",
                    [](double v) { return hw_fmt_hours(v) + " h"; })
     << "</figure>\n";
  os << "<figure><figcaption>Predicted peak memory vs GPU memory (GB)</figcaption>" << memory_chart(doc)
     << "</figure>\n";
  os << "<figure><figcaption>Cost per GPU (US dollars)</figcaption>"
     << value_chart(doc, "cost", kCostHue, &HwReportRow::cost_usd, "Cost per GPU", "cost (US dollars)",
                    [](double v) { return "$" + hw_fmt_usd(v); })
     << "</figure>\n";

  if (!doc.measured.empty())
    os << "<h2>Measured runs</h2>\n<div class=\"wide\">" << measured_table(doc) << "</div>\n";

  std::ostringstream unfit, advice;
  for (const HwReportRow& r : doc.rows) {
    std::string text;
    for (const std::string& a : r.advice) text += " " + svg_escape(a);
    if (r.fits && !*r.fits) {
      unfit << "<li>" << strong(r.gpu);
      if (r.predicted_peak_gb && r.memory_gb)
        unfit << ": needs " << hw_fmt_gb(*r.predicted_peak_gb) << " GB, has " << hw_fmt_gb(*r.memory_gb)
              << " GB";
      unfit << "." << text << "</li>";
    } else if (!r.advice.empty()) {
      advice << "<li>" << strong(r.gpu) << ":" << text << "</li>";
    }
  }
  if (!unfit.str().empty()) os << "<h2>GPUs that do not fit</h2>\n<ul>" << unfit.str() << "</ul>\n";
  if (!advice.str().empty()) os << "<h2>Advice</h2>\n<ul>" << advice.str() << "</ul>\n";

  // Sources are shown as text, not links: the page links to nothing outside itself.
  std::ostringstream prices;
  for (const HwReportRow& r : doc.rows)
    if (r.price_per_hour || !r.price_source.empty() || !r.price_date.empty())
      prices << "<tr><td>" << svg_escape(r.gpu) << "</td>" << td(r.price_per_hour, hw_fmt_usd) << "<td>"
             << (r.price_source.empty() ? kDash : svg_escape(r.price_source)) << "</td><td>"
             << (r.price_date.empty() ? kDash : svg_escape(r.price_date)) << "</td></tr>";
  if (!prices.str().empty())
    os << "<h2>Prices</h2>\n<table class=\"prices\"><thead><tr><th>GPU</th><th class=\"num\">$/hour</th>"
          "<th>source</th><th>date</th></tr></thead><tbody>"
       << prices.str() << "</tbody></table>\n";

  if (!doc.formulas.empty()) {
    os << "<h2>Formulas</h2>\n<ul class=\"formulas\">";
    for (const auto& [key, text] : doc.formulas)
      os << "<li>" << strong(key) << ": " << svg_escape(text) << "</li>";
    os << "</ul>\n";
  }
  if (!doc.notes.empty()) {
    os << "<h2>Notes</h2>\n<ul class=\"notes\">";
    for (const std::string& n : doc.notes) os << "<li>" << svg_escape(n) << "</li>";
    os << "</ul>\n";
  }
  if (!doc.config.empty())
    os << "<h2>Config</h2>\n<details><summary>resolved config</summary><pre>" << svg_escape(doc.config)
       << "</pre></details>\n";
  os << "</body></html>\n";
  return os.str();
}

}  // namespace luatune
