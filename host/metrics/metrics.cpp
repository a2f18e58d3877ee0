// The Metrics fan-out, metrics_open (which sinks a run gets, rank 0 only), the step timer behind
// the ETA, and the number formatting the console uses.
#include "host/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/metrics/run_report.h"

namespace luatune {

bool metrics_is_eval_key(const std::string& name) {
  return str_starts_with(name, "eval_");
}

void metrics_order(MetricValues& values, const std::vector<std::string>& order) {
  auto rank = [&](const std::string& k) {
    auto at = std::find(order.begin(), order.end(), k);  // a few keys: a scan is fine
    return static_cast<size_t>(at - order.begin());
  };
  std::stable_sort(values.numbers.begin(), values.numbers.end(), [&](const auto& a, const auto& b) {
    size_t ra = rank(a.first), rb = rank(b.first);
    return ra != rb ? ra < rb : (ra == order.size() && a.first < b.first);
  });
}

// ============================================================================================
// Fan-out

namespace {

// Every Metrics not yet closed, for metrics_close_open. Touched from the recipe's thread only.
std::set<Metrics*>& open_metrics() {
  static std::set<Metrics*> open;
  return open;
}

}  // namespace

Metrics::Metrics() {
  open_metrics().insert(this);
}

Metrics::~Metrics() {
  try {
    close(0);
  } catch (...) {
    // A sink failing while the run is torn down has nowhere to report; its data was flushed.
  }
  open_metrics().erase(this);
}

void metrics_close_open(int exit_code) {
  std::set<Metrics*> open = open_metrics();  // close() erases
  for (Metrics* m : open) {
    try {
      m->close(exit_code);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: metrics: closing a log failed: %s\n", e.what());
    }
  }
}

bool Metrics::stopped() const {
  for (const auto& s : sinks_)
    if (s->stopped()) return true;
  return false;
}

void Metrics::add(std::unique_ptr<MetricSink> sink) {
  sinks_.push_back(std::move(sink));
}

void Metrics::write(int64_t step, const MetricValues& values) {
  LT_CHECK(!closed_, "metrics: write after close");
  LT_CHECK(step >= 0, "metrics: step must be 0 or more, got " << step);
  for (auto& s : sinks_) s->write(step, values);
}

void Metrics::summary(const MetricValues& values) {
  LT_CHECK(!closed_, "metrics: summary after close");
  for (auto& s : sinks_) s->summary(values);
}

void Metrics::table(const MetricTable& t) {
  LT_CHECK(!closed_, "metrics: table after close");
  LT_CHECK(!t.columns.empty(), "metrics: table '" << t.title << "' has no columns");
  for (size_t i = 0; i < t.rows.size(); i++)
    LT_CHECK(t.rows[i].size() == t.columns.size(),
             "metrics: table '" << t.title << "' row " << i + 1 << " has " << t.rows[i].size()
                                << " cells, expected " << t.columns.size() << " (one per column)");
  for (auto& s : sinks_) s->table(t);
}

void Metrics::close(int exit_code) {
  if (closed_) return;
  closed_ = true;
  open_metrics().erase(this);
  for (auto& s : sinks_) s->close(exit_code);
  if (report_jsonl_.empty()) return;
  try {
    metrics_console_println("report: " + run_report_write(report_jsonl_));
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    if (str_starts_with(why, "report: ")) why = why.substr(8);
    std::fprintf(stderr, "warning: report: not written: %s\n", why.c_str());
  }
}

bool metrics_is_rank0() {
  for (const char* var : {"RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v && *v && std::string(v) != "0") return false;
  }
  return true;
}

std::unique_ptr<Metrics> metrics_open(const MetricsOptions& o) {
  LT_CHECK(o.console_options.total_steps >= 0,
           "metrics.open: total_steps must be 0 (unknown) or more, got " << o.console_options.total_steps);
  if (o.console) metrics_progress_seconds(o.console_options.progress_seconds);  // every rank fails alike
  auto m = std::make_unique<Metrics>();
  if (!metrics_is_rank0()) return m;
  if (o.console) m->add(console_sink_new(o.console_options));
  if (!o.jsonl.path.empty()) {
    m->add(jsonl_sink_new(o.jsonl));
    if (o.report) m->report_on_close(o.jsonl.path);
  }
  if (wandb_enabled(o.wandb)) m->add(wandb_sink_new(o.wandb));
  return m;
}

double metrics_progress_seconds(double option) {
  if (option >= 0) return option;
  const char* env = std::getenv("LUATUNE_PROGRESS_SECONDS");
  if (!env || !*env) return 30;
  double v = 0;
  if (!str_to_number(env, &v) || !std::isfinite(v) || v < 0)
    fail_usage(std::string("LUATUNE_PROGRESS_SECONDS: expected a number of seconds >= 0, got '") + env + "'",
               "0 prints a line every step; unset it for the default of 30");
  return v;
}

// ============================================================================================
// Step timer

void StepTimer::tick(int64_t step, double now) {
  if (last_step_ >= 0 && step > last_step_) {
    double x = (now - last_time_) / static_cast<double>(step - last_step_);
    per_step_ = per_step_ == 0 ? x : alpha_ * x + (1 - alpha_) * per_step_;
  }
  if (last_step_ < 0 || step > last_step_) {
    last_step_ = step;
    last_time_ = now;
  }
}

double StepTimer::eta_seconds(int64_t step, int64_t total) const {
  if (total <= 0 || step >= total) return 0;
  return per_step_ * static_cast<double>(total - step);
}

// ============================================================================================
// Formatting

namespace {

std::string printf_str(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

bool ends_or_is(const std::string& name, const std::string& what) {
  return name == what || str_ends_with(name, "_" + what);
}

}  // namespace

std::string metrics_format_thousands(double v) {
  if (!std::isfinite(v)) return printf_str("%g", v);
  std::string digits = printf_str("%.0f", std::fabs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); i++) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 && digits != "0" ? "-" : "") + out;
}

std::string metrics_format_value(const std::string& key, double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string name = metrics_is_eval_key(key) ? key.substr(5) : key;
  if (ends_or_is(name, "lr")) return printf_str("%.1e", v);
  if (name.find("loss") != std::string::npos || name == "ppl" || name == "perplexity")
    return printf_str("%.4f", v);
  if (name.find("per_s") != std::string::npos) return metrics_format_thousands(v);
  if (ends_or_is(name, "norm")) return printf_str("%.3f", v);
  if (v == std::floor(v) && std::fabs(v) < 1e15) return printf_str("%.0f", v);
  return printf_str("%.4g", v);
}

std::string metrics_format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto n = static_cast<int64_t>(std::llround(s));
  char buf[32];
  if (n < 60)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(n));
  else if (n < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(n / 60),
                  static_cast<long long>(n % 60));
  else if (n < 86400)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(n / 3600),
                  static_cast<long long>(n % 3600 / 60));
  else
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(n / 86400),
                  static_cast<long long>(n % 86400 / 3600));
  return buf;
}

