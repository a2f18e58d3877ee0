// The W&B sink against a loopback server speaking the protocol's server side (fake_wandb.h):
// settings resolution and netrc, the wire helpers (extended JSON, retry policy, Retry-After,
// request cutting), then whole runs: a normal run, failures and outages, 401, stop from the UI,
// resume, offline + wandb-sync, a killed run, and the API key in no file and no notice; a
// user:password@ in the base URL in no file either, spool files 0600, wandb-sync refusing a spool
// that names another host, and the plain-http warning.
// Intervals are a few tens of milliseconds so the whole file runs in a few seconds.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/metrics/metrics.h"
#include "host/metrics/wandb.h"
#include "host/metrics/wandb_settings.h"
#include "host/metrics/wandb_spool.h"
#include "host/metrics/wandb_wire.h"
#include "tests/cpp/fake_wandb.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// 40 characters, like a real key, and distinctive enough to grep for.
const std::string kKey = "luatuneTESTkey0123456789abcdefghijklmnop";
// The header W&B's client sends for it, "Basic " + base64("api:" + kKey), computed with
// coreutils' base64 rather than with anything under test.
const std::string kAuthorization = "Basic YXBpOmx1YXR1bmVURVNUa2V5MDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1ub3A=";

// Every variable the resolution reads, cleared for a test and restored after it.
const char* const kVars[] = {"WANDB_API_KEY",
                             "WANDB_BASE_URL",
                             "WANDB_PROJECT",
                             "WANDB_ENTITY",
                             "WANDB_MODE",
                             "WANDB_RUN_ID",
                             "WANDB_NAME",
                             "WANDB_NOTES",
                             "WANDB_TAGS",
                             "WANDB_RUN_GROUP",
                             "WANDB_JOB_TYPE",
                             "WANDB_DIR",
                             "WANDB_HTTP_TIMEOUT",
                             "WANDB_HEARTBEAT_SECONDS",
                             "WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL",
                             "WANDB_X_FILE_STREAM_RETRY_WAIT_MIN_SECONDS",
                             "WANDB_X_FILE_STREAM_RETRY_WAIT_MAX_SECONDS",
                             "WANDB_X_FINISH_TIMEOUT",
                             "NETRC"};

struct EnvScope {
  std::map<std::string, std::string> saved;
  explicit EnvScope(const std::map<std::string, std::string>& set = {}) {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved[v] = old;
      ::unsetenv(v);
    }
    ::setenv("NETRC", "/nonexistent/luatune-netrc", 1);  // never the developer's own ~/.netrc
    for (const auto& [k, v] : set) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvScope() {
    for (const char* v : kVars) ::unsetenv(v);
    for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
  }
};

MetricValues vals(std::vector<std::pair<std::string, double>> numbers) {
  MetricValues v;
  v.numbers = std::move(numbers);
  return v;
}

WandbOptions options(const FakeWandb& server, const TempDir& dir, std::FILE* notices, const std::string& id) {
  WandbOptions o;
  o.project = "proj";
  o.base_url = server.base_url();
  o.api_key = kKey;
  o.dir = dir.path;
  o.run_id = id;
  o.mode = "online";
  o.transmit_interval = 0.05;
  o.heartbeat_interval = 30;
  o.retry_wait_min = 0.05;
  o.retry_wait_max = 0.2;
  o.http_timeout = 2;
  o.finish_timeout = 5;
  o.notices = notices;
  return o;
}

bool eventually(const std::function<bool()>& done, double seconds = 5) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

std::vector<int64_t> steps_of(const std::vector<std::string>& rows) {
  std::vector<int64_t> steps;
  for (const auto& r : rows) steps.push_back(wandb_json_parse(r)["_step"].get<int64_t>());
  return steps;
}

// Every byte under a directory, to look for the key in it.
std::string all_files(const std::string& dir) {
  std::string text;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) text += file_read(e.path().string());
  return text;
}

// Each file in a run directory with its permission bits ("history.jsonl" -> 0600).
std::map<std::string, unsigned> file_modes(const std::string& dir) {
  std::map<std::string, unsigned> modes;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0) modes[e.path().filename().string()] = st.st_mode & 07777;
  }
  return modes;
}

// Sets the umask for a test, restoring it after.
struct UmaskScope {
  mode_t saved;
  explicit UmaskScope(mode_t m) : saved(::umask(m)) {}
  ~UmaskScope() { ::umask(saved); }
};

// Prints `line` the way a recipe's print does, to /dev/null: the console taps (the W&B sink's
// output.log) see it, the test's terminal does not.
void recipe_print(const std::string& line) {
  std::FILE* null = std::fopen("/dev/null", "w");
  metrics_console_println(line, null);
  std::fclose(null);
}

// The key may appear in an Authorization header and nowhere else in what the server received.
void expect_key_only_in_authorization(const FakeWandb& server) {
  for (const auto& r : server.requests()) {
    EXPECT_EQ(r.body.find(kKey), std::string::npos) << r.path;
    for (const auto& [k, v] : r.headers)
      if (k != "Authorization") {
        EXPECT_EQ(v.find(kKey), std::string::npos) << k;
      }
  }
}

// What every run against the loopback server starts from: the W&B variables cleared, the server
// knowing kKey, a spool directory and the sink's notices in memory.
class WandbRun : public ::testing::Test {
 protected:
  EnvScope env;
  FakeWandb server{kKey};
  TempDir dir;
  Capture notices;
  // options() for run `id` against this test's server, spool directory and notices.
  WandbOptions run_options(const std::string& id) { return options(server, dir, notices.f, id); }
};
class WandbSink : public WandbRun {};
class WandbSync : public WandbRun {};
class WandbSpoolFiles : public WandbRun {};  // (WandbSpool names luatune's spool class)

}  // namespace

// ============================================================================================
// Settings

