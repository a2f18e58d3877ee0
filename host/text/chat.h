// Chat templates: a model's own Jinja chat_template, rendered exactly as transformers'
// apply_chat_template renders it (MiniJinja behind host/text/jinja, set up as transformers sets up
// Jinja2), and the bytes of the rendered text that are the assistant's own output, so training can
// put the loss on those only. Facts, the variables a template sees and the mask rule:
// docs/chat_formats.md.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

class Tokenizer;  // host/text/tokenizer.h

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};
// [{"role": ..., "content": ...}, ...], the form a template reads.
nlohmann::ordered_json chat_messages_json(const std::vector<ChatMessage>& messages);

// One compiled template. `origin` names where its text came from ("DIR/tokenizer_config.json",
// "FILE.jinja"); every error starts with "chat_template ORIGIN:LINE: ".
class ChatTemplate {
 public:
  static std::shared_ptr<const ChatTemplate> compile(const std::string& source, const std::string& origin);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }
  bool has_generation_blocks() const;  // {% generation %} ... {% endgeneration %}

  // Renders with `context` as the template's variables (a JSON object). generation_spans, when
  // given, gets the byte ranges of the output that {% generation %} blocks wrote. Limits: a render
  // past kMaxOutputBytes or the work budget fails (an endless template ends in an error).
  std::string render(const nlohmann::ordered_json& context,
                     std::vector<std::pair<size_t, size_t>>* generation_spans = nullptr) const;

  static constexpr size_t kMaxOutputBytes = 64u << 20;
  static constexpr uint64_t kFuel = 50'000'000;  // MiniJinja instructions per render

 private:
  ChatTemplate() = default;
  struct Handle;
  Handle* handle_ = nullptr;
  std::string source_, origin_;
};

struct ChatOptions {
  bool add_generation_prompt = false;  // end with the header that starts an assistant reply
  nlohmann::ordered_json tools;        // null, or a list of JSON-schema tools (the template's `tools`)
  nlohmann::ordered_json documents;    // null, or a list of {title, text} (the template's `documents`)
  // Extra variables: the tokenizer's special tokens (bos_token, eos_token, ...; chat_options_for adds
  // them) and chat_template_kwargs such as {"enable_thinking": false}. Later keys win. (strftime_now
  // reads the local time, or SOURCE_DATE_EPOCH when it is set.)
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// The variables apply_chat_template passes: special tokens and kwargs, then messages, tools,
// documents and add_generation_prompt.
nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, const ChatOptions& options);

struct ChatRendered {
  std::string text;
  // Half-open byte ranges [first, second) of `text` the model must learn to emit. Sorted and
  // disjoint. From the template's {% generation %} blocks where it has them, else by rendering
  // growing prefixes of the conversation (docs/chat_formats.md, "The loss mask").
  std::vector<std::pair<size_t, size_t>> assistant_spans;
};

// Errors (one line): the template's own (syntax, raise_exception, limits) as "chat_template
// ORIGIN:LINE: ...", and an assistant turn the prefix rule cannot place.
ChatRendered chat_render(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                         const ChatOptions& options = {});
// The text only (no spans, one render).
std::string chat_render_text(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                             const ChatOptions& options = {});

// Token ids of the rendered text and a per-token loss mask (1 = part of an assistant span). The
// text is encoded with add_special = false: a template writes its own BOS (as transformers'
// apply_chat_template(tokenize=True) does).
struct ChatEncoding {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // same length as ids
};
// `options` as chat_render takes them: chat_options_for(tokenizer, ...) has added the tokenizer's
// special tokens, once (a data set does it once for all its records).
ChatEncoding chat_encode(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                         const nlohmann::ordered_json& messages, const ChatOptions& options);
// The options with the tokenizer's special tokens added to kwargs (where kwargs lacks them).
ChatOptions chat_options_for(const Tokenizer& tokenizer, ChatOptions options);
// The mask rule on its own: token i is 1 when its byte range overlaps an assistant span (a token
// that straddles a span edge is something the model emits); empty ranges (inserted tokens) are 0.
std::vector<uint8_t> chat_mask_from_offsets(const std::vector<std::pair<uint32_t, uint32_t>>& offsets,
                                            const std::vector<std::pair<size_t, size_t>>& spans);

// Which template a run uses. `choice` is the recipe's chat_template key: "" = the tokenizer's own
// (its "default", or "tool_use" when `tools` is set and it has one); a path to a .jinja file, a
// tokenizer_config.json; a name of one of the tokenizer's named templates; or a name of
// a template luatune ships (templates/chat/NAME.jinja: chat_template_shipped_names()). Fails in one
// line naming what was looked for and what exists, with a hint naming the chat_template key.
std::shared_ptr<const ChatTemplate> chat_template_resolve(const Tokenizer& tokenizer,
                                                          const std::string& choice, bool with_tools = false);
std::vector<std::string> chat_template_shipped_names();
// A data set's chat rendering: the template and the options every record is rendered with (the
// tokenizer's special tokens and chat_template_kwargs in options.kwargs).
struct ChatSetup {
  std::shared_ptr<const ChatTemplate> tmpl;
  ChatOptions options;
};

// Reads the template text of a file: a .jinja file as it is, or tokenizer_config.json's chat_template
// (string, or the named list: `name`, default "default").
std::shared_ptr<const ChatTemplate> chat_template_from_file(const std::string& path,
                                                            const std::string& name = "");

}  // namespace luatune
