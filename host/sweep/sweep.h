// Hyperparameter sweeps: a search space over a recipe's config keys, each trial a child runner
// process with its own output directory and W&B run grouped under the sweep, results in a JSONL of
// trials and a Markdown table. (Placeholder: the sweep engine is being written.)
#pragma once

#include <string>

namespace luatune {

// `runner sweep --report DIR`: the results table (Markdown) of the sweep whose output_dir is DIR.
std::string sweep_report(const std::string& dir);

}  // namespace luatune
