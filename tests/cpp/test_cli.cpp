// Command-line parsing: verbs, overrides, --config, and usage errors.
#include <gtest/gtest.h>

#include "host/cli/cli.h"
#include "host/core/error.h"

using namespace luatune;

TEST(Cli, RecipeWithOverrides) {
  Command c = cli_parse({"recipes/x.lua", "lr=2e-4", "--steps=3", "--config", "o.lua", "lora.r=8"});
  EXPECT_EQ(c.verb, Command::Verb::run);
  EXPECT_EQ(c.recipe, "recipes/x.lua");
  EXPECT_EQ(c.overrides, (std::vector<std::string>{"lr=2e-4", "steps=3", "lora.r=8"}));
  EXPECT_EQ(c.config_files, (std::vector<std::string>{"o.lua"}));
}

TEST(Cli, Verbs) {
  EXPECT_EQ(cli_parse({}).verb, Command::Verb::help);
  EXPECT_EQ(cli_parse({"--help"}).verb, Command::Verb::help);
  EXPECT_EQ(cli_parse({"--version"}).verb, Command::Verb::version);
  EXPECT_EQ(cli_parse({"ls"}).verb, Command::Verb::ls);
  Command v = cli_parse({"validate", "quickstart", "steps=2"});
  EXPECT_EQ(v.verb, Command::Verb::validate);
  EXPECT_EQ(v.recipe, "quickstart");
  Command cp = cli_parse({"cp", "quickstart", "mine.lua"});
  EXPECT_EQ(cp.verb, Command::Verb::cp);
  EXPECT_EQ(cp.dest, "mine.lua");
}

TEST(Cli, Tokenize) {
  Command c = cli_parse({"tokenize", "--tokenizer", "models/x", "--special", "--decode"});
  EXPECT_EQ(c.verb, Command::Verb::tokenize);
  EXPECT_EQ(c.tokenizer, "models/x");
  EXPECT_TRUE(c.special);
  EXPECT_TRUE(c.decode);
  Command d = cli_parse({"tokenize", "--tokenizer=y"});
  EXPECT_EQ(d.tokenizer, "y");
  EXPECT_FALSE(d.special);
  EXPECT_FALSE(d.decode);
  EXPECT_THROW(cli_parse({"tokenize"}), UsageError);
  EXPECT_THROW(cli_parse({"tokenize", "--tokenizer"}), UsageError);
  EXPECT_THROW(cli_parse({"tokenize", "--tokenizer", "x", "extra"}), UsageError);
}

TEST(Cli, Data) {
  Command c = cli_parse({"data", "--tokenizer", "m", "--format=chat", "--chat-template", "chatml",
                         "--max-length", "64", "--limit=3", "train.jsonl"});
  EXPECT_EQ(c.verb, Command::Verb::data);
  EXPECT_EQ(c.tokenizer, "m");
  EXPECT_EQ(c.format, "chat");
  EXPECT_EQ(c.chat_template, "chatml");
  EXPECT_EQ(c.max_length, 64);
  EXPECT_EQ(c.limit, 3);
  EXPECT_EQ(c.data_file, "train.jsonl");
  Command d = cli_parse({"data", "train.jsonl", "--tokenizer=m"});
  EXPECT_EQ(d.max_length, 2048);
  EXPECT_EQ(d.limit, 10);
  EXPECT_THROW(cli_parse({"data", "--tokenizer", "m"}), UsageError);
  EXPECT_THROW(cli_parse({"data", "f.jsonl"}), UsageError);
  EXPECT_THROW(cli_parse({"data", "--tokenizer", "m", "a.jsonl", "b.jsonl"}), UsageError);
  EXPECT_THROW(cli_parse({"data", "--tokenizer", "m", "--limit", "0", "a.jsonl"}), UsageError);
  EXPECT_THROW(cli_parse({"data", "--tokenizer", "m", "--max-length"}), UsageError);
}

TEST(Cli, UsageErrors) {
  EXPECT_THROW(cli_parse({"validate"}), UsageError);
  EXPECT_THROW(cli_parse({"cp", "only_one"}), UsageError);
  EXPECT_THROW(cli_parse({"x.lua", "notakv"}), UsageError);
  EXPECT_THROW(cli_parse({"--frobnicate"}), UsageError);
  EXPECT_THROW(cli_parse({"x.lua", "--config"}), UsageError);
  try {
    cli_parse({"x.lua", "stray"});
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected argument 'stray': expected key=value"),
              std::string::npos);
  }
}

