// The hardware comparison report: one JSON document (the schema below, built by recipes/hw_compare.lua
// through the `hw` module) rendered as Markdown and as a self-contained HTML page with inline SVG
// charts (time, memory, cost per GPU; fits or not). No LibTorch, no network, no external assets.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace luatune {

// The report document:
// {
//   "title": "...", "recipe": "lora_finetune", "date": "2026-11-22",
//   "model": {"name": "...", "parameters": 8.03e9, "trainable": 4.2e7, "method": "lora"},
//   "config": {...},                                   // the recipe's resolved config (optional)
//   "measured": [ {                                    // runs measured on real devices (maybe none)
//       "device": "NVIDIA H100 80GB HBM3" | "cpu", "gpu": "H100 SXM" (catalog name, when known),
//       "tokens_per_s": 1234.5, "step_time_s": 0.8, "mfu": 0.41, "peak_memory_gb": 23.4,
//       "tokens": 1.2e6, "seconds": 950, "gpu_hours": 0.26, "cost_usd": 1.1, "usd_per_mtok": 0.9,
//       "eval_loss": 1.23, "accuracy": 0.61, "utilization": 0.93, "power_w": 610 } ],
//   "rows": [ {                                        // one per catalog GPU
//       "gpu": "H100 SXM", "memory_gb": 80, "price_per_hour": 2.69, "price_source": "...", "price_date":
//       "...", "predicted_peak_gb": 23.1, "fits": true, "max_micro_batch": 8, "advice": ["..."], "kind":
//       "measured" | "projected" | "planned",  // planned: memory only, no time "tokens_per_s": 5000,
//       "hours": 1.2, "cost_usd": 3.2, "usd_per_mtok": 0.5, "eval_loss": 1.23, "accuracy": 0.61 } ],     //
//       eval numbers only on measured rows
//   "formulas": {"mfu": "...", "projection": "...", "memory": "..."},
//   "notes": ["..."]
// }
// Missing optional fields render as "-". Errors (a document that is not an object, rows not a
// list, a row without "gpu") raise with the field named.
std::string hw_report_markdown(const nlohmann::json& report);
std::string hw_report_html(const nlohmann::json& report);

}  // namespace luatune
