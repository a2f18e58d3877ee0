// Command-line parsing and help text (see cli.h).
#include "host/cli/cli.h"

#include <algorithm>

#include "host/core/error.h"
#include "host/core/strings.h"

namespace luatune {

std::string cli_help() {
  return R"(usage: runner RECIPE [key=value ...] [--config FILE]   run a recipe
       runner --nproc N RECIPE [key=value ...]            run it as N data-parallel ranks on this machine
       runner validate RECIPE [key=value ...]             resolve its config, check paths and ranges, run nothing
       runner plan RECIPE [key=value ...]                 predict its GPU memory per catalog GPU, run nothing
       runner help RECIPE                                 what it does and every key: type, default, doc
       runner ls                                          list the shipped recipes
       runner cp RECIPE DEST                              copy a shipped recipe to edit
       runner tokenize --tokenizer DIR [--special] [--decode] < in.jsonl
                                                          tokenize stdin (one JSON string a line)
       runner data --tokenizer DIR [--format F] [--chat-template T] [--no-chat]
                   [--max-length N] [--limit N] FILE      show a dataset's records as trained
       runner convert FILE.gguf DIR [--dtype T]           a llama.cpp GGUF as a Hugging Face model directory
       runner sweep SWEEP [key=value ...]                 run a sweep file (trials as child runs)
       runner sweep --report DIR                          the results table of a sweep so far
       runner wandb-sync [--trust-spool-host] PATH        upload offline or unsent W&B runs
       runner report OUTPUT_DIR [--out FILE]              draw a run: report.html (charts) and report.md
       runner --version                                   luatune, LibTorch, CUDA versions and devices
       runner --help                                      this text; runner VERB --help: that verb's part

RECIPE is a path to a .lua file or the name of a shipped recipe (runner ls).
Overrides: key=value or a.b=value, typed like the recipe's default (number, boolean, string,
comma-separated list); --config FILE applies a file of overrides first: .lua (returning a table),
.json or .yaml/.yml (docs/config.md).
Errors: a mistake in the data, a path or a value prints one line, `error: ...`; a bug (a Lua runtime
error, a LibTorch or internal error) adds a stack traceback. --traceback after RECIPE (or
LUATUNE_TRACEBACK=1) adds it to every error (docs/recipes.md).
tokenize: DIR holds tokenizer.json (a model directory) or is the file itself. Each stdin line is a
JSON string; each output line the JSON array of its token ids (BOS/EOS added with --special).
With --decode each line is a JSON array of ids and each output line a JSON string. A bad line
stops with "stdin:LINE: expected ..." and exit status 1.
data: the first N records (--limit, default 10) of a JSONL dataset tokenized as training sees
them, one block per record: its text and token ids with the masked ones (no loss) in [brackets].
--format text|prompt_response|alpaca|chat|guanaco (default: from the first record's keys);
non-chat records are rendered as conversations when the tokenizer has a chat template (--no-chat:
plain text templates; --chat-template FILE.jinja or a template name: docs/chat_formats.md).
convert: writes DIR (new, or empty) from a GGUF file: model.safetensors dequantised to --dtype
(float32, the default; bfloat16; float16) from any type llama.cpp's Llama-family files use, config.json
from its metadata, tokenizer.json rebuilt from tokenizer.ggml.* with llama.cpp's pre-tokenizer, and
tokenizer_config.json with its chat template (docs/gguf.md, "GGUF in"). Architectures: llama, qwen2, qwen3.
sweep: SWEEP is a Lua file that calls sweep.run{...} (docs/sweeps.md); each trial runs as its own
runner process, results go to its output_dir (trials.jsonl, results.md); running it again resumes.
--nproc: starts N copies of the runner as ranks 0..N-1 of one job, with the variables torchrun
sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...); rank 0's output as it is, the
others' lines prefixed "[rank N] ". The first rank to fail stops the others and its status is the
runner's. Under torchrun or srun, run the runner plainly: it reads their variables
(docs/distributed.md).
plan: resolves the recipe's config as validate does, reads base_model's config.json (or a built-in
shape: model_preset=llama3.1-8b|mistral-7b|gemma2-9b) and prints the predicted peak memory by
component and, per GPU of the catalog (data/gpu_catalog.json or $LUATUNE_GPU_CATALOG), whether it fits,
the largest micro-batch that fits and what to change (docs/hardware.md). Plan's own keys:
model_preset=, method=full|lora|qlora, nproc=N (or gpus=N), shard=none|optimizer|gradients|full,
optimizer=adamw|adamw8bit|sgd, optimizer_offload=none|cpu, gpus_per_node=N (host RAM per node).
wandb-sync: PATH is a spooled run (OUTPUT_DIR/wandb/run-ID) or a directory of them; only what the
server has not acknowledged is sent (docs/wandb.md). The API key goes only to WANDB_BASE_URL's host
(default https://api.wandb.ai): a run whose run.json names another host is refused, unless
--trust-spool-host, which uploads it (with the key) to the host the spool names.
report: reads OUTPUT_DIR/metrics.jsonl (or a .jsonl file given instead) and the run.json beside it;
writes report.html (inline SVG curves of loss, eval loss, learning rate, grad norm, tokens/s, the
evaluations and phases logged, the config, the final numbers) and report.md (the same as tables)
beside it, or the HTML to --out FILE and the Markdown beside that. Every recipe that logs writes
them when it closes its log (docs/report.md).
Exit status: 0 success, 1 the run failed, 2 bad command line or config, 130 interrupted (Ctrl-C).
)";
}

