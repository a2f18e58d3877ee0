// The W&B sink (see wandb.h): the training thread appends each row to the spool and an inbox; a
// sender thread creates the run with UpsertBucket, then posts what the inbox gathered to
// file_stream every transmit interval, retrying with backoff while the server is away, until
// close() asks for {"complete": true}. Notices from the sender wait in a list that the training
// thread prints on its next call, so nothing prints from two threads at once.
#include "host/metrics/wandb.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/number.h"
#include "host/metrics/metrics.h"
#include "host/metrics/wandb_settings.h"
#include "host/metrics/wandb_spool.h"
#include "host/metrics/wandb_wire.h"

namespace luatune {

namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double steady_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// A row's value: whole numbers as JSON integers, as in metrics.jsonl; NaN and infinities stay
// doubles, which wandb_json_dump writes as NaN, Infinity, -Infinity.
ojson wandb_number(double v) {
  return number_is_whole(v) ? ojson(static_cast<int64_t>(v)) : ojson(v);
}

// "2025-01-02T03:04:05.678901Z ": the timestamp the official client puts before each console line.
std::string utc_stamp() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  long micros = static_cast<long>(duration_cast<microseconds>(now.time_since_epoch()).count() % 1000000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

class WandbSink : public MetricSink {
 public:
  explicit WandbSink(WandbSettings s);
  ~WandbSink() override;
  void write(int64_t step, const MetricValues& values) override;
  void summary(const MetricValues& values) override;
  void close(int exit_code) override;
  bool stopped() const override { return stopped_; }

 private:
  // Training thread.
  void on_console_line(const std::string& line);
  void push_summary();  // the summary as it stands to the inbox (and, now and then, summary.json)
  void print_notices();
  // Sender thread.
  void sender_main();
  bool sender_upsert(WandbQueue& q);
  void sender_stream(WandbQueue& q);
  bool sender_wait_until(double when);  // false when told to quit
  void sender_take_inbox(WandbQueue& q);
  void notice(const std::string& text);  // queues it for the training thread
  bool sender_retry_later(const WandbReply& r, int attempt);
  void save_state(const WandbQueue& q, bool complete);
  std::string keep_local() const;

  WandbSettings s_;
  WandbRunInfo run_;
  bool online_;  // a sender thread talks to the server (online and a key was found)
  std::unique_ptr<WandbSpool> spool_;
  double start_ = 0, runtime_base_ = 0;
  ojson summary_ = ojson::object();    // the latest value of each key (training thread)
  ojson overrides_ = ojson::object();  // what summary() set, laid over it
  double summary_written_ = 0;
  bool closed_ = false;

  std::mutex mu_;  // guards everything below up to state_mu_, and the spool's appends
  std::condition_variable cv_;
  std::deque<std::string> inbox_history_, inbox_output_;
  std::string inbox_summary_;
  bool inbox_summary_new_ = false;
  bool closing_ = false, quit_ = false, sender_done_ = false, gave_up_ = false;
  int exit_code_ = 0;
  std::vector<std::string> notices_;

  std::mutex state_mu_;  // state_ and the state.json file (both threads write it)
  WandbState state_;

  std::atomic<bool> stopped_{false};
  std::unique_ptr<WandbHttp> http_;
  bool outage_ = false;  // sender thread: a failure was announced, "server back" not yet
  std::mt19937 rng_{std::random_device{}()};
  std::uniform_real_distribution<double> jitter_{0, 1};
  std::thread sender_;
};

WandbSink::WandbSink(WandbSettings s) : s_(std::move(s)) {
  run_.run_id = s_.run_id;
  run_.entity = s_.entity;
  run_.project = s_.project;
  run_.name = s_.name;
  run_.group = s_.group;
  run_.job_type = s_.job_type;
  run_.notes = s_.notes;
  run_.tags = s_.tags;
  run_.host = host_name();
  run_.config_json = s_.config_json;

  std::string dir = s_.run_dir();
  bool resume = s_.resume && file_exists(dir + "/run.json");
  WandbState previous = resume ? wandb_state_read(dir) : WandbState();
  spool_ = std::make_unique<WandbSpool>(dir, resume);
  wandb_run_json_write(dir, run_, s_.base_url);
  start_ = steady_seconds();
  if (resume) {
    // The resumed run keeps its summary and its clock.
    std::vector<std::string> lines = wandb_spool_lines(dir + "/summary.json");
    if (!lines.empty()) {
      try {
        summary_ = wandb_json_parse(lines[0]);
      } catch (const std::exception&) {
        summary_ = ojson::object();  // a damaged summary is rebuilt from the next rows
      }
      if (!summary_.is_object()) summary_ = ojson::object();
      if (summary_.contains("_runtime") && summary_["_runtime"].is_number())
        runtime_base_ = summary_["_runtime"].get<double>();
    }
  }
  state_ = resume ? previous : WandbState();
  state_.complete = state_.closed = false;  // this process has not ended the run
  wandb_state_write(dir, state_);

  bool no_key = s_.mode == WandbMode::online && s_.api_key.empty();
  online_ = s_.mode == WandbMode::online && !no_key;
  if (online_ && resume) {
    // Rows a previous process spooled but never got acknowledged go first.
    std::vector<std::string> h = wandb_spool_lines(dir + "/history.jsonl");
    for (size_t i = static_cast<size_t>(std::max<int64_t>(0, state_.history_acked)); i < h.size(); i++)
      inbox_history_.push_back(h[i]);
    std::vector<std::string> o = wandb_spool_lines(dir + "/output.log");
    for (size_t i = static_cast<size_t>(std::max<int64_t>(0, state_.output_acked)); i < o.size(); i++)
      inbox_output_.push_back(o[i]);
  }
  metrics_console_add_tap(this, [this](const std::string& line) { on_console_line(line); });
  if (s_.base_url_had_credentials) metrics_console_println(wandb_credentials_notice(), s_.notices);
  // Warned once, by the one sink of the run, and only when something will be sent.
  std::string insecure = online_ ? wandb_insecure_warning(s_.base_url) : "";
  if (!insecure.empty()) metrics_console_println(insecure, s_.notices);
  if (no_key) {
    std::string host = wandb_url_host(s_.base_url, false);
    metrics_console_println("wandb: no API key for " + host + " (set WANDB_API_KEY, or put 'machine " + host +
                                " password KEY' in ~/.netrc); logging offline to " + dir +
                                ", upload later with runner wandb-sync " + dir,
                            s_.notices);
  }
  if (online_) {
    http_ = std::make_unique<WandbHttp>(s_.base_url, s_.api_key, s_.http_timeout);
    sender_ = std::thread([this] { sender_main(); });
  }
}

WandbSink::~WandbSink() {
  if (!closed_) {
    try {
      close(0);
    } catch (...) {
      // Torn down without close(): the spool holds everything; nothing to report to.
    }
  }
  if (sender_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    http_->abort();
    sender_.join();
  }
  metrics_console_remove_tap(this);
}

std::string WandbSink::keep_local() const {
  return "this run goes on logging locally to " + s_.run_dir() + ", upload it later with runner wandb-sync " +
         s_.run_dir();
}

// ============================================================================================
// Training thread

void WandbSink::write(int64_t step, const MetricValues& values) {
  LT_CHECK(!closed_, "wandb: write after close");
  print_notices();
  double runtime = runtime_base_ + steady_seconds() - start_;
  ojson row = ojson::object();
  for (const auto& [k, v] : values.numbers) {
    row[k] = wandb_number(v);
    summary_[k] = row[k];
  }
  row["_step"] = step;
  row["_runtime"] = std::round(runtime * 1e6) / 1e6;
  row["_timestamp"] = std::round(unix_seconds() * 1e6) / 1e6;
  std::string text = wandb_json_dump(row);
  summary_["_step"] = step;
  summary_["_runtime"] = row["_runtime"];
  {
    std::lock_guard<std::mutex> lock(mu_);
    spool_->append_history(text);
    if (online_ && !gave_up_) inbox_history_.push_back(std::move(text));
  }
  push_summary();
}

void WandbSink::summary(const MetricValues& values) {
  LT_CHECK(!closed_, "wandb: summary after close");
  print_notices();
  for (const auto& [k, v] : values.numbers) overrides_[k] = wandb_number(v);
  summary_written_ = 0;  // written now, not at the next second
  push_summary();
}

void WandbSink::push_summary() {
  double runtime = runtime_base_ + steady_seconds() - start_;
  ojson merged = summary_;
  for (auto it = overrides_.begin(); it != overrides_.end(); ++it) merged[it.key()] = it.value();
  merged["_wandb"] = {{"runtime", static_cast<int64_t>(runtime)}};
  std::string text = wandb_json_dump(merged);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (online_ && !gave_up_) {
      inbox_summary_ = text;
      inbox_summary_new_ = true;
    }
  }
  // summary.json for wandb-sync, at most once a second: the rows themselves are already spooled.
  double now = steady_seconds();
  if (closed_ || now - summary_written_ >= 1.0) {
    spool_->write_summary(text);
    summary_written_ = now;
  }
}

void WandbSink::on_console_line(const std::string& line) {
  std::string stamped = utc_stamp() + line;
  std::lock_guard<std::mutex> lock(mu_);
  spool_->append_output(stamped);
  if (online_ && !gave_up_) inbox_output_.push_back(std::move(stamped));
}

void WandbSink::print_notices() {
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lines.swap(notices_);
  }
  // Outside mu_: printing feeds the console taps, ours included, which takes mu_.
  for (const auto& line : lines) metrics_console_println(line, s_.notices);
}