namespace {

std::string step_text(int64_t step, int64_t total) {
  std::string s = "step " + std::to_string(step);
  if (total > 0) s += "/" + std::to_string(total);
  return s;
}

// The numbers a live line has room for, in this order when present.
const char* const kLiveKeys[] = {"loss", "lr", "grad_norm", "tokens_per_s"};

}  // namespace

std::string metrics_plain_line(int64_t step, int64_t total, const MetricValues& values, double eta_s,
                               double elapsed_s) {
  std::string line = step_text(step, total);
  for (const auto& [k, v] : values.numbers) line += " | " + k + " " + metrics_format_value(k, v);
  if (elapsed_s >= 0) line += " | elapsed " + metrics_format_duration(elapsed_s);
  if (eta_s >= 0.5) line += " | eta " + metrics_format_duration(eta_s);
  if (!values.note.empty()) line += " | " + values.note;
  return line;
}

std::string metrics_progress_line(int64_t step, int64_t total, const MetricValues& values, double eta_s,
                                  int width, double elapsed_s) {
  std::string head = step_text(step, total);
  std::string tail;
  for (const char* key : kLiveKeys)
    for (const auto& [k, v] : values.numbers)
      if (k == key) {
        tail += " | " + k + " " + metrics_format_value(k, v);
        break;
      }
  if (elapsed_s >= 0) tail += " | elapsed " + metrics_format_duration(elapsed_s);
  if (eta_s >= 0.5) tail += " | eta " + metrics_format_duration(eta_s);
  if (!values.note.empty()) tail += " | " + values.note;
  std::string bar;
  if (total > 0) {
    double frac = std::min(1.0, std::max(0.0, static_cast<double>(step) / static_cast<double>(total)));
    std::string pct = printf_str(" %3.0f%%", 100 * frac);
    // The bar takes what is left of the line, between 10 and 30 cells; none when under 10.
    int room = width - 1 - static_cast<int>(head.size() + tail.size() + pct.size()) - 3;
    int cells = std::min(30, room);
    if (cells >= 10) {
      int filled = static_cast<int>(frac * cells);
      bar = " [" + std::string(filled, '=') + (filled < cells ? ">" : "") +
            std::string(std::max(0, cells - filled - 1), ' ') + "]";
    }
    bar += pct;
  }
  std::string line = head + bar + tail;
  // The last column stays empty: writing it makes some terminals wrap before the \r.
  if (width > 1 && static_cast<int>(line.size()) > width - 1) line.resize(width - 1);
  return line;
}

}  // namespace luatune
