// Metrics sinks: number formatting, the ETA's step timer, console output pinned for logs and for a
// terminal (a memory stream stands in for it, with a fixed width and a fake clock), the JSONL file
// parsed back (config line, flush per write, append on resume), and the fan-out's errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/core/term.h"
#include "host/metrics/metrics.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

MetricValues vals(std::vector<std::pair<std::string, double>> numbers, std::string note = "") {
  MetricValues v;
  v.numbers = std::move(numbers);
  v.note = std::move(note);
  return v;
}

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("luatune_test_metrics_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const std::string& line : str_split(file_read(path), '\n'))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A console sink's options for a test: lines go to memory (`cap`) and the clock reads `now`, which
// the test moves. tty 0 gives plain lines, 1 the live line; progress_seconds -1 and width 0 are
// ConsoleOptions' defaults.
struct FakeConsole {
  Capture cap;
  double now = 0;
  ConsoleOptions o;
  FakeConsole(int tty, int64_t total_steps, double progress_seconds, int width = 0) {
    o.out = cap.f;
    o.tty = tty;
    o.total_steps = total_steps;
    o.progress_seconds = progress_seconds;
    o.width = width;
    o.clock = [this] { return now; };
  }
  FakeConsole(const FakeConsole&) = delete;
  FakeConsole& operator=(const FakeConsole&) = delete;

  // Writes loss 1 at steps first..last, one second a step: the clock reads the step number.
  void write_loss_each_second(MetricSink& sink, int first, int last) {
    for (int step = first; step <= last; step++) {
      now = step;
      sink.write(step, vals({{"loss", 1}}));
    }
  }
};

}  // namespace

TEST(Metrics, FormatsNumbersByName) {
  EXPECT_EQ(metrics_format_value("lr", 2e-4), "2.0e-04");
  EXPECT_EQ(metrics_format_value("head_lr", 1.5e-5), "1.5e-05");
  EXPECT_EQ(metrics_format_value("loss", 1.234567), "1.2346");
  EXPECT_EQ(metrics_format_value("eval_loss", 2.0), "2.0000");
  EXPECT_EQ(metrics_format_value("tokens_per_s", 12345.6), "12,346");
  EXPECT_EQ(metrics_format_value("grad_norm", 1.23456), "1.235");
  EXPECT_EQ(metrics_format_value("epoch", 3), "3");
  EXPECT_EQ(metrics_format_value("eval_acc", 0.123456), "0.1235");
  EXPECT_EQ(metrics_format_value("loss", std::nan("")), "nan");
  EXPECT_EQ(metrics_format_value("loss", -INFINITY), "-inf");
  EXPECT_EQ(metrics_format_thousands(999), "999");
  EXPECT_EQ(metrics_format_thousands(1000), "1,000");
  EXPECT_EQ(metrics_format_thousands(1234567), "1,234,567");
  EXPECT_EQ(metrics_format_thousands(-4321), "-4,321");
  EXPECT_EQ(metrics_format_duration(45), "45s");
  EXPECT_EQ(metrics_format_duration(83), "1m23s");
  EXPECT_EQ(metrics_format_duration(3725), "1h02m");
  EXPECT_EQ(metrics_format_duration(90000), "1d01h");
}

TEST(Metrics, OrderIsTheProducersThenTheRestByName) {
  MetricValues v = vals({{"zeta", 1},
                         {"eval_loss", 1},
                         {"lr", 1},
                         {"loss", 1},
                         {"alpha", 1},
                         {"tokens_per_s", 1},
                         {"grad_norm", 1}});
  // trainer:step's order (a key it lists that the table lacks is passed over, as is a repeat).
  metrics_order(v, {"loss", "lr", "missing", "grad_norm", "tokens_per_s", "lr"});
  std::vector<std::string> keys;
  for (const auto& kv : v.numbers) keys.push_back(kv.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"loss", "lr", "grad_norm", "tokens_per_s", "alpha", "eval_loss",
                                            "zeta"}));
  metrics_order(v);  // a plain Lua table says no order: by name
  keys.clear();
  for (const auto& kv : v.numbers) keys.push_back(kv.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"alpha", "eval_loss", "grad_norm", "loss", "lr", "tokens_per_s",
                                            "zeta"}));
}

