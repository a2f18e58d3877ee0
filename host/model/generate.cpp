// Autoregressive decoding and perplexity. The KV cache path prefills the prompt once, then feeds one
// token per step; use_cache=false recomputes everything each step, which the tests compare against.
#include "host/model/generate.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "host/core/error.h"
#include "host/model/decode_cpu.h"
#include "host/text/tokenizer.h"

namespace luatune {

int64_t sample_next(const at::Tensor& logits_in, const GenerateOptions& o, at::Generator& gen) {
  at::Tensor logits = logits_in.to(at::kFloat).flatten();
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  const int64_t V = logits.size(0);
  if (o.top_k > 0 && o.top_k < V) {
    at::Tensor kth = std::get<0>(logits.topk(o.top_k)).select(0, o.top_k - 1);
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  if (o.top_p < 1.0) {
    // Keep the smallest set of most likely tokens whose probability reaches top_p (the most likely
    // token always stays).
    auto [sorted, order] = logits.sort(-1, true);
    at::Tensor cum = sorted.softmax(-1).cumsum(-1);
    at::Tensor drop = (cum - sorted.softmax(-1)) >= o.top_p;  // mass before this token already enough
    at::Tensor remove = at::zeros_like(drop).scatter(0, order, drop);
    logits = logits.masked_fill(remove, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = logits.softmax(-1);
  return at::multinomial(probs, 1, false, gen).item<int64_t>();
}

namespace {

// One sequence of a batch: what model_generate_ids' loop keeps, step by step.
struct Sequence {
  GenerateResult r;
  at::Generator gen;
  bool done = false;
};

void check_options(const GenerateOptions& o, const Tokenizer* tok) {
  LT_CHECK(o.max_new_tokens >= 0, "model:generate: max_new_tokens must be >= 0");
  LT_CHECK(o.top_p > 0 && o.top_p <= 1, "model:generate: top_p must be in (0, 1]");
  LT_CHECK(o.stop.empty() || tok, "model:generate: stop strings need a tokenizer");
}

// The ids that end a sequence: the options', the config's EOS ids and the tokenizer's.
std::vector<int64_t> stop_ids_of(const Model& model, const GenerateOptions& o, const Tokenizer* tok) {
  std::vector<int64_t> ids = o.stop_ids;
  for (int64_t e : model.config.eos_token_ids) ids.push_back(e);
  if (tok)
    for (int32_t e : tok->special().eos) ids.push_back(e);
  return ids;
}

// One sampled token for r: an EOS id ends it ("eos"); else the token is kept, and a stop string in
// the text so far ends it ("stop"), as does reaching max_new_tokens (the finish reason stays
// "length"). Returns whether the sequence goes on, i.e. `next` must be fed back.
bool take_token(GenerateResult& r, int64_t next, const GenerateOptions& o,
                const std::vector<int64_t>& stop_ids, const Tokenizer* tok) {
  if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
    r.finish_reason = "eos";
    return false;
  }
  r.new_ids.push_back(next);
  if (!o.stop.empty()) {
    std::vector<int32_t> ids32(r.new_ids.begin(), r.new_ids.end());
    const std::string text = tok->decode(ids32, true);
    for (const auto& st : o.stop)
      if (!st.empty() && text.find(st) != std::string::npos) {
        r.finish_reason = "stop";
        return false;
      }
  }
  return static_cast<int64_t>(r.new_ids.size()) < o.max_new_tokens;
}

// The text of the new ids, cut at the first stop string.
void finish_text(GenerateResult& r, const GenerateOptions& o, const Tokenizer* tok) {
  if (!tok) return;
  std::vector<int32_t> ids32(r.new_ids.begin(), r.new_ids.end());
  r.text = tok->decode(ids32, true);
  size_t cut = std::string::npos;
  for (const auto& s : o.stop)
    if (!s.empty()) cut = std::min(cut, r.text.find(s));
  if (cut != std::string::npos) r.text.resize(cut);
}

}  // namespace

GenerateResult model_generate_ids(const Model& model, const std::vector<int64_t>& prompt_ids,
                                  const GenerateOptions& o, const Tokenizer* tok) {
  LT_CHECK(!prompt_ids.empty(), "model:generate: the prompt encodes to no tokens");
  check_options(o, tok);
  at::NoGradGuard no_grad;
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> stop_ids = stop_ids_of(model, o, tok);

  GenerateResult r;
  r.prompt_ids = prompt_ids;
  r.finish_reason = "length";
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const int64_t P = static_cast<int64_t>(prompt_ids.size());
  auto ids_tensor = [&](const std::vector<int64_t>& v) {
    return at::tensor(v, at::kLong).unsqueeze(0).to(model.device());
  };
  KVCache cache;
  ForwardOptions fo;
  fo.last_only = true;
  if (o.use_cache) {
    cache = model.new_cache(1, P + std::max<int64_t>(o.max_new_tokens, 1));
    fo.cache = &cache;
  }
  std::vector<int64_t> all = prompt_ids;
  at::Tensor logits = model.forward(ids_tensor(prompt_ids), fo);
  // After the LibTorch prefill, one token at a time through plain loops where the model allows it.
  std::unique_ptr<DecodeCpu> fast;
  if (o.use_cache && o.fast_decode && o.max_new_tokens > 1 && decode_cpu_unsupported(model).empty())
    fast = std::make_unique<DecodeCpu>(model, &cache);
  while (static_cast<int64_t>(r.new_ids.size()) < o.max_new_tokens) {
    const int64_t next = sample_next(logits.select(1, 0).select(0, 0), o, gen);
    if (!take_token(r, next, o, stop_ids, tok)) break;
    all.push_back(next);
    logits = fast          ? fast->step(next)
             : o.use_cache ? model.forward(ids_tensor({next}), fo)
                           : model.forward(ids_tensor(all), fo);
  }
  finish_text(r, o, tok);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<GenerateResult> model_generate_batch(const Model& model,
                                                 const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerateOptions& o, const Tokenizer* tok,
                                                 const std::function<void(size_t, size_t)>& progress,
                                                 const std::vector<uint64_t>& seeds) {
  std::vector<GenerateResult> out;
  const size_t total = prompts.size();
  LT_CHECK(seeds.empty() || seeds.size() == total,
           "model:generate: " << seeds.size() << " seeds for " << total << " prompts");
  auto seed_of = [&](size_t i) { return seeds.empty() ? o.seed : seeds[i]; };
  if (total == 0) return out;
  if (total == 1 || !o.use_cache || !o.fast_decode || o.max_new_tokens <= 1 ||
      !decode_cpu_unsupported(model).empty()) {
    for (size_t i = 0; i < total; i++) {
      GenerateOptions one = o;
      one.seed = seed_of(i);
      out.push_back(model_generate_ids(model, prompts[i], one, tok));
      if (progress) progress(i + 1, total);
    }
    return out;
  }
  for (const auto& p : prompts) LT_CHECK(!p.empty(), "model:generate: a prompt encodes to no tokens");
  check_options(o, tok);
  at::NoGradGuard no_grad;
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> stop_ids = stop_ids_of(model, o, tok);
  std::vector<KVCache> caches(total);
  std::vector<Sequence> seqs(total);
  std::vector<at::Tensor> logits(total);  // each sequence's next-token logits (V)
  std::vector<KVCache*> cache_ptrs;
  std::map<std::vector<int64_t>, size_t> prefilled;  // a prompt given again (best-of-n) is prefilled once
  for (size_t i = 0; i < total; i++) {
    const int64_t P = static_cast<int64_t>(prompts[i].size());
    caches[i] = model.new_cache(1, P + o.max_new_tokens);
    auto seen = prefilled.find(prompts[i]);
    if (seen != prefilled.end()) {
      const KVCache& from = caches[seen->second];
      for (size_t l = 0; l < from.k.size(); l++) {
        caches[i].k[l].narrow(2, 0, P).copy_(from.k[l].narrow(2, 0, P));
        caches[i].v[l].narrow(2, 0, P).copy_(from.v[l].narrow(2, 0, P));
      }
      caches[i].length = P;
      logits[i] = logits[seen->second];
    } else {
      ForwardOptions fo;
      fo.last_only = true;
      fo.cache = &caches[i];
      logits[i] = model.forward(at::tensor(prompts[i], at::kLong).unsqueeze(0), fo).select(1, 0).select(0, 0);
      prefilled.emplace(prompts[i], i);
    }
    seqs[i].r.prompt_ids = prompts[i];
    seqs[i].r.finish_reason = "length";
    seqs[i].gen = at::detail::createCPUGenerator(seed_of(i));
    cache_ptrs.push_back(&caches[i]);
  }
  DecodeCpu fast(model, cache_ptrs);
  size_t finished = 0;
  auto finish = [&](Sequence& s) {
    s.done = true;
    finish_text(s.r, o, tok);
    if (progress) progress(++finished, total);
  };
  while (true) {
    std::vector<int64_t> feed_seq, feed_tok;
    for (size_t i = 0; i < total; i++) {
      Sequence& s = seqs[i];
      if (s.done) continue;
      // As model_generate_ids' loop (take_token), every unfinished sequence in turn.
      const int64_t next = sample_next(logits[i], o, s.gen);
      if (!take_token(s.r, next, o, stop_ids, tok)) {
        finish(s);
        continue;
      }
      feed_seq.push_back(static_cast<int64_t>(i));
      feed_tok.push_back(next);
    }
    if (feed_seq.empty()) break;
    // Views of the step's buffer: every one is sampled above before the next step overwrites it.
    at::Tensor rows = fast.step(feed_seq, feed_tok);
    for (size_t j = 0; j < feed_seq.size(); j++) logits[feed_seq[j]] = rows[static_cast<int64_t>(j)];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (Sequence& s : seqs) {
    s.r.seconds = seconds;
    out.push_back(std::move(s.r));
  }
  return out;
}

std::vector<int64_t> generate_prompt_ids(const Tokenizer& tok, const std::string& prompt) {
  const SpecialTokens& sp = tok.special();
  bool has_bos = !sp.bos_text.empty() && prompt.compare(0, sp.bos_text.size(), sp.bos_text) == 0;
  std::vector<int32_t> ids32 = tok.encode(prompt, !has_bos);
  // A post-processor that appends EOS (add_eos_token) would end the prompt; generation continues it.
  const bool ends_with_eos_text =
      !sp.eos_text.empty() && prompt.size() >= sp.eos_text.size() &&
      prompt.compare(prompt.size() - sp.eos_text.size(), sp.eos_text.size(), sp.eos_text) == 0;
  if (!has_bos && !ends_with_eos_text && !ids32.empty() &&
      std::find(sp.eos.begin(), sp.eos.end(), ids32.back()) != sp.eos.end())
    ids32.pop_back();
  return std::vector<int64_t>(ids32.begin(), ids32.end());
}

GenerateResult model_generate(const Model& model, const Tokenizer& tok, const std::string& prompt,
                              const GenerateOptions& o) {
  return model_generate_ids(model, generate_prompt_ids(tok, prompt), o, &tok);
}

PerplexityResult model_perplexity(const Model& model, const std::vector<std::vector<int64_t>>& sequences,
                                  int64_t max_length) {
  LT_CHECK(max_length >= 2, "model:perplexity: max_length must be at least 2");
  at::NoGradGuard no_grad;
  double nll = 0;
  int64_t count = 0;
  for (const auto& seq : sequences) {
    for (size_t start = 0; start + 1 < seq.size(); start += max_length) {
      size_t len = std::min<size_t>(max_length, seq.size() - start);
      if (len < 2) break;
      std::vector<int64_t> window(seq.begin() + start, seq.begin() + start + len);
      at::Tensor ids = at::tensor(window, at::kLong).unsqueeze(0).to(model.device());
      at::Tensor logits = model.forward(ids).to(at::kFloat);  // (1, len, V)
      at::Tensor logp = logits.narrow(1, 0, len - 1).log_softmax(-1);
      at::Tensor target = ids.narrow(1, 1, len - 1).unsqueeze(-1);
      nll -= logp.gather(-1, target).sum().item<double>();
      count += static_cast<int64_t>(len - 1);
    }
  }
  LT_CHECK(count > 0, "model:perplexity: no sequence has two or more tokens");
  PerplexityResult r;
  r.tokens = count;
  r.nll = nll / count;
  r.perplexity = std::exp(r.nll);
  return r;
}

}  // namespace luatune
