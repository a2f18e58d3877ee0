// `runner wandb-sync PATH`: uploads spooled W&B runs (offline runs, runs whose server was away
// at the end, runs killed mid-way). Each run is created or resumed with UpsertBucket, then what
// state.json says the server has not acknowledged goes out through file_stream, then complete with
// the recorded exit code (1 for a run that never closed). Safe to repeat: a complete run is skipped.
// A spool is data anyone can copy or edit, so the server comes from our side (WANDB_BASE_URL, else
// https://api.wandb.ai) and a spool naming another host is refused unless --trust-spool-host.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/metrics/wandb.h"
#include "host/metrics/wandb_settings.h"
#include "host/metrics/wandb_spool.h"
#include "host/metrics/wandb_wire.h"

namespace luatune {

namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Posts with the sink's retry rules, blocking; gives up after finish_timeout of failures in a
// row. *why says why it stopped when it returns something other than ok.
WandbVerdict post_with_retries(WandbHttp& http, const std::string& path, const std::string& body, bool upsert,
                               const WandbSettings& s, WandbReply* reply, std::string* why) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0, 1);
  double give_up_at = 0;
  for (int attempt = 0;; attempt++) {
    *reply = http.post(path, body);
    WandbVerdict v = wandb_verdict(reply->status, upsert);
    if (v == WandbVerdict::ok) return v;
    if (v == WandbVerdict::final) {
      *why = wandb_refusal(*reply, http.url(path));
      return v;
    }
    double wait = reply->retry_after >= 0
                      ? reply->retry_after
                      : wandb_backoff(attempt, s.retry_wait_min, s.retry_wait_max, jitter(rng));
    if (attempt == 0) give_up_at = s.finish_timeout;
    give_up_at -= wait;
    if (give_up_at < 0) {
      *why = "server unreachable (" + wandb_reply_reason(*reply) + ") at " + http.url(path) +
             "; try again later";
      return WandbVerdict::retry;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
}

// What every run of one `wandb-sync` shares: where to send, and the warnings already given.
struct SyncContext {
  std::string configured;  // WANDB_BASE_URL or the default, without user:password@ or a trailing '/'
  bool trust_spool_host = false;
  WandbSettings pacing;
  std::FILE* out = stdout;
  std::FILE* notices = stderr;
  std::set<std::string> warned;  // base URLs already warned about (plain http)
};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Uploads one run directory; prints its line; false when something was left unsent.
bool sync_run(const std::string& dir, SyncContext& ctx) {
  const WandbSettings& pacing = ctx.pacing;
  std::FILE* out = ctx.out;
  std::string spool_url;  // what run.json names (read without user:password@)
  WandbRunInfo run = wandb_run_json_read(dir, &spool_url);
  WandbState st = wandb_state_read(dir);
  if (st.complete) {
    std::fprintf(out, "wandb-sync: %s: already complete (exit code %d), nothing to send\n", dir.c_str(),
                 st.exit_code);
    return true;
  }
  // Same host: the configured URL (its port and path are ours to choose). Another host: only
  // when trusted, and then the spool's URL, which must at least be http(s).
  std::string base_url = ctx.configured;
  std::string spool_host = wandb_url_host(spool_url, false);
  if (lowercase(spool_host) != lowercase(wandb_url_host(ctx.configured, false))) {
    if (!ctx.trust_spool_host) {
      std::fprintf(out,
                   "wandb-sync: %s: the spool names host %s (%s), not the configured %s; not sent, so the "
                   "API key goes to no other host: set WANDB_BASE_URL=%s or pass --trust-spool-host to "
                   "upload there\n",
                   dir.c_str(), spool_host.c_str(), spool_url.c_str(),
                   wandb_url_host(ctx.configured, false).c_str(), spool_url.c_str());
      return false;
    }
    LT_CHECK(str_starts_with(spool_url, "http://") || str_starts_with(spool_url, "https://"),
             "the base_url in run.json must start with http:// or https://, got '" << spool_url << "'");
    base_url = spool_url;
  }
  std::string key = env("WANDB_API_KEY");
  if (key.empty()) key = wandb_netrc_key(base_url);
  std::string host = wandb_url_host(base_url, false);
  if (key.empty()) {
    std::fprintf(out,
                 "wandb-sync: %s: no API key for %s (set WANDB_API_KEY, or put 'machine %s password KEY' in "
                 "~/.netrc)\n",
                 dir.c_str(), host.c_str(), host.c_str());
    return false;
  }
  std::string insecure = wandb_insecure_warning(base_url);
  if (!insecure.empty() && ctx.warned.insert(base_url).second) {
    std::fprintf(ctx.notices, "%s\n", insecure.c_str());
    std::fflush(ctx.notices);
  }
  if (!st.entity.empty()) run.entity = st.entity;
  if (!st.project.empty()) run.project = st.project;
  run.storage_id = st.storage_id;

  WandbHttp http(base_url, key, pacing.http_timeout);
  WandbReply reply;
  std::string why;
  auto failed = [&](int64_t sent) {
    std::fprintf(out, "wandb-sync: %s: %lld rows sent, then stopped: %s\n", dir.c_str(),
                 static_cast<long long>(sent), why.c_str());
    return false;
  };
  WandbVerdict v = post_with_retries(http, "/graphql", wandb_upsert_body(run), true, pacing, &reply, &why);
  WandbBucket b;
  if (v == WandbVerdict::ok && !wandb_upsert_parse(reply.body, &b, &why)) {
    why = "UpsertBucket failed at " + http.url("/graphql") + ": " + why;
    v = WandbVerdict::final;
  }
  if (v != WandbVerdict::ok) return failed(0);
  st.storage_id = b.id;
  st.entity = b.entity;
  st.project = b.project;

  std::vector<std::string> history = wandb_spool_lines(dir + "/history.jsonl");
  std::vector<std::string> output = wandb_spool_lines(dir + "/output.log");
  std::vector<std::string> summary = wandb_spool_lines(dir + "/summary.json");
  wandb_state_reconcile(st, static_cast<int64_t>(history.size()), b.history_line_count);
  WandbQueue q;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, st.history_acked)); i < history.size(); i++)
    q.history.push_back(history[i]);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, st.output_acked)); i < output.size(); i++)
    q.output.push_back(output[i]);
  q.history_offset = st.history_base + st.history_acked;
  q.output_offset = st.output_acked;
  if (!summary.empty()) {
    q.summary = summary[0];
    q.summary_dirty = true;  // one line, rewritten in place: sending it again is harmless
  }
  bool killed = !st.closed;
  q.complete = true;
  q.exit_code = killed ? 1 : st.exit_code;

  std::string path = wandb_file_stream_path(b.entity, b.project, run.run_id);
  int64_t sent = 0;
  for (;;) {
    WandbChunk c = wandb_chunk(q);
    v = post_with_retries(http, path, c.body, false, pacing, &reply, &why);
    if (v != WandbVerdict::ok) {
      wandb_state_write(dir, st);
      return failed(sent);
    }
    wandb_queue_ack(q, c);
    sent += static_cast<int64_t>(c.history);
    st.history_acked = q.history_offset - st.history_base;
    st.output_acked = q.output_offset;
    st.summary_acked = !q.summary_dirty;
    if (c.complete) {
      st.complete = true;
      if (killed) {
        st.closed = true;  // recorded as the exit code the server now shows
        st.exit_code = 1;
      }
    }
    wandb_state_write(dir, st);
    if (c.complete) break;
  }
  std::fprintf(out, "wandb-sync: %s: %lld rows sent, complete (exit code %d%s)\n", dir.c_str(),
               static_cast<long long>(sent), q.exit_code,
               killed ? "; the run never closed (killed or crashed), so it is marked failed" : "");
  return true;
}

}  // namespace