TEST(Metrics, StepTimerSmoothsSecondsPerStepForTheEta) {
  StepTimer t(0.1);
  t.tick(1, 10.0);  // origin only: start-up before step 1 is not step time
  EXPECT_EQ(t.seconds_per_step(), 0);
  EXPECT_EQ(t.eta_seconds(1, 10), 0);
  t.tick(2, 11.0);  // 1 s/step
  EXPECT_DOUBLE_EQ(t.seconds_per_step(), 1.0);
  t.tick(4, 15.0);  // 2 s/step over two steps: 0.1 * 2 + 0.9 * 1
  EXPECT_DOUBLE_EQ(t.seconds_per_step(), 1.1);
  EXPECT_DOUBLE_EQ(t.eta_seconds(4, 10), 6 * 1.1);
  EXPECT_EQ(t.eta_seconds(10, 10), 0);  // done
  EXPECT_EQ(t.eta_seconds(4, 0), 0);    // total unknown
  t.tick(4, 99.0);                      // a repeated step changes nothing
  EXPECT_DOUBLE_EQ(t.seconds_per_step(), 1.1);
}

TEST(Metrics, ConsoleWritesPlainLinesEveryNSecondsWhenNotATerminal) {
  FakeConsole con(/*tty=*/0, /*total_steps=*/8, /*progress_seconds=*/10);
  auto sink = console_sink_new(con.o);  // opened at 0: elapsed counts from here
  for (int step = 1; step <= 8; step++) {
    con.now = 4.0 * step;  // four seconds a step: lines at the first step, 12 s later, 12 s later, the last
    sink->write(step, vals({{"loss", 10.0 - step}, {"lr", 1e-4}}, step == 4 ? "warmup done" : ""));
    if (step == 6) sink->write(step, vals({{"eval_loss", 1.5}, {"eval_acc", 0.25}}));
  }
  sink->summary(vals({{"loss", 2}, {"eval_loss", 1.5}}));
  sink->close(0);
  EXPECT_EQ(con.cap.text(),
            "step 1/8 | loss 9.0000 | lr 1.0e-04 | elapsed 4s\n"
            "step 4/8 | loss 6.0000 | lr 1.0e-04 | elapsed 16s | eta 16s | warmup done\n"
            "eval step 6/8 | eval_loss 1.5000 | eval_acc 0.25 | elapsed 24s\n"
            "step 7/8 | loss 3.0000 | lr 1.0e-04 | elapsed 28s | eta 4s\n"
            "step 8/8 | loss 2.0000 | lr 1.0e-04 | elapsed 32s\n"
            "summary\n"
            "  loss       2.0000\n"
            "  eval_loss  1.5000\n");
}

TEST(Metrics, ConsolePlainLinesComeEveryNSecondsNotEveryStep) {
  FakeConsole con(/*tty=*/0, /*total_steps=*/1000, /*progress_seconds=*/30);
  auto sink = console_sink_new(con.o);
  con.write_loss_each_second(*sink, 1, 1000);
  std::vector<std::string> lines;
  for (const std::string& l : str_split(con.cap.text(), '\n'))
    if (!l.empty()) lines.push_back(l);
  // The first step, then one each time 30 s have passed since the last line (steps 31, 61, ...,
  // 991), then the last step: 35 lines for 1000 steps.
  ASSERT_EQ(lines.size(), 35u);
  EXPECT_EQ(lines[0], "step 1/1000 | loss 1.0000 | elapsed 1s");
  EXPECT_EQ(lines[1], "step 31/1000 | loss 1.0000 | elapsed 31s | eta 16m09s");
  EXPECT_EQ(lines[33], "step 991/1000 | loss 1.0000 | elapsed 16m31s | eta 9s");
  EXPECT_EQ(lines[34], "step 1000/1000 | loss 1.0000 | elapsed 16m40s");

  // 0 seconds: every step.
  FakeConsole every(/*tty=*/0, /*total_steps=*/3, /*progress_seconds=*/0);
  auto each = console_sink_new(every.o);
  every.write_loss_each_second(*each, 1, 3);
  EXPECT_EQ(str_split(every.cap.text(), '\n').size(), 4u);  // three lines and the empty rest
}