namespace {

// The verbs with a part of their own in cli_help() (runner VERB --help), and the starts of its
// paragraphs: each begins a line, and runs until the next one does.
const char* const kHelpTopics[] = {"ls",      "cp",    "tokenize",   "data",
                                   "convert", "sweep", "wandb-sync", "report"};
const char* const kParagraphs[] = {
    "RECIPE is ", "Overrides: ", "Errors: ", "tokenize: ",   "data: ",   "convert: ",
    "sweep: ",    "--nproc: ",   "plan: ",   "wandb-sync: ", "report: ", "Exit status: "};

bool is_help_flag(const std::string& a) {
  return a == "--help" || a == "-h";
}

}  // namespace

std::string cli_verb_help(const std::string& verb) {
  std::string usage, paragraph;
  bool in_usage = true, in_entry = false, in_paragraph = false;
  for (const std::string& line : str_split(cli_help(), '\n')) {
    if (in_usage) {  // "usage: runner ..." / "       runner ..." and their continuation lines
      if (line.empty()) {
        in_usage = false;
        continue;
      }
      const std::string entry = line.size() > 7 ? line.substr(7) : "";
      if (str_starts_with(entry, "runner "))
        in_entry = str_starts_with(entry, "runner " + verb + " ") || str_trim(entry) == "runner " + verb;
      if (in_entry) usage += (usage.empty() ? "usage: " : "       ") + entry + "\n";
      continue;
    }
    bool starts = false;
    for (const char* p : kParagraphs) starts = starts || str_starts_with(line, p);
    if (starts) in_paragraph = str_starts_with(line, verb + ": ");
    if (in_paragraph) paragraph += line + "\n";
  }
  return usage + paragraph +
         "Exit status: 0 success, 1 failed, 2 bad command line (runner --help: all verbs).\n";
}

namespace {

// Reads RECIPE then key=value / --config FILE arguments into `cmd`.
void parse_recipe_args(const std::vector<std::string>& args, size_t i, const char* verb, Command& cmd) {
  for (; i < args.size() && args[i] == "--traceback"; i++) cmd.traceback = true;  // runner --traceback RECIPE
  if (i >= args.size()) fail_usage(std::string("runner ") + verb + ": missing RECIPE", "see runner --help");
  cmd.recipe = args[i++];
  if (str_starts_with(cmd.recipe, "-"))
    fail_usage("runner: unknown option '" + cmd.recipe + "'", "see runner --help");
  for (; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--config") {
      if (i + 1 >= args.size()) fail_usage("runner: --config needs a FILE");
      cmd.config_files.push_back(args[++i]);
    } else if (str_starts_with(a, "--config=")) {
      cmd.config_files.push_back(a.substr(9));
    } else if (a == "--help" || a == "-h") {
      cmd.verb = Command::Verb::recipe_help;  // runner RECIPE --help, runner validate RECIPE --help
    } else if (a == "--traceback") {
      cmd.traceback = true;
    } else if (str_starts_with(a, "--") && a.find('=') != std::string::npos) {
      cmd.overrides.push_back(a.substr(2));  // --lr=1e-4 reads as lr=1e-4, as nanoGPT accepts
    } else if (a.find('=') != std::string::npos && !str_starts_with(a, "-")) {
      cmd.overrides.push_back(a);
    } else {
      fail_usage("runner: unexpected argument '" + a + "': expected key=value or --config FILE",
                 "overrides look like learning_rate=2e-4 or lora.r=8");
    }
  }
}

