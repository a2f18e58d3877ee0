// Chat templates: the Jinja engine set up as transformers sets up Jinja2 (whitespace control, Python's
// way of printing values, tojson, raise_exception, strftime_now, Python string methods), the assistant
// spans from {% generation %} blocks and from the prefix rule, where a template comes from, and the
// one-line errors of bad templates. Byte-for-byte parity with transformers over real templates and
// many conversations is the chat_template_reference test (tests/reference/chat_template_ref.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "host/core/error.h"
#include "host/text/chat.h"
#include "tests/cpp/test_chat_util.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
using json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& source, const json& context = json::object()) {
  return ChatTemplate::compile(source, "t.jinja")->render(context);
}

// The text of each assistant span, for readable expectations.
std::vector<std::string> span_texts(const ChatRendered& r) {
  std::vector<std::string> out;
  for (auto [a, z] : r.assistant_spans) out.push_back(r.text.substr(a, z - a));
  return out;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// ChatML without generation blocks: its masks come from the prefix rule.
const char kPlainChatml[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

}  // namespace

// ---------------------------------------------------------------------------------------------
// The engine, as transformers sets up Jinja2

TEST(ChatTemplate, TrimsAndStripsBlocksAsTransformers) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(render("A\n  {% if true %}\nB\n  {% endif %}\nC"), "A\nB\nC");
  EXPECT_EQ(render("{{ 'x' }}\n"), "x");  // keep_trailing_newline is off
  EXPECT_EQ(
      render("{%- for i in range(5) -%}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}"
             "{% endif %}{{ i }}{%- endfor -%}"),
      "02");
}

TEST(ChatTemplate, PrintsValuesAsPython) {
  json ctx = {
      {"flag", true}, {"off", false}, {"nothing", nullptr}, {"list", {1, "a", 2.5}}, {"map", {{"k", "v"}}}};
  EXPECT_EQ(render("{{ flag }} {{ off }} {{ nothing }} {{ list }} {{ map }} {{ undefined_name }}.", ctx),
            "True False None [1, 'a', 2.5] {'k': 'v'} .");
  EXPECT_EQ(render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 0.00001 }}"),
            "1.0 0.30000000000000004 1e+20 1e-05");
  EXPECT_EQ(render("{{ [\"it's\"] }}"), "[\"it's\"]");
}

TEST(ChatTemplate, ToJsonIsPythonsJsonDumps) {
  json ctx = {{"x", {{"b", 1}, {"a", {1.0, true, nullptr, "\xC3\xA9\n\"</"}}}}};
  EXPECT_EQ(render("{{ x | tojson }}", ctx), "{\"b\": 1, \"a\": [1.0, true, null, \"\xC3\xA9\\n\\\"</\"]}");
  EXPECT_EQ(render("{{ x | tojson(indent=2) }}", ctx),
            "{\n  \"b\": 1,\n  \"a\": [\n    1.0,\n    true,\n    null,\n    \"\xC3\xA9\\n\\\"</\"\n  ]\n}");
  EXPECT_EQ(render("{{ x | tojson(separators=(',', ':'), sort_keys=true) }}", ctx),
            "{\"a\":[1.0,true,null,\"\xC3\xA9\\n\\\"</\"],\"b\":1}");
  EXPECT_EQ(render("{{ 'é' | tojson(ensure_ascii=true) }} {{ {} | tojson }} {{ [] | tojson(indent=4) }}"),
            "\"\\u00e9\" {} []");
}

TEST(ChatTemplate, PythonStringAndDictMethods) {
  EXPECT_EQ(
      render("{{ '  a b  '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'abc'.startswith('ab') }}|"
             "{{ 'abc'.endswith('x') }}|{{ 'aXa'.replace('X', '-') }}|{{ 'Ab'.lower() }}{{ 'Ab'.upper() }}|"
             "{{ {'k': 1}.get('k') }}{{ {'k': 1}.get('z', 7) }}|{% for k, v in {'p': 2}.items() %}{{ k }}={{ "
             "v }}"
             "{% endfor %}|{{ '\\n\\nx\\n'.lstrip('\\n') }}"),
      "a b|['a', 'b']|True|False|a-a|abAB|17|p=2|x\n");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0) %}{% for m in [1, 2, 3] %}{% set ns.n = ns.n + m %}{% endfor %}"
             "{{ ns.n }} {{ [1, 2, 3][1:] }} {{ [3, 1] | length }} {{ ['a', 'b'] | join('+') }}"),
      "6 [2, 3] 2 a+b");
}