TEST(WandbSettings, OptionBeatsEnvironmentBeatsDefault) {
  EnvScope env({{"WANDB_PROJECT", "envproj"},
                {"WANDB_ENTITY", "envent"},
                {"WANDB_TAGS", "a, b,,c"},
                {"WANDB_BASE_URL", "http://h:1/"},
                {"WANDB_MODE", "dryrun"},
                {"WANDB_RUN_ID", "abc-1"},
                {"WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL", "0.25"}});
  WandbOptions o;
  o.entity = "optent";
  EXPECT_TRUE(wandb_enabled(o));
  WandbSettings s = wandb_resolve(o);
  EXPECT_EQ(s.project, "envproj");
  EXPECT_EQ(s.entity, "optent");
  EXPECT_EQ(s.tags, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(s.base_url, "http://h:1");
  EXPECT_EQ(s.mode, WandbMode::offline);  // dryrun is the legacy spelling
  EXPECT_EQ(s.run_id, "abc-1");
  EXPECT_EQ(s.transmit_interval, 0.25);
  EXPECT_EQ(s.heartbeat_interval, 30);
  EXPECT_EQ(s.dir, "wandb");
  EXPECT_EQ(s.api_key, "");  // offline: no key looked up

  ::unsetenv("WANDB_RUN_ID");
  ::unsetenv("WANDB_BASE_URL");
  o.mode = "online";
  s = wandb_resolve(o);
  EXPECT_TRUE(std::regex_match(s.run_id, std::regex("[a-z0-9]{8}"))) << s.run_id;
  EXPECT_NE(wandb_resolve(o).run_id, s.run_id);
  EXPECT_EQ(s.base_url, "https://api.wandb.ai");
  EXPECT_EQ(s.mode, WandbMode::online);

  // The spool: dir, else WANDB_DIR, else the default metrics.open gives (beside the JSONL file).
  o.default_dir = "out/run/wandb";
  EXPECT_EQ(wandb_resolve(o).dir, "out/run/wandb");
  ::setenv("WANDB_DIR", "/spool", 1);
  EXPECT_EQ(wandb_resolve(o).dir, "/spool");
  o.dir = "mine";
  EXPECT_EQ(wandb_resolve(o).dir, "mine");
}

TEST(WandbSettings, BadValuesAreRefusedWithTheirName) {
  EnvScope env(std::map<std::string, std::string>{{"WANDB_MODE", "x"}});
  WandbOptions o;
  EXPECT_FALSE(wandb_enabled(o));  // no project: W&B is not wanted, so WANDB_MODE is not looked at
  o.project = "p";
  EXPECT_EQ(error_of([&] { wandb_enabled(o); }),
            "wandb: WANDB_MODE must be online, offline or disabled, got 'x'");
  o.mode = "shared";
  EXPECT_EQ(error_of([&] { wandb_resolve(o); }),
            "wandb: WANDB_MODE must be online, offline or disabled, got 'shared'");
  o.mode = "disabled";
  EXPECT_FALSE(wandb_enabled(o));
  EXPECT_EQ(wandb_sink_new(o), nullptr);
  o.mode = "offline";
  ::setenv("WANDB_HTTP_TIMEOUT", "soon", 1);
  EXPECT_EQ(error_of([&] { wandb_resolve(o); }),
            "wandb: WANDB_HTTP_TIMEOUT must be a number of seconds (0 or more), got 'soon'");
  ::unsetenv("WANDB_HTTP_TIMEOUT");
  o.run_id = "../x";
  EXPECT_EQ(error_of([&] { wandb_resolve(o); }),
            "wandb: a run id is letters, digits, '-' and '_' (at most 128), got '../x'");
  o.run_id = "";
  o.base_url = "api.wandb.ai";
  EXPECT_EQ(error_of([&] { wandb_resolve(o); }),
            "wandb: WANDB_BASE_URL must start with http:// or https://, got 'api.wandb.ai'");
}

TEST(WandbSettings, ResumeTakesTheSpoolsNewestRun) {
  EnvScope env;
  TempDir dir;
  for (const char* id : {"older", "newer"}) {
    fs::create_directories(dir.path + "/run-" + id);
    file_write_atomic(dir.path + "/run-" + id + "/run.json", "{}");
  }
  fs::last_write_time(dir.path + "/run-older/run.json",
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  fs::last_write_time(dir.path + "/run-older", fs::file_time_type::clock::now() - std::chrono::hours(1));
  EXPECT_EQ(wandb_latest_run_id(dir.path), "newer");
  WandbOptions o;
  o.project = "p";
  o.mode = "offline";
  o.dir = dir.path;
  o.resume = true;
  EXPECT_EQ(wandb_resolve(o).run_id, "newer");
  o.resume = false;
  EXPECT_NE(wandb_resolve(o).run_id, "newer");
}

TEST(WandbNetrc, FindsTheBaseUrlsHostThenTheDefault) {
  const std::string text =
      "# my hosts\n"
      "machine other.example password nope\n"
      "machine 127.0.0.1:8080 login api password \"with space\"\n"
      "machine api.wandb.ai\n"
      "  login user\n"
      "  password KEY1\n"
      "macdef init\n"
      "machine evil.example password frommacro\n"
      "\n"
      "default login x password DEF\n";
  EXPECT_EQ(wandb_netrc_password(text, "http://127.0.0.1:8080"), "with space");
  EXPECT_EQ(wandb_netrc_password(text, "https://api.wandb.ai"), "KEY1");
  EXPECT_EQ(wandb_netrc_password(text, "https://api.wandb.ai:443/"), "KEY1");  // host:port, then host
  EXPECT_EQ(wandb_netrc_password(text, "http://127.0.0.1:9"), "DEF");
  EXPECT_EQ(wandb_netrc_password(text, "http://evil.example"), "DEF");  // a macro body is not an entry
  EXPECT_EQ(wandb_netrc_password("machine a password b", "http://c"), "");
  EXPECT_EQ(wandb_netrc_password("", "http://c"), "");
  EXPECT_EQ(wandb_url_host("https://u:p@api.wandb.ai:443/x", false), "api.wandb.ai");
  EXPECT_EQ(wandb_url_host("https://u:p@api.wandb.ai:443/x", true), "api.wandb.ai:443");
  EXPECT_EQ(wandb_url_redacted("https://u:p@h.example/x"), "https://h.example/x");
  EXPECT_EQ(wandb_app_url("https://api.wandb.ai"), "https://wandb.ai");
  EXPECT_EQ(wandb_app_url("http://127.0.0.1:5"), "http://127.0.0.1:5");
}

TEST(WandbNetrc, KeyComesFromTheEnvironmentThenNetrc) {
  EnvScope env;
  TempDir dir;
  std::string netrc = dir.path + "/netrc";
  file_write_atomic(netrc, "machine 127.0.0.1 login api password " + kKey + "\n");
  ::setenv("NETRC", netrc.c_str(), 1);
  WandbOptions o;
  o.project = "p";
  o.base_url = "http://127.0.0.1:1234";
  EXPECT_EQ(wandb_resolve(o).api_key, kKey);
  ::setenv("WANDB_API_KEY", "fromenv", 1);
  EXPECT_EQ(wandb_resolve(o).api_key, "fromenv");
  o.api_key = "fromoption";
  EXPECT_EQ(wandb_resolve(o).api_key, "fromoption");
}

// ============================================================================================
// Credentials in the base URL, loopback, plain http (issue 18)

TEST(WandbUrl, UserinfoIsStrippedFromEveryForm) {
  EXPECT_EQ(wandb_url_redacted("http://user:pw@h.example:8080/x"), "http://h.example:8080/x");
  EXPECT_EQ(wandb_url_redacted("https://user:p@ss@h.example"), "https://h.example");  // '@' in the password
  EXPECT_EQ(wandb_url_redacted("https://token@h.example/"), "https://h.example/");
  EXPECT_EQ(wandb_url_redacted("http://u:pw@[::1]:8080/x"), "http://[::1]:8080/x");
  EXPECT_EQ(wandb_url_redacted("u:pw@h.example:1/x"), "h.example:1/x");             // no scheme
  EXPECT_EQ(wandb_url_redacted("https://h.example/a@b"), "https://h.example/a@b");  // a path is not userinfo
  EXPECT_EQ(wandb_url_redacted("https://h.example?q=a@b"), "https://h.example?q=a@b");
  EXPECT_EQ(wandb_url_redacted("https://api.wandb.ai"), "https://api.wandb.ai");
  EXPECT_EQ(wandb_url_redacted(""), "");
  EXPECT_TRUE(wandb_url_has_credentials("http://u:pw@h"));
  EXPECT_FALSE(wandb_url_has_credentials("http://h/a@b"));
}

TEST(WandbUrl, ResolveDropsUserinfoBeforeAnythingSeesIt) {
  EnvScope env({{"WANDB_PROJECT", "p"}, {"WANDB_BASE_URL", "http://user:s3cretPW@h.example:1/"}});
  WandbOptions o;
  o.mode = "offline";
  WandbSettings s = wandb_resolve(o);
  EXPECT_EQ(s.base_url, "http://h.example:1");
  EXPECT_TRUE(s.base_url_had_credentials);
  o.base_url = "https://h.example";
  EXPECT_FALSE(wandb_resolve(o).base_url_had_credentials);
  // Not even a malformed URL's error message carries the password.
  o.base_url = "ftp://user:s3cretPW@h.example";
  EXPECT_EQ(error_of([&] { wandb_resolve(o); }),
            "wandb: WANDB_BASE_URL must start with http:// or https://, got 'ftp://h.example'");
}

TEST(WandbUrl, LoopbackIsLocalhost127Slash8AndColonColon1) {
  for (const char* h : {"localhost", "LocalHost", "localhost.", "127.0.0.1", "127.1.2.3", "127.255.255.254",
                        "[::1]", "::1", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]"})
    EXPECT_TRUE(wandb_host_is_loopback(h)) << h;
  for (const char* h : {"", "example.com", "localhost.example.com", "mylocalhost", "127.0.0.1.example.com",
                        "128.0.0.1", "126.255.255.255", "10.0.0.1", "0.0.0.0", "127.0.0.256", "127.1",
                        "[::2]", "[::]", "[::ffff:10.0.0.1]"})
    EXPECT_FALSE(wandb_host_is_loopback(h)) << h;
  EXPECT_EQ(wandb_host_is_loopback(wandb_url_host("http://u:p@[::1]:8080/x", false)), true);
}

TEST(WandbUrl, PlainHttpToANonLoopbackHostIsWarnedAbout) {
  EXPECT_EQ(wandb_insecure_warning("http://u:s3cretPW@10.1.2.3:8080/x"),
            "wandb: warning: http://10.1.2.3:8080/x is plain http to a non-loopback host: the API key and "
            "the run's data cross the network unencrypted (use https://)");
  EXPECT_NE(wandb_insecure_warning("http://wandb.example.com"), "");
  for (const char* url : {"https://wandb.example.com", "https://api.wandb.ai", "http://localhost:8080",
                          "http://127.0.0.1:8080", "http://[::1]:8080/x"})
    EXPECT_EQ(wandb_insecure_warning(url), "") << url;
}

// ============================================================================================
// Wire

TEST(WandbWire, ExtendedJsonKeepsNanAndInfinity) {
  ojson row = ojson::object();
  row["a"] = std::nan("");
  row["b"] = HUGE_VAL;
  row["c"] = -HUGE_VAL;
  row["d"] = 1.5;
  row["s"] = "NaN and Infinity stay text";
  std::string text = wandb_json_dump(row);
  EXPECT_EQ(text, R"({"a":NaN,"b":Infinity,"c":-Infinity,"d":1.5,"s":"NaN and Infinity stay text"})");
  ojson back = wandb_json_parse(text);
  EXPECT_TRUE(std::isnan(back["a"].get<double>()));
  EXPECT_EQ(back["b"].get<double>(), HUGE_VAL);
  EXPECT_EQ(back["c"].get<double>(), -HUGE_VAL);
  EXPECT_EQ(back["s"], "NaN and Infinity stay text");
}

TEST(WandbWire, RetryPolicyBackoffAndRetryAfter) {
  for (long s : {200L, 204L}) EXPECT_EQ(wandb_verdict(s, false), WandbVerdict::ok);
  for (long s : {400L, 401L, 403L, 404L, 409L, 410L, 413L, 422L, 501L})
    EXPECT_EQ(wandb_verdict(s, false), WandbVerdict::final) << s;
  for (long s : {0L, 408L, 429L, 500L, 502L, 503L, 504L, 600L})
    EXPECT_EQ(wandb_verdict(s, false), WandbVerdict::retry) << s;
  EXPECT_EQ(wandb_verdict(409, true), WandbVerdict::retry);  // UpsertBucket retries a conflict
  EXPECT_EQ(wandb_verdict(401, true), WandbVerdict::final);
  EXPECT_DOUBLE_EQ(wandb_backoff(0, 2, 60, 0), 2);
  EXPECT_DOUBLE_EQ(wandb_backoff(3, 2, 60, 0), 16);
  EXPECT_DOUBLE_EQ(wandb_backoff(3, 2, 60, 1), 20);
  EXPECT_DOUBLE_EQ(wandb_backoff(10, 2, 60, 0.5), 60);
  EXPECT_DOUBLE_EQ(wandb_backoff(500, 2, 60, 0.5), 60);
  EXPECT_DOUBLE_EQ(wandb_retry_after("3", 0), 3);
  EXPECT_DOUBLE_EQ(wandb_retry_after("1.5", 0), 1.5);
  EXPECT_DOUBLE_EQ(wandb_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480.0 - 10), 10);
  EXPECT_DOUBLE_EQ(wandb_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480.0 + 10), 0);
  EXPECT_EQ(wandb_retry_after("soon", 0), -1);
  WandbReply r;
  r.status = 503;
  EXPECT_EQ(wandb_reply_reason(r), "HTTP 503 Service Unavailable");
}

TEST(WandbWire, UpsertBodyCarriesConfigAsAJsonStringOfValues) {
  WandbRunInfo run;
  run.run_id = "r1";
  run.project = "p";
  run.tags = {"x"};
  run.config_json = R"({"lr":0.0002,"lora":{"r":16}})";
  json body = json::parse(wandb_upsert_body(run));
  EXPECT_EQ(body["operationName"], "UpsertBucket");
  EXPECT_NE(body["query"].get<std::string>().find("mutation UpsertBucket("), std::string::npos);
  EXPECT_NE(body["query"].get<std::string>().find("historyLineCount"), std::string::npos);
  json v = body["variables"];
  EXPECT_EQ(v["name"], "r1");
  EXPECT_EQ(v["project"], "p");
  EXPECT_TRUE(v["entity"].is_null());
  EXPECT_TRUE(v["id"].is_null());
  EXPECT_EQ(v["tags"], json::array({"x"}));
  ASSERT_TRUE(v["config"].is_string());
  json config = json::parse(v["config"].get<std::string>());
  EXPECT_EQ(config["lr"]["value"], 0.0002);
  EXPECT_EQ(config["lora"]["value"]["r"], 16);
  EXPECT_TRUE(str_starts_with(config["_wandb"]["value"]["cli_version"].get<std::string>(), "luatune "));

  WandbBucket b;
  std::string why;
  EXPECT_FALSE(wandb_upsert_parse(R"({"errors":[{"message":"permission denied"}]})", &b, &why));
  EXPECT_EQ(why, "permission denied");
  EXPECT_TRUE(wandb_upsert_parse(
      R"({"data":{"upsertBucket":{"bucket":{"id":"S1","name":"r1","project":{"name":"p","entity":{"name":"e"}},"historyLineCount":7}}}})",
      &b, &why));
  EXPECT_EQ(b.id, "S1");
  EXPECT_EQ(b.entity, "e");
  EXPECT_EQ(b.history_line_count, 7);
}

TEST(WandbWire, ChunksFollowOffsetsAndCompleteRidesOnTheLast) {
  WandbQueue q;
  EXPECT_EQ(wandb_chunk(q).body, "{}");  // the heartbeat
  for (int i = 0; i < 5; i++) q.history.push_back(std::string(90, 'a' + i));
  q.history_offset = 10;
  q.output.push_back("line");
  q.complete = true;
  q.exit_code = 3;
  std::vector<json> bodies;
  while (!q.empty()) {
    WandbChunk c = wandb_chunk(q, 300);  // two 90-byte rows a request
    bodies.push_back(json::parse(c.body));
    wandb_queue_ack(q, c);
  }
  ASSERT_EQ(bodies.size(), 3u);
  EXPECT_EQ(bodies[0]["files"]["wandb-history.jsonl"]["offset"], 10);
  EXPECT_EQ(bodies[0]["files"]["wandb-history.jsonl"]["content"].size(), 2u);
  EXPECT_FALSE(bodies[0].contains("complete"));
  EXPECT_EQ(bodies[1]["files"]["wandb-history.jsonl"]["offset"], 12);
  EXPECT_EQ(bodies[2]["files"]["wandb-history.jsonl"]["offset"], 14);
  EXPECT_EQ(bodies[0]["files"]["output.log"]["offset"], 0);  // a short line fits beside the rows
  EXPECT_EQ(bodies[2]["complete"], true);
  EXPECT_EQ(bodies[2]["exitcode"], 3);
  EXPECT_EQ(q.history_offset, 15);
  EXPECT_TRUE(wandb_reply_stopped(R"({"stopped": true})"));
  EXPECT_FALSE(wandb_reply_stopped(R"({"exitcode": null})"));
  EXPECT_FALSE(bodies[2].contains("preempting"));  // a failure is not a preemption
}

TEST(WandbWire, AStopBySignalCompletesAsPreempting) {
  WandbQueue q;
  q.history.push_back("{}");
  q.complete = true;
  q.exit_code = kExitInterrupted;  // the runner's status after SIGINT/SIGTERM saved and stopped
  json body = json::parse(wandb_chunk(q).body);
  EXPECT_EQ(body["preempting"], true);
  EXPECT_EQ(body["complete"], true);
  EXPECT_EQ(body["exitcode"], 130);
}

TEST(WandbWire, FileStreamPathEscapesEachPart) {
  EXPECT_EQ(wandb_file_stream_path("ent", "proj", "ab12cd34"), "/files/ent/proj/ab12cd34/file_stream");
  EXPECT_EQ(wandb_file_stream_path("my team", "a/b?c", "r-1_x.y~z"),
            "/files/my%20team/a%2Fb%3Fc/r-1_x.y~z/file_stream");
  EXPECT_EQ(wandb_file_stream_path("\xc3\xa9", "p", "r"), "/files/%C3%A9/p/r/file_stream");  // UTF-8 bytes
}

// ============================================================================================
// Runs against the loopback server

// libcurl builds the header from user "api" and the key; a ':' in the key stays in the password.
TEST(WandbHttp, KeyGoesAsBasicAuthForUserApi) {
  const std::string key = "onprem:" + kKey;
  FakeWandb server(key);
  WandbRunInfo run;
  run.run_id = "auth0001";
  run.project = "p";
  WandbHttp http(server.base_url(), key, 10);
  WandbReply ok = http.post("/graphql", wandb_upsert_body(run));
  EXPECT_EQ(ok.status, 200) << ok.body;
  WandbHttp other(server.base_url(), kKey, 10);
  EXPECT_EQ(other.post("/graphql", wandb_upsert_body(run)).status, 401);
  std::vector<FakeWandbRequest> requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].headers.find("Authorization")->second, kAuthorization);
  EXPECT_TRUE(server.errors().empty());
}

