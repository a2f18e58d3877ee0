// The ZeRO stage names, one table for the trainer (host/dist/zero.h) and the planner (host/hw/plan.h).
#pragma once

#include <string>

namespace luatune {

enum class ShardStage { none = 0, optimizer = 1, gradients = 2, full = 3 };

// "none" | "optimizer" | "gradients" | "full", FSDP's NO_SHARD / SHARD_GRAD_OP / FULL_SHARD, or the
// stage number "0".."3"; false (and *out untouched) for anything else.
inline bool shard_stage_lookup(const std::string& s, ShardStage* out) {
  static const struct {
    const char *name, *fsdp, *number;
    ShardStage stage;
  } kStages[] = {{"none", "NO_SHARD", "0", ShardStage::none},
                 {"optimizer", nullptr, "1", ShardStage::optimizer},
                 {"gradients", "SHARD_GRAD_OP", "2", ShardStage::gradients},
                 {"full", "FULL_SHARD", "3", ShardStage::full}};
  for (const auto& k : kStages)
    if (s == k.name || (k.fsdp && s == k.fsdp) || s == k.number) {
      *out = k.stage;
      return true;
    }
  return false;
}

inline const char* shard_stage_name(ShardStage s) {
  static const char* const kNames[] = {"none", "optimizer", "gradients", "full"};
  return kNames[static_cast<int>(s)];
}

}  // namespace luatune
