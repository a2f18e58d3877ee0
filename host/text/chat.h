// Chat formats: renders a conversation ({role, content} messages) exactly as a model family's
// Jinja chat_template does, and records which bytes are the assistant's own output (content plus
// its end-of-turn marker) so training can put the loss on those bytes only. No Jinja engine: each
// family is a few lines of C++ checked byte for byte against the real templates
// (tests/reference/chat_ref.*). Facts and sources: docs/chat_formats.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

class Tokenizer;  // host/text/tokenizer.h

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat {
  llama3,   // "llama3": Llama 3.0 instruct
  llama31,  // "llama3.1": Llama 3.1/3.3 instruct (system block with knowledge/today dates)
  mistral,  // "mistral": Mistral v3 tokenizer layout (Mistral-7B-Instruct-v0.3)
  chatml,   // "chatml": plain ChatML, no default system message
  qwen25,   // "qwen2.5": ChatML plus Qwen2.5's default system message
  qwen3,    // "qwen3": ChatML plus Qwen3's <think> block on the final answer
  gemma,    // "gemma": Gemma 2/3 (system text prepended to the first user turn)
};

struct ChatOptions {
  bool add_generation_prompt = false;       // end with the header that starts an assistant reply
  std::string date_string = "26 Jul 2024";  // llama3.1's "Today Date:" (the template's default)
  bool enable_thinking = true;              // qwen3: false appends an empty <think> block to the prompt
  // The template's bos_token / eos_token; unset means the family's usual text (<|begin_of_text|>,
  // <s>/</s>, <bos>). chat_encode fills them from the tokenizer when it has them.
  std::optional<std::string> bos_text, eos_text;
};

struct ChatRendered {
  std::string text;
  // Half-open byte ranges [first, second) of `text` the model must learn to emit: each assistant
  // message's content and its end-of-turn marker (<|eot_id|>, </s>, <|im_end|>, <end_of_turn>),
  // never the role header before it nor the newline after it. Sorted, non-overlapping.
  std::vector<std::pair<size_t, size_t>> assistant_spans;
};

// "llama3", "llama3.1", "mistral", "chatml", "qwen2.5", "qwen3", "gemma"; an error lists them.
ChatFormat chat_format_parse(const std::string& name);
const char* chat_format_name(ChatFormat format);
// Recognises a family from a tokenizer's chat_template text by its markers; an error when none
// matches (or the family's variant renders differently from ours), suggesting format=.
ChatFormat chat_format_detect(const std::string& chat_template);

// Errors (one line, naming the message by position) where the real template raises, and for
// roles we do not render (tool calls and results: ipython, tool).
ChatRendered chat_render(ChatFormat format, const std::vector<ChatMessage>& messages,
                         const ChatOptions& options = {});

// Token ids of the rendered text and a per-token loss mask (1 = part of an assistant span). The
// text is encoded with add_special = false: every template already writes its own BOS.
struct ChatEncoding {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // same length as ids
};
ChatEncoding chat_encode(const Tokenizer& tokenizer, ChatFormat format,
                         const std::vector<ChatMessage>& messages, const ChatOptions& options = {});
// The mask rule on its own: token i is 1 when its byte range overlaps an assistant span (a token
// that straddles a span edge is something the model emits); empty ranges (inserted tokens) are 0.
std::vector<uint8_t> chat_mask_from_offsets(const std::vector<std::pair<uint32_t, uint32_t>>& offsets,
                                            const std::vector<std::pair<size_t, size_t>>& spans);

}  // namespace luatune
