// chat_encode (see chat.h): renders a conversation, tokenizes the whole text once with offsets,
// and marks the tokens that fall in assistant spans. Kept apart from chat.cpp because it needs
// the tokenizer implementation, while rendering does not.
#include "host/core/error.h"
#include "host/text/chat.h"
#include "host/text/tokenizer.h"

namespace luatune {

ChatOptions chat_options_for(const Tokenizer& tokenizer, ChatOptions o) {
  // transformers passes **special_tokens_map first, then the caller's kwargs (which win).
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (const auto& [key, text] : tokenizer.template_tokens()) vars[key] = text;
  if (o.kwargs.is_object())
    for (auto it = o.kwargs.begin(); it != o.kwargs.end(); ++it) vars[it.key()] = it.value();
  o.kwargs = std::move(vars);
  return o;
}

ChatEncoding chat_encode(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                         const nlohmann::ordered_json& messages, const ChatOptions& options) {
  ChatRendered r = chat_render(tmpl, messages, options);
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