TEST(ChatTemplate, StrftimeNowFollowsSourceDateEpoch) {
  setenv("SOURCE_DATE_EPOCH", "86400", 1);  // 2 Jan 1970 in UTC; a day's margin either way for TZ
  std::string day = render("{{ strftime_now('%Y-%m') }}");
  unsetenv("SOURCE_DATE_EPOCH");
  EXPECT_EQ(day, "1970-01");
  EXPECT_NE(render("{{ strftime_now('%Y') }}"), "1970");
}

// ---------------------------------------------------------------------------------------------
// Bad templates: one line naming the template's file and line, before anything renders

TEST(ChatTemplate, ErrorsNameTheFileAndLine) {
  EXPECT_EQ(first_line(error_of([] {
              ChatTemplate::compile("ok\n{% if x %}\nno end", "t.jinja");
            })).rfind("chat_template t.jinja:", 0),
            0u);
  std::string raised = error_of([] { render("a\n{{ raise_exception('only user and assistant roles') }}"); });
  EXPECT_EQ(raised,
            "chat_template t.jinja:2: the template raised an exception: only user and assistant roles");
  std::string undefined = error_of([] { render("{{ nope.attr }}"); });
  EXPECT_EQ(undefined.rfind("chat_template t.jinja:1: undefined value", 0), 0u) << undefined;
  // Inside tokenizer_config.json the line is the template's own.
  std::string inside = error_of(
      [] { ChatTemplate::compile("x\n{{ raise_exception('no') }}", "d/tokenizer_config.json")->render({}); });
  EXPECT_EQ(inside,
            "chat_template d/tokenizer_config.json (template line 2): the template raised an exception: no");
}

TEST(ChatTemplate, EndlessRecursiveAndHugeTemplatesFail) {
  std::string endless = error_of(
      [] { render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"); });
  EXPECT_NE(endless.find("work limit"), std::string::npos) << endless;
  std::string deep = error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_EQ(deep.rfind("chat_template t.jinja:1: ", 0), 0u) << deep;
  EXPECT_NE(deep.find("recursion"), std::string::npos) << deep;
  std::string huge = error_of([] { render("{% for i in range(70) %}{{ 'x' * 1048576 }}{% endfor %}"); });
  EXPECT_NE(huge.find("size limit"), std::string::npos) << huge;
}

// ---------------------------------------------------------------------------------------------
// The assistant's spans

TEST(ChatRender, GenerationBlocksGiveTheSpans) {
  auto t = ChatTemplate::compile(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{%- generation -%}"
      "{{ m.content }}<|im_end|>{%- endgeneration %}{{ '\n' }}{% else %}{{ m.content }}<|im_end|>\n{% endif "
      "%}{% endfor %}",
      "g.jinja");
  EXPECT_TRUE(t->has_generation_blocks());
  ChatRendered r = chat_render(*t, chat_messages_json({U("q"), A("a1"), U("q2"), A("")}));
  EXPECT_EQ(
      r.text,
      "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
      "<|im_start|>assistant\n<|im_end|>\n");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"a1<|im_end|>", "<|im_end|>"}));
}

TEST(ChatRender, PrefixRuleWithoutGenerationBlocks) {
  auto t = ChatTemplate::compile(kPlainChatml, "plain.jinja");
  EXPECT_FALSE(t->has_generation_blocks());
  ChatRendered r = chat_render(*t, chat_messages_json({S("s"), U("q"), A(" a1 \n"), U("q2"), A("a2")}));
  // The reply is what follows the generation prompt, less the template's whitespace after it.
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{" a1 \n<|im_end|>", "a2<|im_end|>"}));
}

