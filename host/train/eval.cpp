// Multiple-choice accuracy by log-likelihood (see eval.h and docs/eval.md): prompts built as
// lm-evaluation-harness builds them, context/continuation split as its _encode_pair splits them,
// continuations scored in padded batches from one forward each.
#include "host/train/eval.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/io/jsonl.h"
#include "host/model/transformer.h"
#include "host/text/tokenizer.h"

namespace luatune {

// ============================================================================================
// Records

namespace {

int64_t answer_from_json(const nlohmann::json& a, const std::string& where) {
  if (a.is_number_integer()) return a.get<int64_t>();
  if (a.is_string()) {
    const std::string& s = a.get_ref<const std::string&>();
    LT_CHECK(s.size() == 1 && s[0] >= 'A' && s[0] <= 'Z',
             where << ": answer must be a 0-based index or a letter A-Z, got \"" << s << "\"");
    return s[0] - 'A';
  }
  fail(where + ": answer must be a 0-based index or a letter A-Z, got " + a.dump());
}

}  // namespace

std::vector<McRecord> mc_read_jsonl(const std::string& path) {
  std::vector<McRecord> out;
  JsonlReadOptions o;
  o.expected = "a JSON object";
  JsonlReader in(path, o);
  if (!in.is_open()) fail(in.open_error());
  while (in.next()) {
    const std::string where = in.where();
    const nlohmann::json& j = in.value();
    LT_CHECK(j.is_object(), where << ": expected {\"question\": ..., \"choices\": [...], \"answer\": index}");
    McRecord r;
    LT_CHECK(j.contains("question") && j["question"].is_string(), where << ": \"question\" must be a string");
    r.question = j["question"].get<std::string>();
    LT_CHECK(j.contains("choices") && j["choices"].is_array(),
             where << ": \"choices\" must be a list of strings");
    for (const auto& c : j["choices"]) {
      LT_CHECK(c.is_string(), where << ": \"choices\" must be a list of strings");
      r.choices.push_back(c.get<std::string>());
    }
    LT_CHECK(j.contains("answer"), where << ": \"answer\" is missing");
    r.answer = answer_from_json(j["answer"], where);
    mc_check_record(r, where);
    out.push_back(std::move(r));
  }
  LT_CHECK(!out.empty(), "eval: " << path << " holds no records");
  return out;
}

void mc_check_record(const McRecord& r, const std::string& where) {
  LT_CHECK(!r.choices.empty(), where << ": a record needs at least one choice");
  for (size_t i = 0; i < r.choices.size(); i++)
    LT_CHECK(!r.choices[i].empty(), where << ": choice " << i << " is empty");
  LT_CHECK(r.answer >= 0 && r.answer < static_cast<int64_t>(r.choices.size()),
           where << ": answer " << r.answer << " is not a choice index (0-based, " << r.choices.size()
                 << " choices)");
}

// ============================================================================================
// Prompts

std::string mc_choice_target(const McRecord& r, size_t i, McChoicesAs as) {
  if (as == McChoicesAs::text) return r.choices.at(i);
  LT_CHECK(i < 26, "eval: choices_as = \"letters\" supports at most 26 choices, got " << r.choices.size());
  return std::string(1, static_cast<char>('A' + i));
}

std::string mc_doc_text(const McRecord& r, McChoicesAs as) {
  if (as == McChoicesAs::text) return "Question: " + r.question + "\nAnswer:";
  std::string s = str_trim(r.question);  // MMLU's template strips the question
  for (size_t i = 0; i < r.choices.size(); i++) s += "\n" + mc_choice_target(r, i, as) + ". " + r.choices[i];
  return s + "\nAnswer:";
}

std::string mc_chat_question(const McRecord& r, McChoicesAs as) {
  if (as == McChoicesAs::text) return r.question;
  std::string s = str_trim(r.question);
  for (size_t i = 0; i < r.choices.size(); i++) s += "\n" + mc_choice_target(r, i, as) + ". " + r.choices[i];
  return s;
}

std::string mc_context(const McRecord& r, const std::vector<McRecord>& examples, const McOptions& o) {
  if (o.chat) {
    std::vector<std::pair<std::string, std::string>> turns;
    if (!o.description.empty()) turns.emplace_back("system", o.description);
    for (const McRecord& ex : examples) {
      turns.emplace_back("user", mc_chat_question(ex, o.choices_as));
      turns.emplace_back("assistant", mc_choice_target(ex, ex.answer, o.choices_as));
    }
    turns.emplace_back("user", mc_chat_question(r, o.choices_as));
    return o.chat(turns);
  }
  // The harness's defaults: target_delimiter " ", fewshot_delimiter "\n\n".
  std::string s = o.description;
  for (const McRecord& ex : examples)
    s += mc_doc_text(ex, o.choices_as) + " " + mc_choice_target(ex, ex.answer, o.choices_as) + "\n\n";
  return s + mc_doc_text(r, o.choices_as);
}

double mc_choice_length(const std::string& target) {
  size_t n = 0;
  for (unsigned char c : target) n += (c & 0xC0) != 0x80;  // count UTF-8 lead bytes: code points
  return static_cast<double>(n);
}

// ============================================================================================
// Tokens

std::vector<int64_t> mc_special_prefix(const Tokenizer& tok) {
  const std::string probe = "x";
  std::vector<int32_t> plain = tok.encode(probe, false), with = tok.encode(probe, true);
  for (size_t k = 0; k + plain.size() <= with.size(); k++)
    if (std::equal(plain.begin(), plain.end(), with.begin() + static_cast<std::ptrdiff_t>(k)))
      return std::vector<int64_t>(with.begin(), with.begin() + static_cast<std::ptrdiff_t>(k));
  return {};
}

McRequest mc_encode_pair(const Tokenizer& tok, std::string context, std::string continuation,
                         const std::vector<int64_t>& prefix) {
  size_t keep = context.find_last_not_of(" \t\n\r\f\v");
  keep = keep == std::string::npos ? 0 : keep + 1;
  if (keep < context.size()) {
    continuation = context.substr(keep) + continuation;
    context.resize(keep);
  }
  std::vector<int32_t> whole = tok.encode(context + continuation, false);
  std::vector<int32_t> ctx = tok.encode(context, false);
  McRequest r;
  r.context = prefix;
  r.context.insert(r.context.end(), ctx.begin(), ctx.end());
  if (whole.size() > ctx.size())
    r.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(ctx.size()), whole.end());
  LT_CHECK(!r.continuation.empty(),
           "eval: continuation \"" << continuation << "\" adds no tokens to its context");
  LT_CHECK(!r.context.empty(), "eval: the context is empty (and the tokenizer adds no BOS)");
  return r;
}

