// W&B settings resolution (see wandb_settings.h): recipe option > environment variable > default,
// the netrc lookup for the API key, and run ids. Nothing here touches the network.
#include "host/metrics/wandb_settings.h"

#include <arpa/inet.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"

namespace luatune {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string pick(const std::string& option, const char* var, const std::string& fallback = "") {
  if (!option.empty()) return option;
  std::string v = env(var);
  return v.empty() ? fallback : v;
}

// A pacing setting: the option when set (>= 0), else the variable, else the default.
double pick_seconds(double option, const char* var, double fallback) {
  if (option >= 0) return option;
  std::string v = env(var);
  if (v.empty()) return fallback;
  double x;
  LT_CHECK(str_to_number(v, &x) && x >= 0,
           "wandb: " << var << " must be a number of seconds (0 or more), got '" << v << "'");
  return x;
}

bool run_id_ok(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

}  // namespace

WandbMode wandb_resolve_mode(const std::string& option) {
  std::string m = pick(option, "WANDB_MODE", "online");
  if (m == "online") return WandbMode::online;
  if (m == "offline" || m == "dryrun") return WandbMode::offline;  // dryrun: the legacy spelling
  if (m == "disabled") return WandbMode::disabled;
  fail("wandb: WANDB_MODE must be online, offline or disabled, got '" + m + "'");
}

bool wandb_enabled(const WandbOptions& o) {
  // No project: W&B is not wanted, so a stray WANDB_MODE in the environment is not an error.
  if (pick(o.project, "WANDB_PROJECT").empty()) return false;
  return wandb_resolve_mode(o.mode) != WandbMode::disabled;
}

void wandb_resolve_pacing(const WandbOptions& o, WandbSettings* s) {
  s->transmit_interval = pick_seconds(o.transmit_interval, "WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL", 5);
  s->heartbeat_interval = pick_seconds(o.heartbeat_interval, "WANDB_HEARTBEAT_SECONDS", 30);
  s->retry_wait_min = pick_seconds(o.retry_wait_min, "WANDB_X_FILE_STREAM_RETRY_WAIT_MIN_SECONDS", 2);
  s->retry_wait_max = pick_seconds(o.retry_wait_max, "WANDB_X_FILE_STREAM_RETRY_WAIT_MAX_SECONDS", 60);
  s->http_timeout = pick_seconds(o.http_timeout, "WANDB_HTTP_TIMEOUT", 30);
  s->finish_timeout = pick_seconds(o.finish_timeout, "WANDB_X_FINISH_TIMEOUT", 60);
  if (s->retry_wait_max < s->retry_wait_min) s->retry_wait_max = s->retry_wait_min;
  if (s->http_timeout <= 0) s->http_timeout = 30;  // libcurl reads 0 as "no limit"
}

WandbSettings wandb_resolve(const WandbOptions& o) {
  WandbSettings s;
  s.mode = wandb_resolve_mode(o.mode);
  s.project = pick(o.project, "WANDB_PROJECT");
  LT_CHECK(!s.project.empty(),
           "wandb: no project named (metrics.open{wandb = \"project\"} or WANDB_PROJECT)");
  s.entity = pick(o.entity, "WANDB_ENTITY");
  s.name = pick(o.name, "WANDB_NAME");
  s.group = pick(o.group, "WANDB_RUN_GROUP");
  s.job_type = pick(o.job_type, "WANDB_JOB_TYPE");
  s.notes = pick(o.notes, "WANDB_NOTES");
  s.tags = o.tags;
  if (s.tags.empty())
    for (const auto& t : str_split(env("WANDB_TAGS"), ','))
      if (!str_trim(t).empty()) s.tags.push_back(str_trim(t));
  // user:password@ goes no further than here: not to libcurl, the spool, a notice or an error.
  std::string given = pick(o.base_url, "WANDB_BASE_URL", "https://api.wandb.ai");
  s.base_url_had_credentials = wandb_url_has_credentials(given);
  s.base_url = wandb_url_redacted(given);
  while (!s.base_url.empty() && s.base_url.back() == '/') s.base_url.pop_back();
  LT_CHECK(str_starts_with(s.base_url, "http://") || str_starts_with(s.base_url, "https://"),
           "wandb: WANDB_BASE_URL must start with http:// or https://, got '" << s.base_url << "'");
  s.dir = pick(o.dir, "WANDB_DIR", o.default_dir.empty() ? "wandb" : o.default_dir);
  s.config_json = o.config_json.empty() ? "{}" : o.config_json;
  s.resume = o.resume;

  s.run_id = pick(o.run_id, "WANDB_RUN_ID");
  if (s.run_id.empty() && s.resume) s.run_id = wandb_latest_run_id(s.dir);
  if (s.run_id.empty()) s.run_id = wandb_new_run_id();
  LT_CHECK(run_id_ok(s.run_id),
           "wandb: a run id is letters, digits, '-' and '_' (at most 128), got '" << s.run_id << "'");

  wandb_resolve_pacing(o, &s);
  s.notices = o.notices ? o.notices : stderr;

  // The key is looked up only when it could be used, so an offline run never reads ~/.netrc.
  if (s.mode == WandbMode::online) {
    s.api_key = pick(o.api_key, "WANDB_API_KEY");
    if (s.api_key.empty()) s.api_key = wandb_netrc_key(s.base_url);
  }
  return s;
}

// ============================================================================================
// netrc

namespace {

// netrc tokens: blank-separated words, "double quoted" words with backslash escapes, and
// comments from a '#' at the start of a word to the end of the line. A `macdef` body (up to an
// empty line) is skipped.
std::vector<std::string> netrc_tokens(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0, n = text.size();
  while (i < n) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      i++;
    } else if (c == '#') {
      while (i < n && text[i] != '\n') i++;
    } else {
      std::string tok;
      if (c == '"') {
        for (i++; i < n && text[i] != '"'; i++) {
          if (text[i] == '\\' && i + 1 < n) i++;
          tok += text[i];
        }
        i++;  // the closing quote
      } else {
        for (; i < n && !std::isspace(static_cast<unsigned char>(text[i])); i++) {
          if (text[i] == '\\' && i + 1 < n) i++;
          tok += text[i];
        }
      }
      out.push_back(tok);
      if (tok == "macdef") {
        size_t end = text.find("\n\n", i);
        i = end == std::string::npos ? n : end + 2;  // the macro's name and body
      }
    }
  }
  return out;
}

}  // namespace

