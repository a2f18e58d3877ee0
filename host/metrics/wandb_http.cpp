// W&B's transport (see wandb_http.h): libcurl POSTs with basic auth, the retry policy and
// backoff, Retry-After, and the reasons printed when a request fails.
#include "host/metrics/wandb_http.h"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/core/version.h"
#include "host/metrics/wandb_settings.h"

namespace luatune {

namespace {

// curl_global_init is not thread-safe; every handle we make comes after this one call.
void curl_ready() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

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

// ============================================================================================
// Requests

WandbHttp::WandbHttp(std::string base_url, const std::string& api_key, double timeout_s)
    : base_url_(std::move(base_url)), timeout_s_(timeout_s) {
  curl_ready();
  curl_ = curl_easy_init();
  LT_CHECK(curl_, "wandb: libcurl could not start (curl_easy_init failed)");
  CURL* c = static_cast<CURL*>(curl_);
  // W&B's own client authenticates as user "api" with the key as password; libcurl builds the
  // header (and copies both strings). Separate fields, so a ':' in a key needs no care.
  curl_easy_setopt(c, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
  curl_easy_setopt(c, CURLOPT_USERNAME, "api");
  curl_easy_setopt(c, CURLOPT_PASSWORD, api_key.c_str());
  curl_slist* h = nullptr;
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
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, nullptr);  // errbuf ends with this call
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

std::string wandb_url_escape(const std::string& segment) {
  // curl_easy_escape wants a handle (a null one is allowed only from libcurl 7.82 on).
  curl_ready();
  CURL* c = curl_easy_init();
  LT_CHECK(c, "wandb: libcurl could not start (curl_easy_init failed)");
  char* escaped = curl_easy_escape(c, segment.data(), static_cast<int>(segment.size()));
  curl_easy_cleanup(c);
  LT_CHECK(escaped, "wandb: libcurl could not escape a URL segment (out of memory)");
  std::string out = escaped;
  curl_free(escaped);
  return out;
}

// ============================================================================================
// Retries

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

// ============================================================================================
// Reasons

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
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("error") && j["error"].is_string()) why = j["error"].get<std::string>();
    if (j.contains("errors") && j["errors"].is_array() && !j["errors"].empty() && j["errors"][0].is_object())
      why = j["errors"][0].value("message", "");
  }
  if (why.size() > 200) why = why.substr(0, 200) + "...";
  return head + "the server refused the request" + (why.empty() ? "" : " (" + why + ")");
}

}  // namespace luatune
