// Writes a sample hardware report (a realistic document: one measured H100 run, projections,
// memory-only plans, GPUs that do not fit) as Markdown and HTML, for the headless-Chromium render
// test (tests/tools/render_html.sh) and for looking at the page by eye.
// Usage: hw_report_sample OUT.md OUT.html [ROWS]   (ROWS > 0: that many rows, the sample's first
// ROWS, or its rows repeated with a " #k" suffix, to check the layout at 1 row and at 20)
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "host/core/error.h"
#include "host/hw/report.h"

using json = nlohmann::json;

namespace {

json sample_document() {
  json rows = json::array();
  auto row = [&](const char* gpu, double mem, double price, double peak, bool fits, int mb, const char* kind,
                 double tps, const char* source) {
    json r = {{"gpu", gpu},
              {"memory_gb", mem},
              {"price_per_hour", price},
              {"predicted_peak_gb", peak},
              {"fits", fits},
              {"max_micro_batch", mb},
              {"kind", kind},
              {"price_source", source},
              {"price_date", "2026-11-01"}};
    const double tokens = 2.0e8;  // the job: 200M training tokens
    if (tps > 0 && fits) {
      double hours = tokens / tps / 3600;
      r["tokens_per_s"] = tps;
      r["hours"] = hours;
      r["cost_usd"] = hours * price;
      r["usd_per_mtok"] = price / (tps * 3600) * 1e6;
    }
    if (!fits)
      r["advice"] = {"Use QLoRA (4-bit base weights): predicted peak 14.9 GB.",
                     "Or turn on activation checkpointing and micro-batch 1."};
    rows.push_back(r);
  };
  row("H100 SXM 80GB", 80, 2.69, 38.2, true, 16, "measured", 4150, "Lambda on-demand list price");
  row("H200 SXM 141GB", 141, 3.79, 38.2, true, 32, "projected", 5020, "RunPod community cloud");
  row("A100 SXM 80GB", 80, 1.29, 38.2, true, 16, "projected", 1510, "Lambda on-demand list price");
  row("A100 PCIe 40GB", 40, 0.99, 38.2, true, 2, "projected", 1380, "RunPod community cloud");
  row("L40S 48GB", 48, 0.86, 38.2, true, 4, "projected", 1050, "RunPod community cloud");
  row("RTX 4090 24GB", 24, 0.34, 38.2, false, 0, "projected", 0, "Vast.ai median, interruptible");
  row("RTX A6000 48GB", 48, 0.49, 38.2, true, 4, "planned", 0, "Vast.ai median, interruptible");
  row("L4 24GB", 24, 0.43, 38.2, false, 0, "planned", 0, "GCP us-central1 on-demand");
  row("B200 SXM 192GB", 192, 5.99, 38.2, true, 48, "planned", 0, "vendor preview <beta> & \"list\"");
  rows[0]["eval_loss"] = 1.2843;
  rows[0]["accuracy"] = 0.612;
  rows[1]["advice"] = {"Micro-batch 32 fits; the measured run used 16."};
  return {
      {"title", "Llama-3.1-8B LoRA: which GPU to rent"},
      {"recipe", "lora_finetune"},
      {"date", "2026-11-22"},
      {"model",
       {{"name", "Llama-3.1-8B-Instruct"},
        {"parameters", 8.03e9},
        {"trainable", 4.19e7},
        {"method", "lora"}}},
      {"config",
       {{"lr", 2e-4}, {"lora", {{"r", 16}, {"alpha", 32}}}, {"seq_len", 2048}, {"micro_batch", 16}}},
      {"measured",
       {{{"device", "NVIDIA H100 80GB HBM3"},
         {"gpu", "H100 SXM 80GB"},
         {"tokens_per_s", 4150.2},
         {"step_time_s", 7.9},
         {"mfu", 0.412},
         {"peak_memory_gb", 36.9},
         {"tokens", 1.2e6},
         {"seconds", 289},
         {"gpu_hours", 0.0803},
         {"cost_usd", 0.216},
         {"usd_per_mtok", 0.18},
         {"eval_loss", 1.2843},
         {"accuracy", 0.612},
         {"utilization", 0.97},
         {"power_w", 642}}}},
      {"rows", rows},
      {"formulas",
       {{"mfu",
         "MFU = 6 · N_params · tokens/s ÷ peak dense bf16 FLOP/s (forward + backward, no attention term)"},
        {"projection",
         "tokens/s on GPU g = measured tokens/s × (peak FLOP/s of g ÷ peak FLOP/s of the measured GPU)"},
        {"memory",
         "peak = weights + LoRA grads and Adam states + activations(micro-batch, seq_len) + 10% overhead"}}},
      {"notes",
       {"Prices are on-demand list prices; spot and reserved prices differ.",
        "Projections assume the same MFU on every GPU."}},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: hw_report_sample OUT.md OUT.html [ROWS]\n");
    return 2;
  }
  json doc = sample_document();
  int want = argc > 3 ? std::atoi(argv[3]) : 0;
  if (want > 0) {
    json all = doc["rows"], rows = json::array();
    for (int i = 0; i < want; i++) {
      json r = all[i % all.size()];
      if (i >= static_cast<int>(all.size()))
        r["gpu"] = r["gpu"].get<std::string>() + " #" + std::to_string(i / all.size() + 1);
      rows.push_back(r);
    }
    doc["rows"] = rows;
  }
  try {
    std::ofstream(argv[1]) << luatune::hw_report_markdown(doc);
    std::ofstream(argv[2]) << luatune::hw_report_html(doc);
  } catch (const luatune::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