std::string wandb_netrc_password(const std::string& text, const std::string& base_url) {
  std::vector<std::string> toks = netrc_tokens(text);
  // machine -> password, in file order; "" is the default entry.
  std::vector<std::pair<std::string, std::string>> entries;
  bool in_entry = false;
  for (size_t i = 0; i < toks.size(); i++) {
    const std::string& t = toks[i];
    if (t == "machine" && i + 1 < toks.size()) {
      entries.emplace_back(toks[++i], "");
      in_entry = true;
    } else if (t == "default") {
      entries.emplace_back("", "");
      in_entry = true;
    } else if ((t == "login" || t == "account") && i + 1 < toks.size()) {
      i++;
    } else if (t == "password" && i + 1 < toks.size()) {
      if (in_entry) entries.back().second = toks[i + 1];
      i++;
    }
  }
  for (const std::string& want : {wandb_url_host(base_url, true), wandb_url_host(base_url, false)})
    for (const auto& e : entries)
      if (!e.first.empty() && e.first == want) return e.second;
  for (const auto& e : entries)
    if (e.first.empty()) return e.second;
  return "";
}

std::string wandb_netrc_key(const std::string& base_url) {
  std::string path = env("NETRC");
  if (path.empty()) {
    std::string home = env("HOME");
    if (home.empty()) return "";
    path = home + "/.netrc";
  }
  if (!file_exists(path)) return "";
  try {
    return wandb_netrc_password(file_read(path), base_url);
  } catch (const Error&) {
    return "";  // an unreadable netrc is the same as none: the run logs offline and says why
  }
}

// ============================================================================================
// URLs and run ids

namespace {

// [start, end) of the authority (userinfo@host:port), after "scheme://" or from the start.
void url_authority(const std::string& url, size_t* start, size_t* end) {
  size_t s = url.find("://");
  *start = s == std::string::npos ? 0 : s + 3;
  *end = url.find_first_of("/?#", *start);
  if (*end == std::string::npos) *end = url.size();
}

}  // namespace

std::string wandb_url_host(const std::string& url, bool with_port) {
  size_t start, end;
  url_authority(url, &start, &end);
  std::string authority = url.substr(start, end - start);
  size_t at = authority.rfind('@');
  if (at != std::string::npos) authority = authority.substr(at + 1);
  if (with_port) return authority;
  if (!authority.empty() && authority[0] == '[') return authority.substr(0, authority.find(']') + 1);  // IPv6
  return authority.substr(0, authority.find(':'));
}

std::string wandb_url_redacted(const std::string& url) {
  size_t start, end;
  url_authority(url, &start, &end);
  size_t at = url.rfind('@', end);
  if (at == std::string::npos || at < start || at >= end) return url;
  return url.substr(0, start) + url.substr(at + 1);
}

bool wandb_url_has_credentials(const std::string& url) {
  return wandb_url_redacted(url) != url;
}

bool wandb_host_is_loopback(const std::string& host) {
  std::string h;
  for (char c : host) h += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is the same name
  if (h == "localhost") return true;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  return false;  // a name other than localhost may resolve anywhere
}

std::string wandb_insecure_warning(const std::string& base_url) {
  if (!str_starts_with(base_url, "http://") || wandb_host_is_loopback(wandb_url_host(base_url, false)))
    return "";
  return "wandb: warning: " + wandb_url_redacted(base_url) +
         " is plain http to a non-loopback host: the API key and the run's data cross the network "
         "unencrypted (use https://)";
}

std::string wandb_credentials_notice() {
  return "wandb: the user:password@ in WANDB_BASE_URL is ignored (the API key authenticates, as in "
         "W&B's own client) and is written nowhere";
}

std::string wandb_app_url(const std::string& base_url) {
  if (wandb_url_host(base_url, false) == "api.wandb.ai") return "https://wandb.ai";
  return wandb_url_redacted(base_url);
}

std::string wandb_new_run_id() {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<int> pick_char(0, 35);
  std::string id;
  for (int i = 0; i < 8; i++) id += alphabet[pick_char(gen)];
  return id;
}

std::string wandb_latest_run_id(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string best;
  fs::file_time_type best_time;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (!entry.is_directory(ec) || !str_starts_with(name, "run-") ||
        !file_exists((entry.path() / "run.json").string()))
      continue;
    fs::file_time_type newest = fs::last_write_time(entry.path(), ec);
    for (const auto& f : fs::directory_iterator(entry.path(), ec)) {
      auto t = fs::last_write_time(f.path(), ec);
      if (!ec && t > newest) newest = t;
    }
    if (best.empty() || newest > best_time) {
      best = name.substr(4);
      best_time = newest;
    }
  }
  return best;
}

}  // namespace luatune
