// Chat formats (see chat.h). One render function per family, each a transcription of what that
// family's chat_template emits for plain {role, content} messages; docs/chat_formats.md says
// where every string comes from and where we knowingly differ.
#include "host/text/chat.h"

#include <algorithm>
#include <cctype>

#include "host/core/error.h"
#include "host/core/strings.h"

namespace luatune {

// ---------------------------------------------------------------------------------------------
// Names

namespace {

struct FormatName {
  ChatFormat format;
  const char* name;
};
const FormatName kFormatNames[] = {
    {ChatFormat::llama3, "llama3"}, {ChatFormat::llama31, "llama3.1"}, {ChatFormat::mistral, "mistral"},
    {ChatFormat::chatml, "chatml"}, {ChatFormat::qwen25, "qwen2.5"},   {ChatFormat::qwen3, "qwen3"},
    {ChatFormat::gemma, "gemma"},
};

std::vector<std::string> format_names() {
  std::vector<std::string> names;
  for (const auto& f : kFormatNames) names.push_back(f.name);
  return names;
}

}  // namespace

const char* chat_format_name(ChatFormat format) {
  for (const auto& f : kFormatNames)
    if (f.format == format) return f.name;
  LT_ASSERT(false, "unnamed ChatFormat " << static_cast<int>(format));
  return "";
}

ChatFormat chat_format_parse(const std::string& name) {
  for (const auto& f : kFormatNames)
    if (name == f.name) return f.format;
  // "llama31" and "qwen25" mean the dotted names; otherwise the nearest name, if any is near.
  auto undot = [](std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '.'), s.end());
    return s;
  };
  std::string near;
  for (const auto& f : kFormatNames)
    if (undot(f.name) == undot(name)) near = f.name;
  if (near.empty()) near = str_nearest(name, format_names());
  fail("chat: unknown format '" + name + "' (expected one of: " + str_join(format_names(), ", ") + ")",
       near.empty() ? "" : "did you mean '" + near + "'?");
}

// ---------------------------------------------------------------------------------------------
// Detection from the template text

namespace {

bool has(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

// True when some "<|im_start|>system" + newline is followed by literal text in the template, i.e.
// the template writes a default system message of its own. The newline may be a real one or the
// two characters \n inside a Jinja string.
bool chatml_has_default_system(const std::string& t) {
  const std::string marker = "<|im_start|>system";
  for (size_t p = t.find(marker); p != std::string::npos; p = t.find(marker, p + 1)) {
    size_t q = p + marker.size();
    if (t.compare(q, 2, "\\n") == 0) {
      q += 2;
    } else if (q < t.size() && t[q] == '\n') {
      q += 1;
    } else {
      continue;
    }
    if (q < t.size() && std::isalpha(static_cast<unsigned char>(t[q]))) return true;
  }
  return false;
}

}  // namespace

ChatFormat chat_format_detect(const std::string& t) {
  const std::string pick = "set format = one of: " + str_join(format_names(), ", ");
  if (t.empty()) fail("chat: the tokenizer has no chat_template to detect a format from", pick);
  if (has(t, "<|start_header_id|>")) {
    return has(t, "Cutting Knowledge Date") ? ChatFormat::llama31 : ChatFormat::llama3;
  }
  if (has(t, "<start_of_turn>")) return ChatFormat::gemma;
  if (has(t, "<|im_start|>")) {
    if (has(t, "<think>")) return ChatFormat::qwen3;
    if (has(t, "You are Qwen, created by Alibaba Cloud")) return ChatFormat::qwen25;
    if (chatml_has_default_system(t)) {
      fail("chat: this ChatML chat_template writes a default system message luatune does not know",
           "set format = \"chatml\" and put that system message into the data");
    }
    return ChatFormat::chatml;
  }
  if (has(t, "[INST]")) {
    if (has(t, "<<SYS>>")) fail("chat: Llama 2 ([INST] <<SYS>>) chat templates are not supported", pick);
    // v3 writes "[INST] " + content + "[/INST]"; v1 has " [/INST]", Tekken has no space after [INST].
    if (has(t, "[INST] ") && (has(t, "\"[/INST]\"") || has(t, "'[/INST]'"))) return ChatFormat::mistral;
    fail("chat: this Mistral [INST] chat_template is not the v3 (Mistral-7B-Instruct-v0.3) layout",
         "format = \"mistral\" renders \"[INST] user[/INST] answer</s>\"; set it only if that is what "
         "the model was trained on");
  }
  fail("chat: the tokenizer's chat_template matches no known format", pick);
}

// ---------------------------------------------------------------------------------------------
// Rendering helpers

namespace {

// Python's str.strip() (Jinja's |trim under Hugging Face transformers): Unicode whitespace.
bool is_py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Decodes the UTF-8 code point at s[i]; *len gets its byte length (1 for a malformed byte).
uint32_t utf8_at(const std::string& s, size_t i, size_t* len) {
  unsigned char b = static_cast<unsigned char>(s[i]);
  int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; k++) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return c;
}

std::string py_strip(const std::string& s) {
  size_t b = 0, len = 0;
  while (b < s.size() && is_py_space(utf8_at(s, b, &len))) b += len;
  size_t e = s.size();
  while (e > b) {
    size_t p = e - 1;  // back up to the lead byte of the last code point
    while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) p--;
    if (!is_py_space(utf8_at(s, p, &len)) || p + len != e) break;
    e = p;
  }
  return s.substr(b, e - b);
}

