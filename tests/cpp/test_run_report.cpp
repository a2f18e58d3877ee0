// The run report (host/metrics/run_report.h): metrics.jsonl parsed back with bad lines counted and
// repeated steps resolved to their last value, run.json's facts, the HTML's inline SVG curves
// (one polyline point per logged step), the Markdown's tables, the files written beside the JSONL,
// and metrics' close writing them without ever failing the run. Also the shared line chart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/core/svg_chart.h"
#include "host/metrics/metrics.h"
#include "host/metrics/run_report.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("luatune_test_run_report_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// The number of x,y pairs in the polyline of the series named `name`.
size_t polyline_points(const std::string& html, const std::string& name) {
  size_t at = html.find("data-name=\"" + name + "\" points=\"");
  if (at == std::string::npos) return 0;
  at = html.find("points=\"", at) + 8;
  std::string pts = html.substr(at, html.find('"', at) - at);
  return pts.empty() ? 0 : count_of(pts, " ") + 1;
}

// A run killed and resumed: a config line, steps 1-3 with step 2 logged twice (the later value
// wins), an eval record, a NaN, a line that is not JSON, a summary and a truncated last line.
const char* const kJsonl =
    "{\"config\":{\"lr\":0.001,\"lora\":{\"r\":8},\"device\":\"cpu\"}}\n"
    "{\"step\":1,\"time\":1000.0,\"elapsed\":1.0,\"loss\":3.0,\"lr\":0.0001,\"grad_norm\":1.5,\"tokens\":100,"
    "\"tokens_per_s\":50.0}\n"
    "{\"step\":2,\"time\":1010.0,\"elapsed\":11.0,\"loss\":2.5,\"lr\":0.0002,\"grad_norm\":1.25,\"tokens\":"
    "100,"
    "\"tokens_per_s\":55.0}\n"
    "this is not json\n"
    "{\"step\":2,\"time\":1040.0,\"elapsed\":1.0,\"loss\":2.4}\n"
    "{\"step\":2,\"time\":1041.0,\"elapsed\":2.0,\"eval_loss\":2.6,\"note\":\"eval\"}\n"
    "{\"step\":3,\"time\":1070.0,\"elapsed\":31.0,\"loss\":null,\"lr\":0.0002,\"grad_norm\":1.0,\"tokens\":"
    "100,"
    "\"tokens_per_s\":60.0}\n"
    "{\"summary\":{\"loss\":2.0,\"eval_loss\":2.6,\"note\":\"done\"}}\n"
    "{\"step\":4,\"time\":1080.0,\"loss\":2.";

}  // namespace

TEST(RunReport, ReadsCurvesKeepingTheLastValuePerStepAndCountsBadLines) {
  std::string dir = fresh_dir("read");
  write_text(dir + "/metrics.jsonl", kJsonl);
  RunReport r = run_report_read(dir + "/metrics.jsonl");
  EXPECT_EQ(r.bad_lines, 2);  // "this is not json" and the truncated last line
  EXPECT_EQ(r.records, 5);
  EXPECT_EQ(r.repeated, 1);  // step 2's loss, logged again after the resume
  EXPECT_EQ(r.first_step, 1);
  EXPECT_EQ(r.last_step, 3);
  EXPECT_DOUBLE_EQ(r.wall_seconds, 70);
  std::vector<std::string> keys;
  for (const RunCurve& c : r.curves) keys.push_back(c.key);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "tokens"}));
  const RunCurve* loss = r.curve("loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->points.size(), 3u);
  EXPECT_EQ(loss->points[1], (std::pair<int64_t, double>{2, 2.4}));
  EXPECT_TRUE(std::isnan(loss->points[2].second));  // null: kept as NaN, not drawn
  ASSERT_EQ(r.summary.size(), 2u);                  // numbers only: the note is not one
  EXPECT_EQ(r.summary[0], (std::pair<std::string, double>{"loss", 2.0}));
  EXPECT_EQ(r.config_source, "metrics.jsonl");  // no run.json: the JSONL's config line
  EXPECT_EQ(r.config["lora"]["r"], 8);
  EXPECT_EQ(r.curve("nothing"), nullptr);
}