void WandbSink::close(int exit_code) {
  if (closed_) return;
  print_notices();
  closed_ = true;
  push_summary();
  metrics_console_remove_tap(this);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    state_.closed = true;
    state_.exit_code = exit_code;
    wandb_state_write(spool_->dir(), state_);
  }
  bool complete = false;
  if (sender_.joinable()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      closing_ = true;
      exit_code_ = exit_code;
      cv_.notify_all();
      auto limit = std::chrono::duration<double>(s_.finish_timeout);
      if (!cv_.wait_for(lock, limit, [this] { return sender_done_; })) quit_ = true;
    }
    cv_.notify_all();
    http_->abort();  // a request still in flight after finish_timeout ends now
    sender_.join();
  }
  print_notices();
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    complete = state_.complete;
    wandb_state_write(spool_->dir(), state_);
  }
  spool_->close();
  std::string dir = s_.run_dir();
  if (!online_) {
    metrics_console_println("wandb: offline run saved to " + dir + "; upload with runner wandb-sync " + dir,
                            s_.notices);
  } else if (!complete) {
    int64_t unsent;
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      unsent = spool_->history_lines() - state_.history_acked;
    }
    metrics_console_println(
        unsent > 0 ? "wandb: " + std::to_string(unsent) + " rows not uploaded; run: runner wandb-sync " + dir
                   : "wandb: the run's end was not uploaded; run: runner wandb-sync " + dir,
        s_.notices);
  }
}

