// W&B run settings after resolution: each WandbOptions field is the recipe's value, else the
// environment variable the official client reads (docs/wandb.md, "Settings"), else the default.
// Also the API key lookup in ~/.netrc and the run id rules. Internal to host/metrics/wandb*.cpp
// and tests.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "host/metrics/wandb.h"

namespace luatune {

enum class WandbMode { online, offline, disabled };

struct WandbSettings {
  WandbMode mode = WandbMode::online;
  std::string project, entity, name, group, job_type, notes;
  std::vector<std::string> tags;
  std::string run_id;
  std::string base_url;  // no trailing '/', no user:password@ (wandb_url_redacted)
  std::string dir;       // spool root; the run's files are in run_dir()
  std::string api_key;   // "" when none was found (the run then logs offline)
  std::string config_json;
  bool resume = false;
  double transmit_interval = 5, heartbeat_interval = 30;  // seconds
  double retry_wait_min = 2, retry_wait_max = 60, http_timeout = 30, finish_timeout = 60;
  std::FILE* notices = stderr;
  // The base URL as given carried a user:password@ (dropped from base_url; the sink says so once).
  bool base_url_had_credentials = false;

  std::string run_dir() const { return dir + "/run-" + run_id; }
};

// Resolves every field: options, environment, defaults; the run id (resume: the spool's latest
// run) and the key (WANDB_API_KEY, then netrc). Fails on a malformed setting, e.g.
// `wandb: WANDB_MODE must be online, offline or disabled, got 'x'`.
WandbSettings wandb_resolve(const WandbOptions& options);

// The pacing and retry fields alone (the `wandb-sync` verb has no other settings to resolve).
void wandb_resolve_pacing(const WandbOptions& options, WandbSettings* s);

// The mode alone (options, then WANDB_MODE, then online); fails like wandb_resolve on a bad value.
WandbMode wandb_resolve_mode(const std::string& option);

// The password of `machine HOST` in netrc text, trying "host:port" first, then "host", then the
// `default` entry; "" when none matches. Follows the netrc(5) tokens (machine, default, login,
// password, account, macdef) with "quoted" tokens and # comments, as Python's netrc does.
// Our own rather than libcurl's CURLOPT_NETRC: why, with sources, in docs/wandb.md ("Why luatune
// reads netrc itself").
std::string wandb_netrc_password(const std::string& netrc_text, const std::string& base_url);
// The key from $NETRC, else ~/.netrc, for base_url; "" when there is no file or no entry.
std::string wandb_netrc_key(const std::string& base_url);

// "https://u@api.wandb.ai:443/x" -> "api.wandb.ai" (with_port: "api.wandb.ai:443").
std::string wandb_url_host(const std::string& url, bool with_port);
// The URL without its userinfo: "http://u:pw@h:1/x" -> "http://h:1/x" (a URL without a scheme
// too: "u:pw@h" -> "h"). Every base URL is used, printed and spooled only in this form: W&B's own
// client ignores userinfo when it has a key (its Authorization header wins), and so do we.
std::string wandb_url_redacted(const std::string& url);
bool wandb_url_has_credentials(const std::string& url);  // an '@' in the authority
// localhost, 127.0.0.0/8, ::1 (and ::ffff:127.x.y.z): a host whose traffic stays on this machine.
// Takes a host as wandb_url_host gives it ("[::1]" in brackets, no port).
bool wandb_host_is_loopback(const std::string& host);
// The one-line warning for a plain http:// base URL to a host that is not loopback (the key and
// the run's data would cross the network unencrypted); "" for https:// or a loopback host.
std::string wandb_insecure_warning(const std::string& base_url);
// The notice for a base URL given with user:password@ (which is ignored).
std::string wandb_credentials_notice();
// Where people look at the run: https://wandb.ai for api.wandb.ai, else the base URL itself.
std::string wandb_app_url(const std::string& base_url);

// 8 random characters from [a-z0-9], like the official client's generate_id.
std::string wandb_new_run_id();
// The id of the newest run-ID directory under dir (by its files' modification time); "" if none.
std::string wandb_latest_run_id(const std::string& dir);

}  // namespace luatune
