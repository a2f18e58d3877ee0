// Rejection sampling (best-of-N): for each prompt, generate N candidate responses with the policy,
// score each with a reward model, keep the best as supervised fine-tuning data (JSONL that
// data.jsonl reads). Prompts and candidates are encoded exactly as data.preferences encodes pairs,
// so the reward model scores what it was trained on. docs/alignment.md.
#pragma once

#include <cstdint>
#include <string>

#include "host/data/dataset.h"
#include "host/model/generate.h"
#include "host/train/reward.h"

namespace luatune {

class Tokenizer;

struct RejectionOptions {
  int64_t n = 4;                 // candidates per prompt
  GenerateOptions generate;      // sampling settings; candidate k of prompt i uses seed + i * n + k
  DataOptions data;              // max_length, chat / chat_format, max_records, as data.preferences
  int64_t batch_size = 8;        // candidates scored per forward
};

struct RejectionStats {
  int64_t prompts = 0, candidates = 0;
  double mean_best = 0;      // mean over prompts of the kept candidate's reward
  double mean_reward = 0;    // mean over every candidate
  double mean_new_tokens = 0;
  double seconds = 0;
};

// Reads prompts from `prompts_path` (JSONL: {"prompt": string or messages}, or {"messages": [...]}
// whose trailing assistant message, if any, is dropped; preference records' prompts work too) and
// writes `out_path` atomically, one record shape for the file: {"messages", "reward",
// "candidate_rewards"} when a chat format renders the prompts (string prompts become a user turn),
// else {"prompt", "response", "reward", "candidate_rewards"}. Errors name PATH:LINE.
RejectionStats rejection_sample(const Model& policy, RewardModel& reward, const Tokenizer& tokenizer,
                                const std::string& prompts_path, const std::string& out_path,
                                const RejectionOptions& options);

}  // namespace luatune
