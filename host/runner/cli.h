// The runner's command line: `runner RECIPE [key=value ...]`, `runner validate|ls|cp|--help|--version`,
// `runner tokenize --tokenizer DIR [--special] [--decode]`.
// Parsing only; runner/main.cpp carries the verbs out. Bad command lines raise UsageError (exit 2).
#pragma once

#include <string>
#include <vector>

namespace luatune {

struct Command {
  enum class Verb { run, validate, ls, cp, tokenize, help, version };
  Verb verb = Verb::help;
  std::string recipe;                     // run, validate, cp: a path or a shipped recipe's name
  std::string dest;                       // cp
  std::vector<std::string> overrides;     // "key=value", in order
  std::vector<std::string> config_files;  // --config FILE, applied before the key=value overrides
  std::string tokenizer;                  // tokenize: --tokenizer DIR
  bool special = false;                   // tokenize: --special (add BOS/EOS)
  bool decode = false;                    // tokenize: --decode (ids in, text out)
};

Command cli_parse(const std::vector<std::string>& args);  // args without argv[0]
std::string cli_help();

}  // namespace luatune