// Python's lstrip/rstrip/strip with a character set of "\n" only (Qwen3's template).
std::string lstrip_nl(const std::string& s) {
  size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? "" : s.substr(b);
}
std::string rstrip_nl(const std::string& s) {
  size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? "" : s.substr(0, e + 1);
}

// The text being built and its assistant spans.
struct Builder {
  ChatRendered out;
  size_t span_start = 0;
  void add(const std::string& s) { out.text += s; }
  void begin_span() { span_start = out.text.size(); }
  void end_span() { out.assistant_spans.emplace_back(span_start, out.text.size()); }
};

// "chat(gemma): message 2 of 3 ..." — messages are counted from 1 so the words read naturally.
std::string at(ChatFormat f, size_t i, size_t n) {
  std::ostringstream os;
  os << "chat(" << chat_format_name(f) << "): message " << i + 1 << " of " << n;
  return os.str();
}

// Roles every format accepts: system, user, assistant. Tool traffic gets its own message.
void check_roles(ChatFormat f, const std::vector<ChatMessage>& msgs) {
  LT_CHECK(!msgs.empty(), "chat(" << chat_format_name(f) << "): the conversation has no messages");
  for (size_t i = 0; i < msgs.size(); i++) {
    const std::string& r = msgs[i].role;
    if (r == "system" || r == "user" || r == "assistant") continue;
    if (r == "ipython" || r == "tool" || r == "tool_results" || r == "function") {
      fail(at(f, i, msgs.size()) + " has role '" + r +
           "': tool calls and tool results are not supported (roles: system, user, assistant)");
    }
    fail(at(f, i, msgs.size()) + " has role '" + r + "' (expected system, user or assistant)");
  }
}

// Mistral and Gemma: an optional system message first, then user/assistant strictly alternating
// starting with user, as their templates raise. Returns the index of the first non-system message.
size_t check_alternation(ChatFormat f, const std::vector<ChatMessage>& msgs) {
  size_t start = msgs[0].role == "system" ? 1 : 0;
  LT_CHECK(start < msgs.size(), "chat(" << chat_format_name(f)
                                        << "): a system message alone is not a conversation (the "
                                        << "format puts it into the user turn that must follow)");
  for (size_t i = start; i < msgs.size(); i++) {
    const char* want = (i - start) % 2 == 0 ? "user" : "assistant";
    if (msgs[i].role != want) {
      fail(at(f, i, msgs.size()) + " has role '" + msgs[i].role + "', expected '" + want +
           "': after an optional first system message, roles must alternate user/assistant/user/...");
    }
  }
  return start;
}

// ---------------------------------------------------------------------------------------------
// The families