// tokenize --tokenizer DIR [--special] [--decode]
void parse_tokenize_args(const std::vector<std::string>& args, Command& cmd) {
  for (size_t i = 1; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--tokenizer") {
      if (i + 1 >= args.size()) fail_usage("runner tokenize: --tokenizer needs a DIR");
      cmd.tokenizer = args[++i];
    } else if (str_starts_with(a, "--tokenizer=")) {
      cmd.tokenizer = a.substr(12);
    } else if (a == "--special") {
      cmd.special = true;
    } else if (a == "--decode") {
      cmd.decode = true;
    } else {
      fail_usage("runner tokenize: unexpected argument '" + a + "'",
                 "usage: runner tokenize --tokenizer DIR [--special] [--decode] < in.jsonl");
    }
  }
  if (cmd.tokenizer.empty())
    fail_usage("runner tokenize: missing --tokenizer DIR",
               "usage: runner tokenize --tokenizer DIR [--special] [--decode] < in.jsonl");
}

// data --tokenizer DIR [--format F] [--chat-template T] [--no-chat] [--max-length N] [--limit N] FILE
void parse_data_args(const std::vector<std::string>& args, Command& cmd) {
  const char* usage =
      "usage: runner data --tokenizer DIR [--format F] [--chat-template T] [--no-chat] [--max-length N] "
      "[--limit N] FILE";
  auto value = [&](size_t& i, const std::string& name) -> std::string {
    const std::string& a = args[i];
    if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0)
      return a.substr(name.size() + 1);
    if (i + 1 >= args.size()) fail_usage("runner data: " + name + " needs a value", usage);
    return args[++i];
  };
  auto count = [&](const std::string& name, const std::string& text) {
    double v = 0;
    if (!str_to_number(text, &v) || v < 1 || v != static_cast<double>(static_cast<int64_t>(v)))
      fail_usage("runner data: " + name + " expects a whole number >= 1, got '" + text + "'", usage);
    return static_cast<int64_t>(v);
  };
  auto is = [&](const std::string& a, const char* name) {
    return a == name || str_starts_with(a, std::string(name) + "=");
  };
  for (size_t i = 1; i < args.size(); i++) {
    const std::string& a = args[i];
    if (is(a, "--tokenizer")) {
      cmd.tokenizer = value(i, "--tokenizer");
    } else if (is(a, "--format")) {
      cmd.format = value(i, "--format");
    } else if (is(a, "--chat-template")) {
      cmd.chat_template = value(i, "--chat-template");
    } else if (a == "--no-chat") {
      cmd.no_chat = true;
    } else if (is(a, "--max-length")) {
      cmd.max_length = count("--max-length", value(i, "--max-length"));
    } else if (is(a, "--limit")) {
      cmd.limit = count("--limit", value(i, "--limit"));
    } else if (str_starts_with(a, "-") || !cmd.data_file.empty()) {
      fail_usage("runner data: unexpected argument '" + a + "'", usage);
    } else {
      cmd.data_file = a;
    }
  }
  if (cmd.tokenizer.empty()) fail_usage("runner data: missing --tokenizer DIR", usage);
  if (cmd.data_file.empty()) fail_usage("runner data: missing FILE (a JSONL dataset)", usage);
}

// --nproc N / --nproc=N at args[0]: the rest must run a recipe.
Command parse_nproc(const std::vector<std::string>& args) {
  size_t rest = 1;
  std::string text;
  if (args[0] == "--nproc") {
    if (args.size() < 2) fail_usage("runner: --nproc needs N, a whole number >= 1");
    text = args[1];
    rest = 2;
  } else {
    text = args[0].substr(8);
  }
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  long n = !digits ? 0 : text.size() > 6 ? 1000000 : std::stol(text);
  if (n < 1) fail_usage("runner: --nproc expects a whole number >= 1, got '" + text + "'");
  if (n > 1024) fail_usage("runner: --nproc " + text + " is more ranks than one machine runs (at most 1024)");
  if (rest >= args.size()) fail_usage("runner --nproc: missing RECIPE");
  Command cmd = cli_parse(std::vector<std::string>(args.begin() + static_cast<long>(rest), args.end()));
  if (cmd.verb != Command::Verb::run || cmd.nproc != 0)
    fail_usage("runner --nproc: expected RECIPE [key=value ...] after N, got '" + args[rest] + "'");
  cmd.nproc = static_cast<int>(n);
  return cmd;
}

}  // namespace

