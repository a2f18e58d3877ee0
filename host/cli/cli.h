// The runner's command line: `runner RECIPE [key=value ...]`, `runner validate|ls|cp|--help|--version`,
// `runner help RECIPE` (or `runner RECIPE --help`: its description and every key with its doc),
// `runner tokenize --tokenizer DIR [--special] [--decode]`, `runner convert FILE.gguf DIR [--dtype T]`,
// `runner data --tokenizer DIR [--format F] [--chat-template T] [--no-chat] [--max-length N] [--limit N]
// FILE`, `runner sweep SWEEP [key=value ...]`, `runner sweep --report DIR`, `runner wandb-sync
// [--trust-spool-host] PATH`, `runner report OUTPUT_DIR [--out FILE]`, `runner --nproc N RECIPE [key=value
// ...]` (N data-parallel ranks on this machine), `runner VERB --help` (that verb's part of --help),
// `--traceback` after RECIPE (every error with its Lua traceback). Parsing only; runner/main.cpp carries the
// verbs out. Bad command lines raise UsageError (exit 2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace luatune {

struct Command {
  enum class Verb {
    run,
    validate,
    plan,
    ls,
    cp,
    tokenize,
    data,
    convert,
    sweep,
    sweep_report,
    wandb_sync,
    report,
    help,
    recipe_help,
    version
  };
  Verb verb = Verb::help;
  std::string recipe;    // run, validate, plan, cp, recipe_help: a path or a shipped recipe's name
  std::string dest;      // cp; sweep --report DIR; wandb-sync PATH; report OUTPUT_DIR; convert DIR
  std::string out_file;  // report: --out FILE (the HTML; "" = OUTPUT_DIR/report.html)
  std::vector<std::string> overrides;     // "key=value", in order
  std::vector<std::string> config_files;  // --config FILE, applied before the key=value overrides
  std::string tokenizer;                  // tokenize, data: --tokenizer DIR
  bool special = false;                   // tokenize: --special (add BOS/EOS)
  bool decode = false;                    // tokenize: --decode (ids in, text out)
  std::string data_file;                  // data: the JSONL file; convert: the GGUF file
  std::string dtype = "float32";          // convert: --dtype float32|bfloat16|float16
  std::string format;                     // data: --format (default: detected)
  std::string chat_template;              // data: --chat-template (default: the tokenizer's own)
  bool no_chat = false;                   // data: --no-chat (plain text templates)
  int64_t max_length = 2048;              // data: --max-length
  int64_t limit = 10;                     // data: --limit, records shown
  int nproc = 0;                          // run: --nproc N, ranks on this machine (0: not given)
  bool trust_spool_host = false;          // wandb-sync: --trust-spool-host (send to the spool's host)
  bool traceback = false;                 // run, validate, ...: --traceback (as LUATUNE_TRACEBACK=1)
  std::string help_topic;                 // help: "" for all of it, else a verb (runner report --help)
};

Command cli_parse(const std::vector<std::string>& args);  // args without argv[0]
std::string cli_help();
// One verb's part of cli_help(): its usage lines and its paragraph (runner report --help).
std::string cli_verb_help(const std::string& verb);

}  // namespace luatune