TEST(RunReport, RunJsonGivesTitleConfigAndHardware) {
  std::string dir = fresh_dir("runjson");
  write_text(dir + "/metrics.jsonl", kJsonl);
  write_text(dir + "/run.json",
             R"({"run_id": "20261126T012032Z-vm-42", "started": "2026-11-26T01:20:32Z", "luatune": "0.1.0",
                 "host": "node7", "world_size": 2, "recipe": "/x/recipes/lora_finetune.lua",
                 "resumes": [{"step": 2}], "config": {"device": "cuda", "dtype": "bf16", "max_steps": 3}})");
  RunReport r = run_report_read(dir + "/metrics.jsonl");
  EXPECT_EQ(r.run_id, "20261126T012032Z-vm-42");
  EXPECT_EQ(r.config_source, "run.json");
  EXPECT_EQ(r.config["max_steps"], 3);
  EXPECT_EQ(r.resumes, 1);
  EXPECT_EQ(r.hardware, (std::vector<std::pair<std::string, std::string>>{{"host", "node7"},
                                                                          {"world size (ranks)", "2"},
                                                                          {"device (config)", "cuda"},
                                                                          {"dtype (config)", "bf16"}}));
  std::string html = run_report_html(r);
  EXPECT_NE(html.find("<h1>Run report: lora_finetune</h1>"), std::string::npos);
  EXPECT_NE(
      html.find("run 20261126T012032Z-vm-42 · started 2026-11-26T01:20:32Z · steps 1–3 · 1m10s wall clock"),
      std::string::npos);
  std::string md = run_report_markdown(r);
  EXPECT_NE(md.find("| host | node7 |"), std::string::npos);
  EXPECT_NE(md.find("resolved, from run.json"), std::string::npos);
  EXPECT_NE(md.find("- resumed 1 time (run.json)"), std::string::npos);
}

TEST(RunReport, HtmlDrawsEachCurveAsAnSvgWithOnePointPerStep) {
  std::string dir = fresh_dir("html");
  std::string text = "{\"config\":{\"max_steps\":37}}\n";
  for (int s = 1; s <= 37; s++) {
    text += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(3.0 / s) +
            ",\"lr\":" + std::to_string(1e-4 * s / 37) +
            ",\"grad_norm\":1,\"tokens_per_s\":" + std::to_string(1000 + s) + "}\n";
    if (s % 10 == 0)
      text += "{\"step\":" + std::to_string(s) + ",\"eval_loss\":" + std::to_string(3.5 / s) + "}\n";
  }
  write_text(dir + "/metrics.jsonl", text);
  RunReport r = run_report_read(dir + "/metrics.jsonl");
  std::string html = run_report_html(r);
  // Loss (with eval loss), learning rate, gradient norm, throughput.
  EXPECT_EQ(count_of(html, "<svg"), 4u);
  EXPECT_EQ(count_of(html, "</svg>"), 4u);
  EXPECT_EQ(count_of(html, "<polyline"), 5u);
  EXPECT_EQ(polyline_points(html, "loss"), 37u);
  EXPECT_EQ(polyline_points(html, "eval_loss"), 3u);
  EXPECT_EQ(polyline_points(html, "lr"), 37u);
  EXPECT_EQ(polyline_points(html, "tokens_per_s"), 37u);
  EXPECT_NE(html.find("<figcaption>Learning rate</figcaption>"), std::string::npos);
  EXPECT_NE(html.find(">2.0e-05</text>"), std::string::npos);  // a learning-rate tick, not "0.00"
  // Self-contained: nothing to run, nothing to fetch.
  for (const char* banned : {"<script", "src=", "href=", "url(http", "@import"})
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;

  // A long run is drawn as 1000 bucket means, and says so.
  text.clear();
  for (int s = 1; s <= 2500; s++)
    text += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(s) + "}\n";
  write_text(dir + "/metrics.jsonl", text);
  html = run_report_html(run_report_read(dir + "/metrics.jsonl"));
  EXPECT_EQ(polyline_points(html, "loss"), 1000u);
  EXPECT_NE(html.find("drawn as 1000 means of consecutive steps"), std::string::npos);
}

