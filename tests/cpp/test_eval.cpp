// Multiple-choice evaluation: prompts pinned to lm-evaluation-harness's MMLU / ARC layouts, the
// context/continuation split, batched and padded log-likelihoods equal to the sum of log-softmax
// terms from one unpadded forward per sequence, accuracy on a model built to prefer one letter,
// acc_norm's length normalisation, and adapters kept out of training mode while scoring.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/text/tokenizer.h"
#include "host/train/eval.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

namespace {

const char* const kLlamaTok = "tokenizers/llama3_1";

std::shared_ptr<Tokenizer> llama_tok() {
  static std::shared_ptr<Tokenizer> tok =
      file_exists(std::string(kLlamaTok) + "/tokenizer.json") ? Tokenizer::load(kLlamaTok) : nullptr;
  return tok;
}

#define NEED_TOKENIZER()  \
  auto tok = llama_tok(); \
  if (!tok) GTEST_SKIP() << "tests/reference/node/node_modules not installed (setup.sh)"

std::shared_ptr<Model> tiny_llama(uint64_t seed = 1) {
  return model_init(model_config_with("llama", R"({"vocab_size": 128256, "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "bos_token_id": 128000})",
                                      "test"),
                    seed, at::kFloat, at::kCPU);
}

McRecord rec(std::string q, std::vector<std::string> choices, int64_t answer) {
  return McRecord{std::move(q), std::move(choices), answer};
}

std::vector<McRecord> letters_task() {
  return {rec(" What is 1+1? ", {"1", "2", "3", "4"}, 1),
          rec("Pick red.", {"blue", "red", "green", "grey"}, 1),
          rec("Sky?", {"up", "down", "left", "right"}, 0)};
}

// Sum of log-softmax terms of `cont` after `ctx`, from one forward of the whole unpadded sequence.
double by_hand(const Model& m, const std::vector<int64_t>& ctx, const std::vector<int64_t>& cont) {
  at::NoGradGuard g;
  std::vector<int64_t> all = ctx;
  all.insert(all.end(), cont.begin(), cont.end());
  at::Tensor logp = m.forward(at::tensor(all, at::kLong).unsqueeze(0)).log_softmax(-1)[0];  // (T, V)
  double s = 0;
  for (size_t j = 0; j < cont.size(); j++) s += logp[ctx.size() - 1 + j][cont[j]].item<double>();
  return s;
}

}  // namespace

TEST(Eval, FewShotPromptsFollowTheHarnessLayouts) {
  std::vector<McRecord> t = letters_task();
  McOptions o;
  o.description = "The following are multiple choice questions (with answers) about tests.\n\n";
  EXPECT_EQ(mc_context(t[2], {t[0], t[1]}, o),
            "The following are multiple choice questions (with answers) about tests.\n\n"
            "What is 1+1?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer: B\n\n"
            "Pick red.\nA. blue\nB. red\nC. green\nD. grey\nAnswer: B\n\n"
            "Sky?\nA. up\nB. down\nC. left\nD. right\nAnswer:");
  o.description.clear();
  o.choices_as = McChoicesAs::text;
  EXPECT_EQ(mc_context(t[2], {t[0]}, o), "Question:  What is 1+1? \nAnswer: 2\n\nQuestion: Sky?\nAnswer:");
  EXPECT_EQ(mc_choice_target(t[1], 3, McChoicesAs::letters), "D");
  EXPECT_EQ(mc_choice_target(t[1], 3, McChoicesAs::text), "grey");
}

// A chat model asked in its chat template (eval.multiple_choice's chat option): the description a
// system turn, examples earlier user/assistant turns, the question the last user turn, rendered with
// the generation prompt; the continuation is the choice itself (no leading space) and no BOS is added
// (the template writes its own).
TEST(Eval, ChatPromptsAreTurnsRenderedByTheTemplate) {
  std::vector<McRecord> t = letters_task();
  McOptions o;
  std::vector<std::vector<std::pair<std::string, std::string>>> seen;
  o.chat = [&](const std::vector<std::pair<std::string, std::string>>& turns) {
    seen.push_back(turns);
    std::string s;
    for (const auto& [role, content] : turns) s += "<" + role + ">" + content + "</>";
    return s + "<assistant>";
  };
  o.description = "Answer with a letter.";
  EXPECT_EQ(mc_context(t[2], {t[1]}, o),
            "<system>Answer with a letter.</><user>Pick red.\nA. blue\nB. red\nC. green\nD. grey</>"
            "<assistant>B</><user>Sky?\nA. up\nB. down\nC. left\nD. right</><assistant>");
  o.description.clear();
  o.choices_as = McChoicesAs::text;
  EXPECT_EQ(mc_context(t[0], {}, o), "<user> What is 1+1? </><assistant>");
  EXPECT_EQ(mc_chat_question(t[0], McChoicesAs::text), " What is 1+1? ");
  NEED_TOKENIZER();
  auto m = tiny_llama();
  // Scored: the continuation is encode(context + choice) past encode(context), without a space or BOS.
  McResult r = mc_evaluate(*m, *tok, {rec("Sky?", {"up", "down"}, 0)}, o);
  ASSERT_EQ(r.loglik.size(), 1u);
  const std::string ctx = "<user>Sky?</><assistant>";
  std::vector<int32_t> c32 = tok->encode(ctx, false), w32 = tok->encode(ctx + "down", false);
  std::vector<int64_t> ctx_ids(c32.begin(), c32.end()), cont(w32.begin() + c32.size(), w32.end());
  EXPECT_NEAR(r.loglik[0][1], by_hand(*m, ctx_ids, cont), 1e-4);
}