Command cli_parse(const std::vector<std::string>& args) {
  Command cmd;
  if (args.empty()) return cmd;  // help
  const std::string& first = args[0];
  // runner report --help, runner tokenize -h, runner sweep --help, ...: that verb's part of --help.
  for (const char* topic : kHelpTopics) {
    if (first != topic) continue;
    const bool asked = first == "sweep" ? args.size() >= 2 && is_help_flag(args[1])
                                        : std::any_of(args.begin() + 1, args.end(), is_help_flag);
    if (!asked) break;
    cmd.verb = Command::Verb::help;
    cmd.help_topic = first;
    return cmd;
  }
  if (first == "help" && args.size() >= 2) {
    if (args.size() > 2) fail_usage("runner help: expected one RECIPE, got '" + args[2] + "' too");
    cmd.verb = Command::Verb::recipe_help;
    cmd.recipe = args[1];
  } else if (first == "--help" || first == "-h" || first == "help") {
    cmd.verb = Command::Verb::help;
  } else if (first == "--version" || first == "-V" || first == "version") {
    cmd.verb = Command::Verb::version;
  } else if (first == "--nproc" || str_starts_with(first, "--nproc=")) {
    cmd = parse_nproc(args);
  } else if (first == "ls") {
    cmd.verb = Command::Verb::ls;
    if (args.size() > 1) fail_usage("runner ls: takes no arguments, got '" + args[1] + "'");
  } else if (first == "cp") {
    cmd.verb = Command::Verb::cp;
    if (args.size() != 3)
      fail_usage("runner cp: expected RECIPE DEST", "for example: runner cp quickstart my_recipe.lua");
    cmd.recipe = args[1];
    cmd.dest = args[2];
  } else if (first == "tokenize") {
    cmd.verb = Command::Verb::tokenize;
    parse_tokenize_args(args, cmd);
  } else if (first == "data") {
    cmd.verb = Command::Verb::data;
    parse_data_args(args, cmd);
  } else if (first == "convert") {
    cmd.verb = Command::Verb::convert;
    const char* usage = "usage: runner convert FILE.gguf DIR [--dtype float32|bfloat16|float16]";
    std::vector<std::string> paths;
    for (size_t i = 1; i < args.size(); i++) {
      if (args[i] == "--dtype" && i + 1 < args.size()) {
        cmd.dtype = args[++i];
      } else if (str_starts_with(args[i], "--dtype=")) {
        cmd.dtype = args[i].substr(8);
      } else if (str_starts_with(args[i], "-")) {
        fail_usage("runner convert: unexpected option '" + args[i] + "'", usage);
      } else {
        paths.push_back(args[i]);
      }
    }
    if (paths.size() != 2) fail_usage("runner convert: expected FILE.gguf and DIR", usage);
    cmd.data_file = paths[0];
    cmd.dest = paths[1];
  } else if (first == "sweep") {
    if (args.size() >= 2 && args[1] == "--report") {
      cmd.verb = Command::Verb::sweep_report;
      if (args.size() != 3) fail_usage("runner sweep --report: expected one DIR (a sweep's output_dir)");
      cmd.dest = args[2];
    } else {
      cmd.verb = Command::Verb::sweep;
      parse_recipe_args(args, 1, "sweep", cmd);
    }
  } else if (first == "wandb-sync") {
    cmd.verb = Command::Verb::wandb_sync;
    for (size_t i = 1; i < args.size(); i++) {
      if (args[i] == "--trust-spool-host")
        cmd.trust_spool_host = true;
      else if (str_starts_with(args[i], "-") || !cmd.dest.empty())
        fail_usage("runner wandb-sync: unexpected argument '" + args[i] + "'",
                   "usage: runner wandb-sync [--trust-spool-host] PATH");
      else
        cmd.dest = args[i];
    }
    if (cmd.dest.empty())
      fail_usage("runner wandb-sync: expected one PATH (OUTPUT_DIR/wandb/run-ID, or a directory of runs)",
                 "usage: runner wandb-sync [--trust-spool-host] PATH");
  } else if (first == "report") {
    cmd.verb = Command::Verb::report;
    const char* usage = "usage: runner report OUTPUT_DIR [--out FILE]";
    for (size_t i = 1; i < args.size(); i++) {
      if (args[i] == "--out") {
        if (i + 1 >= args.size()) fail_usage("runner report: --out needs a FILE", usage);
        cmd.out_file = args[++i];
      } else if (str_starts_with(args[i], "--out=")) {
        cmd.out_file = args[i].substr(6);
        if (cmd.out_file.empty()) fail_usage("runner report: --out needs a FILE", usage);
      } else if (str_starts_with(args[i], "-") || !cmd.dest.empty()) {
        fail_usage("runner report: unexpected argument '" + args[i] + "'", usage);
      } else {
        cmd.dest = args[i];
      }
    }
    if (cmd.dest.empty()) fail_usage("runner report: expected OUTPUT_DIR (a run's output directory)", usage);
  } else if (first == "validate") {
    cmd.verb = Command::Verb::validate;
    parse_recipe_args(args, 1, "validate", cmd);
  } else if (first == "plan") {
    cmd.verb = Command::Verb::plan;
    parse_recipe_args(args, 1, "plan", cmd);
  } else if (first == "run") {
    cmd.verb = Command::Verb::run;
    parse_recipe_args(args, 1, "run", cmd);
  } else {
    cmd.verb = Command::Verb::run;
    parse_recipe_args(args, 0, "run", cmd);
  }
  return cmd;
}

}  // namespace luatune
