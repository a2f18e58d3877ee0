// Data files read for `runner validate` (see file_check.h): the one JSONL reader, then the record
// checks loading makes, line by line, keeping the first few problems and counting the rest.
#include "host/data/file_check.h"

#include <nlohmann/json.hpp>

#include "host/core/error.h"
#include "host/data/preference.h"
#include "host/io/jsonl.h"

namespace luatune {

DataFileCheck data_check_file(const std::string& path, DataFileKind kind, std::optional<DataFormat> format,
                              size_t max_problems) {
  JsonlReadOptions ro;
  ro.bad = JsonlBad::report;  // a bad line is one more problem; the rest of the file is still read
  ro.expected = "a JSON object";
  JsonlReaderOf<nlohmann::ordered_json> in(path, ro);
  if (!in.is_open()) fail(in.open_error());
  DataFileCheck out;
  out.format = format;
  auto problem = [&](const std::string& why) {
    out.bad++;
    if (out.problems.size() < max_problems) out.problems.push_back(why);
  };
  while (in.next()) {
    out.records++;
    if (!in.error().empty()) {
      problem(in.error());
      continue;
    }
    const nlohmann::ordered_json& record = in.value();
    try {
      switch (kind) {
        case DataFileKind::records:
          if (!out.format) out.format = data_format_detect(record, in.where());
          data_check_record(*out.format, record, in.where());
          break;
        case DataFileKind::pairs:
          preference_check_record(record, in.where());
          break;
        case DataFileKind::objects:
          if (!record.is_object())
            fail(in.where() + ": expected a JSON object, got " + data_record_excerpt(record));
          break;
      }
    } catch (const Error& e) {
      problem(e.what());
    }
  }
  return out;
}

}  // namespace luatune