TEST(Metrics, ConsoleShowsTheLastStepOfARunThatEndsEarlyUnlessItFailed) {
  for (int code : {0, 1}) {
    FakeConsole con(/*tty=*/0, /*total_steps=*/100, /*progress_seconds=*/30);
    auto sink = console_sink_new(con.o);
    con.write_loss_each_second(*sink, 1, 7);
    sink->close(code);  // stopped from W&B at step 7 (0), or failed there (1)
    std::string first = "step 1/100 | loss 1.0000 | elapsed 1s\n";
    EXPECT_EQ(con.cap.text(),
              code == 0 ? first + "step 7/100 | loss 1.0000 | elapsed 7s | eta 1m33s\n" : first);
  }
}

TEST(Metrics, ConsoleShowsTokensPerSecondFromATokenCount) {
  FakeConsole con(/*tty=*/0, /*total_steps=*/0, /*progress_seconds=*/0);
  auto sink = console_sink_new(con.o);
  // 1000 tokens every 2 s: the rate is known from the second step (the first step's start is not).
  for (int step = 1; step <= 3; step++) {
    con.now = 2.0 * step;
    sink->write(step, vals({{"loss", 1}, {"tokens", 1000}}));
  }
  // A write that carries its own rate (trainer:step's tokens_per_s) shows that one.
  sink->write(4, vals({{"loss", 1}, {"tokens_per_s", 123}, {"tokens", 1000}}));
  EXPECT_EQ(con.cap.text(),
            "step 1 | loss 1.0000 | tokens 1000 | elapsed 2s\n"
            "step 2 | loss 1.0000 | tokens_per_s 500 | tokens 1000 | elapsed 4s\n"
            "step 3 | loss 1.0000 | tokens_per_s 500 | tokens 1000 | elapsed 6s\n"
            "step 4 | loss 1.0000 | tokens_per_s 123 | tokens 1000 | elapsed 6s\n");
}

TEST(Metrics, ProgressSecondsComeFromTheOptionThenTheEnvironmentThenThirty) {
  const char* saved = std::getenv("LUATUNE_PROGRESS_SECONDS");
  std::string keep = saved ? saved : "";
  ::unsetenv("LUATUNE_PROGRESS_SECONDS");
  EXPECT_EQ(metrics_progress_seconds(-1), 30);
  ::setenv("LUATUNE_PROGRESS_SECONDS", "", 1);
  EXPECT_EQ(metrics_progress_seconds(-1), 30);  // set but empty: the default
  ::setenv("LUATUNE_PROGRESS_SECONDS", "7.5", 1);
  EXPECT_EQ(metrics_progress_seconds(-1), 7.5);  // the environment beats the default
  EXPECT_EQ(metrics_progress_seconds(5), 5);     // the option beats the environment
  EXPECT_EQ(metrics_progress_seconds(0), 0);
  ::setenv("LUATUNE_PROGRESS_SECONDS", "soon", 1);
  EXPECT_EQ(error_of([] { metrics_progress_seconds(-1); }),
            "LUATUNE_PROGRESS_SECONDS: expected a number of seconds >= 0, got 'soon'\n"
            "  HINT: 0 prints a line every step; unset it for the default of 30");
  ::setenv("LUATUNE_PROGRESS_SECONDS", "-1", 1);
  EXPECT_THROW(metrics_progress_seconds(-1), UsageError);
  ConsoleOptions o;
  o.out = stdout;
  EXPECT_THROW(console_sink_new(o), UsageError);  // the sink asks at open, not at its first line
  if (saved)
    ::setenv("LUATUNE_PROGRESS_SECONDS", keep.c_str(), 1);
  else
    ::unsetenv("LUATUNE_PROGRESS_SECONDS");
}

TEST(Metrics, ConsoleEvalValuesInATrainingWriteGetTheirOwnLine) {
  FakeConsole con(/*tty=*/0, /*total_steps=*/0, /*progress_seconds=*/30);
  auto sink = console_sink_new(con.o);
  sink->write(3, vals({{"loss", 2}, {"eval_loss", 2.5}}));
  sink->write(4, vals({{"loss", 2}, {"eval_loss", 2.25}}));  // no step line due; the eval still shows
  EXPECT_EQ(con.cap.text(),
            "eval step 3 | eval_loss 2.5000 | elapsed 0s\n"
            "step 3 | loss 2.0000 | elapsed 0s\n"
            "eval step 4 | eval_loss 2.2500 | elapsed 0s\n");
}

