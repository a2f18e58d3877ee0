// W&B's wire (see wandb_wire.h): extended JSON, libcurl POSTs, the retry policy and backoff,
// UpsertBucket and file_stream bodies. Follows ../shared/reference/formats.md section 1.
#include "host/metrics/wandb_wire.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/core/version.h"
#include "host/metrics/wandb_settings.h"

namespace luatune {

using ojson = nlohmann::ordered_json;

// ============================================================================================
// Extended JSON

namespace {

std::string json_string(const std::string& s) {
  // Invalid UTF-8 (a console line cut mid-character) becomes U+FFFD rather than failing the run.
  return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

void dump_to(const ojson& j, std::string& out) {
  if (j.is_number_float()) {
    double v = j.get<double>();
    if (std::isnan(v))
      out += "NaN";
    else if (std::isinf(v))
      out += v > 0 ? "Infinity" : "-Infinity";
    else
      out += j.dump();
  } else if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ',';
      first = false;
      out += json_string(it.key());
      out += ':';
      dump_to(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); i++) {
      if (i) out += ',';
      dump_to(j[i], out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}

// Stand-ins for the three tokens while nlohmann parses (it knows no NaN); a string that starts
// with a NUL never comes from our own writers.
const char* const kSentinels[3][2] = {
    {"-Infinity", "\\u0000lt:-inf"}, {"Infinity", "\\u0000lt:inf"}, {"NaN", "\\u0000lt:nan"}};

void restore_tokens(ojson& j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s.size() > 4 && s[0] == '\0' && s.compare(1, 3, "lt:") == 0) {
      std::string t = s.substr(4);
      j = t == "nan" ? std::nan("") : t == "inf" ? HUGE_VAL : -HUGE_VAL;
    }
  } else if (j.is_structured()) {
    for (auto& v : j) restore_tokens(v);
  }
}

}  // namespace

std::string wandb_json_dump(const ojson& j) {
  std::string out;
  dump_to(j, out);
  return out;
}

ojson wandb_json_parse(const std::string& text) {
  std::string t;
  t.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    char c = text[i];
    if (in_string) {
      t += c;
      if (c == '\\' && i + 1 < text.size())
        t += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const auto& s : kSentinels) {
      size_t n = std::strlen(s[0]);
      if (text.compare(i, n, s[0]) == 0) {
        t += '"';
        t += s[1];
        t += '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) t += c;
  }
  ojson j = ojson::parse(t);
  restore_tokens(j);
  return j;
}

// ============================================================================================
// HTTP

std::string wandb_base64(const std::string& in) {
  static const char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += table[(v >> k) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += table[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

namespace {

struct Transfer {
  WandbReply* reply;
  std::string retry_after;
  const std::atomic<bool>* abort;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  static_cast<Transfer*>(user)->reply->body.append(data, size * n);
  return size * n;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  std::string line(data, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name == "retry-after") static_cast<Transfer*>(user)->retry_after = str_trim(line.substr(colon + 1));
  }
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Transfer*>(user)->abort->load() ? 1 : 0;  // non-zero ends the transfer
}

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

WandbHttp::WandbHttp(std::string base_url, const std::string& api_key, double timeout_s)
    : base_url_(std::move(base_url)), timeout_s_(timeout_s) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  LT_CHECK(curl_, "wandb: libcurl could not start (curl_easy_init failed)");
  std::string auth = "Authorization: Basic " + wandb_base64("api:" + api_key);
  curl_slist* h = nullptr;
  h = curl_slist_append(h, auth.c_str());
  h = curl_slist_append(h, "Content-Type: application/json");
  h = curl_slist_append(h, "Expect:");  // no 100-continue round trip before large bodies
  headers_ = h;
}

WandbHttp::~WandbHttp() {
  curl_slist_free_all(static_cast<curl_slist*>(headers_));
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string WandbHttp::url(const std::string& path) const {
  return wandb_url_redacted(base_url_) + path;
}

WandbReply WandbHttp::post(const std::string& path, const std::string& body) {
  WandbReply reply;
  if (abort_) {
    reply.error = "aborted";
    return reply;
  }
  CURL* c = static_cast<CURL*>(curl_);
  Transfer t{&reply, "", &abort_};
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::string full = base_url_ + path;
  long timeout_ms = static_cast<long>(timeout_s_ * 1000);
  curl_easy_setopt(c, CURLOPT_URL, full.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers_));
  std::string agent = "luatune/" + version_luatune();
  curl_easy_setopt(c, CURLOPT_USERAGENT, agent.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, std::min(10000L, timeout_ms));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);        // we run on a worker thread; no SIGALRM for DNS
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);  // a redirect would carry the key elsewhere
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    reply.status = 0;
    reply.error = abort_ ? "aborted" : (errbuf[0] ? errbuf : curl_easy_strerror(rc));
    reply.body.clear();
    return reply;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.status);
  if (!t.retry_after.empty()) reply.retry_after = wandb_retry_after(t.retry_after, unix_now());
  return reply;
}

WandbVerdict wandb_verdict(long status, bool upsert) {
  if (status >= 200 && status < 300) return WandbVerdict::ok;
  switch (status) {
    case 409:
      return upsert ? WandbVerdict::retry : WandbVerdict::final;
    case 400:
    case 401:
    case 403:
    case 404:
    case 410:
    case 413:
    case 422:
    case 501:
      return WandbVerdict::final;
    default:
      return WandbVerdict::retry;  // 429, 5xx, 0 (no answer), >= 600
  }
}

double wandb_backoff(int attempt, double min_s, double max_s, double jitter01) {
  double wait = min_s * std::ldexp(1.0, std::min(std::max(attempt, 0), 32)) * (1 + 0.25 * jitter01);
  return std::min(max_s, wait);
}

double wandb_retry_after(const std::string& value, double now_unix) {
  double seconds;
  if (str_to_number(value, &seconds)) return seconds >= 0 ? seconds : -1;
  time_t t = curl_getdate(value.c_str(), nullptr);
  if (t == -1) return -1;
  return std::max(0.0, static_cast<double>(t) - now_unix);
}

std::string wandb_status_text(long status) {
  static const std::pair<long, const char*> texts[] = {{400, "Bad Request"},
                                                       {401, "Unauthorized"},
                                                       {403, "Forbidden"},
                                                       {404, "Not Found"},
                                                       {409, "Conflict"},
                                                       {410, "Gone"},
                                                       {413, "Payload Too Large"},
                                                       {422, "Unprocessable Entity"},
                                                       {429, "Too Many Requests"},
                                                       {500, "Internal Server Error"},
                                                       {501, "Not Implemented"},
                                                       {502, "Bad Gateway"},
                                                       {503, "Service Unavailable"},
                                                       {504, "Gateway Timeout"}};
  for (const auto& [code, text] : texts)
    if (code == status) return text;
  return "";
}

std::string wandb_reply_reason(const WandbReply& r) {
  if (r.status == 0) return r.error.empty() ? "no answer" : r.error;
  std::string text = wandb_status_text(r.status);
  return "HTTP " + std::to_string(r.status) + (text.empty() ? "" : " " + text);
}

std::string wandb_refusal(const WandbReply& r, const std::string& url) {
  std::string head = std::to_string(r.status);
  std::string text = wandb_status_text(r.status);
  if (!text.empty()) head += " " + text;
  head += " from " + url + ": ";
  switch (r.status) {
    case 401:
      return head + "the API key was refused (check WANDB_API_KEY or ~/.netrc)";
    case 403:
      return head + "the API key may not write there (check WANDB_ENTITY and WANDB_PROJECT)";
    case 404:
      return head +
             "no such entity, project or endpoint (check WANDB_ENTITY, WANDB_PROJECT and WANDB_BASE_URL)";
    default:
      break;
  }
  // The server's reason, when it gave one as {"error": "..."} or GraphQL {"errors": [{"message"}]}.
  std::string why;
  ojson j = ojson::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("error") && j["error"].is_string()) why = j["error"].get<std::string>();
    if (j.contains("errors") && j["errors"].is_array() && !j["errors"].empty() && j["errors"][0].is_object())
      why = j["errors"][0].value("message", "");
  }
  if (why.size() > 200) why = why.substr(0, 200) + "...";
  return head + "the server refused the request" + (why.empty() ? "" : " (" + why + ")");
}

