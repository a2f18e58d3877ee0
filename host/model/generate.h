// Text generation with a KV cache (greedy, temperature, top-k, top-p, stop strings and stop ids)
// and perplexity over token sequences.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "host/model/transformer.h"

namespace luatune {

class Tokenizer;

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;       // 0 = greedy
  int64_t top_k = 0;              // 0 = off
  double top_p = 1.0;             // 1 = off
  std::vector<std::string> stop;  // stop strings: output is cut before the first one
  std::vector<int64_t> stop_ids;  // besides the tokenizer's/config's EOS ids
  uint64_t seed = 0;
  bool use_cache = true;  // false recomputes the whole sequence every step (for testing)
  // The fast CPU decode step (host/model/decode_cpu.h) after the prefill, where the model allows it
  // (float32 on the CPU, no enabled adapter, ...); false: every step through model.forward.
  bool fast_decode = true;
};

struct GenerateResult {
  std::vector<int64_t> prompt_ids, new_ids;  // new_ids excludes a final EOS/stop id
  std::string text;                          // decoded new tokens, cut at a stop string
  std::string finish_reason;                 // "eos", "stop", "length"
  double seconds = 0;                        // wall time of the decoding loop (prefill included)
};

// Generates from `prompt_ids` (token ids, BOS included when the caller wants one).
GenerateResult model_generate_ids(const Model& model, const std::vector<int64_t>& prompt_ids,
                                  const GenerateOptions& options, const Tokenizer* tok);
// Many prompts at once: each prefilled through the forward pass into a cache of its own, then every
// unfinished sequence decoded together by the fast CPU step (one pass over the weights for all of
// them; a finished sequence drops out). Each result equals model_generate_ids on its prompt alone with
// the same options and its seed (seeds[i], or options.seed when `seeds` is empty), token for token;
// models the fast step does not take are generated one at a time. `progress(done, total)` after each
// sequence finishes.
std::vector<GenerateResult> model_generate_batch(const Model& model,
                                                 const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerateOptions& options, const Tokenizer* tok,
                                                 const std::function<void(size_t, size_t)>& progress = {},
                                                 const std::vector<uint64_t>& seeds = {});
// The prompt ids model_generate uses for `prompt`.
std::vector<int64_t> generate_prompt_ids(const Tokenizer& tok, const std::string& prompt);
// Encodes `prompt` (adding BOS/EOS as the tokenizer's post-processor says unless the prompt
// already starts with the BOS text) and generates.
GenerateResult model_generate(const Model& model, const Tokenizer& tok, const std::string& prompt,
                              const GenerateOptions& options);
// Next-token sampling from float logits (V): exposed for tests.
int64_t sample_next(const at::Tensor& logits, const GenerateOptions& options, at::Generator& gen);

struct PerplexityResult {
  double perplexity = 0, nll = 0;  // mean negative log-likelihood per predicted token (nats)
  int64_t tokens = 0;              // predicted tokens
};

// Each sequence is cut into windows of at most max_length tokens (no overlap); every token after
// the first of a window is predicted. Computed in float32 without gradients.
PerplexityResult model_perplexity(const Model& model, const std::vector<std::vector<int64_t>>& sequences,
                                  int64_t max_length);

}  // namespace luatune