int wandb_sync(const std::string& path, std::FILE* out, bool trust_spool_host, std::FILE* notices) {
  std::vector<std::string> runs;
  if (file_exists(path + "/run.json")) {
    runs.push_back(path);
  } else if (dir_exists(path)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (str_starts_with(e.path().filename().string(), "run-") &&
          file_exists((e.path() / "run.json").string()))
        runs.push_back(e.path().string());
    std::sort(runs.begin(), runs.end());
  }
  if (runs.empty())
    fail("runner wandb-sync: '" + path +
             "' holds no spooled W&B run (a run directory has run.json; a spool "
             "directory has run-ID directories)",
         "the spool is OUTPUT_DIR/wandb by default, or the wandb.dir / WANDB_DIR the run was given");
  SyncContext ctx;
  ctx.trust_spool_host = trust_spool_host;
  ctx.out = out;
  ctx.notices = notices ? notices : stderr;
  wandb_resolve_pacing(WandbOptions(), &ctx.pacing);
  std::string given = env("WANDB_BASE_URL");
  if (given.empty()) given = "https://api.wandb.ai";
  ctx.configured = wandb_url_redacted(given);
  while (!ctx.configured.empty() && ctx.configured.back() == '/') ctx.configured.pop_back();
  LT_CHECK(str_starts_with(ctx.configured, "http://") || str_starts_with(ctx.configured, "https://"),
           "wandb: WANDB_BASE_URL must start with http:// or https://, got '" << ctx.configured << "'");
  if (wandb_url_has_credentials(given)) {
    std::fprintf(ctx.notices, "%s\n", wandb_credentials_notice().c_str());
    std::fflush(ctx.notices);
  }
  int rc = 0;
  for (const auto& dir : runs) {
    try {
      if (!sync_run(dir, ctx)) rc = 1;
    } catch (const Error& e) {
      std::fprintf(out, "wandb-sync: %s: %s\n", dir.c_str(), e.what());
      rc = 1;
    }
    std::fflush(out);
  }
  return rc;
}

}  // namespace luatune
