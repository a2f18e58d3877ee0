// `runner RECIPE --config FILE`: a file of overrides in one of three formats, chosen by extension.
// .lua (a chunk returning a table) is read by the runner, which holds the Lua state; .json and
// .yaml/.yml are read here into the same ConfigOverrides the command line makes, marked with the
// file's path. Nested objects flatten to dotted keys ("lora: {r: 8}" -> lora.r). Every failure is a
// UsageError naming the file (and, where the parser knows it, file:line:column). See docs/config.md.
#pragma once

#include <string>
#include <vector>

#include "host/cli/config.h"

namespace luatune {

enum class ConfigFileFormat { lua, json, yaml };

// By extension (.lua, .json, .yaml, .yml; any case); anything else is a one-line UsageError.
ConfigFileFormat config_file_format(const std::string& path);

// Reads a .json or .yaml/.yml file of overrides (UsageError for a .lua file: the runner reads those).
std::vector<ConfigOverride> config_file_read(const std::string& path);

// The parsers, on text already read from `path` (named in errors and marked on each override).
// JSON: values keep their JSON types (number, boolean, string, array -> list).
std::vector<ConfigOverride> config_file_parse_json(const std::string& text, const std::string& path);
// YAML: a plain scalar is passed as text, parsed against the default's type exactly like key=value
// on the command line; a quoted scalar is a string; a sequence is a list whose plain items are typed
// the YAML way (true/false, numbers, else strings).
std::vector<ConfigOverride> config_file_parse_yaml(const std::string& text, const std::string& path);

}  // namespace luatune
