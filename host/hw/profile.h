// A run's profile from the trainer's own numbers (tokens, seconds, steps, peak memory): tokens/s,
// step time, FLOPs per token and MFU under a named convention, GPU-hours, cost and $ per 1M tokens;
// and its projection to other catalog GPUs (roofline: the same MFU on the target's peak, capped by
// its memory bandwidth), each row marked measured, projected or planned. Rules: docs/hardware.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/hw/catalog.h"
#include "host/hw/plan.h"
#include "host/model/config.h"

namespace luatune {

// Training FLOPs per token. Full: 6*N_matmul + 12*L*H*D*T (torchtitan/nanoGPT/PaLM: no causal
// discount, flash recompute not counted). LoRA/QLoRA: 4*N_matmul (frozen: forward + data-gradient)
// + 6*N_lora + 12*L*H*D*T. HFU adds one forward when layers are recomputed: 2*N (+2*N_lora) + 4*L*H*D*T.
struct FlopsPerToken {
  double model = 0;        // MFU's numerator per token
  double hardware = 0;     // HFU's (== model without checkpointing)
  std::string convention;  // "6N+12LHQT (torchtitan)" or "4N+6N_lora+12LHQT (LoRA)"
  std::string formula;     // with the numbers filled in
};
FlopsPerToken hw_flops_per_token(const ModelConfig& c, PlanMethod method, int64_t lora_params,
                                 int64_t seq_len, bool checkpointing);

struct ProfileInput {
  double tokens = 0;   // tokens processed (all GPUs)
  double seconds = 0;  // wall time of the steps
  int64_t steps = 0;
  int64_t seq_len = 0;
  PlanMethod method = PlanMethod::method_full;
  int64_t lora_params = 0;  // trainable adapter parameters (LoRA/QLoRA)
  bool checkpointing = false;
  double peak_memory_gb = 0;  // from the trainer (0 on CPU)
  double peak_tflops = 0;     // the device's dense peak; 0 = unknown (CPU): no MFU
  double price_per_hour = 0;  // USD per GPU-hour; 0 = no cost
  int64_t gpus = 1;
  std::string device;  // "NVIDIA H100 80GB HBM3", "cpu"
  std::string gpu;     // catalog name when the device is in the catalog
};

struct Profile {
  ProfileInput in;
  double tokens_per_s = 0;  // all GPUs
  double step_time_s = 0;
  FlopsPerToken flops;
  double mfu = -1;  // < 0 when there is no peak (CPU)
  double hfu = -1;
  double gpu_hours = 0;
  double cost_usd = -1;  // < 0 when there is no price
  double usd_per_mtok = -1;
};
Profile hw_profile(const ModelConfig& c, const ProfileInput& in);

// MFU assumed on a target when the run was measured without one (CPU): the low end of the H100
// band of hardware.md section 2.6 (35-46 %), applied to every GPU.
constexpr double kHwDefaultMfu = 0.35;

struct ProjectionRow {
  std::string gpu;
  std::string kind;  // "measured", "projected" or "planned" (memory only)
  bool fits = true;  // from the plan (true when no plan was given)
  bool has_plan = false;
  double predicted_peak_gb = 0;
  int64_t max_micro_batch = 0;
  std::vector<std::string> advice;
  double tokens_per_s = -1;  // per GPU; < 0 when no time can be given
  double hours = -1;         // wall hours for `tokens` on `gpus` GPUs
  double gpu_hours = -1;
  double cost_usd = -1;
  double usd_per_mtok = -1;
  double mfu = -1;    // measured, or assumed for the projection
  std::string bound;  // "compute" or "bandwidth"
  std::string note;
};

struct ProjectOptions {
  double tokens = 0;  // tokens the run will process (default: the profile's)
  double mfu = 0;     // MFU to assume on targets; 0 = the measured one, else kHwDefaultMfu
  std::string dtype = "bf16";
  const Plan* plan = nullptr;      // fits per GPU; rows that do not fit get no time
  double weight_bytes = 0;         // bytes of weights read per pass (bandwidth bound); 0 = 2 * N
  int64_t micro_batch_tokens = 0;  // tokens per forward (bandwidth bound); 0 = seq_len
};

// One row per catalog GPU. `profile` may be null (every row "planned").
std::vector<ProjectionRow> hw_project(const Profile* profile, const ModelConfig& c,
                                      const std::vector<GpuSpec>& catalog, const ProjectOptions& o);
// The rule, for reports.
std::string hw_projection_rule();

}  // namespace luatune