// ============================================================================================
// Sender thread

void WandbSink::notice(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  notices_.push_back(text);
}

bool WandbSink::sender_wait_until(double when) {
  std::unique_lock<std::mutex> lock(mu_);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(std::max(0.0, when - steady_seconds())));
  cv_.wait_until(lock, deadline, [this] { return quit_; });
  return !quit_;
}

void WandbSink::sender_take_inbox(WandbQueue& q) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& line : inbox_history_) q.history.push_back(std::move(line));
  inbox_history_.clear();
  for (auto& line : inbox_output_) q.output.push_back(std::move(line));
  inbox_output_.clear();
  if (inbox_summary_new_) {
    q.summary = std::move(inbox_summary_);
    q.summary_dirty = true;
    inbox_summary_new_ = false;
  }
  if (closing_ && !q.complete) {
    q.complete = true;
    q.exit_code = exit_code_;
  }
}

void WandbSink::save_state(const WandbQueue& q, bool complete) {
  std::lock_guard<std::mutex> lock(state_mu_);
  state_.history_acked = q.history_offset - state_.history_base;
  state_.output_acked = q.output_offset;
  state_.summary_acked = !q.summary_dirty;
  if (complete) state_.complete = true;
  try {
    wandb_state_write(spool_->dir(), state_);
  } catch (const std::exception& e) {
    notice(std::string("wandb: ") + e.what());  // a full disk; the next save tries again
  }
}

