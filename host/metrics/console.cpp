// The console sink. On a terminal: one live line redrawn in place with '\r' (step, bar, the key
// numbers, elapsed time, ETA), which any other print clears first and redraws after
// (metrics_console_println), so output never lands in the middle of it. Elsewhere (CI logs, Slurm,
// files): a plain line at the first step, then one every `progress_seconds` (30 by default), and
// at the last step, so a slow run is never silent for long and a fast one never floods the log.
// Eval values always get their own line; the summary is a small table.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "host/core/error.h"
#include "host/core/term.h"
#include "host/metrics/metrics.h"

namespace luatune {

namespace {

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class ConsoleSink;

// Console taps (metrics.h): who gets a copy of each printed line.
std::mutex g_tap_mutex;
std::vector<std::pair<const void*, std::function<void(const std::string&)>>> g_taps;

// The one live line of the process (there is one terminal): who draws it and whether it is up.
std::mutex g_live_mutex;
ConsoleSink* g_live = nullptr;

class ConsoleSink : public MetricSink {
 public:
  explicit ConsoleSink(const ConsoleOptions& o) : o_(o) {
    if (!o_.clock) o_.clock = steady_seconds;
    tty_ = o_.tty < 0 ? isatty(fileno(o_.out)) == 1 : o_.tty == 1;
    seconds_ = metrics_progress_seconds(o_.progress_seconds);
    start_ = o_.clock();
  }
  ~ConsoleSink() override {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    if (g_live == this) g_live = nullptr;
  }

  void write(int64_t step, const MetricValues& values) override {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    MetricValues train, eval;
    for (const auto& kv : values.numbers)
      (metrics_is_eval_key(kv.first) ? eval : train).numbers.push_back(kv);
    // A note goes with the training numbers unless the write holds only eval values.
    (train.numbers.empty() && !eval.numbers.empty() ? eval : train).note = values.note;
    double now = o_.clock();
    if (!eval.empty()) {
      clear_live_locked();
      std::string line = "eval " + metrics_plain_line(step, o_.total_steps, eval, 0, now - start_);
      std::fprintf(o_.out, "%s\n", line.c_str());
      metrics_console_tap(line);
      if (tty_) draw_locked();
      std::fflush(o_.out);
    }
    if (train.empty()) return;
    timer_.tick(step, now);
    count_tokens(train, now);
    last_step_ = step;
    last_time_ = now;
    last_ = with_token_rate(train, now);
    // Plain lines (printed off a terminal, tapped on one): the first step, every seconds_, the last.
    bool last = o_.total_steps > 0 && step >= o_.total_steps;
    bool plain_due = line_step_ < 0 || last || now - line_time_ >= seconds_;
    if (tty_) {
      if (last || !drawn_once_ || now - last_draw_ >= o_.redraw_interval) {
        draw_locked();
        last_draw_ = now;
      }
    }
    if (plain_due) plain_locked();
  }

  void summary(const MetricValues& values) override {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    end_live_locked();
    plain_locked_if_pending();
    size_t w = 0;
    for (const auto& kv : values.numbers) w = std::max(w, kv.first.size());
    std::vector<std::string> lines{"summary"};
    for (const auto& [k, v] : values.numbers) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "  %-*s  %s", static_cast<int>(w), k.c_str(),
                    metrics_format_value(k, v).c_str());
      lines.push_back(buf);
    }
    if (!values.note.empty()) lines.push_back("  " + values.note);
    for (const auto& line : lines) {
      std::fprintf(o_.out, "%s\n", line.c_str());
      metrics_console_tap(line);
    }
    std::fflush(o_.out);
  }

  // A run that ends before total_steps (stopped from W&B, data ran out) still shows where it
  // ended; a failed run does not: its error message is the last thing it says.
  void close(int exit_code) override {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    end_live_locked();
    if (exit_code == 0) plain_locked_if_pending();
  }

  // Wipes the live line so other output can take its place (the caller redraws after).
  void clear_live_locked() {
    if (!showing_) return;
    std::fputs("\r\033[K", o_.out);
    std::fflush(o_.out);
    showing_ = false;
  }

  // Draws (or redraws) the live line from the last training values.
  void draw_locked() {
    if (!tty_ || last_step_ < 0) return;
    int width = o_.width > 0 ? o_.width : term_width(o_.out);
    std::string line =
        metrics_progress_line(last_step_, o_.total_steps, last_, eta(), width, last_time_ - start_);
    std::fprintf(o_.out, "\r%s\033[K", line.c_str());
    std::fflush(o_.out);
    showing_ = true;
    drawn_once_ = true;
    g_live = this;
  }

