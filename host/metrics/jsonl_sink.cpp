// The JSONL sink: one JSON object a line, written and flushed on every write so that a run that
// crashes keeps every line before the crash; a resumed run appends to the same file.
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/number.h"
#include "host/io/jsonl.h"
#include "host/metrics/metrics.h"

namespace luatune {

namespace {

using ojson = nlohmann::ordered_json;

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Whole numbers as integers ("tokens":480, not 480.0); NaN and infinities as null.
ojson number_json(double v) {
  if (number_is_whole(v)) return ojson(static_cast<int64_t>(v));
  return std::isfinite(v) ? ojson(v) : ojson(nullptr);
}

class JsonlSink : public MetricSink {
 public:
  explicit JsonlSink(const JsonlOptions& o) : path_(o.path), start_(steady_seconds()) {
    std::error_code ec;
    std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (o.resume && o.resume_step >= 0) drop_lines_after(o.resume_step);
    f_ = std::fopen(path_.c_str(), o.resume ? "a" : "w");
    if (!f_) fail("metrics: cannot open '" + path_ + "' for writing: " + std::strerror(errno));
    // A resumed run appends to a file that already starts with its config line.
    std::fseek(f_, 0, SEEK_END);
    bool fresh = std::ftell(f_) == 0;
    if (!o.config_json.empty() && fresh) {
      ojson line;
      line["config"] = ojson::parse(o.config_json);
      if (!o.hardware_json.empty()) line["hardware"] = ojson::parse(o.hardware_json);
      put(line);
    }
  }
  ~JsonlSink() override {
    if (f_) std::fclose(f_);
  }

  void write(int64_t step, const MetricValues& values) override {
    ojson line;
    line["step"] = step;
    line["time"] = std::round(unix_seconds() * 1000) / 1000;  // ms resolution is plenty
    line["elapsed"] = std::round((steady_seconds() - start_) * 1000) / 1000;
    for (const auto& [k, v] : values.numbers) line[k] = number_json(v);
    if (!values.note.empty()) line["note"] = values.note;
    put(line);
  }

  void summary(const MetricValues& values) override {
    ojson s = ojson::object();
    for (const auto& [k, v] : values.numbers) s[k] = number_json(v);
    if (!values.note.empty()) s["note"] = values.note;
    ojson line;
    line["summary"] = s;
    put(line);
  }

  void table(const MetricTable& t) override {
    ojson line;
    line["table"]["title"] = t.title;
    line["table"]["columns"] = t.columns;
    line["table"]["rows"] = t.rows;
    put(line);
  }

  void close(int) override {
    if (f_ && std::fclose(f_) != 0) {
      f_ = nullptr;
      fail("metrics: closing '" + path_ + "' failed: " + std::strerror(errno));
    }
    f_ = nullptr;
  }

 private:
  // A resumed run redoes the steps after its checkpoint: their lines from the run that stopped go
  // (rewritten atomically), as do that run's summary and table lines; the config line and earlier
  // steps stay.
  void drop_lines_after(int64_t step) {
    if (!file_exists(path_)) return;
    std::string kept;
    bool dropped = false;
    // Damaged lines are kept as they are (the report counts them); blank ones and a line too long
    // to hold go.
    JsonlReadOptions o;
    o.bad = JsonlBad::report;
    JsonlReader in(path_, o);
    if (!in.is_open()) fail("metrics: " + in.open_error());
    while (in.next()) {
      const nlohmann::json& j = in.value();
      const bool after = j.is_object() && j.contains("step") && j["step"].is_number() &&
                         j["step"].get<double>() > static_cast<double>(step);
      const bool later = after || (j.is_object() && (j.contains("summary") || j.contains("table")));
      if (later || in.text().empty()) {
        dropped = true;
        continue;
      }
      kept.append(in.text().data(), in.text().size());
      kept += '\n';
    }
    if (dropped) file_write_atomic(path_, kept);
  }

  void put(const ojson& line) {
    LT_CHECK(f_, "metrics: '" << path_ << "' is closed");
    // Invalid UTF-8 in a note becomes U+FFFD instead of failing the run.
    std::string text = line.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
    if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fflush(f_) != 0)
      fail("metrics: writing '" + path_ + "' failed: " + std::strerror(errno));
  }

  std::string path_;
  std::FILE* f_ = nullptr;
  double start_;
};

}  // namespace

std::unique_ptr<MetricSink> jsonl_sink_new(const JsonlOptions& options) {
  LT_CHECK(!options.path.empty(), "metrics: jsonl path is empty");
  return std::make_unique<JsonlSink>(options);
}

}  // namespace luatune