// ============================================================================================
// Scoring

std::vector<double> mc_loglikelihoods(const Model& model, const std::vector<McRequest>& requests,
                                      int64_t batch_size, int64_t max_length) {
  if (max_length <= 0) max_length = model.config.max_position_embeddings;
  if (batch_size <= 0) batch_size = static_cast<int64_t>(requests.size());
  at::NoGradGuard no_grad;
  const int64_t pad = model.config.pad_token_id >= 0 ? model.config.pad_token_id : 0;
  std::vector<double> out;
  out.reserve(requests.size());
  for (size_t start = 0; start < requests.size(); start += static_cast<size_t>(batch_size)) {
    size_t end = std::min(requests.size(), start + static_cast<size_t>(batch_size));
    // Input = context + continuation without its last token (nothing predicts past it), cut on the
    // left to max_length. The continuation's log-probs come from its last n positions.
    std::vector<std::vector<int64_t>> inputs;
    int64_t T = 0;
    for (size_t i = start; i < end; i++) {
      const McRequest& r = requests[i];
      LT_CHECK(static_cast<int64_t>(r.continuation.size()) <= max_length,
               "eval: a continuation of " << r.continuation.size() << " tokens is longer than max_length "
                                          << max_length);
      std::vector<int64_t> in = r.context;
      in.insert(in.end(), r.continuation.begin(), r.continuation.end() - 1);
      if (static_cast<int64_t>(in.size()) > max_length) in.erase(in.begin(), in.end() - max_length);
      T = std::max<int64_t>(T, static_cast<int64_t>(in.size()));
      inputs.push_back(std::move(in));
    }
    const int64_t B = static_cast<int64_t>(inputs.size());
    std::vector<int64_t> flat(static_cast<size_t>(B * T), pad), rows, targets;
    for (int64_t b = 0; b < B; b++) {
      const auto& in = inputs[b];
      std::copy(in.begin(), in.end(), flat.begin() + b * T);
      const auto& cont = requests[start + b].continuation;
      const int64_t L = static_cast<int64_t>(in.size()), n = static_cast<int64_t>(cont.size());
      for (int64_t j = 0; j < n; j++) {
        rows.push_back(b * T + L - n + j);  // position predicting cont[j], in the flattened (B*T)
        targets.push_back(cont[j]);
      }
    }
    at::Tensor ids = at::tensor(flat, at::kLong).view({B, T}).to(model.device());
    at::Tensor hidden = model.hidden(ids).flatten(0, 1);                                         // (B*T, C)
    at::Tensor picked = hidden.index_select(0, at::tensor(rows, at::kLong).to(model.device()));  // (N, C)
    at::Tensor logp = model.logits(picked).to(at::kFloat).log_softmax(-1);                       // (N, V)
    at::Tensor lp = logp.gather(1, at::tensor(targets, at::kLong).to(model.device()).unsqueeze(1))
                        .squeeze(1)
                        .to(at::kDouble)
                        .cpu()
                        .contiguous();
    const double* p = lp.data_ptr<double>();
    size_t k = 0;
    for (int64_t b = 0; b < B; b++) {
      double sum = 0;
      for (size_t j = 0; j < requests[start + b].continuation.size(); j++) sum += p[k++];
      out.push_back(sum);
    }
  }
  return out;
}

