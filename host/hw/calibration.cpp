// The planner's calibration (see calibration.h; data/planner_calibration.json, docs/hardware.md).
#include "host/hw/calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"

namespace luatune {

std::string hw_calibration_default_path() {
  if (const char* env = std::getenv("LUATUNE_PLANNER_CALIBRATION"); env && *env) return env;
  return luatune_home() + "/data/planner_calibration.json";
}

std::vector<CalibrationPoint> hw_calibration_load(const std::string& path) {
  std::vector<CalibrationPoint> out;
  if (!file_exists(path)) return out;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(file_read(path));
  } catch (const nlohmann::json::exception& e) {
    fail("planner calibration " + path + ": not JSON: " + e.what());
  }
  LT_CHECK(doc.is_object() && doc.contains("points") && doc["points"].is_array(),
           "planner calibration " << path << ": expected an object with a \"points\" list");
  for (size_t i = 0; i < doc["points"].size(); i++) {
    const nlohmann::json& j = doc["points"][i];
    const std::string where = "planner calibration " + path + ": points[" + std::to_string(i) + "]";
    try {
      CalibrationPoint p;
      p.date = j.at("date").get<std::string>();
      p.commit = j.at("commit").get<std::string>();
      p.gpu = j.at("gpu").get<std::string>();
      p.step = j.at("step").get<std::string>();
      p.source = j.value("source", std::string());
      p.name = j.value("name", std::string());
      p.shape = j.at("shape").get<std::string>();
      p.method = j.at("method").get<std::string>();
      p.batch_size = j.at("batch_size").get<int64_t>();
      p.max_length = j.at("max_length").get<int64_t>();
      p.gradient_checkpointing = j.value("gradient_checkpointing", true);
      p.dtype = j.value("dtype", std::string("bf16"));
      p.lora_r = j.value("lora_r", int64_t(16));
      p.lora_dropout = j.value("lora_dropout", 0.0);
      p.loss_logit_bytes = j.value("loss_logit_bytes", 0.0);
      p.peak_memory_gb = j.at("peak_memory_gb").get<double>();
      LT_CHECK(p.peak_memory_gb > 0 && p.batch_size > 0 && p.max_length > 0,
               where << ": peak_memory_gb, batch_size and max_length must be positive");
      plan_method_parse(p.method);
      out.push_back(std::move(p));
    } catch (const nlohmann::json::exception& e) {
      fail(where + ": " + e.what());
    }
  }
  return out;
}

CalibrationStatus hw_calibration_status(const std::vector<CalibrationPoint>& points,
                                        const std::string& current_step) {
  CalibrationStatus s;
  for (const CalibrationPoint& p : points)
    if (!s.measured || p.date > s.date) {
      s.measured = true;
      s.date = p.date, s.commit = p.commit, s.gpu = p.gpu, s.step = p.step;
      s.loss_logit_bytes = 0;
    }
  for (const CalibrationPoint& p : points)
    if (s.measured && p.date == s.date) s.loss_logit_bytes = std::max(s.loss_logit_bytes, p.loss_logit_bytes);
  s.step_changed = s.measured && s.step != current_step;
  return s;
}

Plan hw_plan_calibrated(const ModelConfig& c, const PlanOptions& o, const std::vector<GpuSpec>& catalog,
                        const CalibrationStatus& status, std::string* note) {
  Plan plan = hw_plan(c, o, catalog);
  char buf[512];
  if (!status.measured) {
    if (note)
      *note =
          "calibration: no measured peaks (data/planner_calibration.json); this plan is the model alone\n";
    return plan;
  }
  std::snprintf(buf, sizeof buf,
                "calibration: activation terms last checked against peaks measured %s on an %s (commit %s)\n",
                status.date.c_str(), status.gpu.c_str(), status.commit.c_str());
  std::string text = buf;
  if (!status.step_changed) {
    text += "  the training step is the one measured then (fingerprint " + status.step + ")\n";
  } else {
    text += "  the training step changed since (fingerprint " + status.step + " then, " +
            hw_step_fingerprint() + " now): its peaks are not measured yet\n";
    if (!status.margin) {
      text += "  no margin added (margin=false): this plan is the model of today's step alone\n";
    } else if (status.loss_logit_bytes > 0 && o.loss_logit_bytes <= 0) {
      PlanOptions then = o;
      then.loss_logit_bytes = status.loss_logit_bytes;
      Plan margin = hw_plan(c, then, catalog);
      const double extra = margin.components.total - plan.components.total;
      if (extra > 0) {
        std::snprintf(
            buf, sizeof buf,
            "  margin: +%.2f GiB, the loss at the %.0f bytes per logit measured then (today's model of the "
            "step plans %.2f GiB); scripts/gpu-validate.sh's planner steps measure today's\n",
            extra / kGiB, status.loss_logit_bytes, plan.components.total / kGiB);
        text += buf;
        plan = margin;
      } else {
        text += "  no margin needed: the loss measured then is not this plan's peak\n";
      }
    }
  }
  if (note) *note = text;
  return plan;
}

}  // namespace luatune
