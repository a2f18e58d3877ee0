// Inline SVG for self-contained HTML reports (no script, font or image, nothing outside the file):
// the escaping, number and tick formats, colours and legend swatches the hardware report's bar
// charts (host/hw/report_html.cpp) and the run report's line charts (host/metrics/run_report.cpp)
// share, and the line chart itself.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

// Text and attribute values for HTML and SVG: & < > " ' escaped.
std::string svg_escape(const std::string& s);
// An SVG coordinate: one decimal is finer than a pixel.
std::string svg_num(double v);
// 1, 2 or 5 times a power of ten: the step giving about `ticks` intervals over a span of `span`.
double svg_nice_step(double span, int ticks);
// An axis label for a tick at `v` on a grid of `step`: "250", "2.5", "0.25", then on finer grids
// (learning rates) "0" and "5.0e-05", with the digits it takes to tell ticks apart ("1.05e-04").
std::string svg_tick_label(double v, double step);

// Colours shared by every chart.
extern const char* const svg_ink;    // text, axes
extern const char* const svg_muted;  // tick labels, notes
extern const char* const svg_track;  // grid lines, empty tracks

// A legend entry at (x, 18): a 14x14 swatch filled with `fill` (outlined with `stroke` when given),
// then the text.
std::string svg_legend_item(double x, const std::string& fill, const std::string& text,
                            const std::string& stroke = "");

// ============================================================================================
// Line chart: y against x for one or more series on shared axes.

struct SvgSeries {
  std::string name;                               // the legend's text
  std::string colour;                             // "#2b6cb0"
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending; non-finite values are not drawn
};

struct SvgLineChart {
  std::string title;    // the <title> and aria-label
  std::string x_label;  // "step"
  std::string y_label;  // "loss"
  std::vector<SvgSeries> series;
  bool x_integer = false;           // x is a count (steps): no ticks between whole numbers
  double x_from = NAN, x_to = NAN;  // the x axis's range when both are given (charts of one run share it)
  double width = 960, height = 300;
  size_t markers_up_to = 60;  // a series with this many points or fewer also gets a dot per point
};

// One <svg class="chart line"> with a <polyline class="series" data-name=NAME points="x,y ..."> per
// series holding one x,y pair per finite point, the grid, tick labels, axis titles and, for more
// than one series, a legend. A chart without points draws its frame and says "no data".
std::string svg_line_chart(const SvgLineChart& chart);

}  // namespace luatune