namespace {

// Puts every adapter in eval mode (no dropout) and restores each one's mode when it goes out of scope.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Model& m) {
    for (const ParamSlot& s : model_slots(m))
      if (s.linear && s.linear->adapter) {
        saved_.emplace_back(s.linear->adapter.get(), s.linear->adapter->training);
        s.linear->adapter->training = false;
      }
  }
  ~EvalModeGuard() {
    for (auto& [a, training] : saved_) a->training = training;
  }

 private:
  std::vector<std::pair<LinearAdapter*, bool>> saved_;
};

// numpy's argmax: the first of equal maxima.
int64_t argmax(const std::vector<double>& v) {
  return static_cast<int64_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

McResult mc_evaluate(Model& model, const Tokenizer& tok, const std::vector<McRecord>& records,
                     const McOptions& o) {
  LT_CHECK(o.shots >= 0, "eval: shots must be 0 or more, got " << o.shots);
  std::vector<McRecord> examples = o.fewshot;
  size_t first = 0;
  if (o.shots > 0 && examples.empty()) {  // the task's first records serve as examples, unscored
    LT_CHECK(static_cast<int64_t>(records.size()) > o.shots,
             "eval: shots = " << o.shots << " takes the first " << o.shots << " of " << records.size()
                              << " records as examples, leaving none to score; give a separate fewshot set");
    examples.assign(records.begin(), records.begin() + o.shots);
    first = static_cast<size_t>(o.shots);
  }
  LT_CHECK(static_cast<int64_t>(examples.size()) >= o.shots,
           "eval: shots = " << o.shots << " but the fewshot set has only " << examples.size() << " records");
  examples.resize(static_cast<size_t>(o.shots));
  for (size_t i = 0; i < examples.size(); i++)
    mc_check_record(examples[i], "eval: fewshot record " + std::to_string(i + 1));
  size_t last = records.size();
  if (o.limit > 0) last = std::min(last, first + static_cast<size_t>(o.limit));
  LT_CHECK(last > first, "eval: no records to score");

  EvalModeGuard eval_mode(model);
  const std::vector<int64_t> prefix =
      o.add_special && !o.chat ? mc_special_prefix(tok) : std::vector<int64_t>{};
  const std::string delimiter = o.chat ? "" : " ";  // the harness's target_delimiter
  std::vector<McRequest> requests;
  for (size_t i = first; i < last; i++) {
    const McRecord& r = records[i];
    mc_check_record(r, "eval: record " + std::to_string(i + 1));
    std::string context = mc_context(r, examples, o);
    for (size_t c = 0; c < r.choices.size(); c++)
      requests.push_back(
          mc_encode_pair(tok, context, delimiter + mc_choice_target(r, c, o.choices_as), prefix));
  }
  std::vector<double> ll;
  if (o.batch_size > 0) {
    ll = mc_loglikelihoods(model, requests, o.batch_size, o.max_length);
  } else {  // one forward per record, its choices as the batch
    size_t at = 0;
    for (size_t i = first; i < last; i++) {
      size_t n = records[i].choices.size();
      std::vector<McRequest> one(requests.begin() + static_cast<std::ptrdiff_t>(at),
                                 requests.begin() + static_cast<std::ptrdiff_t>(at + n));
      std::vector<double> part = mc_loglikelihoods(model, one, 0, o.max_length);
      ll.insert(ll.end(), part.begin(), part.end());
      at += n;
    }
  }

  McResult res;
  size_t at = 0;
  double hits = 0, hits_norm = 0;
  for (size_t i = first; i < last; i++) {
    const McRecord& r = records[i];
    std::vector<double> lls(ll.begin() + static_cast<std::ptrdiff_t>(at),
                            ll.begin() + static_cast<std::ptrdiff_t>(at + r.choices.size()));
    at += r.choices.size();
    std::vector<double> normed(lls.size());
    for (size_t c = 0; c < lls.size(); c++)
      normed[c] = lls[c] / mc_choice_length(mc_choice_target(r, c, o.choices_as));
    res.pred.push_back(argmax(lls));
    res.pred_norm.push_back(argmax(normed));
    hits += res.pred.back() == r.answer;
    hits_norm += res.pred_norm.back() == r.answer;
    res.loglik.push_back(std::move(lls));
  }
  res.n = static_cast<int64_t>(last - first);
  res.acc = hits / static_cast<double>(res.n);
  res.acc_norm = hits_norm / static_cast<double>(res.n);
  return res;
}

}  // namespace luatune