TEST(ChatRender, PrefixRuleWhereEarlierTurnsRenderDifferently) {
  // Like Qwen3: the last reply gets a <think> block, earlier ones do not; the earlier span is the
  // tail of its own rendering that the whole conversation holds.
  auto t = ChatTemplate::compile(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and loop.last "
      "%}<think>\n\n"
      "</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "q.jinja");
  ChatRendered r = chat_render(*t, chat_messages_json({U("q1"), A("a1"), U("q2"), A("a2")}));
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{"a1<|im_end|>", "<think>\n\n</think>\n\na2<|im_end|>"}));
  // Like Mistral's v0.3 file: the system text moves to the last user turn, so the prompt of the
  // first reply is not a prefix of the conversation; the reply still starts after "[/INST]".
  auto m = ChatTemplate::compile(
      "{% set sys = messages[0].content if messages[0].role == 'system' else '' %}{% for x in messages %}"
      "{% if x.role == 'user' %}[INST] {{ sys + '\n\n' if sys and loop.last else '' }}{{ x.content }}[/INST]"
      "{% elif x.role == 'assistant' %} {{ x.content }}</s>{% endif %}{% endfor %}",
      "m.jinja");
  r = chat_render(*m, chat_messages_json({S("sys"), U("u1"), A("a1"), U("u2"), A("a2")}));
  EXPECT_EQ(r.text, "[INST] u1[/INST] a1</s>[INST] u2[/INST] a2</s>");
  EXPECT_EQ(span_texts(r), (std::vector<std::string>{" a1</s>", " a2</s>"}));
}

TEST(ChatRender, VariablesAsTransformersPassesThem) {
  auto t = ChatTemplate::compile(
      "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ enable_thinking }}|{{ "
      "add_generation_prompt }}|"
      "{{ messages | length }}",
      "v.jinja");
  ChatOptions o;
  o.kwargs = {{"bos_token", "<s>"}, {"enable_thinking", false}};
  EXPECT_EQ(chat_render_text(*t, chat_messages_json({U("q")}), o), "<s>|True|True|False|False|1");
  o.tools = json::array({{{"type", "function"}}});
  o.add_generation_prompt = true;
  EXPECT_EQ(chat_render_text(*t, chat_messages_json({U("q")}), o), "<s>|False|True|False|True|1");
}

TEST(ChatRender, ShippedTemplatesHaveGenerationBlocks) {
  std::vector<std::string> names = chat_template_shipped_names();
  for (const char* want : {"chatml", "gemma", "llama3", "mistral"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const std::string& name : names) {
    auto t = chat_template_from_file(std::string(LUATUNE_SOURCE_DIR) + "/templates/chat/" + name + ".jinja");
    EXPECT_TRUE(t->has_generation_blocks()) << name;
    ChatOptions o;
    o.kwargs = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    ChatRendered r = chat_render(*t, chat_messages_json({U("Hi"), A("Hello!"), U("Bye"), A("Ciao")}), o);
    ASSERT_EQ(r.assistant_spans.size(), 2u) << name;
    EXPECT_EQ(span_texts(r)[1].find("Ciao"), name == "mistral" ? 1u : 0u) << name << ": " << r.text;
  }
}

TEST(ChatRender, NamedTemplatesInTokenizerConfig) {
  std::string dir = test_temp_dir("chat_named", true);
  write_text(dir + "/tokenizer_config.json",
             R"({"chat_template": [{"name": "default", "template": "D{{ messages|length }}"},
                                   {"name": "tool_use", "template": "T{{ tools|length }}"}]})");
  EXPECT_EQ(chat_template_from_file(dir + "/tokenizer_config.json")->render({{"messages", {1, 2}}}), "D2");
  EXPECT_EQ(chat_template_from_file(dir + "/tokenizer_config.json", "tool_use")->render({{"tools", {1}}}),
            "T1");
  EXPECT_EQ(
      first_line(error_of([&] { chat_template_from_file(dir + "/tokenizer_config.json", "rag"); })),
      "chat_template " + dir + "/tokenizer_config.json: no template named 'rag' (it has: default, tool_use)");
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