TEST(Metrics, PlainAndLiveLinesShowElapsedThenEta) {
  MetricValues v = vals({{"loss", 2.34564}, {"lr", 2e-4}});
  EXPECT_EQ(metrics_plain_line(10, 100, v, 47, 252),
            "step 10/100 | loss 2.3456 | lr 2.0e-04 | elapsed 4m12s | eta 47s");
  EXPECT_EQ(metrics_plain_line(10, 100, v, 47),
            "step 10/100 | loss 2.3456 | lr 2.0e-04 | eta 47s");  // no clock
  EXPECT_EQ(metrics_progress_line(100, 100, vals({{"loss", 1}}), 0, 100, 3725),
            "step 100/100 [" + std::string(30, '=') + "] 100% | loss 1.0000 | elapsed 1h02m");
}

TEST(Metrics, NoColorMeansNoColourCodes) {
  const char* saved = std::getenv("NO_COLOR");
  std::string keep = saved ? saved : "";
  ::unsetenv("NO_COLOR");
  EXPECT_FALSE(term_no_color());
  ::setenv("NO_COLOR", "", 1);
  EXPECT_FALSE(term_no_color());  // no-color.org: set and non-empty
  ::setenv("NO_COLOR", "1", 1);
  EXPECT_TRUE(term_no_color());
  FakeConsole con(/*tty=*/1, /*total_steps=*/2, /*progress_seconds=*/-1, /*width=*/80);
  EXPECT_FALSE(term_color(con.cap.f));  // not a terminal: never colour
  std::FILE* tty = std::fopen("/dev/tty", "w");
  if (tty) {  // a terminal (not in CI): colour only without NO_COLOR
    EXPECT_FALSE(term_color(tty));
    ::unsetenv("NO_COLOR");
    EXPECT_TRUE(term_color(tty));
    std::fclose(tty);
  }
  // The live line redraws with '\r' and erase-to-end-of-line only: no colour (SGR, ESC[...m) at all.
  auto sink = console_sink_new(con.o);
  sink->write(1, vals({{"loss", 1}}));
  sink->write(1, vals({{"eval_loss", 1}}));
  sink->write(2, vals({{"loss", 1}}));
  sink->close(0);
  std::string text = con.cap.text();
  for (size_t at = text.find("\033["); at != std::string::npos; at = text.find("\033[", at + 1))
    EXPECT_EQ(text.substr(at, 3), "\033[K") << "an escape other than erase-line at " << at;
  if (saved)
    ::setenv("NO_COLOR", keep.c_str(), 1);
  else
    ::unsetenv("NO_COLOR");
}

TEST(Metrics, ProgressLineFitsTheTerminalWidth) {
  MetricValues v =
      vals({{"loss", 2.5}, {"lr", 2e-4}, {"grad_norm", 1.5}, {"tokens_per_s", 12345}, {"other", 3}});
  std::string tail = " | loss 2.5000 | lr 2.0e-04 | grad_norm 1.500 | tokens_per_s 12,345 | eta 1m30s";
  // 140 columns: the bar gets its full 30 cells; 10% of them filled.
  EXPECT_EQ(metrics_progress_line(10, 100, v, 90, 140),
            "step 10/100 [===>" + std::string(26, ' ') + "]  10%" + tail);
  // Narrower: the bar shrinks to what is left.
  std::string mid = metrics_progress_line(10, 100, v, 90, 110);
  EXPECT_EQ(mid, "step 10/100 [=>" + std::string(9, ' ') + "]  10%" + tail);
  EXPECT_EQ(mid.size(), 109u);  // the last column stays free
  // Too narrow for a bar: no bar, and the line is cut at width - 1.
  EXPECT_EQ(metrics_progress_line(10, 100, v, 90, 40), std::string("step 10/100  10%" + tail).substr(0, 39));
  // Done, and total unknown.
  EXPECT_EQ(metrics_progress_line(100, 100, vals({{"loss", 1}}), 0, 60),
            "step 100/100 [" + std::string(25, '=') + "] 100% | loss 1.0000");
  EXPECT_EQ(metrics_progress_line(7, 0, vals({{"loss", 1}}), 0, 60), "step 7 | loss 1.0000");
}

