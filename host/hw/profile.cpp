// Run profile (MFU, cost) and projection to other GPUs; formulas in profile.h, rules and their
// limits in docs/hardware.md ("MFU", "Projection").
#include "host/hw/profile.h"

#include <algorithm>
#include <cstdio>

#include "host/core/error.h"

namespace luatune {

namespace {

std::string num(double v, const char* fmt = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

FlopsPerToken hw_flops_per_token(const ModelConfig& c, PlanMethod method, int64_t lora_params,
                                 int64_t seq_len, bool checkpointing) {
  LT_CHECK(seq_len > 0, "hw: seq_len must be positive for FLOPs per token, got " << seq_len);
  const HwParamCounts n = hw_param_counts(c);
  const double N = static_cast<double>(n.matmul), Nl = static_cast<double>(lora_params);
  const double LHQT = static_cast<double>(c.num_layers) * static_cast<double>(c.num_heads) *
                      static_cast<double>(c.head_dim) * static_cast<double>(seq_len);
  FlopsPerToken f;
  if (method == PlanMethod::method_full) {
    f.model = 6 * N + 12 * LHQT;
    f.hardware = f.model + (checkpointing ? 2 * N + 4 * LHQT : 0);
    f.convention = "6N+12LHQT (torchtitan/nanoGPT/PaLM; no causal discount)";
    f.formula = "6 x " + num(N / 1e9) + "e9 + 12 x " + std::to_string(c.num_layers) + " x " +
                std::to_string(c.num_heads) + " x " + std::to_string(c.head_dim) + " x " +
                std::to_string(seq_len) + " = " + num(f.model / 1e9) + " GFLOP/token";
  } else {
    f.model = 4 * N + 6 * Nl + 12 * LHQT;
    f.hardware = f.model + (checkpointing ? 2 * N + 2 * Nl + 4 * LHQT : 0);
    f.convention = "4N+6N_lora+12LHQT (LoRA: frozen weights get no weight-gradient matmul)";
    f.formula = "4 x " + num(N / 1e9) + "e9 + 6 x " + num(Nl / 1e6) + "e6 + 12 x " +
                std::to_string(c.num_layers) + " x " + std::to_string(c.num_heads) + " x " +
                std::to_string(c.head_dim) + " x " + std::to_string(seq_len) + " = " + num(f.model / 1e9) +
                " GFLOP/token";
  }
  return f;
}

Profile hw_profile(const ModelConfig& c, const ProfileInput& in) {
  LT_CHECK(in.tokens > 0, "hw.profile: tokens must be positive, got " << in.tokens);
  LT_CHECK(in.seconds > 0, "hw.profile: seconds must be positive, got " << in.seconds);
  LT_CHECK(in.gpus > 0, "hw.profile: gpus must be positive, got " << in.gpus);
  Profile p;
  p.in = in;
  p.tokens_per_s = in.tokens / in.seconds;
  p.step_time_s = in.steps > 0 ? in.seconds / static_cast<double>(in.steps) : 0;
  p.flops = hw_flops_per_token(c, in.method, in.lora_params, in.seq_len, in.checkpointing);
  if (in.peak_tflops > 0) {
    const double peak = in.peak_tflops * 1e12 * static_cast<double>(in.gpus);
    p.mfu = p.tokens_per_s * p.flops.model / peak;
    p.hfu = p.tokens_per_s * p.flops.hardware / peak;
  }
  p.gpu_hours = in.seconds * static_cast<double>(in.gpus) / 3600.0;
  if (in.price_per_hour > 0) {
    p.cost_usd = p.gpu_hours * in.price_per_hour;
    p.usd_per_mtok = p.cost_usd / in.tokens * 1e6;
  }
  return p;
}

std::string hw_projection_rule() {
  return "tokens/s per GPU on a target = min(MFU x peak_bf16 / FLOPs per token, micro-batch tokens x "
         "bandwidth / "
         "(passes x weight bytes)), passes = 3 for full training and 2 for LoRA; MFU = the measured run's "
         "(or 0.35 "
         "when measured on a CPU, hardware.md 2.6); hours = tokens / (tokens/s x GPUs); cost = GPU-hours x "
         "price";
}

std::vector<ProjectionRow> hw_project(const Profile* profile, const ModelConfig& c,
                                      const std::vector<GpuSpec>& catalog, const ProjectOptions& o) {
  std::vector<ProjectionRow> rows;
  const HwParamCounts n = hw_param_counts(c);
  const bool full = !profile || profile->in.method == PlanMethod::method_full;
  const double weight_bytes = o.weight_bytes > 0 ? o.weight_bytes : 2.0 * static_cast<double>(n.total);
  const double tokens = o.tokens > 0 ? o.tokens : (profile ? profile->in.tokens : 0);
  const int64_t gpus = profile ? profile->in.gpus : 1;
  double mfu = o.mfu;
  std::string mfu_note;
  if (mfu <= 0 && profile && profile->mfu > 0) {
    mfu = profile->mfu;
    mfu_note = "assumes the measured MFU (" + num(100 * mfu, "%.1f") + " %) on " + profile->in.gpu;
  } else if (mfu <= 0) {
    mfu = kHwDefaultMfu;
    mfu_note = "assumes MFU " + num(100 * mfu, "%.0f") + " % (measured on " +
               (profile ? profile->in.device : std::string("no device")) + ": no GPU MFU to carry over)";
  } else {
    mfu_note = "assumes MFU " + num(100 * mfu, "%.1f") + " % (given)";
  }
  for (const GpuSpec& g : catalog) {
    ProjectionRow r;
    r.gpu = g.name;
    if (o.plan) {
      for (const GpuFit& f : o.plan->gpus)
        if (f.gpu == g.name) {
          r.has_plan = true;
          r.fits = f.fits;
          r.max_micro_batch = f.max_micro_batch;
          r.advice = f.advice;
        }
      r.predicted_peak_gb = o.plan->components.total / kGiB;
    }
    const bool measured_here = profile && !profile->in.gpu.empty() && profile->in.gpu == g.name;
    if (!profile) {
      r.kind = "planned";
      r.note = "no measured run: memory only";
    } else if (!r.fits) {
      r.kind = "planned";
      r.note = "does not fit: no time projected";
    } else if (measured_here) {
      r.kind = "measured";
      r.tokens_per_s = profile->tokens_per_s / static_cast<double>(gpus);
      r.mfu = profile->mfu;
      r.note = "measured on " + profile->in.device;
    } else {
      r.kind = "projected";
      const double peak = g.peak_tflops(o.dtype) * 1e12;
      const double compute = mfu * peak / profile->flops.model;
      const double n_tok =
          static_cast<double>(o.micro_batch_tokens > 0 ? o.micro_batch_tokens : profile->in.seq_len);
      const double bandwidth = n_tok * g.bandwidth_gbs * 1e9 / ((full ? 3.0 : 2.0) * weight_bytes);
      r.tokens_per_s = std::min(compute, bandwidth);
      r.bound = compute <= bandwidth ? "compute" : "bandwidth";
      r.mfu = r.tokens_per_s * profile->flops.model / peak;
      r.note = "projection: " + mfu_note + (r.bound == "bandwidth" ? "; capped by memory bandwidth" : "");
      if (!g.bf16 && o.dtype == "bf16") r.note += "; no bf16 on this GPU: fp16 peak used";
    }
    if (r.tokens_per_s > 0 && tokens > 0) {
      r.hours = tokens / (r.tokens_per_s * static_cast<double>(gpus)) / 3600.0;
      r.gpu_hours = r.hours * static_cast<double>(gpus);
      if (g.price_per_hour > 0) {
        r.cost_usd = r.gpu_hours * g.price_per_hour;
        r.usd_per_mtok = r.cost_usd / tokens * 1e6;
      }
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace luatune
