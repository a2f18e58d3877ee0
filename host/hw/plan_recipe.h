// From a recipe's resolved config to the planner's inputs, by the shipped recipes' keys, which are
// the Lua API's names (base_model, dtype, batch_size, max_length, gradient_checkpointing, lora.r /
// lora.targets / lora.dropout, quantize, use_lora, master_weights, loss_chunk, optimizer,
// optimizer_offload, shard), for `runner plan` and recipes/hw_compare.lua; and reading a finished
// run's metrics.jsonl into the numbers a profile needs.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "host/hw/plan.h"

namespace luatune {

// Settings `runner plan` takes that are not the recipe's own keys. The trainer's shard=, optimizer=
// and optimizer_offload= are taken here too, so a plan can try them on a recipe that does not pass
// them on yet; given here, they win over the recipe's config.
struct PlanExtras {
  std::string model_preset;       // "llama3.1-8b", ... instead of base_model's config.json
  std::string method;             // "full", "lora", "qlora"; "" = from the config and the recipe's name
  int64_t gpus = 1;               // gpus= or nproc=: data-parallel ranks
  int64_t gpus_per_node = 0;      // ranks per node for host RAM; 0 = min(gpus, 8)
  std::string shard;              // "" = the config's shard, else none
  std::string optimizer;          // "" = the config's optimizer, else adamw
  std::string optimizer_offload;  // "" = the config's optimizer_offload, else none
  bool margin = true;  // margin=false: the model alone, no calibration margin (host/hw/calibration.h)
};
// The keys PlanExtras reads from `runner plan`'s key=value list.
extern const std::vector<std::string> kPlanExtraKeys;
// When `key` is one of kPlanExtraKeys, checks `text` and sets it in `extras` (true); false for any
// other key (the recipe's). Bad values throw UsageError naming the key and what it takes.
bool hw_plan_extra_set(PlanExtras* extras, const std::string& key, const std::string& text);

// One phase of a recipe that trains more than one model in turn (llama31_sheared: the masks on the
// whole model, then the pruned model distilled from the whole one): planned on its own.
struct PlanPhase {
  std::string name;  // "pruning", "recovery"
  std::string what;  // one line: what trains, beside what
  ModelConfig model;
  PlanOptions options;
};

struct PlanRequest {
  ModelConfig model;
  std::string model_source;  // the config.json read, or "preset NAME"
  PlanOptions options;
  std::vector<std::string> notes;  // how each setting was found, for the printout
  // A recipe with phases (llama31_sheared): each phase; model/options above are the first's.
  std::vector<PlanPhase> phases;
};

// `config` is the resolved config as a JSON object; `recipe` the recipe's path or name.
PlanRequest hw_plan_request(const nlohmann::json& config, const std::string& recipe,
                            const PlanExtras& extras);

// A finished run's numbers, from its metrics.jsonl (the config line and one line per step). The
// first step is left out of the rate when there are more (it carries warm-up and allocation).
struct RunSummary {
  int64_t steps = 0;               // steps with a step_time
  int64_t timed_steps = 0;         // the steps `seconds` covers
  double tokens = 0, seconds = 0;  // over the steps counted for the rate
  double tokens_per_s = 0, step_time_s = 0;
  double peak_memory_gb = 0;                        // max over the steps (0 on CPU)
  double loss = -1, eval_loss = -1, accuracy = -1;  // last values seen; < 0 when absent
  std::string config_json = "{}";                   // the run's config line
};
RunSummary hw_read_metrics(const std::string& metrics_jsonl);

}  // namespace luatune