TEST(Metrics, ConsoleOnATerminalRedrawsInPlaceAndKeepsOtherOutputApart) {
  FakeConsole con(/*tty=*/1, /*total_steps=*/4, /*progress_seconds=*/-1, /*width=*/60);
  Capture& cap = con.cap;
  double& now = con.now;
  auto sink = console_sink_new(con.o);
  auto line = [&](int step, double loss, double eta, double elapsed) {
    return "\r" + metrics_progress_line(step, 4, vals({{"loss", loss}}), eta, 60, elapsed) + "\033[K";
  };
  now = 1;
  sink->write(1, vals({{"loss", 3}}));
  std::string expect = line(1, 3, 0, 1);
  EXPECT_EQ(cap.text(), expect);
  EXPECT_NE(expect.find("| elapsed 1s"), std::string::npos);
  now = 3;
  sink->write(2, vals({{"loss", 2}}));  // 2 s/step -> eta 4s
  expect += line(2, 2, 4, 3);
  EXPECT_EQ(cap.text(), expect);
  // Another print: the live line is wiped, the text printed, the live line drawn again below it.
  metrics_console_println("hello", cap.f);
  expect +=
      "\r\033[K"
      "hello\n" +
      line(2, 2, 4, 3);
  EXPECT_EQ(cap.text(), expect);
  // Eval values print on their own line the same way.
  sink->write(2, vals({{"eval_loss", 2.25}}));
  expect +=
      "\r\033[K"
      "eval step 2/4 | eval_loss 2.2500 | elapsed 3s\n" +
      line(2, 2, 4, 3);
  EXPECT_EQ(cap.text(), expect);
  // Redraws are throttled to redraw_interval, except the last step.
  now = 3.05;
  sink->write(3, vals({{"loss", 1}}));
  EXPECT_EQ(cap.text(), expect);
  now = 3.06;
  sink->write(4, vals({{"loss", 0.5}}));
  double eta = 0;  // step 4 of 4
  expect += line(4, 0.5, eta, 3.06);
  EXPECT_EQ(cap.text(), expect);
  // Closing leaves the last progress on screen and moves below it; later prints are plain.
  sink->close(0);
  metrics_console_println("after", cap.f);
  expect += "\nafter\n";
  EXPECT_EQ(cap.text(), expect);
}

TEST(Metrics, ClearLiveWipesTheLineBeforeAnErrorMessage) {
  FakeConsole con(/*tty=*/1, /*total_steps=*/0, /*progress_seconds=*/-1, /*width=*/50);
  auto sink = console_sink_new(con.o);
  sink->write(1, vals({{"loss", 1}}));
  metrics_console_clear_live();
  EXPECT_EQ(con.cap.text(), "\rstep 1 | loss 1.0000 | elapsed 0s\033[K\r\033[K");
  sink->close(0);  // nothing showing: no newline
  EXPECT_EQ(con.cap.text(), "\rstep 1 | loss 1.0000 | elapsed 0s\033[K\r\033[K");
}

TEST(Metrics, JsonlWritesConfigThenOneObjectPerWriteFlushedAtOnce) {
  std::string path = temp_path("run/metrics.jsonl");  // the directory is created
  fs::remove_all(path_dirname(path));
  JsonlOptions o;
  o.path = path;
  o.config_json = R"({"lr": 0.0002, "lora": {"r": 8}})";
  auto sink = jsonl_sink_new(o);
  sink->write(1, vals({{"loss", 2.5}, {"lr", 2e-4}}));
  sink->write(2, vals({{"loss", std::nan("")}}, "phase 2"));
  // Before close: everything is already on disk (a crash keeps it).
  std::vector<nlohmann::json> lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], nlohmann::json::parse(R"({"config": {"lr": 0.0002, "lora": {"r": 8}}})"));
  EXPECT_EQ(str_split(file_read(path), '\n')[1].substr(0, 10), "{\"step\":1,");  // step first, as written
  EXPECT_EQ(lines[1]["step"], 1);
  EXPECT_EQ(lines[1]["loss"], 2.5);
  EXPECT_EQ(lines[1]["lr"], 2e-4);
  double now = static_cast<double>(std::time(nullptr));
  EXPECT_NEAR(lines[1]["time"].get<double>(), now, 60);
  EXPECT_GE(lines[1]["elapsed"].get<double>(), 0);
  EXPECT_LT(lines[1]["elapsed"].get<double>(), 60);
  EXPECT_TRUE(lines[2]["loss"].is_null());  // NaN: JSON has no such number
  EXPECT_EQ(lines[2]["note"], "phase 2");
  sink->summary(vals({{"eval_loss", 1.25}}));
  sink->close(0);
  lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3], nlohmann::json::parse(R"({"summary": {"eval_loss": 1.25}})"));

  // Resuming appends (no second config line); a fresh run truncates.
  auto run_once = [&](bool resume, int64_t step, double loss) {  // one line written, the file read back
    o.resume = resume;
    auto s = jsonl_sink_new(o);
    s->write(step, vals({{"loss", loss}}));
    s->close(0);
    return read_jsonl(path);
  };
  lines = run_once(/*resume=*/true, 3, 1.0);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[4]["step"], 3);
  lines = run_once(/*resume=*/false, 1, 9.0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0].contains("config"));
  EXPECT_EQ(lines[1]["loss"], 9.0);
  // Resuming into a file that does not exist yet starts it with the config line.
  fs::remove(path);
  o.resume = true;
  jsonl_sink_new(o)->close(0);
  EXPECT_TRUE(read_jsonl(path).at(0).contains("config"));
  fs::remove_all(path_dirname(path));
}