// Llama 3.0: bos, then per message a role header, the trimmed content and <|eot_id|>.
// Llama 3.1 first writes a system block that is always there (dates, then the system text).
void render_llama3(Builder& b, ChatFormat f, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
  const bool v31 = f == ChatFormat::llama31;
  b.add(o.bos_text.value_or("<|begin_of_text|>"));
  size_t start = 0;
  if (v31) {
    std::string system;
    if (msgs[0].role == "system") {
      system = py_strip(msgs[0].content);
      start = 1;
    }
    b.add(
        "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: " +
        o.date_string + "\n\n" + system + "<|eot_id|>");
  }
  for (size_t i = start; i < msgs.size(); i++) {
    b.add("<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n");
    bool assistant = msgs[i].role == "assistant";
    if (assistant) b.begin_span();
    b.add(py_strip(msgs[i].content) + "<|eot_id|>");
    if (assistant) b.end_span();
  }
  if (o.add_generation_prompt) b.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Mistral v3: "[INST] user[/INST] answer</s>". The system text goes in front of the last user
// message, as mistral-common does. (The v0.3 Jinja template does the same when the conversation
// ends with that user message and drops the system text otherwise; we keep it.)
void render_mistral(Builder& b, ChatFormat f, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
  size_t start = check_alternation(f, msgs);
  size_t last_user = start;
  for (size_t i = start; i < msgs.size(); i++)
    if (msgs[i].role == "user") last_user = i;
  b.add(o.bos_text.value_or("<s>"));
  for (size_t i = start; i < msgs.size(); i++) {
    if (msgs[i].role == "user") {
      std::string system = start == 1 && i == last_user ? msgs[0].content + "\n\n" : "";
      b.add("[INST] " + system + msgs[i].content + "[/INST]");
    } else {
      b.begin_span();
      b.add(" " + py_strip(msgs[i].content) + o.eos_text.value_or("</s>"));
      b.end_span();
    }
  }
  // The template has no generation prompt: a prompt already ends in [/INST].
}

// ChatML: <|im_start|>role\ncontent<|im_end|>\n, content untouched. Qwen2.5 adds its default
// system message when the conversation has none.
void render_chatml(Builder& b, ChatFormat f, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
  const bool qwen25 = f == ChatFormat::qwen25;
  if (qwen25 && msgs[0].role != "system") {
    b.add(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n");
  }
  for (const auto& m : msgs) {
    b.add("<|im_start|>" + m.role + "\n");
    bool assistant = m.role == "assistant";
    if (assistant) b.begin_span();
    b.add(m.content + "<|im_end|>");
    if (assistant) b.end_span();
    b.add("\n");
  }
  if (o.add_generation_prompt) b.add("<|im_start|>assistant\n");
}

// Qwen3: ChatML, where assistant messages after the last real user query carry a <think> block
// (the final one always, even when empty) and earlier ones lose theirs.
void render_qwen3(Builder& b, ChatFormat, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
  const size_t n = msgs.size();
  // The last user message that is not a tool response wrapped as a user turn.
  size_t last_query = n - 1;
  for (size_t k = n; k-- > 0;) {
    const std::string& c = msgs[k].content;
    if (msgs[k].role == "user" &&
        !(str_starts_with(c, "<tool_response>") && str_ends_with(c, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < n; i++) {
    const ChatMessage& m = msgs[i];
    if (m.role != "assistant") {
      b.add("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
      continue;
    }
    // Split "<think>reasoning</think>answer" the way the template does.
    std::string content = m.content, reasoning;
    size_t close = m.content.find("</think>");
    if (close != std::string::npos) {
      size_t last_close = m.content.rfind("</think>");
      content = lstrip_nl(m.content.substr(last_close + 8));
      std::string before = rstrip_nl(m.content.substr(0, close));
      size_t open = before.rfind("<think>");
      reasoning = lstrip_nl(open == std::string::npos ? before : before.substr(open + 7));
    }
    b.add("<|im_start|>assistant\n");
    b.begin_span();
    if (i > last_query && (i == n - 1 || !reasoning.empty())) {
      b.add("<think>\n" + lstrip_nl(rstrip_nl(reasoning)) + "\n</think>\n\n" + lstrip_nl(content));
    } else {
      b.add(content);
    }
    b.add("<|im_end|>");
    b.end_span();
    b.add("\n");
  }
  if (o.add_generation_prompt) {
    b.add("<|im_start|>assistant\n");
    if (!o.enable_thinking) b.add("<think>\n\n</think>\n\n");
  }
}

// Gemma 2/3: bos, <start_of_turn>user|model\n trimmed content <end_of_turn>\n; the system text
// and a blank line open the first user turn.
void render_gemma(Builder& b, ChatFormat f, const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
  size_t start = check_alternation(f, msgs);
  b.add(o.bos_text.value_or("<bos>"));
  for (size_t i = start; i < msgs.size(); i++) {
    bool model = msgs[i].role == "assistant";
    b.add(std::string("<start_of_turn>") + (model ? "model" : "user") + "\n");
    if (i == start && start == 1) b.add(msgs[0].content + "\n\n");
    if (model) b.begin_span();
    b.add(py_strip(msgs[i].content) + "<end_of_turn>");
    if (model) b.end_span();
    b.add("\n");
  }
  if (o.add_generation_prompt) b.add("<start_of_turn>model\n");
}

// Each format's renderer: llama3.1 and qwen2.5 are variants of llama3 and chatml.
using Renderer = void (*)(Builder& b, ChatFormat f, const std::vector<ChatMessage>& msgs,
                          const ChatOptions& o);
const struct {
  ChatFormat format;
  Renderer render;
} kRenderers[] = {
    {ChatFormat::llama3, render_llama3},   {ChatFormat::llama31, render_llama3},
    {ChatFormat::mistral, render_mistral}, {ChatFormat::chatml, render_chatml},
    {ChatFormat::qwen25, render_chatml},   {ChatFormat::qwen3, render_qwen3},
    {ChatFormat::gemma, render_gemma},
};

}  // namespace

ChatRendered chat_render(ChatFormat format, const std::vector<ChatMessage>& messages,
                         const ChatOptions& options) {
  check_roles(format, messages);
  Builder b;
  for (const auto& r : kRenderers)
    if (r.format == format) r.render(b, format, messages, options);
  return std::move(b.out);
}

// ---------------------------------------------------------------------------------------------
// Loss mask from token offsets (chat_encode, in chat_encode.cpp, feeds it the tokenizer's)

std::vector<uint8_t> chat_mask_from_offsets(const std::vector<std::pair<uint32_t, uint32_t>>& offsets,
                                            const std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<uint8_t> mask(offsets.size(), 0);
  for (size_t i = 0; i < offsets.size(); i++) {
    size_t a = offsets[i].first, z = offsets[i].second;
    if (a >= z) continue;
    // The first span that ends after this token starts; spans are sorted and disjoint.
    auto it = std::upper_bound(spans.begin(), spans.end(), a,
                               [](size_t v, const std::pair<size_t, size_t>& s) { return v < s.second; });
    mask[i] = it != spans.end() && it->first < z;
  }
  return mask;
}

}  // namespace luatune
