// Chat messages in one letter for the chat units (test_chat, test_chat_encode): S("Be brief."),
// U("Hello"), A("Hi!") are a system, a user and an assistant message.
#pragma once

#include <string>

#include "host/text/chat.h"

namespace luatune {

inline ChatMessage S(const std::string& content) {
  return {"system", content};
}
inline ChatMessage U(const std::string& content) {
  return {"user", content};
}
inline ChatMessage A(const std::string& content) {
  return {"assistant", content};
}

}  // namespace luatune
