// Best-of-N rejection sampling (see rejection.h). The prompt a candidate is generated from is the
// part of its encoded preference record before the first trained token, and the scored sequence is
// that record's whole side: generation and scoring use one encoding, the one the reward model saw.
#include "host/train/rejection.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/data/format.h"
#include "host/data/preference.h"
#include "host/dist/dist.h"
#include "host/io/jsonl.h"
#include "host/text/tokenizer.h"

namespace luatune {

using json = nlohmann::ordered_json;  // prompts keep their keys' order, as the chat template sees them

namespace {

// The prompt of one JSONL record: "prompt" as it is, else "messages" without a final assistant turn.
json record_prompt(const json& record, const std::string& where) {
  if (record.is_object() && record.contains("prompt") &&
      (record["prompt"].is_string() || record["prompt"].is_array()))
    return record["prompt"];
  if (record.is_object() && record.contains("messages") && record["messages"].is_array() &&
      !record["messages"].empty()) {
    json m = record["messages"];
    if (m.back().is_object() && m.back().value("role", "") == "assistant") m.erase(m.size() - 1);
    if (!m.empty()) return m;
  }
  fail(where + ": expected a JSON object with \"prompt\" (a string or a message list) or \"messages\", got " +
       data_record_excerpt(record));
}

// The record data.preferences would read for two responses to `prompt`.
json pair_record(const json& prompt, const std::string& a, const std::string& b) {
  if (prompt.is_string()) return {{"prompt", prompt}, {"chosen", a}, {"rejected", b}};
  return {{"prompt", prompt},
          {"chosen", json::array({{{"role", "assistant"}, {"content", a}}})},
          {"rejected", json::array({{{"role", "assistant"}, {"content", b}}})}};
}

// The generation prompt of `prompt`: its encoded preference record up to the first trained token, and
// that token (the end of an empty response: EOS or the chat format's end of turn), which also stops
// generation.
std::vector<int64_t> generation_prefix(const json& prompt, const Tokenizer& tok, const DataOptions& data,
                                       const std::string& where, int64_t* stop_id) {
  Document empty;
  try {
    empty = PreferenceDataset::from_records({pair_record(prompt, "", "")}, tok, data)->document(0, 0);
  } catch (const Error& e) {
    fail(where + ": " + e.what());
  }
  size_t first = 1;
  while (first < empty.mask.size() && !empty.mask[first]) first++;
  LT_CHECK(first < empty.mask.size(),
           where << ": the prompt leaves no room for a response within max_length " << data.max_length);
  *stop_id = empty.ids[first];
  return std::vector<int64_t>(empty.ids.begin(), empty.ids.begin() + static_cast<std::ptrdiff_t>(first));
}

}  // namespace

RejectionStats rejection_sample(const Model& policy, RewardModel& reward, const Tokenizer& tok,
                                const std::string& prompts_path, const std::string& out_path,
                                const RejectionOptions& o) {
  LT_CHECK(o.n >= 1, "train.rejection_sample: n must be at least 1, got " << o.n);
  LT_CHECK(o.batch_size >= 1, "train.rejection_sample: batch_size must be at least 1");
  LT_CHECK(!out_path.empty(), "train.rejection_sample: option 'out' (the JSONL file to write) is required");
  // ZeRO-3 models gather here, on every rank alike (ranks sample different numbers of prompts).
  policy.ensure_full_weights();
  reward.model()->ensure_full_weights();
  LT_CHECK(reward.model()->config.vocab_size == policy.config.vocab_size,
           "train.rejection_sample: the reward model's vocabulary ("
               << reward.model()->config.vocab_size << ") differs from the policy's ("
               << policy.config.vocab_size << "); both must use the tokenizer given here");
  const auto t0 = std::chrono::steady_clock::now();
  JsonlReadOptions ro;
  ro.expected = "a JSON object";
  JsonlReaderOf<json> in(prompts_path, ro);
  LT_CHECK(in.is_open(), "train.rejection_sample: cannot open '" << prompts_path << "'");
  const bool chat = data_resolve_chat(DataFormat::prompt_response, o.data, tok) != nullptr;
  // Data parallel: prompt i is rank (i mod N)'s; each rank writes its rows to a part file and rank 0
  // interleaves them back into prompt order. Seeds follow the prompt, so any N writes the same file.
  const int64_t rank = dist_rank(), world = dist_world_size();
  RejectionStats st;
  std::string out;
  int64_t index = -1, new_tokens = 0;
  double sum_best = 0, sum_all = 0;
  // Every rank reads every line (a bad one fails on all ranks alike) and keeps its share.
  while ((o.data.max_records < 0 || index + 1 < o.data.max_records) && in.next()) {
    if (++index % world != rank) continue;
    const std::string where = in.where();
    const json& record = in.value();
    const json prompt = record_prompt(record, where);
    const uint64_t seed0 = o.generate.seed + static_cast<uint64_t>(index * o.n);

    int64_t stop_id = 0;
    const std::vector<int64_t> prefix = generation_prefix(prompt, tok, o.data, where, &stop_id);
    GenerateOptions go = o.generate;
    go.stop_ids.push_back(stop_id);

    // The n candidates decode together (model_generate_batch), each seeded as it was alone.
    std::vector<std::string> candidates;
    std::vector<uint64_t> seeds;
    for (int64_t k = 0; k < o.n; k++) seeds.push_back(seed0 + static_cast<uint64_t>(k));
    const std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(o.n), prefix);
    for (const GenerateResult& g : model_generate_batch(policy, prompts, go, &tok, {}, seeds)) {
      new_tokens += static_cast<int64_t>(g.new_ids.size());
      candidates.push_back(g.text);
    }
    // Score: candidates two by two as the chosen/rejected sides of pairs (an odd one out twice).
    std::vector<json> pairs;
    for (size_t k = 0; k < candidates.size(); k += 2)
      pairs.push_back(pair_record(prompt, candidates[k], candidates[std::min(k + 1, candidates.size() - 1)]));
    auto set = PreferenceDataset::from_records(pairs, tok, o.data);
    LT_CHECK(
        set->size() == static_cast<int64_t>(pairs.size()),
        where << ": a candidate was cut away entirely by max_length " << o.data.max_length << "; raise it");
    at::Tensor scores =
        reward.score_pairs(*set, std::max<int64_t>(1, o.batch_size / 2)).to(at::kDouble).contiguous();
    const double* r = scores.data_ptr<double>();  // (pairs, 2) row-major: candidate k is element k
    std::vector<double> rewards(r, r + o.n);
    size_t best = 0;
    for (size_t k = 1; k < rewards.size(); k++)
      if (rewards[k] > rewards[best]) best = k;

    // One record shape for the whole file (data.jsonl detects it from the first record): a
    // conversation whenever a chat format renders the prompts, else prompt/response.
    json row;
    if (!chat) {
      row = {{"prompt", prompt}, {"response", candidates[best]}};
    } else {
      json messages = prompt.is_string() ? json::array({{{"role", "user"}, {"content", prompt}}}) : prompt;
      messages.push_back({{"role", "assistant"}, {"content", candidates[best]}});
      row = {{"messages", messages}};
    }
    row["reward"] = rewards[best];
    row["candidate_rewards"] = rewards;
    out += row.dump() + "\n";
    st.prompts++;
    st.candidates += o.n;
    sum_best += rewards[best];
    for (double r : rewards) sum_all += r;
  }
  st.prompts = dist_sum(st.prompts);
  st.candidates = dist_sum(st.candidates);
  new_tokens = dist_sum(new_tokens);
  sum_best = dist_sum(sum_best);
  sum_all = dist_sum(sum_all);
  LT_CHECK(st.prompts > 0, "train.rejection_sample: " << prompts_path << " has no prompts");
  if (world == 1) {
    file_write_atomic(out_path, out);
  } else {
    const std::string part = out_path + ".part-" + std::to_string(rank);
    file_write_atomic(part, out);
    dist_barrier();
    DistMainOnly main_only;  // rank 0 merges; the others wait for the file
    if (main_only) {
      std::vector<std::ifstream> parts;
      for (int64_t r = 0; r < world; r++)
        parts.emplace_back(out_path + ".part-" + std::to_string(r), std::ios::binary);
      std::string merged, row;
      for (int64_t i = 0; i < st.prompts; i++) {
        LT_CHECK(
            std::getline(parts[static_cast<size_t>(i % world)], row),
            out_path << ".part-" << i % world << ": ends early (a rank wrote fewer rows than its prompts)");
        merged += row + "\n";
      }
      file_write_atomic(out_path, merged);
      for (int64_t r = 0; r < world; r++) std::remove((out_path + ".part-" + std::to_string(r)).c_str());
    }
  }
  st.mean_best = sum_best / static_cast<double>(st.prompts);
  st.mean_reward = sum_all / static_cast<double>(st.candidates);
  st.mean_new_tokens = static_cast<double>(new_tokens) / static_cast<double>(st.candidates);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

CompletionStats generate_completions(const Model& model, const Tokenizer& tok,
                                     const std::string& prompts_path, const std::string& out_path,
                                     const CompletionOptions& o) {
  LT_CHECK(o.batch_size >= 1, "train.generate: batch_size must be at least 1, got " << o.batch_size);
  LT_CHECK(!out_path.empty(), "train.generate: option 'out' (the JSONL file to write) is required");
  model.ensure_full_weights();
  const auto t0 = std::chrono::steady_clock::now();
  JsonlReadOptions ro;
  ro.expected = "a JSON object";
  JsonlReaderOf<json> in(prompts_path, ro);
  LT_CHECK(in.is_open(), "train.generate: cannot open '" << prompts_path << "'");
  const bool tty = isatty(fileno(stderr));
  CompletionStats st;
  std::string out;
  std::vector<json> prompts;
  std::vector<std::vector<int64_t>> ids;
  std::vector<int64_t> stops;  // each prompt's end-of-response id (generation_prefix)
  auto flush = [&]() {
    if (ids.empty()) return;
    // The end-of-response id is the same for every prompt of one chat format; prompts are grouped by
    // it so each group shares one GenerateOptions.
    std::vector<uint64_t> seeds;
    for (size_t i = 0; i < ids.size(); i++)
      seeds.push_back(o.generate.seed + static_cast<uint64_t>(st.prompts + static_cast<int64_t>(i)));
    std::vector<GenerateResult> rs(ids.size());
    std::vector<bool> done(ids.size(), false);
    for (size_t i = 0; i < ids.size(); i++) {
      if (done[i]) continue;
      std::vector<size_t> group;
      for (size_t j = i; j < ids.size(); j++)
        if (!done[j] && stops[j] == stops[i]) group.push_back(j);
      GenerateOptions go = o.generate;
      go.stop_ids.push_back(stops[i]);
      std::vector<std::vector<int64_t>> gp;
      std::vector<uint64_t> gs;
      for (size_t j : group) gp.push_back(ids[j]), gs.push_back(seeds[j]);
      std::vector<GenerateResult> gr = model_generate_batch(model, gp, go, &tok, {}, gs);
      for (size_t k = 0; k < group.size(); k++) rs[group[k]] = std::move(gr[k]), done[group[k]] = true;
    }
    for (size_t i = 0; i < ids.size(); i++) {
      json row = {{"prompt", prompts[i]},
                  {"completion", rs[i].text},
                  {"finish_reason", rs[i].finish_reason},
                  {"new_tokens", static_cast<int64_t>(rs[i].new_ids.size())}};
      out += row.dump() + "\n";
      st.new_tokens += static_cast<int64_t>(rs[i].new_ids.size());
    }
    st.prompts += static_cast<int64_t>(ids.size());
    prompts.clear(), ids.clear(), stops.clear();
    if (o.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "%sgenerate: %lld prompts, %lld new tokens, %.1f tokens/s%s", tty ? "\r" : "",
                   static_cast<long long>(st.prompts), static_cast<long long>(st.new_tokens),
                   s > 0 ? static_cast<double>(st.new_tokens) / s : 0.0, tty ? "" : "\n");
      std::fflush(stderr);
    }
  };
  int64_t index = -1;
  while ((o.data.max_records < 0 || index + 1 < o.data.max_records) && in.next()) {
    index++;
    const std::string where = in.where();
    const json prompt = record_prompt(in.value(), where);
    int64_t stop_id = 0;
    ids.push_back(generation_prefix(prompt, tok, o.data, where, &stop_id));
    stops.push_back(stop_id);
    prompts.push_back(prompt);
    if (static_cast<int64_t>(ids.size()) == o.batch_size) flush();
  }
  flush();
  if (o.progress && tty) std::fprintf(stderr, "\n");
  LT_CHECK(st.prompts > 0, "train.generate: " << prompts_path << " has no prompts");
  file_write_atomic(out_path, out);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.tokens_per_s = st.seconds > 0 ? static_cast<double>(st.new_tokens) / st.seconds : 0;
  return st;
}

}  // namespace luatune