TEST(Metrics, JsonlWritesCountsAsIntegers) {
  std::string path = temp_path("ints/metrics.jsonl");
  fs::remove_all(path_dirname(path));
  JsonlOptions o;
  o.path = path;
  auto sink = jsonl_sink_new(o);
  sink->write(7, vals({{"loss", 2.5}, {"tokens", 480}, {"target_tokens", 96}, {"lr", 0}, {"big", 1e20}}));
  sink->summary(vals({{"tokens", 960}, {"loss", 2.25}}));
  sink->close(0);
  std::vector<std::string> lines = str_split(file_read(path), '\n');
  EXPECT_EQ(lines[0].substr(0, 9), "{\"step\":7");
  EXPECT_NE(lines[0].find(R"("loss":2.5,"tokens":480,"target_tokens":96,"lr":0,"big":1e+20})"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[1], R"({"summary":{"tokens":960,"loss":2.25}})");
  fs::remove_all(path_dirname(path));
}

TEST(Metrics, JsonlResumeDropsLaterStepsAndSummariesKeepingDamagedLines) {
  std::string path = temp_path("resume_drop/metrics.jsonl");
  fs::remove_all(path_dirname(path));
  fs::create_directories(path_dirname(path));
  file_write_atomic(path,
                    "{\"config\":{}}\n{\"step\":1,\"loss\":3}\nnot json\n\n{\"step\":2,\"loss\":2}\n"
                    "{\"summary\":{\"loss\":2}}\n{\"step\":3,\"lo");
  JsonlOptions o;
  o.path = path;
  o.resume = true;
  o.resume_step = 1;  // the run resumes from its step-1 checkpoint
  auto sink = jsonl_sink_new(o);
  sink->write(2, vals({{"loss", 2.5}}));
  sink->close(0);
  std::vector<std::string> lines = str_split(file_read(path), '\n');
  ASSERT_EQ(lines.size(), 6u);  // the last is the empty string after the final newline
  EXPECT_EQ(lines[0], "{\"config\":{}}");
  EXPECT_EQ(lines[1], "{\"step\":1,\"loss\":3}");
  EXPECT_EQ(lines[2], "not json");          // damaged lines are kept, for the report to count
  EXPECT_EQ(lines[3], "{\"step\":3,\"lo");  // ended, so the next line starts a line of its own
  EXPECT_EQ(lines[4].substr(0, 9), "{\"step\":2");
  EXPECT_NE(lines[4].find("\"loss\":2.5"), std::string::npos);
  fs::remove_all(path_dirname(path));
}

TEST(Metrics, FanOutReachesEverySinkAndRefusesUseAfterClose) {
  std::string a = temp_path("a.jsonl"), b = temp_path("b.jsonl");
  Metrics m;
  m.add(jsonl_sink_new(JsonlOptions{a, false, ""}));
  m.add(jsonl_sink_new(JsonlOptions{b, false, ""}));
  m.write(5, vals({{"loss", 1}}));
  EXPECT_EQ(read_jsonl(a).at(0)["step"], 5);
  EXPECT_EQ(read_jsonl(b).at(0)["step"], 5);
  EXPECT_EQ(error_of([&] { m.write(-1, vals({})); }), "metrics: step must be 0 or more, got -1");
  m.close(0);
  m.close(0);  // idempotent
  EXPECT_EQ(error_of([&] { m.write(6, vals({})); }), "metrics: write after close");
  fs::remove(a);
  fs::remove(b);
}

TEST(Metrics, OpenRejectsBadPathsAndAddsNoWandbSinkWithoutAProject) {
  MetricsOptions o;
  o.console = false;
  o.jsonl.path = "/proc/luatune-no-such-dir/m.jsonl";
  EXPECT_TRUE(str_starts_with(error_of([&] { metrics_open(o); }),
                              "metrics: cannot open '/proc/luatune-no-such-dir/m.jsonl' for writing: "));
  o.jsonl.path = "";
  EXPECT_EQ(metrics_open(o)->sink_count(), 0u);
  o.wandb.project = "p";
  o.wandb.mode = "disabled";
  EXPECT_EQ(metrics_open(o)->sink_count(), 0u);
}

// A sink that records what reaches it, to see the fan-out's close and stop plumbing.
struct RecordingSink : MetricSink {
  int* closed_with;
  bool stop = false;
  explicit RecordingSink(int* c) : closed_with(c) {}
  void write(int64_t, const MetricValues&) override {}
  void summary(const MetricValues&) override {}
  void close(int code) override { *closed_with = code; }
  bool stopped() const override { return stop; }
};

TEST(Metrics, CloseOpenReachesEveryOpenLogWithTheExitCodeOnce) {
  int a = -1, b = -1;
  Metrics m1, m2;
  m1.add(std::make_unique<RecordingSink>(&a));
  auto sink = std::make_unique<RecordingSink>(&b);
  RecordingSink* raw = sink.get();
  m2.add(std::move(sink));
  EXPECT_FALSE(m2.stopped());
  raw->stop = true;
  EXPECT_TRUE(m2.stopped());
  m1.close(0);
  metrics_close_open(1);
  EXPECT_EQ(a, 0);  // already closed: untouched
  EXPECT_EQ(b, 1);
  metrics_close_open(3);  // nothing open any more
  EXPECT_EQ(b, 1);
}

TEST(Metrics, ConsoleTapsSeePrintedLinesUntilRemoved) {
  std::vector<std::string> seen;
  int owner = 0;
  metrics_console_add_tap(&owner, [&](const std::string& l) { seen.push_back(l); });
  FakeConsole con(/*tty=*/0, /*total_steps=*/0, /*progress_seconds=*/30);
  metrics_console_println("hello", con.cap.f);
  auto c = console_sink_new(con.o);
  c->write(1, {{{"loss", 1.0}}, ""});
  con.now = 10;
  c->write(2, {{{"loss", 0.5}}, ""});  // 10 s after the first line: not due
  metrics_console_remove_tap(&owner);
  metrics_console_println("after", con.cap.f);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], "hello");
  EXPECT_EQ(seen[1], "step 1 | loss 1.0000 | elapsed 0s");
}