TEST(Cli, Nproc) {
  Command c = cli_parse({"--nproc", "4", "quickstart", "steps=2", "--config", "o.lua"});
  EXPECT_EQ(c.verb, Command::Verb::run);
  EXPECT_EQ(c.nproc, 4);
  EXPECT_EQ(c.recipe, "quickstart");
  EXPECT_EQ(c.overrides, (std::vector<std::string>{"steps=2"}));
  EXPECT_EQ(c.config_files, (std::vector<std::string>{"o.lua"}));
  EXPECT_EQ(cli_parse({"--nproc=2", "run", "x.lua"}).nproc, 2);
  EXPECT_EQ(cli_parse({"x.lua"}).nproc, 0);
  auto message = [](std::vector<std::string> args) -> std::string {
    try {
      cli_parse(args);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({"--nproc", "0", "x.lua"}), "runner: --nproc expects a whole number >= 1, got '0'");
  EXPECT_EQ(message({"--nproc", "x", "x.lua"}), "runner: --nproc expects a whole number >= 1, got 'x'");
  EXPECT_EQ(message({"--nproc", "-2", "x.lua"}), "runner: --nproc expects a whole number >= 1, got '-2'");
  EXPECT_EQ(message({"--nproc", "1.5", "x.lua"}), "runner: --nproc expects a whole number >= 1, got '1.5'");
  EXPECT_EQ(message({"--nproc=", "x.lua"}), "runner: --nproc expects a whole number >= 1, got ''");
  EXPECT_EQ(message({"--nproc", "99999999999", "x.lua"}),
            "runner: --nproc 99999999999 is more ranks than one machine runs (at most 1024)");
  EXPECT_EQ(message({"--nproc"}), "runner: --nproc needs N, a whole number >= 1");
  EXPECT_EQ(message({"--nproc", "2"}), "runner --nproc: missing RECIPE");
  EXPECT_EQ(message({"--nproc", "2", "validate", "x.lua"}),
            "runner --nproc: expected RECIPE [key=value ...] after N, got 'validate'");
  EXPECT_EQ(message({"--nproc", "2", "--nproc", "3", "x.lua"}),
            "runner --nproc: expected RECIPE [key=value ...] after N, got '--nproc'");
}

TEST(Cli, Report) {
  Command r = cli_parse({"report", "out/lora"});
  EXPECT_EQ(r.verb, Command::Verb::report);
  EXPECT_EQ(r.dest, "out/lora");
  EXPECT_EQ(r.out_file, "");
  EXPECT_EQ(cli_parse({"report", "--out", "r.html", "out/lora"}).out_file, "r.html");
  EXPECT_EQ(cli_parse({"report", "out/lora", "--out=r.html"}).out_file, "r.html");
  auto error = [](std::vector<std::string> args) {
    try {
      cli_parse(args);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string usage = "\n  HINT: usage: runner report OUTPUT_DIR [--out FILE]";
  EXPECT_EQ(error({"report"}), "runner report: expected OUTPUT_DIR (a run's output directory)" + usage);
  EXPECT_EQ(error({"report", "a", "b"}), "runner report: unexpected argument 'b'" + usage);
  EXPECT_EQ(error({"report", "a", "--out"}), "runner report: --out needs a FILE" + usage);
  EXPECT_EQ(error({"report", "a", "--out="}), "runner report: --out needs a FILE" + usage);
  EXPECT_EQ(error({"report", "--html", "a"}), "runner report: unexpected argument '--html'" + usage);
  EXPECT_NE(cli_help().find("runner report OUTPUT_DIR [--out FILE]"), std::string::npos);
}

// runner VERB --help: that verb's usage lines and paragraph of --help, exit 0 (issue 32: `runner
// report --help` was "unexpected argument", exit 2).
TEST(Cli, VerbHelp) {
  for (const char* verb : {"report", "tokenize", "data", "wandb-sync", "ls", "cp"}) {
    Command c = cli_parse({verb, "--help"});
    EXPECT_EQ(c.verb, Command::Verb::help) << verb;
    EXPECT_EQ(c.help_topic, verb);
  }
  EXPECT_EQ(cli_parse({"report", "out/run", "-h"}).help_topic, "report");
  EXPECT_EQ(cli_parse({"sweep", "--help"}).help_topic, "sweep");
  // runner sweep FILE --help: the sweep file's own help, as for a recipe.
  EXPECT_EQ(cli_parse({"sweep", "my_sweep.lua", "--help"}).verb, Command::Verb::recipe_help);
  const std::string report = cli_verb_help("report");
  EXPECT_EQ(report.rfind("usage: runner report OUTPUT_DIR [--out FILE]", 0), 0u) << report;
  EXPECT_NE(report.find("\nreport: reads OUTPUT_DIR/metrics.jsonl"), std::string::npos) << report;
  EXPECT_EQ(report.find("wandb-sync"), std::string::npos) << report;  // only its own part
  const std::string sweep = cli_verb_help("sweep");
  EXPECT_NE(sweep.find("       runner sweep --report DIR"), std::string::npos) << sweep;
}

// --traceback: after RECIPE or before it, with the other arguments kept (as LUATUNE_TRACEBACK=1).
TEST(Cli, Traceback) {
  Command c = cli_parse({"lora_finetune", "--traceback", "lr=1"});
  EXPECT_TRUE(c.traceback);
  EXPECT_EQ(c.recipe, "lora_finetune");
  EXPECT_EQ(c.overrides, std::vector<std::string>{"lr=1"});
  Command b = cli_parse({"--traceback", "quickstart"});
  EXPECT_TRUE(b.traceback);
  EXPECT_EQ(b.recipe, "quickstart");
  EXPECT_FALSE(cli_parse({"quickstart"}).traceback);
  EXPECT_NE(cli_help().find("LUATUNE_TRACEBACK=1"), std::string::npos);
}
