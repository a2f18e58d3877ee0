// Multiple-choice evaluation by log-likelihood, scored the way lm-evaluation-harness scores MMLU
// and ARC-style tasks: each choice is a continuation of the same prompt, the model's summed
// log-probability of each continuation picks the answer (acc), and the same sum divided by the
// choice's length in characters picks it for acc_norm. Sources and choices: docs/eval.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

class Model;
class Tokenizer;

// One question: {"question": ..., "choices": [...], "answer": 0-based index}.
struct McRecord {
  std::string question;
  std::vector<std::string> choices;
  int64_t answer = -1;
};

enum class McChoicesAs {
  letters,  // MMLU: choices listed in the prompt as "A. ...", continuations " A", " B", ...
  text,     // ARC/HellaSwag style: "Question: ...\nAnswer:", continuations " " + choice text
};

struct McOptions {
  McChoicesAs choices_as = McChoicesAs::letters;
  int64_t shots = 0;  // few-shot examples before each question
  // Where the examples come from, first `shots` in order (the harness's first_n sampler, as MMLU
  // uses with its dev split). Empty: the first `shots` records of the task, which are then not scored.
  std::vector<McRecord> fewshot;
  std::string description;  // prepended once, e.g. "The following are multiple choice questions ...\n\n"
  int64_t limit = 0;        // score at most this many records (0: all)
  int64_t batch_size = 0;   // sequences per forward (0: the choices of one record)
  bool add_special = true;  // BOS (or whatever the post-processor puts first) before the context
  int64_t max_length = 0;   // longest input; longer ones lose tokens on the left (0: the model's
                            // max_position_embeddings)
  // A chat model asked as it is used: set, each question is a user message (mc_chat_question), the
  // examples earlier user/assistant turns, the description a system message, and `chat` renders them
  // with the assistant's generation prompt (the binding wraps the model's chat template). Each
  // continuation is then the choice target itself, without the leading space, and no special prefix
  // is added (a template writes its own BOS).
  std::function<std::string(const std::vector<std::pair<std::string, std::string>>& turns)> chat;
};

struct McResult {
  double acc = 0, acc_norm = 0;
  int64_t n = 0;                            // records scored
  std::vector<std::vector<double>> loglik;  // per record, per choice: summed log-probability
  std::vector<int64_t> pred, pred_norm;     // per record: the choices picked
};

// The context/continuation token ids of one request.
struct McRequest {
  std::vector<int64_t> context, continuation;
};

// Reads a JSONL task file; `answer` may also be a letter ("B").
std::vector<McRecord> mc_read_jsonl(const std::string& path);
// A record checked (question present, 1+ choices, answer in range); `where` names it in errors.
void mc_check_record(const McRecord& r, const std::string& where);

// The prompt of one record without its answer:
//   letters: "{question}\nA. {c0}\nB. {c1}\n...\nAnswer:"      text: "Question: {question}\nAnswer:"
std::string mc_doc_text(const McRecord& r, McChoicesAs as);
// What choice i is called: its letter ("B") or its text. The continuation is " " + this.
std::string mc_choice_target(const McRecord& r, size_t i, McChoicesAs as);
// A question as a chat user message: text, the question; letters, the question and its lettered
// choices ("{question}\nA. {c0}\nB. {c1}...").
std::string mc_chat_question(const McRecord& r, McChoicesAs as);
// description + for each example: doc text + " " + its answer + "\n\n", then the record's doc text.
std::string mc_context(const McRecord& r, const std::vector<McRecord>& examples, const McOptions& o);
// The length acc_norm divides by: Unicode characters of the choice target, as Python's len(str).
double mc_choice_length(const std::string& target);

// Tokenizes like the harness: trailing whitespace of the context moves to the continuation, then
// encode(context) and encode(context + continuation); the continuation is the tail of the second
// after as many tokens as the first has. `prefix` (BOS) goes before both.
McRequest mc_encode_pair(const Tokenizer& tok, std::string context, std::string continuation,
                         const std::vector<int64_t>& prefix);
// What the tokenizer's post-processor puts before a text (BOS, or nothing).
std::vector<int64_t> mc_special_prefix(const Tokenizer& tok);

// Summed log-probability of each request's continuation given its context, `batch_size` requests
// per forward (right-padded: causal attention keeps padding out of every real position), without
// gradients, in float32 log-softmax.
std::vector<double> mc_loglikelihoods(const Model& model, const std::vector<McRequest>& requests,
                                      int64_t batch_size, int64_t max_length);

// Scores `records` (few-shot examples, limit and batching as the options say). Adapters are put in
// eval mode for the duration (no dropout) and restored after.
McResult mc_evaluate(Model& model, const Tokenizer& tok, const std::vector<McRecord>& records,
                     const McOptions& options);

}  // namespace luatune
