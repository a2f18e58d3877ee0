// The hardware report renderers (host/hw/report*.cpp) on a hand-built document with measured,
// projected, planned and not-fitting rows: Markdown lines pinned verbatim, the sort order, number
// formats, escaping of names from user catalogs, the HTML page self-contained with one SVG per
// chart and projected bars drawn apart from measured ones, missing fields as dashes, and the
// one-line errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "host/core/strings.h"
#include "host/hw/report.h"
#include "host/hw/report_doc.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
using json = nlohmann::json;

namespace {

// Rows deliberately out of order: the renderer sorts them.
json sample() {
  return {
      {"title", "8B LoRA"},
      {"recipe", "lora_finetune"},
      {"date", "2026-11-22"},
      {"model", {{"name", "Llama-3.1-8B"}, {"parameters", 8.03e9}, {"trainable", 4.2e7}, {"method", "lora"}}},
      {"measured",
       {{{"device", "NVIDIA H100 80GB HBM3"},
         {"gpu", "H100 SXM"},
         {"tokens_per_s", 4150.2},
         {"mfu", 0.412},
         {"peak_memory_gb", 36.9},
         {"seconds", 950},
         {"cost_usd", 0.71},
         {"eval_loss", 1.23456}}}},
      {"rows",
       {{{"gpu", "RTX 4090"},
         {"memory_gb", 24},
         {"predicted_peak_gb", 31.24},
         {"fits", false},
         {"max_micro_batch", 0},
         {"kind", "planned"},
         {"price_per_hour", 0.34},
         {"advice", {"Use QLoRA: 14.9 GB.", "Or micro-batch 1."}}},
        {{"gpu", "H200 SXM"},
         {"memory_gb", 141},
         {"predicted_peak_gb", 31.24},
         {"fits", true},
         {"max_micro_batch", 32},
         {"kind", "projected"},
         {"tokens_per_s", 5020.4},
         {"hours", 11.07},
         {"cost_usd", 41.95},
         {"usd_per_mtok", 0.2097},
         {"price_per_hour", 3.79},
         {"price_source", "RunPod"},
         {"price_date", "2026-11-01"}},
        {{"gpu", "H100 SXM"},
         {"memory_gb", 80},
         {"predicted_peak_gb", 31.24},
         {"fits", true},
         {"max_micro_batch", 16},
         {"kind", "measured"},
         {"tokens_per_s", 4150.2},
         {"hours", 13.386},
         {"cost_usd", 36.0084},
         {"usd_per_mtok", 0.18},
         {"eval_loss", 1.23456},
         {"price_per_hour", 2.69}},
        {{"gpu", "A6000 <script>alert(1)</script>"},
         {"memory_gb", 48},
         {"predicted_peak_gb", 31.24},
         {"fits", true},
         {"max_micro_batch", 4},
         {"kind", "planned"}},
        {{"gpu", "A100 80GB"},
         {"memory_gb", 80},
         {"predicted_peak_gb", 31.24},
         {"fits", true},
         {"max_micro_batch", 16},
         {"kind", "projected"},
         {"tokens_per_s", 1510},
         {"hours", 1234.6},
         {"cost_usd", 1592.5},
         {"usd_per_mtok", 0.0039}}}},
      {"formulas",
       {{"memory", "weights + states"}, {"mfu", "6 N tok/s / peak"}, {"projection", "scale by FLOP/s"}}},
      {"notes", {"Prices change."}},
  };
}

bool has_line(const std::string& text, const std::string& line) {
  for (const std::string& l : str_split(text, '\n'))
    if (l == line) return true;
  return false;
}

}  // namespace

// ============================================================================================
// Markdown