// On a terminal the taps (W&B's output.log) get the plain lines a log would: first step, every N
// seconds, last step, evals; never the live line's redraws.
TEST(Metrics, ConsoleTapOnATerminalFollowsTheSecondsRule) {
  std::vector<std::string> seen;
  int owner = 0;
  metrics_console_add_tap(&owner, [&](const std::string& l) { seen.push_back(l); });
  FakeConsole con(/*tty=*/1, /*total_steps=*/100, /*progress_seconds=*/30, /*width=*/100);
  auto c = console_sink_new(con.o);
  con.write_loss_each_second(*c, 1, 50);
  c->write(50, vals({{"eval_loss", 2}}));
  con.write_loss_each_second(*c, 51, 100);
  c->close(0);
  metrics_console_remove_tap(&owner);
  std::vector<std::string> steps;
  for (const std::string& l : seen) steps.push_back(l.substr(0, l.find(" |")));
  EXPECT_EQ(steps, (std::vector<std::string>{"step 1/100", "step 31/100", "eval step 50/100", "step 61/100",
                                             "step 91/100", "step 100/100"}));
  EXPECT_EQ(seen.back(), "step 100/100 | loss 1.0000 | elapsed 1m40s");
  for (const std::string& l : seen) EXPECT_EQ(l.find('\r'), std::string::npos) << l;
  EXPECT_NE(con.cap.text().find("| elapsed 1m40s"), std::string::npos);  // the live bar shows it too
}
