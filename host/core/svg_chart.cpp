// Inline SVG pieces and the line chart (see svg_chart.h).
#include "host/core/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace luatune {

const char* const svg_ink = "#1a202c";
const char* const svg_muted = "#718096";
const char* const svg_track = "#e2e8f0";

std::string svg_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

double svg_nice_step(double span, int ticks) {
  if (!(span > 0) || !std::isfinite(span)) return 1;
  double raw = span / ticks, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string svg_tick_label(double v, double step) {
  char buf[32];
  bool zero = std::fabs(v) < step / 2;  // 0, give or take the sum of steps that reached it
  if (step < 0.01) {
    // Enough significant digits that neighbouring ticks read apart: 9.5e-05, 1.00e-04, 1.05e-04.
    int digits =
        zero ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(v))) - std::floor(std::log10(step)));
    std::snprintf(buf, sizeof buf, zero ? "0" : "%.*e", std::clamp(digits, 1, 6), v);
  } else
    std::snprintf(buf, sizeof buf, step >= 1 ? "%.0f" : step >= 0.1 ? "%.1f" : "%.2f", zero ? 0.0 : v);
  return buf;
}

std::string svg_legend_item(double x, const std::string& fill, const std::string& text,
                            const std::string& stroke) {
  std::ostringstream os;
  os << "<rect x=\"" << svg_num(x) << "\" y=\"8\" width=\"14\" height=\"14\" fill=\"" << fill << "\""
     << (stroke.empty() ? "" : " stroke=\"" + stroke + "\"") << "/><text x=\"" << svg_num(x + 20)
     << "\" y=\"20\" fill=\"" << svg_ink << "\">" << svg_escape(text) << "</text>";
  return os.str();
}

// ============================================================================================
// Line chart

namespace {

// An axis over [lo, hi] with ticks every `step`, rounded out to whole steps.
struct Axis {
  double lo = 0, hi = 1, step = 1;
};

Axis axis_over(double lo, double hi, int ticks) {
  if (lo == hi) {  // one value: give it room
    double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  Axis a;
  a.step = svg_nice_step(hi - lo, ticks);
  a.lo = std::floor(lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(hi / a.step - 1e-9) * a.step;
  if (a.hi <= a.lo) a.hi = a.lo + a.step;
  return a;
}

}  // namespace

std::string svg_line_chart(const SvgLineChart& c) {
  const double left = 84, right = c.width - 24, top = 36, bottom = c.height - 48;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const SvgSeries& s : c.series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) {
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
        ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
  bool empty = !std::isfinite(xmin);
  if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  // Steps start where the run started: the x axis is not rounded out below the first step.
  Axis xa = axis_over(xmin, xmax, 6), ya = axis_over(ymin, ymax, 5);
  if (std::isfinite(c.x_from) && std::isfinite(c.x_to) && c.x_from < c.x_to)
    xa.lo = c.x_from, xa.hi = c.x_to;
  else if (xmin != xmax)
    xa.lo = xmin, xa.hi = xmax;
  auto px = [&](double x) { return left + (right - left) * (x - xa.lo) / (xa.hi - xa.lo); };
  auto py = [&](double y) { return bottom - (bottom - top) * (y - ya.lo) / (ya.hi - ya.lo); };

  std::ostringstream os;
  os << "<svg class=\"chart line\" viewBox=\"0 0 " << svg_num(c.width) << " " << svg_num(c.height)
     << "\" width=\"" << svg_num(c.width) << "\" height=\"" << svg_num(c.height)
     << "\" role=\"img\" aria-label=\"" << svg_escape(c.title)
     << "\" font-family=\"system-ui, sans-serif\" font-size=\"13\">";
  os << "<title>" << svg_escape(c.title) << "</title>";
  if (c.series.size() > 1) {
    os << "<g class=\"legend\">";
    double x = left;
    for (const SvgSeries& s : c.series) {
      os << svg_legend_item(x, s.colour, s.name);
      x += 40 + 8 * static_cast<double>(s.name.size());
    }
    os << "</g>";
  }
  // Grid: horizontal lines at the y ticks, short marks and labels at the x ticks.
  for (int i = 0;; i++) {
    double v = ya.lo + i * ya.step;
    if (v > ya.hi + ya.step / 2) break;
    double y = py(v);
    os << "<line x1=\"" << svg_num(left) << "\" y1=\"" << svg_num(y) << "\" x2=\"" << svg_num(right)
       << "\" y2=\"" << svg_num(y) << "\" stroke=\"" << (i == 0 ? svg_muted : svg_track) << "\"/>";
    os << "<text x=\"" << svg_num(left - 6) << "\" y=\"" << svg_num(y + 4) << "\" text-anchor=\"end\" fill=\""
       << svg_muted << "\">" << svg_tick_label(v, ya.step) << "</text>";
  }
  double xstep = svg_nice_step(xa.hi - xa.lo, 6);
  if (c.x_integer) xstep = std::max(1.0, std::round(xstep));
  for (double v = std::ceil(xa.lo / xstep - 1e-9) * xstep; v <= xa.hi + xstep * 1e-6; v += xstep) {
    double x = px(v);
    os << "<line x1=\"" << svg_num(x) << "\" y1=\"" << svg_num(bottom) << "\" x2=\"" << svg_num(x)
       << "\" y2=\"" << svg_num(bottom + 5) << "\" stroke=\"" << svg_muted << "\"/>";
    os << "<text x=\"" << svg_num(x) << "\" y=\"" << svg_num(bottom + 19)
       << "\" text-anchor=\"middle\" fill=\"" << svg_muted << "\">" << svg_tick_label(v, xstep) << "</text>";
  }
  os << "<line x1=\"" << svg_num(left) << "\" y1=\"" << svg_num(top) << "\" x2=\"" << svg_num(left)
     << "\" y2=\"" << svg_num(bottom) << "\" stroke=\"" << svg_muted << "\"/>";
  os << "<text x=\"" << svg_num((left + right) / 2) << "\" y=\"" << svg_num(c.height - 8)
     << "\" text-anchor=\"middle\" fill=\"" << svg_ink << "\" font-weight=\"600\">" << svg_escape(c.x_label)
     << "</text>";
  os << "<text transform=\"translate(16 " << svg_num((top + bottom) / 2)
     << ") rotate(-90)\" text-anchor=\"middle\" fill=\"" << svg_ink << "\" font-weight=\"600\">"
     << svg_escape(c.y_label) << "</text>";
  if (empty)
    os << "<text x=\"" << svg_num((left + right) / 2) << "\" y=\"" << svg_num((top + bottom) / 2)
       << "\" text-anchor=\"middle\" fill=\"" << svg_muted << "\">no data</text>";

  for (const SvgSeries& s : c.series) {
    std::ostringstream pts, dots;
    size_t n = 0;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      pts << (n++ ? " " : "") << svg_num(px(x)) << "," << svg_num(py(y));
    }
    if (n <= c.markers_up_to)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          dots << "<circle cx=\"" << svg_num(px(x)) << "\" cy=\"" << svg_num(py(y)) << "\" r=\"3\" fill=\""
               << s.colour << "\"/>";
    os << "<g class=\"series\"><polyline class=\"series\" data-name=\"" << svg_escape(s.name)
       << "\" points=\"" << pts.str() << "\" fill=\"none\" stroke=\"" << s.colour
       << "\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"/>" << dots.str()
       << "</g>";
  }
  os << "</svg>";
  return os.str();
}

}  // namespace luatune