// The device the run used and its GPU by name, from the hardware record metrics.open writes beside
// the config (issue 32: the section said only "device (config) auto").
TEST(RunReport, HardwareNamesTheDeviceUsedAndItsGpu) {
  std::string dir = fresh_dir("hardware");
  write_text(dir + "/metrics.jsonl",
             "{\"config\":{\"device\":\"auto\",\"dtype\":\"bf16\"},"
             "\"hardware\":{\"device\":\"cuda:0\",\"name\":\"NVIDIA H200\"}}\n"
             "{\"step\":1,\"loss\":2.0}\n");
  RunReport r = run_report_read(dir + "/metrics.jsonl");
  EXPECT_EQ(r.hardware,
            (std::vector<std::pair<std::string, std::string>>{
                {"device", "cuda:0 (config: auto)"}, {"GPU", "NVIDIA H200"}, {"dtype (config)", "bf16"}}));
  EXPECT_EQ(r.bad_lines, 0);
  std::string md = run_report_markdown(r);
  EXPECT_NE(md.find("| device | cuda:0 (config: auto) |\n| GPU | NVIDIA H200 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("device (config)"), std::string::npos) << md;
  EXPECT_NE(run_report_html(r).find("NVIDIA H200"), std::string::npos);
  // On the CPU: the device as the config named it, and the CPU's model.
  write_text(
      dir + "/metrics.jsonl",
      "{\"config\":{\"device\":\"cpu\"},\"hardware\":{\"device\":\"cpu\",\"name\":\"AMD EPYC 9454\"}}\n");
  EXPECT_EQ(run_report_read(dir + "/metrics.jsonl").hardware,
            (std::vector<std::pair<std::string, std::string>>{{"device", "cpu"}, {"CPU", "AMD EPYC 9454"}}));
}

TEST(RunReport, MarkdownHasFinalNumbersConfigAndSampledPointsAsTables) {
  std::string dir = fresh_dir("md");
  write_text(dir + "/metrics.jsonl", kJsonl);
  std::string md = run_report_markdown(run_report_read(dir + "/metrics.jsonl"));
  EXPECT_NE(md.find("# Run report: md\n"), std::string::npos);  // no run.json: the directory's name
  EXPECT_NE(
      md.find("## Final numbers\n\n| metric | value | from |\n|---|---:|---|\n"
              "| loss | 2.0000 | summary |\n| eval_loss | 2.6000 | summary |\n"
              "| lr | 2.0e-04 | step 3 |\n| grad_norm | 1.000 | step 3 |\n| tokens_per_s | 60 | step 3 |\n"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("### loss (2 points)\n\n| step | loss |\n|---:|---:|\n| 1 | 3.0000 |\n| 2 | 2.4000 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| lora.r | 8 |"), std::string::npos);
  EXPECT_NE(md.find("- 2 lines were skipped in metrics.jsonl"), std::string::npos);
  EXPECT_NE(md.find("- 1 value was logged again for a step already logged"), std::string::npos);
  EXPECT_EQ(md.find("<svg"), std::string::npos);
  EXPECT_EQ(md.find("### tokens "), std::string::npos);  // counts are not curves worth a table

  // Sampled: at most 10 rows per curve, first and last included.
  std::string text;
  for (int s = 1; s <= 100; s++)
    text += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(s) + "}\n";
  write_text(dir + "/metrics.jsonl", text);
  md = run_report_markdown(run_report_read(dir + "/metrics.jsonl"));
  size_t table = md.find("### loss (100 points)");
  ASSERT_NE(table, std::string::npos);
  std::string rows = md.substr(table, md.find("\n\n", md.find("|---:|", table)) - table);
  EXPECT_EQ(count_of(rows, "\n| "), 11u);  // the header and 10 rows
  EXPECT_NE(rows.find("\n| 1 | 1.0000 |"), std::string::npos);
  EXPECT_NE(rows.find("\n| 100 | 100.0000 |"), std::string::npos);
}

TEST(RunReport, AMissingFileIsOneLineNamingIt) {
  std::string dir = fresh_dir("missing");
  EXPECT_EQ(error_of([&] { run_report_read(run_report_jsonl_of(dir)); }),
            "report: no metrics file '" + dir +
                "/metrics.jsonl' (metrics.open{jsonl = OUTPUT_DIR .. \"/metrics.jsonl\"} writes it)");
  EXPECT_EQ(run_report_jsonl_of(dir + "/lora.jsonl"), dir + "/lora.jsonl");  // a file: as given
  // An empty file is a report of nothing, not an error.
  write_text(dir + "/metrics.jsonl", "");
  EXPECT_NE(run_report_html(run_report_read(dir + "/metrics.jsonl")).find("no step was logged"),
            std::string::npos);
}

TEST(RunReport, WritesBesideTheJsonlOrWhereAsked) {
  std::string dir = fresh_dir("write");
  write_text(dir + "/metrics.jsonl", kJsonl);
  write_text(dir + "/pretrain.jsonl", kJsonl);
  EXPECT_EQ(run_report_write(dir + "/metrics.jsonl"), dir + "/report.html");
  EXPECT_TRUE(file_exists(dir + "/report.html"));
  EXPECT_TRUE(file_exists(dir + "/report.md"));
  EXPECT_EQ(run_report_write(dir + "/pretrain.jsonl"), dir + "/pretrain.report.html");  // NAME.jsonl
  EXPECT_TRUE(file_exists(dir + "/pretrain.report.md"));
  EXPECT_NE(file_read(dir + "/pretrain.report.html").find("Run report: write (pretrain)"), std::string::npos);
  EXPECT_EQ(run_report_write(dir + "/metrics.jsonl", dir + "/elsewhere/run.html"),
            dir + "/elsewhere/run.html");
  EXPECT_TRUE(file_exists(dir + "/elsewhere/run.md"));
  for (const auto& e : fs::directory_iterator(dir))  // written then renamed: no temporaries left
    EXPECT_EQ(e.path().filename().string().find("tmp"), std::string::npos) << e.path();
}

TEST(RunReport, MetricsCloseWritesTheReportAndNeverFailsTheRun) {
  std::string dir = fresh_dir("close");
  MetricsOptions o;
  o.console = false;
  o.jsonl.path = dir + "/metrics.jsonl";
  auto m = metrics_open(o);
  m->write(1, {{{"loss", 2.0}}, ""});
  m->write(2, {{{"loss", 1.0}}, ""});
  testing::internal::CaptureStdout();
  m->close(0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "report: " + dir + "/report.html\n");
  EXPECT_EQ(polyline_points(file_read(dir + "/report.html"), "loss"), 2u);

  // report = false: none.
  std::string off = fresh_dir("close_off");
  o.jsonl.path = off + "/metrics.jsonl";
  o.report = false;
  metrics_open(o)->close(0);
  EXPECT_FALSE(file_exists(off + "/report.html"));

  // A report that cannot be written is a warning on stderr; close returns normally.
  std::string gone = fresh_dir("close_gone");
  o.jsonl.path = gone + "/metrics.jsonl";
  o.report = true;
  auto g = metrics_open(o);
  fs::remove_all(gone);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(g->close(0));
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "warning: report: not written: no metrics file '" + gone +
                "/metrics.jsonl' (metrics.open{jsonl = OUTPUT_DIR .. \"/metrics.jsonl\"} writes it)\n");
}

TEST(SvgChart, LineChartDrawsFinitePointsAndSaysWhenThereAreNone) {
  SvgLineChart c;
  c.title = "t";
  c.x_label = "step";
  c.y_label = "loss";
  c.series.push_back({"a", "#000", {{1, 1}, {2, NAN}, {3, 2}}});
  std::string svg = svg_line_chart(c);
  EXPECT_EQ(polyline_points(svg, "a"), 2u);
  EXPECT_EQ(count_of(svg, "<circle"), 2u);                     // few points: a dot each
  EXPECT_EQ(svg.find("class=\"legend\""), std::string::npos);  // one series: no legend
  c.series.push_back({"b <&>", "#111", {{1, 5}}});
  svg = svg_line_chart(c);
  EXPECT_NE(svg.find("<g class=\"legend\">"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"b &lt;&amp;&gt;\""), std::string::npos);
  c.series = {{"none", "#000", {}}};
  EXPECT_NE(svg_line_chart(c).find(">no data</text>"), std::string::npos);
  EXPECT_EQ(svg_tick_label(5e-5, 5e-5), "5.0e-05");
  EXPECT_EQ(svg_tick_label(0, 5e-5), "0");
  EXPECT_EQ(svg_tick_label(1.05e-4, 5e-6), "1.05e-04");  // enough digits to tell neighbours apart
  EXPECT_EQ(svg_tick_label(9.5e-5, 5e-6), "9.5e-05");
  EXPECT_EQ(svg_tick_label(250, 50), "250");
  EXPECT_EQ(svg_tick_label(2.5, 0.5), "2.5");
}

// A run of two stages in one log (quickstart, issue 32): the notes start its phases, the eval_
// values make the evaluations table, in both renderers.
TEST(RunReport, EvaluationsTableAndPhasesFromNotes) {
  std::string dir = fresh_dir("phases");
  write_text(dir + "/metrics.jsonl",
             "{\"step\":1,\"loss\":11.8,\"note\":\"pretraining\"}\n"
             "{\"step\":2,\"loss\":8.0}\n"
             "{\"step\":2,\"eval_acc_seen\":0.27,\"eval_acc_held_out\":0.24}\n"
             "{\"step\":3,\"loss\":3.5,\"note\":\"LoRA\"}\n"
             "{\"step\":4,\"loss\":0.5}\n"
             "{\"step\":4,\"eval_acc_seen\":0.88,\"eval_acc_held_out\":0.82}\n");
  RunReport r = run_report_read(dir + "/metrics.jsonl");
  EXPECT_EQ(r.phases, (std::vector<std::pair<int64_t, std::string>>{{1, "pretraining"}, {3, "LoRA"}}));
  const std::string md = run_report_markdown(r);
  EXPECT_NE(md.find("## Evaluations\n\n| step | phase | eval_acc_seen | eval_acc_held_out |\n"
                    "|---:|---|---:|---:|\n| 2 | pretraining | 0.27 | 0.24 |\n| 4 | LoRA | 0.88 | 0.82 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(
      md.find(
          "## Phases\n\n| phase | steps |\n|---|---|\n| pretraining | steps 1–2 |\n| LoRA | steps 3–4 |\n"),
      std::string::npos)
      << md;
  const std::string html = run_report_html(r);
  EXPECT_NE(html.find("<h2>Evaluations</h2>"), std::string::npos);
  EXPECT_NE(html.find("<td>LoRA</td><td class=\"num\">0.88</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr><td>LoRA</td><td>steps 3–4</td></tr>"), std::string::npos) << html;
  // No eval_ key and no note: neither section.
  write_text(dir + "/metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n");
  const std::string plain = run_report_markdown(run_report_read(dir + "/metrics.jsonl"));
  EXPECT_EQ(plain.find("## Evaluations"), std::string::npos);
  EXPECT_EQ(plain.find("## Phases"), std::string::npos);
}

// Tables of text (quickstart's answers before and after): written by Metrics::table, read back in
// order with a repeated title replacing its table, drawn in both renderers with the text escaped; a
// row of the wrong width is refused when logged and skipped (counted) when read.
TEST(RunReport, TablesOfTextRoundTripThroughTheJsonl) {
  std::string dir = fresh_dir("tables");
  MetricsOptions o;
  o.console = false;
  o.jsonl.path = dir + "/metrics.jsonl";
  o.report = false;
  auto m = metrics_open(o);
  m->write(1, {{{"loss", 2.0}}, ""});
  m->table({"Answers", {"question", "before", "after"}, {{"Reverse: a b", "<think>", "b a"}}});
  m->table({"Other", {"k"}, {{"x|y"}}});
  m->table({"Answers", {"question", "before", "after"}, {{"Reverse: c d", "<think>", "d c"}}});
  EXPECT_THROW(m->table({"Bad", {"a", "b"}, {{"only one"}}}), std::exception);
  m->close(0);
  std::ofstream(dir + "/metrics.jsonl", std::ios::app)
      << "{\"table\":{\"title\":\"Broken\",\"columns\":[\"a\"],\"rows\":[[1]]}}\n";
  RunReport r = run_report_read(dir + "/metrics.jsonl");
  ASSERT_EQ(r.tables.size(), 2u);
  EXPECT_EQ(r.tables[0].title, "Answers");
  EXPECT_EQ(r.tables[0].rows, (std::vector<std::vector<std::string>>{{"Reverse: c d", "<think>", "d c"}}));
  EXPECT_EQ(r.tables[1].title, "Other");
  EXPECT_EQ(r.bad_lines, 1);
  const std::string md = run_report_markdown(r);
  EXPECT_NE(md.find("## Answers\n\n| question | before | after |\n|---|---|---|\n| Reverse: c d | "
                    "&lt;think&gt; | d c |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| x\\|y |"), std::string::npos) << md;
  const std::string html = run_report_html(r);
  EXPECT_NE(html.find("<h2>Answers</h2>\n<table class=\"text\"><thead><tr><th>question</th><th>before</th>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<td>&lt;think&gt;</td><td>d c</td>"), std::string::npos) << html;
}

// `runner report DIR` on a directory without metrics.jsonl says what it holds instead.
TEST(RunReport, DirectoryWithoutMetricsSaysWhatItIs) {
  std::string dir = fresh_dir("no_metrics");
  auto error = [&] {
    try {
      run_report_jsonl_of(dir);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error().find("(metrics.open{jsonl = OUTPUT_DIR"), std::string::npos) << error();
  write_text(dir + "/pretrain.jsonl", "{\"step\":1,\"loss\":2.0}\n");
  write_text(dir + "/lora.jsonl", "{\"step\":1,\"loss\":2.0}\n");
  EXPECT_EQ(error(), "report: no metrics file '" + dir +
                         "/metrics.jsonl'; it holds lora.jsonl, pretrain.jsonl" +
                         "\n  HINT: name the log to draw: runner report " + dir + "/lora.jsonl");
  write_text(dir + "/trials.jsonl", "{}\n");
  EXPECT_NE(error().find("is a sweep's directory)\n  HINT: runner sweep --report DIR tables"),
            std::string::npos)
      << error();
  write_text(dir + "/metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n");
  EXPECT_EQ(run_report_jsonl_of(dir), dir + "/metrics.jsonl");
}
