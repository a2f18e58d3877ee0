// chat_encode (see chat.h): renders a conversation, tokenizes the whole text once with offsets,
// and marks the tokens that fall in assistant spans. Kept apart from chat.cpp because it needs
// the tokenizer implementation, while rendering does not.
#include "host/text/chat.h"

#include "host/core/error.h"
#include "host/text/tokenizer.h"

namespace luatune {

ChatEncoding chat_encode(const Tokenizer& tokenizer, ChatFormat format,
                         const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  // The template's bos_token/eos_token are the tokenizer's, as transformers passes them.
  ChatOptions o = options;
  const SpecialTokens& sp = tokenizer.special();
  if (!o.bos_text && !sp.bos_text.empty()) o.bos_text = sp.bos_text;
  if (!o.eos_text && !sp.eos_text.empty()) o.eos_text = sp.eos_text;
  ChatRendered r = chat_render(format, messages, o);

  // One encode of the full text: tokens can merge across message boundaries exactly as they do
  // when the model sees the conversation, and add_special=false because the text has its BOS.
  Encoding enc = tokenizer.encode_with_offsets(r.text, /*add_special=*/false);
  LT_ASSERT(enc.offsets.size() == enc.ids.size(),
            "encode_with_offsets gave " << enc.offsets.size() << " offsets for " << enc.ids.size() << " ids");
  ChatEncoding out;
  out.mask = chat_mask_from_offsets(enc.offsets, r.assistant_spans);
  out.ids = std::move(enc.ids);
  return out;
}

}  // namespace luatune