// ============================================================================================
// UpsertBucket

namespace {

// formats.md 1.3, verbatim: the server matches on the operation, so the text is the client's own.
const char* const kUpsertBucket = R"(mutation UpsertBucket(
    $id: String, $name: String, $project: String, $entity: String, $groupName: String,
    $description: String, $displayName: String, $notes: String, $commit: String,
    $config: JSONString, $host: String, $debug: Boolean, $program: String, $repo: String,
    $jobType: String, $state: String, $sweep: String, $tags: [String!], $summaryMetrics: JSONString,
) {
    upsertBucket(input: {
        id: $id, name: $name, groupName: $groupName, modelName: $project, entityName: $entity,
        description: $description, displayName: $displayName, notes: $notes, config: $config,
        commit: $commit, host: $host, debug: $debug, jobProgram: $program, jobRepo: $repo,
        jobType: $jobType, state: $state, sweep: $sweep, tags: $tags, summaryMetrics: $summaryMetrics,
    }) {
        bucket {
            id name displayName description config sweepName
            project { id name entity { id name } }
            historyLineCount
        }
        inserted
    }
})";

ojson or_null(const std::string& s) {
  return s.empty() ? ojson(nullptr) : ojson(s);
}

}  // namespace

std::string wandb_upsert_body(const WandbRunInfo& run) {
  ojson config = ojson::object();
  ojson resolved = wandb_json_parse(run.config_json.empty() ? "{}" : run.config_json);
  if (resolved.is_object())
    for (auto it = resolved.begin(); it != resolved.end(); ++it) config[it.key()] = {{"value", it.value()}};
  config["_wandb"] = {{"value", {{"cli_version", "luatune " + version_luatune()}}}};

  ojson vars = ojson::object();
  vars["id"] = or_null(run.storage_id);
  vars["name"] = run.run_id;
  vars["project"] = or_null(run.project);
  vars["entity"] = or_null(run.entity);
  vars["groupName"] = or_null(run.group);
  vars["displayName"] = or_null(run.name);
  vars["notes"] = or_null(run.notes);
  vars["jobType"] = or_null(run.job_type);
  vars["tags"] = run.tags.empty() ? ojson(nullptr) : ojson(run.tags);
  vars["config"] = wandb_json_dump(config);
  vars["host"] = or_null(run.host);

  ojson body = ojson::object();
  body["query"] = kUpsertBucket;
  body["variables"] = vars;
  body["operationName"] = "UpsertBucket";
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool wandb_upsert_parse(const std::string& body, WandbBucket* out, std::string* error) {
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "the reply is not JSON";
    return false;
  }
  const ojson* bucket = nullptr;
  auto data = j.find("data");
  if (data != j.end() && data->is_object()) {
    auto ub = data->find("upsertBucket");
    if (ub != data->end() && ub->is_object()) {
      auto b = ub->find("bucket");
      if (b != ub->end() && b->is_object()) bucket = &*b;
    }
  }
  if (!bucket) {
    auto errors = j.find("errors");
    if (errors != j.end() && errors->is_array() && !errors->empty() && (*errors)[0].is_object())
      *error = (*errors)[0].value("message", std::string("unknown GraphQL error"));
    else
      *error = "the reply has no data.upsertBucket.bucket";
    return false;
  }
  auto str = [](const ojson& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  out->id = str(*bucket, "id");
  out->name = str(*bucket, "name");
  auto project = bucket->find("project");
  if (project != bucket->end() && project->is_object()) {
    out->project = str(*project, "name");
    auto entity = project->find("entity");
    if (entity != project->end() && entity->is_object()) out->entity = str(*entity, "name");
  }
  auto count = bucket->find("historyLineCount");
  out->history_line_count = count != bucket->end() && count->is_number() ? count->get<int64_t>() : 0;
  if (out->entity.empty() || out->project.empty()) {
    *error = "the reply's bucket has no project.name or project.entity.name";
    return false;
  }
  return true;
}

// ============================================================================================
// file_stream

namespace {

std::string url_escape(const std::string& s) {
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Appends `"name":{"offset":N,"content":[...]}` with lines [0, count) of `lines`.
template <class Lines>
void append_file(std::string& body, const char* name, int64_t offset, const Lines& lines, size_t count) {
  if (body.back() != '{') body += ',';
  body += '"';
  body += name;
  body += "\":{\"offset\":" + std::to_string(offset) + ",\"content\":[";
  for (size_t i = 0; i < count; i++) {
    if (i) body += ',';
    body += json_string(lines[i]);
  }
  body += "]}";
}

// How many lines from the front fit in `budget` bytes (escaping adds a little; counted roughly
// with 10% and the quotes), taking at least one when `force`.
template <class Lines>
size_t lines_that_fit(const Lines& lines, size_t* budget, bool force) {
  size_t n = 0;
  while (n < lines.size()) {
    size_t cost = lines[n].size() + lines[n].size() / 10 + 3;
    if (cost > *budget && !(force && n == 0)) break;
    *budget = cost > *budget ? 0 : *budget - cost;
    n++;
  }
  return n;
}

}  // namespace

std::string wandb_file_stream_path(const std::string& entity, const std::string& project,
                                   const std::string& run_id) {
  return "/files/" + url_escape(entity) + "/" + url_escape(project) + "/" + url_escape(run_id) +
         "/file_stream";
}

WandbChunk wandb_chunk(const WandbQueue& q, size_t max_bytes) {
  WandbChunk c;
  size_t budget = max_bytes > 4096 ? max_bytes - 4096 : max_bytes;  // room for the envelope
  if (q.summary_dirty) {
    c.summary = true;
    budget -= std::min(budget, q.summary.size() + q.summary.size() / 10 + 3);
  }
  c.history = lines_that_fit(q.history, &budget, !c.summary);
  c.output = lines_that_fit(q.output, &budget, !c.summary && c.history == 0);
  c.complete = q.complete && c.history == q.history.size() && c.output == q.output.size();

  std::string body = "{\"files\":{";
  if (c.history) append_file(body, "wandb-history.jsonl", q.history_offset, q.history, c.history);
  if (c.summary) append_file(body, "wandb-summary.json", 0, std::vector<std::string>{q.summary}, 1);
  if (c.output) append_file(body, "output.log", q.output_offset, q.output, c.output);
  body += '}';
  // A run stopped by SIGINT/SIGTERM (it saved a checkpoint to resume from) says it was preempted.
  if (c.complete && q.exit_code == kExitInterrupted) body += ",\"preempting\":true";
  if (c.complete) body += ",\"complete\":true,\"exitcode\":" + std::to_string(q.exit_code);
  body += '}';
  // Nothing at all to say: the heartbeat, an empty object (the Go client's).
  c.body = (c.history || c.summary || c.output || c.complete) ? body : "{}";
  return c;
}

void wandb_queue_ack(WandbQueue& q, const WandbChunk& c) {
  q.history.erase(q.history.begin(), q.history.begin() + static_cast<std::ptrdiff_t>(c.history));
  q.history_offset += static_cast<int64_t>(c.history);
  q.output.erase(q.output.begin(), q.output.begin() + static_cast<std::ptrdiff_t>(c.output));
  q.output_offset += static_cast<int64_t>(c.output);
  if (c.summary) q.summary_dirty = false;
  if (c.complete) q.complete = false;
}

bool wandb_reply_stopped(const std::string& body) {
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto it = j.find("stopped");
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace luatune
