// What `runner validate` reads of a JSONL data file before anything is loaded: every line parsed and
// each record's shape checked the way loading checks it (format.h, preference.h), without a tokenizer,
// so a bad line 8 fails validate in seconds rather than the run after its model has loaded; and the
// records counted, for the held-out split (data_eval_split_warning in dataset.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/data/format.h"

namespace luatune {

enum class DataFileKind {
  records,  // training records: text, prompt/response, alpaca, chat or guanaco (format.h)
  pairs,    // preference pairs (preference.h)
  objects,  // a JSON object a line, nothing more (rejection sampling's prompts)
};

struct DataFileCheck {
  int64_t records = 0;                // lines holding a record, good or bad (blank lines are skipped)
  int64_t bad = 0;                    // of them, the ones loading would refuse
  std::optional<DataFormat> format;   // records: the format given, else detected from the first record
  std::vector<std::string> problems;  // the first max_problems bad lines: "PATH:LINE: expected ..."
};

// Reads all of `path` (fails "cannot open 'PATH': REASON"). With `format` unset it is detected from the
// first record, as loading detects it (from the first record that has one, when that one is bad).
DataFileCheck data_check_file(const std::string& path, DataFileKind kind,
                              std::optional<DataFormat> format = std::nullopt, size_t max_problems = 3);

}  // namespace luatune