void WandbSink::sender_main() {
  try {
    WandbQueue q;
    if (sender_upsert(q)) sender_stream(q);
  } catch (const std::exception& e) {
    // Nothing may escape a thread (std::terminate); the run goes on with its spool, as after a 4xx.
    notice(std::string("wandb: the upload stopped: ") + e.what() + "; " + keep_local());
    std::lock_guard<std::mutex> lock(mu_);
    gave_up_ = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  sender_done_ = true;
  cv_.notify_all();
}

// Creates (or resumes) the run; false when the server refused it for good or we were told to quit.
bool WandbSink::sender_upsert(WandbQueue& q) {
  std::string url = http_->url("/graphql");
  for (int attempt = 0;; attempt++) {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      run_.storage_id = state_.storage_id;
    }
    WandbReply r = http_->post("/graphql", wandb_upsert_body(run_));
    WandbVerdict v = wandb_verdict(r.status, true);
    WandbBucket b;
    std::string why;
    if (v == WandbVerdict::ok && !wandb_upsert_parse(r.body, &b, &why)) {
      notice("wandb: UpsertBucket failed at " + url + ": " + why + "; " + keep_local());
      v = WandbVerdict::final;
    } else if (v == WandbVerdict::final) {
      notice("wandb: " + wandb_refusal(r, url) + "; " + keep_local());
    }
    if (v == WandbVerdict::final) {
      std::lock_guard<std::mutex> lock(mu_);
      gave_up_ = true;
      inbox_history_.clear();
      inbox_output_.clear();
      return false;
    }
    if (v == WandbVerdict::ok) {
      sender_take_inbox(q);
      std::lock_guard<std::mutex> lock(state_mu_);
      state_.storage_id = b.id;
      state_.entity = b.entity;
      state_.project = b.project;
      // q.history[0] is spool line history_acked; the server's line count says where it goes,
      // and which queued lines it already holds.
      int64_t first = state_.history_acked;
      wandb_state_reconcile(state_, first + static_cast<int64_t>(q.history.size()), b.history_line_count);
      q.history.erase(q.history.begin(),
                      q.history.begin() + static_cast<std::ptrdiff_t>(state_.history_acked - first));
      q.history_offset = state_.history_base + state_.history_acked;
      q.output_offset = state_.output_acked;
      run_.entity = b.entity;
      run_.project = b.project;
      std::string name = s_.name.empty() ? s_.run_id : s_.name;
      notice("wandb: run " + name + ": " + wandb_app_url(s_.base_url) + "/" + b.entity + "/" + b.project +
             "/runs/" + s_.run_id);
      return true;
    }
    if (!sender_retry_later(r, attempt)) return false;
  }
}

// After a failed attempt: one notice per outage, then the wait (Retry-After, else backoff).
bool WandbSink::sender_retry_later(const WandbReply& r, int attempt) {
  if (!outage_) {
    notice("wandb: server unreachable (" + wandb_reply_reason(r) + "), retrying; rows are kept in " +
           s_.run_dir());
    outage_ = true;
  }
  double wait = r.retry_after >= 0
                    ? r.retry_after
                    : wandb_backoff(attempt, s_.retry_wait_min, s_.retry_wait_max, jitter_(rng_));
  return sender_wait_until(steady_seconds() + wait);
}

// Posts what gathered every transmit interval (at once while closing, and back to back while a
// backlog is over the request cap), a heartbeat when nothing else went for heartbeat_interval,
// until the server acknowledges complete, refuses for good, or we are told to quit.
void WandbSink::sender_stream(WandbQueue& q) {
  std::string path = wandb_file_stream_path(run_.entity, run_.project, run_.run_id);
  std::string url = http_->url(path);
  double next = steady_seconds();  // when the next post may go
  double last_post = next;
  int attempt = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(std::max(0.0, next - steady_seconds())));
      cv_.wait_until(lock, deadline, [this] { return quit_ || closing_; });  // closing: no pacing
      if (quit_) return;
    }
    sender_take_inbox(q);
    double now = steady_seconds();
    if (q.empty() && now - last_post < s_.heartbeat_interval) {
      next = now + std::min(s_.transmit_interval, s_.heartbeat_interval - (now - last_post));
      continue;
    }
    WandbChunk c = wandb_chunk(q);
    WandbReply r = http_->post(path, c.body);
    WandbVerdict v = wandb_verdict(r.status, false);
    if (v == WandbVerdict::final) {
      notice("wandb: " + wandb_refusal(r, url) + "; " + keep_local());
      std::lock_guard<std::mutex> lock(mu_);
      gave_up_ = true;
      inbox_history_.clear();
      inbox_output_.clear();
      return;
    }
    if (v == WandbVerdict::retry) {
      if (!sender_retry_later(r, attempt++)) return;  // the wait happens in there
      next = steady_seconds();
      continue;
    }
    last_post = steady_seconds();
    attempt = 0;
    wandb_queue_ack(q, c);
    save_state(q, c.complete);
    if (outage_) {
      notice("wandb: server back, " + std::to_string(c.history) + " rows sent");
      outage_ = false;
    }
    if (wandb_reply_stopped(r.body) && !stopped_.exchange(true))
      notice("wandb: run stopped from the W&B UI; the recipe ends after this step");
    if (c.complete) return;
    // A backlog over the request cap goes out back to back; otherwise wait for the interval.
    bool backlog = !q.history.empty() || !q.output.empty();
    next = backlog ? last_post : last_post + s_.transmit_interval;
  }
}

}  // namespace

std::unique_ptr<MetricSink> wandb_sink_new(const WandbOptions& options) {
  if (!wandb_enabled(options)) return nullptr;
  return std::make_unique<WandbSink>(wandb_resolve(options));
}

}  // namespace luatune