TEST(Eval, AccNormDividesByCharactersLikePythonLen) {
  EXPECT_EQ(mc_choice_length("B"), 1);
  EXPECT_EQ(mc_choice_length("red car"), 7);
  EXPECT_EQ(mc_choice_length("\xC3\xA9t\xC3\xA9"), 3);         // "été": 5 bytes, 3 characters
  EXPECT_EQ(mc_choice_length("\xE6\x97\xA5\xE6\x9C\xAC"), 2);  // two CJK characters, 6 bytes
}

TEST(Eval, ContinuationIsTheTailOfTheWholeEncoding) {
  NEED_TOKENIZER();
  std::vector<int64_t> prefix = mc_special_prefix(*tok);
  EXPECT_EQ(prefix, (std::vector<int64_t>{128000}));  // Llama 3's post-processor adds BOS
  McRequest a = mc_encode_pair(*tok, "Sky?\nAnswer:", " A", prefix);
  EXPECT_EQ(a.continuation, (std::vector<int64_t>{tok->token_to_id("\xC4\xA0"
                                                                   "A")}));  // "ĠA"
  std::vector<int32_t> ctx = tok->encode("Sky?\nAnswer:", false);
  ASSERT_EQ(a.context.size(), ctx.size() + 1);
  EXPECT_EQ(a.context[0], 128000);
  // Trailing whitespace of the context moves to the continuation.
  McRequest b = mc_encode_pair(*tok, "Sky?\nAnswer: ", "A", prefix);
  EXPECT_EQ(b.context, a.context);
  EXPECT_EQ(b.continuation, a.continuation);
  // Where the two pieces would merge, the tail of encode(context + continuation) is taken:
  // "1234" is one number to the tokenizer, so encode("12") + encode("34") is not what it sees.
  McRequest c = mc_encode_pair(*tok, "x = 12", "34", {});
  std::vector<int32_t> whole = tok->encode("x = 1234", false), head = tok->encode("x = 12", false);
  EXPECT_EQ(c.continuation, std::vector<int64_t>(whole.begin() + head.size(), whole.end()));
  std::vector<int32_t> alone = tok->encode("34", false);
  EXPECT_NE(c.continuation, std::vector<int64_t>(alone.begin(), alone.end()));
}

TEST(Eval, BatchedPaddedLoglikelihoodsEqualOneForwardPerSequence) {
  NEED_TOKENIZER();
  auto m = tiny_llama();
  std::vector<McRecord> t = {rec("Which is longest?", {"a", "a much longer answer here", "mid length"}, 1),
                             rec("Colour of grass?", {"green", "a shade of blue, surely"}, 0)};
  std::vector<int64_t> prefix = mc_special_prefix(*tok);
  McOptions o;
  o.choices_as = McChoicesAs::text;
  std::vector<McRequest> reqs;
  for (const auto& r : t)
    for (size_t c = 0; c < r.choices.size(); c++)
      reqs.push_back(mc_encode_pair(*tok, mc_context(r, {}, o), " " + r.choices[c], prefix));
  for (int64_t batch : {0, 1, 3}) {  // 3: batches cross records and pad to different lengths
    std::vector<double> ll = mc_loglikelihoods(*m, reqs, batch, 0);
    ASSERT_EQ(ll.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); i++)
      EXPECT_NEAR(ll[i], by_hand(*m, reqs[i].context, reqs[i].continuation), 1e-4)
          << "batch " << batch << " req " << i;
  }
  // max_length cuts the input on the left; the continuation keeps its positions at the end.
  const McRequest& r = reqs[1];
  int64_t keep = static_cast<int64_t>(r.continuation.size()) + 2;  // input = last `keep` tokens
  std::vector<int64_t> all = r.context;
  all.insert(all.end(), r.continuation.begin(), r.continuation.end());
  std::vector<int64_t> cut_ctx(all.end() - keep - 1, all.end() - static_cast<int64_t>(r.continuation.size()));
  EXPECT_NEAR(mc_loglikelihoods(*m, {r}, 0, keep)[0], by_hand(*m, cut_ctx, r.continuation), 1e-4);
  EXPECT_EQ(error_of([&] { mc_loglikelihoods(*m, {r}, 0, 2); }), "eval: a continuation of " +
                                                                     std::to_string(r.continuation.size()) +
                                                                     " tokens is longer than max_length 2");
}