  // Leaves the live line on screen as the run's last progress and moves below it.
  void end_live_locked() {
    if (showing_) {
      std::fputs("\n", o_.out);
      std::fflush(o_.out);
    }
    showing_ = false;
    if (g_live == this) g_live = nullptr;
  }

 private:
  double eta() const { return timer_.eta_seconds(last_step_, o_.total_steps); }

  // The plain line of the last training values: printed when not on a terminal, tapped always.
  void plain_locked() {
    std::string line = metrics_plain_line(last_step_, o_.total_steps, last_, eta(), last_time_ - start_);
    if (!tty_) {
      std::fprintf(o_.out, "%s\n", line.c_str());
      std::fflush(o_.out);
    }
    metrics_console_tap(line);
    line_step_ = last_step_;
    line_time_ = last_time_;
  }

  void plain_locked_if_pending() {
    if (last_step_ >= 0 && line_step_ != last_step_) plain_locked();
  }

  // Tokens seen after the first step (whose start time is unknown) and when that step ended: the
  // run's average tokens/s, for values that carry a token count but no rate of their own.
  void count_tokens(const MetricValues& v, double now) {
    for (const auto& [k, x] : v.numbers)
      if (k == "tokens" && std::isfinite(x)) {
        if (tokens_since_ < 0) {
          tokens_since_ = now;
          tokens_ = 0;
        } else {
          tokens_ += x;
        }
      }
  }

  MetricValues with_token_rate(const MetricValues& v, double now) const {
    bool has_tokens = false;
    for (const auto& kv : v.numbers) {
      if (kv.first == "tokens_per_s") return v;
      has_tokens = has_tokens || kv.first == "tokens";
    }
    if (!has_tokens || tokens_since_ < 0 || now <= tokens_since_ || tokens_ <= 0) return v;
    // After loss, lr and grad_norm, where trainer:step puts its own tokens_per_s.
    MetricValues out = v;
    auto at = out.numbers.begin();
    while (at != out.numbers.end() && (at->first == "loss" || at->first == "lr" || at->first == "grad_norm"))
      ++at;
    out.numbers.insert(at, {"tokens_per_s", tokens_ / (now - tokens_since_)});
    return out;
  }

  ConsoleOptions o_;
  bool tty_ = false;
  double seconds_ = 30;  // between plain lines
  double start_ = 0;     // when the sink opened: elapsed time counts from here
  StepTimer timer_;
  int64_t last_step_ = -1;
  double last_time_ = 0;  // when last_step_ was written
  MetricValues last_;
  int64_t line_step_ = -1;  // the step of the last plain line (-1: none yet)
  double line_time_ = 0;
  double tokens_since_ = -1, tokens_ = 0;
  bool showing_ = false, drawn_once_ = false;
  double last_draw_ = 0;
};

}  // namespace

std::unique_ptr<MetricSink> console_sink_new(const ConsoleOptions& options) {
  LT_CHECK(options.out, "metrics: console output stream is null");
  return std::make_unique<ConsoleSink>(options);
}

void metrics_console_println(const std::string& line, std::FILE* out) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  ConsoleSink* live = g_live;
  if (live) live->clear_live_locked();
  std::fprintf(out, "%s\n", line.c_str());
  std::fflush(out);
  if (live) live->draw_locked();
  metrics_console_tap(line);
}

void metrics_console_add_tap(const void* owner, std::function<void(const std::string&)> tap) {
  std::lock_guard<std::mutex> lock(g_tap_mutex);
  g_taps.emplace_back(owner, std::move(tap));
}

void metrics_console_remove_tap(const void* owner) {
  std::lock_guard<std::mutex> lock(g_tap_mutex);
  for (size_t i = g_taps.size(); i-- > 0;)
    if (g_taps[i].first == owner) g_taps.erase(g_taps.begin() + static_cast<std::ptrdiff_t>(i));
}

void metrics_console_tap(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_tap_mutex);
  for (const auto& t : g_taps) t.second(line);
}

void metrics_console_clear_live() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  if (g_live) g_live->clear_live_locked();
  g_live = nullptr;
}

}  // namespace luatune