TEST(HwReportMarkdown, MainTableRowsPinned) {
  std::string md = hw_report_markdown(sample());
  EXPECT_TRUE(has_line(md,
                       "| GPU | memory GB | fits | max micro-batch | predicted peak GB | tokens/s | hours | "
                       "cost $ | $/1M tok | eval loss | kind |"))
      << md;
  EXPECT_TRUE(has_line(md, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")) << md;
  EXPECT_TRUE(has_line(
      md, "| H100 SXM | 80 | yes | 16 | 31.2 | 4,150 | 13.4 | 36.01 | 0.18 | 1.2346 | **measured** |"))
      << md;
  EXPECT_TRUE(
      has_line(md, "| H200 SXM | 141 | yes | 32 | 31.2 | 5,020 | 11.1 | 41.95 | 0.21 | - | projected |"))
      << md;
  EXPECT_TRUE(
      has_line(md, "| A100 80GB | 80 | yes | 16 | 31.2 | 1,510 | 1,235 | 1,592.50 | <0.01 | - | projected |"))
      << md;
  EXPECT_TRUE(has_line(md, "| RTX 4090 | 24 | **no** | 0 | 31.2 | - | - | - | - | - | planned |")) << md;
}

TEST(HwReportMarkdown, SortedFitsFirstThenCostAscending) {
  std::string md = hw_report_markdown(sample());
  std::vector<std::string> order = {"| H100 SXM |", "| H200 SXM |", "| A100 80GB |", "| A6000 ",
                                    "| RTX 4090 |"};
  size_t last = 0;
  for (const std::string& gpu : order) {
    size_t at = md.find(gpu, md.find("## GPUs"));
    ASSERT_NE(at, std::string::npos) << gpu;
    EXPECT_GT(at, last) << gpu << " out of order:\n" << md;
    last = at;
  }
}

TEST(HwReportMarkdown, SummaryNamesCheapestFastestAndMeasuredDevice) {
  EXPECT_TRUE(contains_all(hw_report_markdown(sample()),
                           {"**Best value:** **H100 SXM** fits and costs $36.01 (13.4 h, measured). "
                            "**Fastest:** **H200 SXM** at 11.1 h ($41.95, projected). "
                            "**Measured on:** NVIDIA H100 80GB HBM3 (H100 SXM) at 4,150 tokens/s. "
                            "4 of 5 GPUs fit; 1 does not.",
                            "Model **Llama-3.1-8B** (8.03B parameters, 42M trainable, lora) · recipe "
                            "`lora_finetune` · 2026-11-22"}));
}

TEST(HwReportMarkdown, SectionsMeasuredAdviceFormulasNotes) {
  std::string md = hw_report_markdown(sample());
  // Only the measured run's columns that it has.
  EXPECT_TRUE(has_line(md, "| device | GPU | tokens/s | MFU | peak GB | time | cost $ | eval loss |")) << md;
  EXPECT_TRUE(
      has_line(md, "| NVIDIA H100 80GB HBM3 | H100 SXM | 4,150 | 41.2% | 36.9 | 15m50s | 0.71 | 1.2346 |"))
      << md;
  EXPECT_TRUE(has_line(md, "- **RTX 4090**: needs 31.2 GB, has 24 GB. Use QLoRA: 14.9 GB. Or micro-batch 1."))
      << md;
  EXPECT_TRUE(has_line(md, "| H200 SXM | 3.79 | RunPod | 2026-11-01 |")) << md;
  EXPECT_TRUE(has_line(md, "| H100 SXM | 2.69 | - | - |")) << md;
  // mfu, projection, memory first whatever the document's order.
  size_t mfu = md.find("- **MFU**: 6 N tok/s / peak"),
         proj = md.find("- **Projection rule**: scale by FLOP/s"),
         mem = md.find("- **Memory model**: weights + states");
  ASSERT_NE(mem, std::string::npos) << md;
  EXPECT_LT(mfu, proj);
  EXPECT_LT(proj, mem);
  EXPECT_TRUE(has_line(md, "- Prices change.")) << md;
  EXPECT_NE(md.find("kind: **measured** = timed on this GPU"), std::string::npos);
}

TEST(HwReportMarkdown, EscapesNamesFromCatalogs) {
  json doc = sample();
  doc["rows"][0]["gpu"] = "RTX | 4090";
  std::string md = hw_report_markdown(doc);
  EXPECT_EQ(md.find("<script>"), std::string::npos) << md;
  EXPECT_NE(md.find("| A6000 &lt;script&gt;alert(1)&lt;/script&gt; | 48 | yes | 4 | 31.2 | - | - | - | - | - "
                    "| planned |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| RTX \\| 4090 | 24 |"), std::string::npos) << md;
}

// A cost under a cent reads "$<0.01" in the raw file as in a viewer: "<0" cannot open a tag, so it
// is not escaped to "$&lt;0.01" (issue 32).
TEST(HwReportMarkdown, CostUnderACentReadsAsWritten) {
  json doc = {{"rows",
               {{{"gpu", "T4"},
                 {"fits", true},
                 {"kind", "projected"},
                 {"hours", 0.01},
                 {"cost_usd", 0.004},
                 {"usd_per_mtok", 0.003}}}}};
  std::string md = hw_report_markdown(doc);
  EXPECT_NE(md.find("**Best value:** **T4** fits and costs $<0.01 (0.01 h, projected)."), std::string::npos)
      << md;
  EXPECT_TRUE(has_line(md, "| T4 | - | yes | - | - | - | 0.01 | <0.01 | <0.01 | projected |")) << md;
  EXPECT_EQ(md.find("&lt;"), std::string::npos) << md;
}

TEST(HwReportMarkdown, OptionalColumnsAndMissingFields) {
  json doc = {{"rows", {{{"gpu", "T4"}}}}};
  std::string md = hw_report_markdown(doc);
  EXPECT_TRUE(has_line(md, "# Hardware comparison")) << md;
  EXPECT_TRUE(has_line(md, "| T4 | - | - | - | - | - | - | - | - | - |")) << md;
  EXPECT_EQ(md.find("eval loss"), std::string::npos) << md;
  EXPECT_EQ(md.find("## Measured runs"), std::string::npos) << md;
  EXPECT_NE(md.find("Nothing was measured"), std::string::npos) << md;
  // Accuracy gets its column when a row has it.
  doc["rows"][0]["accuracy"] = 0.5;
  EXPECT_NE(hw_report_markdown(doc).find("| accuracy | kind |"), std::string::npos);
}

TEST(HwReportMarkdown, NumberFormats) {
  EXPECT_EQ(hw_fmt_thousands(1234567.891, 2), "1,234,567.89");
  EXPECT_EQ(hw_fmt_thousands(-999.4, 0), "-999");
  EXPECT_EQ(hw_fmt_thousands(-0.001, 2), "0.00");
  EXPECT_EQ(hw_fmt_tokens_per_s(45.67), "45.7");
  EXPECT_EQ(hw_fmt_tokens_per_s(12345.6), "12,346");
  EXPECT_EQ(hw_fmt_hours(0.5), "0.50");
  EXPECT_EQ(hw_fmt_hours(99.94), "99.9");
  EXPECT_EQ(hw_fmt_usd(0.004), "<0.01");
  EXPECT_EQ(hw_fmt_usd(0), "0.00");
  EXPECT_EQ(hw_fmt_gb(23.14), "23.1");
  EXPECT_EQ(hw_fmt_count(8.03e9), "8.03B");
  EXPECT_EQ(hw_fmt_duration(59), "59s");
  EXPECT_EQ(hw_fmt_duration(7199), "2h00m");
  EXPECT_EQ(hw_fmt_duration(7260), "2h01m");
}

// The line under the title, shared by both renderers: only what the document gives, in order.
TEST(HwReportMarkdown, AboutLineHasOnlyTheGivenParts) {
  const HwMarkup m{[](const std::string& s) { return s; }, [](const std::string& s) { return "*" + s + "*"; },
                   [](const std::string& s) { return "`" + s + "`"; }};
  HwReportDoc doc;
  EXPECT_EQ(hw_report_about(doc, m), std::vector<std::string>());
  doc.date = "2026-11-22";
  EXPECT_EQ(hw_report_about(doc, m), (std::vector<std::string>{"2026-11-22"}));
  doc.model_name = "tiny";
  doc.recipe = "lora_finetune";
  EXPECT_EQ(hw_report_about(doc, m),
            (std::vector<std::string>{"Model *tiny*", "recipe `lora_finetune`", "2026-11-22"}));
  doc.model_trainable = 4.2e7;
  doc.model_method = "lora";
  EXPECT_EQ(hw_report_about(doc, m)[0], "Model *tiny* (42M trainable, lora)");
  doc.model_parameters = 8.03e9;
  EXPECT_EQ(hw_report_about(doc, m)[0], "Model *tiny* (8.03B parameters, 42M trainable, lora)");
}

// ============================================================================================
// HTML

TEST(HwReportHtml, SelfContained) {
  std::string html = hw_report_html(sample());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* bad :
       {"http://", "https://", "src=", "href=", "<script", "<link", "@import", "<img", "<iframe"})
    EXPECT_EQ(html.find(bad), std::string::npos) << bad;
  EXPECT_NE(html.find("<style>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
}

TEST(HwReportHtml, AboutLineUnderTheTitle) {
  std::string html = hw_report_html(sample());
  EXPECT_NE(
      html.find("<h1>8B LoRA</h1>\n<p class=\"about\">Model <strong>Llama-3.1-8B</strong> (8.03B "
                "parameters, 42M trainable, lora) · recipe <code>lora_finetune</code> · 2026-11-22</p>\n"),
      std::string::npos)
      << html;
}

TEST(HwReportHtml, OneSvgPerChartWithAxes) {
  std::string html = hw_report_html(sample());
  EXPECT_EQ(count_of(html, "<svg"), 3u);
  EXPECT_EQ(count_of(html, "</svg>"), 3u);
  EXPECT_TRUE(contains_all(
      html, {"aria-label=\"Time per GPU\"", "aria-label=\"Predicted peak memory vs GPU memory\"",
             "aria-label=\"Cost per GPU\"", ">time (hours, wall clock)</text>", ">cost (US dollars)</text>",
             ">memory (GB): predicted peak vs the GPU&#39;s capacity</text>"}));
}

TEST(HwReportHtml, ProjectedBarsHatchedMeasuredSolid) {
  std::string html = hw_report_html(sample());
  // Time and cost: one measured bar each (solid), two projected (the hatch pattern).
  EXPECT_EQ(count_of(html, "<rect class=\"bar measured\""), 2u);
  EXPECT_EQ(count_of(html, "<rect class=\"bar projected\""), 4u);
  EXPECT_TRUE(contains_all(
      html, {"class=\"bar measured\" x=\"200.0\" y=\"53.0\" width=\"4.8\" height=\"18.0\" fill=\"#2b6cb0\"",
             "fill=\"url(#hatch-time)\"", "fill=\"url(#hatch-cost)\"", "<pattern id=\"hatch-time\"",
             ">13.4 h · measured</text>", ">11.1 h · projected</text>"}));
  // Rows with no time show a dash and why, not a bar.
  EXPECT_TRUE(contains_all(html, {">— planned: memory only</text>", ">— does not fit</text>"}));
}

TEST(HwReportHtml, FitsMarkers) {
  std::string html = hw_report_html(sample());
  EXPECT_EQ(count_of(html, "<span class=\"badge fit\">✓ fits</span>"), 4u);
  EXPECT_EQ(count_of(html, "<span class=\"badge nofit\">✗ does not fit</span>"), 1u);
  // Memory: every row has a capacity track and marker; the one that does not fit is red.
  EXPECT_EQ(count_of(html, "<rect class=\"capacity\""), 5u);
  EXPECT_EQ(count_of(html, "<rect class=\"marker\""), 5u);
  EXPECT_EQ(count_of(html, "fill=\"#e53e3e\"/>"), 2u);  // the red bar and its legend swatch
  EXPECT_TRUE(
      contains_all(html, {">31.2 of 24 GB · does not fit</text>", "<tr class=\"nofit\"><td>RTX 4090</td>"}));
}

TEST(HwReportHtml, MissingFieldsDashAndOneOrManyRows) {
  std::string one = hw_report_html({{"rows", {{{"gpu", "T4"}}}}});
  EXPECT_EQ(count_of(one, "<svg"), 3u);
  EXPECT_EQ(count_of(one, "<rect class=\"bar"), 0u);
  EXPECT_NE(one.find("<tr class=\"fit\"><td>T4</td><td class=\"num\">—</td><td>—</td>"), std::string::npos)
      << one;
  EXPECT_NE(one.find(">— no memory figures</text>"), std::string::npos);
  json doc = sample();
  json many = json::array();
  for (int i = 0; i < 20; i++) {
    json r = doc["rows"][i % 5];
    r["gpu"] = r["gpu"].get<std::string>() + " " + std::to_string(i);
    many.push_back(r);
  }
  doc["rows"] = many;
  std::string html = hw_report_html(doc);
  EXPECT_EQ(count_of(html, "<svg"), 3u);
  EXPECT_EQ(count_of(html, "<rect class=\"capacity\""), 20u);
  // 20 rows of 28 units under a 48-unit legend and a 52-unit axis.
  EXPECT_NE(html.find("viewBox=\"0 0 960.0 660.0\""), std::string::npos);
}

// ============================================================================================
// Errors

TEST(HwReportErrors, MessagesPinned) {
  EXPECT_EQ(error_of([] { hw_report_markdown(json::array()); }),
            "hw.report: the document must be an object, got array");
  EXPECT_EQ(error_of([] {
              hw_report_html(json{{"title", "x"}});
            }),
            "hw.report: \"rows\" must be a list (one entry per GPU), got nothing");
  EXPECT_EQ(error_of([] {
              hw_report_html(json{{"rows", {{"gpu", "x"}}}});
            }),
            "hw.report: \"rows\" must be a list (one entry per GPU), got object");
  json doc = sample();
  doc["rows"][2].erase("gpu");
  EXPECT_EQ(error_of([&] { hw_report_markdown(doc); }), "hw.report: rows[3] has no \"gpu\"");
  doc = sample();
  doc["rows"][0] = "H100";
  EXPECT_EQ(error_of([&] { hw_report_html(doc); }), "hw.report: rows[1] must be an object, got string");
  doc = sample();
  doc["rows"][1]["hours"] = "11";
  EXPECT_EQ(error_of([&] { hw_report_html(doc); }), "hw.report: rows[2].hours must be a number, got string");
  doc = sample();
  doc["rows"][1]["kind"] = "guessed";
  EXPECT_EQ(error_of([&] { hw_report_html(doc); }),
            "hw.report: rows[2].kind must be \"measured\", \"projected\" or \"planned\", got \"guessed\"");
  doc = sample();
  doc["rows"][1]["fits"] = "yes";
  EXPECT_EQ(error_of([&] { hw_report_html(doc); }), "hw.report: rows[2].fits must be a boolean, got string");
  doc = sample();
  doc["measured"] = 3;
  EXPECT_EQ(error_of([&] { hw_report_html(doc); }), "hw.report: \"measured\" must be a list, got number");
  // An empty Lua table arrives as an empty object: no runs, not an error.
  doc["measured"] = json::object();
  EXPECT_EQ(error_of([&] { hw_report_html(doc); }), "(no error)");
}