namespace {

// A model that prefers the token `preferred` after any context: layers add nothing to the residual
// (o_proj, down_proj zero), every embedding has a large component 0, the final norm keeps only that
// component, and lm_head reads it for `preferred` alone.
void prefer_token(Model& m, int64_t preferred) {
  at::NoGradGuard g;
  for (auto& l : m.layers) {
    l.o.weight.zero_();
    l.down.weight.zero_();
  }
  m.embed.select(1, 0).fill_(10.0);
  m.norm.zero_();
  m.norm[0] = 1.0;
  ASSERT_TRUE(m.lm_head.defined());
  m.lm_head.zero_();
  m.lm_head[preferred][0] = 1.0;
}

struct ProbeAdapter : LinearAdapter {
  mutable std::vector<bool> seen;
  at::Tensor forward(const Linear& base, const at::Tensor& x) const override {
    seen.push_back(training);
    return at::linear(x, base.weight, base.bias);
  }
  std::vector<std::pair<std::string, at::Tensor*>> parameters() override { return {}; }
};

}  // namespace

TEST(Eval, AccuracyOnAModelThatAlwaysAnswersB) {
  NEED_TOKENIZER();
  auto m = tiny_llama();
  prefer_token(*m, tok->token_to_id("\xC4\xA0"
                                    "B"));   // "ĠB"
  std::vector<McRecord> t = letters_task();  // answers B, B, A
  McResult r = mc_evaluate(*m, *tok, t, McOptions{});
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.pred, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_DOUBLE_EQ(r.acc, 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.acc_norm, 2.0 / 3);  // letters all have length 1
  t[2].answer = 1;
  EXPECT_DOUBLE_EQ(mc_evaluate(*m, *tok, t, McOptions{}).acc, 1.0);
  // Few-shot from the task itself: the first record becomes the example and is not scored.
  McOptions o;
  o.shots = 1;
  o.batch_size = 3;
  McResult s = mc_evaluate(*m, *tok, t, o);
  EXPECT_EQ(s.n, 2);
  EXPECT_DOUBLE_EQ(s.acc, 1.0);
  o.limit = 1;
  EXPECT_EQ(mc_evaluate(*m, *tok, t, o).n, 1);
  // Adapters score in eval mode and get their mode back.
  auto probe = std::make_shared<ProbeAdapter>();
  probe->training = true;
  m->layers[0].q.adapter = probe;
  mc_evaluate(*m, *tok, t, McOptions{});
  ASSERT_FALSE(probe->seen.empty());
  EXPECT_EQ(std::count(probe->seen.begin(), probe->seen.end(), true), 0);
  EXPECT_TRUE(probe->training);
}

TEST(Eval, AccNormPicksTheBestPerCharacterChoice) {
  NEED_TOKENIZER();
  auto m = tiny_llama();
  prefer_token(*m, tok->token_to_id("\xC4\xA0"
                                    "B"));
  // " B" is likely (about -6.1 nats), every other token unlikely (about -11.8). "B" has the best
  // sum; "B B B B" (four " B" tokens) the best sum per character.
  McOptions o;
  o.choices_as = McChoicesAs::text;
  McResult r = mc_evaluate(*m, *tok, {rec("Say B.", {"B", "B B B B", "C"}, 1)}, o);
  ASSERT_EQ(r.loglik.size(), 1u);
  const auto& ll = r.loglik[0];
  EXPECT_GT(ll[0], ll[1]);
  EXPECT_GT(ll[0], ll[2]);
  EXPECT_GT(ll[1] / 7, ll[0] / 1);
  EXPECT_EQ(r.pred[0], 0);
  EXPECT_EQ(r.pred_norm[0], 1);
  EXPECT_EQ(r.acc, 0.0);
  EXPECT_EQ(r.acc_norm, 1.0);
}

TEST(Eval, ReadsJsonlAndNamesBadRecords) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("luatune_test_eval_" + std::to_string(::getpid()) + ".jsonl"))
                         .string();
  file_write_atomic(path, R"({"question": "Q1", "choices": ["x", "y"], "answer": 1})"
                          "\n\n"
                          R"({"question": "Q2", "choices": ["x", "y", "z"], "answer": "C"})"
                          "\n");
  std::vector<McRecord> r = mc_read_jsonl(path);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].answer, 1);
  EXPECT_EQ(r[1].answer, 2);
  EXPECT_EQ(r[1].choices, (std::vector<std::string>{"x", "y", "z"}));
  file_write_atomic(path, R"({"question": "Q1", "choices": ["x", "y"], "answer": 2})"
                          "\n");
  EXPECT_EQ(error_of([&] { mc_read_jsonl(path); }),
            path + ":1: answer 2 is not a choice index (0-based, 2 choices)");
  file_write_atomic(path, "\n{\"question\": \"Q1\", \"choices\": \"x\", \"answer\": 0}\n");
  EXPECT_EQ(error_of([&] { mc_read_jsonl(path); }), path + ":2: \"choices\" must be a list of strings");
  std::filesystem::remove(path);
  EXPECT_EQ(error_of([&] {
              mc_check_record(rec("Q", {"a", ""}, 0), "record 4");
            }),
            "record 4: choice 1 is empty");
}