TEST_F(WandbSink, NormalRunSendsConfigRowsSummaryConsoleAndComplete) {
  WandbOptions o = run_options("run00001");
  o.name = "my run";
  o.tags = {"t1"};
  o.config_json = R"({"lr":0.0002,"lora":{"r":16},"data":"x.jsonl"})";
  auto sink = wandb_sink_new(o);
  ASSERT_NE(sink, nullptr);
  recipe_print("hello from the recipe");
  for (int step = 1; step <= 5; step++) sink->write(step, vals({{"loss", 2.0 / step}, {"lr", 1e-4}}));
  sink->summary(vals({{"eval_loss", 1.5}}));
  sink->close(0);
  sink.reset();
  recipe_print("not for this run");

  EXPECT_EQ(server.errors(), std::vector<std::string>());
  FakeWandbRun run = server.run("run00001");
  EXPECT_EQ(run.upserts, 1);
  json v = run.upsert_variables;
  EXPECT_EQ(v["project"], "proj");
  EXPECT_TRUE(v["entity"].is_null());
  EXPECT_EQ(v["displayName"], "my run");
  EXPECT_EQ(v["tags"], json::array({"t1"}));
  EXPECT_FALSE(v["host"].get<std::string>().empty());
  json config = json::parse(v["config"].get<std::string>());
  EXPECT_EQ(config["lr"], json({{"value", 0.0002}}));
  EXPECT_EQ(config["lora"], json({{"value", {{"r", 16}}}}));
  EXPECT_EQ(config["data"], json({{"value", "x.jsonl"}}));
  EXPECT_TRUE(config.contains("_wandb"));

  ASSERT_EQ(run.history.size(), 5u);
  EXPECT_EQ(steps_of(run.history), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& line : run.history) {
    ojson row = wandb_json_parse(line);
    EXPECT_TRUE(row.contains("loss") && row.contains("lr"));
    EXPECT_GE(row["_runtime"].get<double>(), 0);
    EXPECT_NEAR(row["_timestamp"].get<double>(), now, 60);
  }
  ojson summary = wandb_json_parse(run.summary);
  EXPECT_DOUBLE_EQ(summary["loss"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(summary["eval_loss"].get<double>(), 1.5);
  EXPECT_EQ(summary["_step"], 5);
  EXPECT_TRUE(summary["_wandb"].contains("runtime"));
  ASSERT_GE(run.output.size(), 1u);
  EXPECT_TRUE(std::regex_match(run.output[0],
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z hello from the recipe)")))
      << run.output[0];
  for (const auto& line : run.output) EXPECT_EQ(line.find("not for this run"), std::string::npos);
  EXPECT_TRUE(run.complete);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(
      notices.text().find("wandb: run my run: " + server.base_url() + "/fake-entity/proj/runs/run00001\n"),
      std::string::npos)
      << notices.text();

  // Every request is authenticated the same way and says who sent it.
  for (const auto& r : server.requests()) {
    EXPECT_EQ(r.headers.find("Authorization")->second, kAuthorization);
    EXPECT_EQ(r.headers.find("Content-Type")->second, "application/json");
    EXPECT_TRUE(str_starts_with(r.headers.find("User-Agent")->second, "luatune/"));
  }
  expect_key_only_in_authorization(server);

  // The spool holds the same rows, the acknowledgements, and never the key.
  std::string rd = dir.path + "/run-run00001";
  EXPECT_EQ(wandb_spool_lines(rd + "/history.jsonl"), run.history);
  WandbState st = wandb_state_read(rd);
  EXPECT_TRUE(st.complete);
  EXPECT_TRUE(st.closed);
  EXPECT_EQ(st.history_acked, 5);
  EXPECT_EQ(st.entity, "fake-entity");
  json run_json = json::parse(file_read(rd + "/run.json"));
  EXPECT_EQ(run_json["config"]["lora"]["r"], 16);
  EXPECT_EQ(run_json["base_url"], server.base_url());
  EXPECT_EQ(all_files(dir.path).find(kKey), std::string::npos);
  EXPECT_EQ(notices.text().find(kKey), std::string::npos);
}

TEST_F(WandbSink, CloseWithAFailureSendsItsExitCodeAndIdleRunsHeartbeat) {
  WandbOptions o = run_options("failed01");
  o.heartbeat_interval = 0.05;
  auto sink = wandb_sink_new(o);
  sink->write(1, vals({{"loss", 1}}));
  EXPECT_TRUE(eventually([&] { return server.run("failed01").heartbeats >= 2; }));
  sink->close(1);
  FakeWandbRun run = server.run("failed01");
  EXPECT_TRUE(run.complete);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(wandb_state_read(dir.path + "/run-failed01").exit_code, 1);
  EXPECT_EQ(server.errors(), std::vector<std::string>());
}

TEST_F(WandbSink, ServerDownAtStartAndMidRunLosesNoRow) {
  server.go_down();
  auto sink = wandb_sink_new(run_options("outage01"));
  int step = 0;
  for (int i = 0; i < 3; i++) sink->write(++step, vals({{"loss", 1.0 * step}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.come_up();
  for (int i = 0; i < 3; i++) sink->write(++step, vals({{"loss", 1.0 * step}}));
  EXPECT_TRUE(eventually([&] { return server.run("outage01").history.size() == 6; }));
  server.go_down();
  for (int i = 0; i < 3; i++) sink->write(++step, vals({{"loss", 1.0 * step}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.come_up();
  EXPECT_TRUE(eventually([&] { return server.run("outage01").history.size() == 9; }));
  // 500s are retried the same way.
  server.fail_next(2, 500, "", "/files/");
  sink->write(++step, vals({{"loss", 1.0 * step}}));
  sink->close(0);
  FakeWandbRun run = server.run("outage01");
  EXPECT_EQ(server.errors(), std::vector<std::string>());
  EXPECT_EQ(steps_of(run.history), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_TRUE(run.complete);
  std::string text = notices.text();
  EXPECT_EQ(count_of(text, "wandb: server unreachable ("), 3u) << text;
  EXPECT_EQ(count_of(text, "), retrying; rows are kept in " + dir.path + "/run-outage01\n"), 3u) << text;
  EXPECT_EQ(count_of(text, "wandb: server back, "), 3u) << text;
  EXPECT_EQ(count_of(text, "HTTP 500 Internal Server Error"), 1u) << text;
}

TEST_F(WandbSink, RetryAfterSetsTheWaitBeforeTheNextAttempt) {
  server.fail_next(1, 429, "1", "/files/");
  auto sink = wandb_sink_new(run_options("limited1"));
  sink->write(1, vals({{"loss", 1}}));
  sink->close(0);
  std::vector<FakeWandbRequest> reqs = server.requests();
  size_t limited = reqs.size();
  for (size_t i = 0; i < reqs.size(); i++)
    if (reqs[i].status == 429) limited = i;
  ASSERT_LT(limited + 1, reqs.size());
  EXPECT_GE(reqs[limited + 1].time - reqs[limited].time, 0.95);  // not the 0.05 s backoff
  EXPECT_TRUE(server.run("limited1").complete);
  EXPECT_NE(notices.text().find("wandb: server unreachable (HTTP 429 Too Many Requests)"), std::string::npos);
}

TEST_F(WandbSink, RefusedKeyPrintsOneNoticeAndTheRunGoesOnLocally) {
  FakeWandb other("someoneelseskey0123456789abcdefghijklmno");  // knows another key, not kKey
  auto sink = wandb_sink_new(options(other, dir, notices.f, "denied01"));
  for (int step = 1; step <= 3; step++) {
    sink->write(step, vals({{"loss", 1}}));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  sink->close(0);
  std::string rd = dir.path + "/run-denied01";
  EXPECT_EQ(
      notices.text(),
      "wandb: 401 Unauthorized from " + other.base_url() +
          "/graphql: the API key was refused (check WANDB_API_KEY or ~/.netrc); this run goes on logging "
          "locally to " +
          rd + ", upload it later with runner wandb-sync " + rd +
          "\n"
          "wandb: 3 rows not uploaded; run: runner wandb-sync " +
          rd + "\n");
  EXPECT_EQ(other.requests().size(), 1u);  // a final status: no retries
  EXPECT_EQ(wandb_spool_lines(rd + "/history.jsonl").size(), 3u);
  WandbState st = wandb_state_read(rd);
  EXPECT_FALSE(st.complete);
  EXPECT_TRUE(st.closed);
  EXPECT_EQ(all_files(dir.path).find(kKey), std::string::npos);
  expect_key_only_in_authorization(other);
}

TEST_F(WandbSink, StoppedFromTheUiEndsTheLoop) {
  server.stop_after_rows(3);
  auto sink = wandb_sink_new(run_options("stopme01"));
  int step = 0;
  while (!sink->stopped() && step < 500) {
    sink->write(++step, vals({{"loss", 1}}));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(sink->stopped());
  EXPECT_LT(step, 500);
  sink->write(++step, vals({{"loss", 1}}));  // the notice prints on the next call
  sink->close(0);
  EXPECT_EQ(count_of(notices.text(), "wandb: run stopped from the W&B UI; the recipe ends after this step\n"),
            1u);
  EXPECT_EQ(server.run("stopme01").history.size(), static_cast<size_t>(step));
  EXPECT_TRUE(server.run("stopme01").complete);
}

TEST_F(WandbSink, ResumeContinuesAfterTheServersLastLine) {
  // A run the server knows from elsewhere: 7 lines, none in this spool.
  server.preload("fake-entity", "proj", "known001", 7);
  WandbOptions o = run_options("known001");
  o.resume = true;
  auto sink = wandb_sink_new(o);
  for (int step = 8; step <= 10; step++) sink->write(step, vals({{"loss", 1}}));
  sink->close(0);
  EXPECT_EQ(server.run("known001").history.size(), 10u);

  // A run of ours, resumed from its own spool (the newest run there) in a second process.
  o = run_options("ours0001");
  sink = wandb_sink_new(o);
  sink->write(1, vals({{"loss", 3}, {"acc", 0.5}}));
  sink->write(2, vals({{"loss", 2}, {"acc", 0.6}}));
  sink->close(0);
  o.run_id = "";
  o.resume = true;
  sink = wandb_sink_new(o);
  sink->write(3, vals({{"loss", 1}}));
  sink->close(0);
  FakeWandbRun run = server.run("ours0001");
  EXPECT_EQ(server.errors(), std::vector<std::string>());
  EXPECT_EQ(steps_of(run.history), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(run.upserts, 2);
  ojson summary = wandb_json_parse(run.summary);
  EXPECT_DOUBLE_EQ(summary["acc"].get<double>(), 0.6);  // kept from before the resume
  EXPECT_DOUBLE_EQ(summary["loss"].get<double>(), 1);
  EXPECT_EQ(wandb_spool_lines(dir.path + "/run-ours0001/history.jsonl").size(), 3u);
}

TEST_F(WandbSink, NanAndInfinityTravelAsExtendedJson) {
  auto sink = wandb_sink_new(run_options("nanrun01"));
  sink->write(1, vals({{"loss", std::nan("")}, {"grad_norm", HUGE_VAL}, {"x", -HUGE_VAL}}));
  sink->close(0);
  FakeWandbRun run = server.run("nanrun01");
  ASSERT_EQ(run.history.size(), 1u);
  EXPECT_NE(run.history[0].find(R"("loss":NaN,"grad_norm":Infinity,"x":-Infinity,"_step":1)"),
            std::string::npos)
      << run.history[0];
  ojson summary = wandb_json_parse(run.summary);
  EXPECT_TRUE(std::isnan(summary["loss"].get<double>()));
}

TEST_F(WandbSink, CountsTravelAsJsonIntegers) {
  auto sink = wandb_sink_new(run_options("intrun01"));
  sink->write(3, vals({{"loss", 2.5}, {"tokens", 480}, {"lr", 0}}));
  sink->summary(vals({{"tokens", 960}}));
  sink->close(0);
  FakeWandbRun run = server.run("intrun01");
  ASSERT_EQ(run.history.size(), 1u);
  EXPECT_EQ(run.history[0].rfind(R"({"loss":2.5,"tokens":480,"lr":0,"_step":3,)", 0), 0u) << run.history[0];
  EXPECT_NE(run.summary.find(R"("tokens":960)"), std::string::npos) << run.summary;
  EXPECT_EQ(run.summary.find("960.0"), std::string::npos) << run.summary;
}

TEST_F(WandbSink, NoKeyMeansOneNoticeAndAnOfflineRun) {
  WandbOptions o = run_options("nokey001");
  o.api_key = "";
  auto sink = wandb_sink_new(o);
  sink->write(1, vals({{"loss", 1}}));
  sink->close(0);
  std::string rd = dir.path + "/run-nokey001";
  EXPECT_EQ(notices.text(),
            "wandb: no API key for 127.0.0.1 (set WANDB_API_KEY, or put 'machine 127.0.0.1 "
            "password KEY' in ~/.netrc); logging offline to " +
                rd + ", upload later with runner wandb-sync " + rd +
                "\n"
                "wandb: offline run saved to " +
                rd + "; upload with runner wandb-sync " + rd + "\n");
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(WandbSync, OfflineRunUploadsOnceAndASecondSyncSendsNothing) {
  WandbOptions o = run_options("offline1");
  o.mode = "offline";
  o.api_key = "";
  auto sink = wandb_sink_new(o);
  recipe_print("printed offline");
  for (int step = 1; step <= 4; step++) sink->write(step, vals({{"loss", 1.0 / step}}));
  sink->summary(vals({{"eval_loss", 0.5}}));
  sink->close(0);
  std::string rd = dir.path + "/run-offline1";
  EXPECT_EQ(notices.text(),
            "wandb: offline run saved to " + rd + "; upload with runner wandb-sync " + rd + "\n");
  EXPECT_TRUE(server.requests().empty());

  ::setenv("WANDB_API_KEY", kKey.c_str(), 1);
  ::setenv("WANDB_BASE_URL", server.base_url().c_str(), 1);  // the key goes only to the configured host
  Capture out;
  EXPECT_EQ(wandb_sync(dir.path, out.f), 0);
  EXPECT_EQ(out.text(), "wandb-sync: " + rd + ": 4 rows sent, complete (exit code 0)\n");
  FakeWandbRun run = server.run("offline1");
  EXPECT_EQ(steps_of(run.history), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_DOUBLE_EQ(wandb_json_parse(run.summary)["eval_loss"].get<double>(), 0.5);
  ASSERT_EQ(run.output.size(), 1u);
  EXPECT_NE(run.output[0].find("printed offline"), std::string::npos);
  EXPECT_TRUE(run.complete);
  EXPECT_EQ(run.exit_code, 0);

  size_t before = server.requests().size();
  Capture again;
  EXPECT_EQ(wandb_sync(rd, again.f), 0);
  EXPECT_EQ(again.text(), "wandb-sync: " + rd + ": already complete (exit code 0), nothing to send\n");
  EXPECT_EQ(server.requests().size(), before);
  EXPECT_EQ(server.errors(), std::vector<std::string>());
  EXPECT_EQ(all_files(dir.path).find(kKey), std::string::npos);
  EXPECT_TRUE(str_starts_with(error_of([&] { wandb_sync(dir.path + "/nothing", out.f); }),
                              "runner wandb-sync: '" + dir.path + "/nothing' holds no spooled W&B run"));
}

TEST_F(WandbSync, KilledRunIsCompletedWithExitCode1) {
  ::setenv("WANDB_API_KEY", kKey.c_str(), 1);
  ::setenv("WANDB_BASE_URL", server.base_url().c_str(), 1);
  TempDir copy;
  WandbOptions o = run_options("killed01");
  o.mode = "offline";
  auto sink = wandb_sink_new(o);
  for (int step = 1; step <= 3; step++) sink->write(step, vals({{"loss", 1}}));
  // The spool as a killed process leaves it: copied before close, with half a row at the end.
  fs::copy(dir.path + "/run-killed01", copy.path + "/run-killed01");
  sink->close(0);
  std::FILE* f = std::fopen((copy.path + "/run-killed01/history.jsonl").c_str(), "a");
  std::fputs("{\"loss\":1,\"_st", f);
  std::fclose(f);
  Capture out;
  EXPECT_EQ(wandb_sync(copy.path + "/run-killed01", out.f), 0);
  EXPECT_EQ(out.text(),
            "wandb-sync: " + copy.path +
                "/run-killed01: 3 rows sent, complete (exit code 1; the run never closed (killed or "
                "crashed), so it is marked failed)\n");
  FakeWandbRun run = server.run("killed01");
  EXPECT_EQ(run.history.size(), 3u);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(server.errors(), std::vector<std::string>());
}

TEST_F(WandbSync, ServerGoneAtCloseLeavesTheRestForSync) {
  ::setenv("WANDB_API_KEY", kKey.c_str(), 1);
  ::setenv("WANDB_BASE_URL", server.base_url().c_str(), 1);
  WandbOptions o = run_options("gone0001");
  o.finish_timeout = 0.3;
  auto sink = wandb_sink_new(o);
  for (int step = 1; step <= 3; step++) sink->write(step, vals({{"loss", 1}}));
  ASSERT_TRUE(eventually([&] { return server.run("gone0001").history.size() == 3; }));
  server.go_down();
  for (int step = 4; step <= 5; step++) sink->write(step, vals({{"loss", 1}}));
  sink->close(0);
  std::string rd = dir.path + "/run-gone0001";
  EXPECT_NE(notices.text().find("wandb: 2 rows not uploaded; run: runner wandb-sync " + rd + "\n"),
            std::string::npos)
      << notices.text();
  EXPECT_FALSE(wandb_state_read(rd).complete);
  server.come_up();
  Capture out;
  EXPECT_EQ(wandb_sync(rd, out.f), 0);
  EXPECT_EQ(out.text(), "wandb-sync: " + rd + ": 2 rows sent, complete (exit code 0)\n");
  FakeWandbRun run = server.run("gone0001");
  EXPECT_EQ(steps_of(run.history), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(server.errors(), std::vector<std::string>());
  EXPECT_TRUE(run.complete);
}

TEST_F(WandbSpoolFiles, RunJsonHasNoPasswordAndEveryFileIsTheOwners) {
  UmaskScope umask(022);  // the usual umask, under which fopen made the files 0644
  WandbOptions o = run_options("secret01");
  o.base_url = "http://user:s3cretPW@127.0.0.1:" + std::to_string(server.port()) + "/";
  auto sink = wandb_sink_new(o);
  recipe_print("a console line");
  for (int step = 1; step <= 3; step++) sink->write(step, vals({{"loss", 1.0 / step}}));
  sink->summary(vals({{"eval_loss", 0.5}}));
  sink->close(0);
  sink.reset();

  std::string rd = dir.path + "/run-secret01";
  EXPECT_EQ(json::parse(file_read(rd + "/run.json"))["base_url"], server.base_url());
  EXPECT_EQ(all_files(dir.path).find("s3cretPW"), std::string::npos);
  EXPECT_EQ(notices.text().find("s3cretPW"), std::string::npos) << notices.text();
  EXPECT_EQ(count_of(notices.text(), wandb_credentials_notice() + "\n"), 1u) << notices.text();
  std::map<std::string, unsigned> want;
  for (const char* name : {"history.jsonl", "output.log", "run.json", "state.json", "summary.json"})
    want[name] = 0600;
  EXPECT_EQ(file_modes(rd), want);  // and no temporary left behind
  // The key went as W&B's client sends it; the URL's user:password never reached the server.
  FakeWandbRun run = server.run("secret01");
  EXPECT_TRUE(run.complete);
  for (const auto& r : server.requests()) {
    EXPECT_EQ(r.headers.find("Authorization")->second, kAuthorization);
    for (const auto& [k, v] : r.headers)
      EXPECT_EQ(v.find("dXNlcjpzM2NyZXRQVw=="), std::string::npos);  // base64("user:s3cretPW")
  }

  // A spool from before: 0644 files and a password in run.json. Resuming narrows the files, and
  // reading run.json (as wandb-sync does) drops the password.
  std::string old = dir.path + "/run-before01";
  fs::create_directories(old);
  for (const char* name : {"history.jsonl", "output.log"}) {
    std::FILE* f = std::fopen((old + "/" + name).c_str(), "w");
    std::fclose(f);
    ::chmod((old + "/" + name).c_str(), 0644);
  }
  file_write_atomic(old + "/run.json",
                    R"({"run_id":"before01","base_url":"http://u:s3cretPW@127.0.0.1:9/"})");
  std::string base_url;
  wandb_run_json_read(old, &base_url);
  EXPECT_EQ(base_url, "http://127.0.0.1:9");
  o.run_id = "before01";
  o.mode = "offline";
  o.resume = true;
  sink = wandb_sink_new(o);
  sink->write(1, vals({{"loss", 1}}));
  sink->close(0);
  sink.reset();
  for (const auto& [name, mode] : file_modes(old)) EXPECT_EQ(mode, 0600u) << name;
  EXPECT_EQ(all_files(old).find("s3cretPW"), std::string::npos);
}

TEST_F(WandbSync, RefusesASpoolNamingAnotherHostUnlessTrusted) {
  ::setenv("WANDB_API_KEY", kKey.c_str(), 1);
  // A spool made against the loopback server, synced with WANDB_BASE_URL unset (so the configured
  // host is api.wandb.ai): it names another host, as a spool copied from elsewhere could.
  WandbOptions o = run_options("copied01");
  o.mode = "offline";
  auto sink = wandb_sink_new(o);
  for (int step = 1; step <= 3; step++) sink->write(step, vals({{"loss", 1}}));
  sink->close(0);
  std::string rd = dir.path + "/run-copied01";
  auto refusal = [&](const std::string& configured_host) {
    return "wandb-sync: " + rd + ": the spool names host 127.0.0.1 (" + server.base_url() +
           "), not the configured " + configured_host +
           "; not sent, so the API key goes to no other host: set WANDB_BASE_URL=" + server.base_url() +
           " or pass --trust-spool-host to upload there\n";
  };
  Capture out;
  EXPECT_EQ(wandb_sync(dir.path, out.f), 1);
  EXPECT_EQ(out.text(), refusal("api.wandb.ai"));
  EXPECT_TRUE(server.requests().empty());

  // Another name for the same machine is still another host.
  ::setenv("WANDB_BASE_URL", ("http://localhost:" + std::to_string(server.port())).c_str(), 1);
  Capture out2;
  EXPECT_EQ(wandb_sync(rd, out2.f), 1);
  EXPECT_EQ(out2.text(), refusal("localhost"));
  EXPECT_TRUE(server.requests().empty());

  // --trust-spool-host: the run goes to the host its spool names.
  ::unsetenv("WANDB_BASE_URL");
  Capture out3, warnings;
  EXPECT_EQ(wandb_sync(rd, out3.f, true, warnings.f), 0);
  EXPECT_EQ(out3.text(), "wandb-sync: " + rd + ": 3 rows sent, complete (exit code 0)\n");
  EXPECT_EQ(warnings.text(), "");  // loopback: no plain-http warning
  EXPECT_EQ(server.run("copied01").history.size(), 3u);
  EXPECT_TRUE(server.run("copied01").complete);
  expect_key_only_in_authorization(server);
}

TEST_F(WandbSink, PlainHttpToANonLoopbackHostWarnsOnce) {
  // Online to a host that is not this machine (and does not exist: nothing is ever delivered).
  WandbOptions o = run_options("plain001");
  o.base_url = "http://example.invalid:9";
  o.http_timeout = 0.5;
  o.finish_timeout = 0.3;
  auto sink = wandb_sink_new(o);
  for (int step = 1; step <= 3; step++) sink->write(step, vals({{"loss", 1}}));
  sink->close(0);
  sink.reset();
  const std::string warning = wandb_insecure_warning(o.base_url) + "\n";
  EXPECT_EQ(warning,
            "wandb: warning: http://example.invalid:9 is plain http to a non-loopback host: the API key and "
            "the run's data cross the network unencrypted (use https://)\n");
  EXPECT_EQ(count_of(notices.text(), warning), 1u) << notices.text();
  EXPECT_TRUE(str_starts_with(notices.text(), warning)) << notices.text();

  // Offline (nothing sent) and loopback runs say nothing of it.
  Capture quiet;
  o = options(server, dir, quiet.f, "plain002");
  sink = wandb_sink_new(o);
  sink->write(1, vals({{"loss", 1}}));
  sink->close(0);
  o = options(server, dir, quiet.f, "plain003");
  o.base_url = "http://example.invalid:9";
  o.mode = "offline";
  sink = wandb_sink_new(o);
  sink->write(1, vals({{"loss", 1}}));
  sink->close(0);
  sink.reset();
  EXPECT_EQ(quiet.text().find("plain http"), std::string::npos) << quiet.text();

  // wandb-sync: one warning for two runs bound for the same plain-http host.
  ::setenv("WANDB_API_KEY", kKey.c_str(), 1);
  ::setenv("WANDB_BASE_URL", "http://example.invalid:9", 1);
  ::setenv("WANDB_X_FINISH_TIMEOUT", "0.2", 1);
  ::setenv("WANDB_X_FILE_STREAM_RETRY_WAIT_MIN_SECONDS", "0.05", 1);
  ::setenv("WANDB_X_FILE_STREAM_RETRY_WAIT_MAX_SECONDS", "0.1", 1);
  ::setenv("WANDB_HTTP_TIMEOUT", "0.5", 1);
  Capture out, warnings;
  EXPECT_EQ(wandb_sync(dir.path, out.f, false, warnings.f), 1);  // nothing there to upload to
  EXPECT_EQ(warnings.text(), warning);
}

// Not a benchmark, a guard: a step never waits on the network, up or down. The averages are printed.
TEST_F(WandbSink, WriteNeverWaitsOnTheNetwork) {
  // The server holds the first request (the UpsertBucket) until the test releases it. All 2000
  // writes must return while the sender thread is stuck inside that request, and every row must
  // arrive once the server answers. (How long a write takes: bench/bench_wandb_write.)
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  server.on_request([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (released) return;
    held = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  auto release = [&] {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  };
  WandbOptions o = run_options("nowait01");
  o.http_timeout = 120;
  auto sink = wandb_sink_new(o);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return held; })) << "no request arrived";
  }
  MetricValues v = vals({{"loss", 1.25}, {"lr", 2e-4}, {"grad_norm", 0.5}, {"tokens_per_s", 12345}});
  // The writes run on their own thread so a write that blocks fails the test instead of hanging it.
  auto writes = std::async(std::launch::async, [&] {
    for (int step = 1; step <= 2000; step++) sink->write(step, v);
  });
  bool returned = writes.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(returned) << "write() waited on a request the server was holding";
    EXPECT_FALSE(released);
  }
  release();
  writes.wait();
  sink->close(0);
  FakeWandbRun run = server.run("nowait01");
  EXPECT_EQ(run.history.size(), 2000u);
  EXPECT_TRUE(run.complete);
  EXPECT_TRUE(server.errors().empty());
}
