// W&B's transport: one libcurl POST at a time with the key as HTTP basic auth (user "api"),
// which statuses are final and how long to wait before the next attempt, and the one-line reasons
// the sink prints. The rules are the official client's: docs/wandb.md, "Protocol sources".
// Internal to host/metrics/.
#pragma once

#include <atomic>
#include <string>

namespace luatune {

struct WandbReply {
  long status = 0;  // 0: no HTTP answer (connection refused, timeout); error says why
  std::string body;
  std::string error;        // curl's reason when status is 0
  double retry_after = -1;  // seconds the server asked us to wait (Retry-After), -1 when absent
};

// One libcurl easy handle (keep-alive across requests), used by one thread at a time. libcurl
// sends the key as basic auth, Authorization: Basic base64("api:KEY"), on every request; the key
// goes nowhere else (redirects are not followed, so it never reaches another host).
class WandbHttp {
 public:
  WandbHttp(std::string base_url, const std::string& api_key, double timeout_s);
  ~WandbHttp();
  WandbHttp(const WandbHttp&) = delete;
  WandbHttp& operator=(const WandbHttp&) = delete;

  WandbReply post(const std::string& path, const std::string& json_body);
  // From any thread: the request in flight (and any later one) ends at once with status 0.
  void abort() { abort_ = true; }
  // base URL + path without credentials, for messages.
  std::string url(const std::string& path) const;

 private:
  std::string base_url_;
  double timeout_s_;
  void* curl_ = nullptr;     // CURL*
  void* headers_ = nullptr;  // curl_slist*
  std::atomic<bool> abort_{false};
};

// One URL path segment, percent-encoded by libcurl (everything but A-Z a-z 0-9 - . _ ~).
std::string wandb_url_escape(const std::string& segment);

enum class WandbVerdict { ok, retry, final };
// The official client's policy: 2xx ok; 400, 401, 403, 404, 409, 410, 413, 422, 501 final
// (UpsertBucket retries 409); anything else, status 0 included, is retried.
WandbVerdict wandb_verdict(long status, bool upsert);
// min(max, min * 2^attempt * (1 + 0.25 * jitter01)), attempt counted from 0.
double wandb_backoff(int attempt, double min_s, double max_s, double jitter01);
// A Retry-After value: seconds ("2", "1.5") or an HTTP date; -1 when it is neither.
double wandb_retry_after(const std::string& value, double now_unix);
// "HTTP 503 Service Unavailable" or curl's reason ("Couldn't connect to server").
std::string wandb_reply_reason(const WandbReply& r);
std::string wandb_status_text(long status);  // 401 -> "Unauthorized"
// Why a final status ended the upload, for one notice: "401 Unauthorized from URL: the API key
// was refused (check WANDB_API_KEY or ~/.netrc)"; the server's own message when it sent one.
std::string wandb_refusal(const WandbReply& r, const std::string& url);

}  // namespace luatune
