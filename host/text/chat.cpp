// Chat rendering (see chat.h): the variables transformers passes a chat template, the rendered
// text, and the assistant's byte spans: from {% generation %} blocks, else by the prefix rule
// (docs/chat_formats.md, "The loss mask"). The template engine itself: chat_template.cpp.
#include <algorithm>

#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/text/chat.h"

namespace luatune {

using json = nlohmann::ordered_json;

json chat_messages_json(const std::vector<ChatMessage>& messages) {
  json out = json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

json chat_context(const json& messages, const ChatOptions& o) {
  // transformers: render(messages=, tools=, documents=, add_generation_prompt=, **special_tokens_map,
  // **kwargs). tools and documents are always defined (None when not given).
  json ctx = o.kwargs.is_object() ? o.kwargs : json::object();
  ctx["messages"] = messages;
  ctx["tools"] = o.tools;
  ctx["documents"] = o.documents;
  ctx["add_generation_prompt"] = o.add_generation_prompt;
  return ctx;
}

std::string chat_render_text(const ChatTemplate& tmpl, const json& messages, const ChatOptions& options) {
  return tmpl.render(chat_context(messages, options));
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

// The longest suffix of `needle` that occurs in `hay` at or after `from`: the length of that
// suffix (0 when not even its last byte occurs) and where it occurs first. A suffix that occurs
// implies every shorter one does, so the length is found by bisection.
std::pair<size_t, size_t> longest_suffix_in(const std::string& needle, const std::string& hay, size_t from) {
  size_t lo = 0, hi = needle.size(), pos = std::string::npos;
  while (lo < hi) {
    size_t mid = (lo + hi + 1) / 2;
    size_t p = hay.find(needle.data() + needle.size() - mid, from, mid);
    if (p != std::string::npos) {
      lo = mid;
      pos = p;
    } else {
      hi = mid - 1;
    }
  }
  if (lo > 0 && pos == std::string::npos) pos = hay.find(needle.data() + needle.size() - lo, from, lo);
  return {lo, pos};
}

std::string render_prefix(const ChatTemplate& tmpl, const json& messages, size_t n, bool generation_prompt,
                          const ChatOptions& o, size_t turn) {
  ChatOptions p = o;
  p.add_generation_prompt = generation_prompt;
  try {
    return tmpl.render(chat_context(json(messages.begin(), messages.begin() + ptrdiff_t(n)), p));
  } catch (const Error& e) {
    fail(std::string(e.what()) + " (rendering the conversation up to message " + std::to_string(turn + 1) +
             " to find the assistant's text)",
         "the loss mask renders growing prefixes of each conversation; give the template {% generation %} "
         "blocks (docs/chat_formats.md) or pick one with chat_template=");
  }
}

// The prefix rule: assistant message i is the text that rendering messages[0..i] adds to the
// prompt messages[0..i) + generation prompt, less trailing whitespace, placed in the full text
// after the previous turn (where the template renders earlier turns differently, the longest tail
// of that text the full rendering holds).
std::vector<std::pair<size_t, size_t>> prefix_spans(const ChatTemplate& tmpl, const json& messages,
                                                    const ChatOptions& o, const std::string& full) {
  std::vector<std::pair<size_t, size_t>> spans;
  size_t from = 0;
  // Text the template writes after every conversation whatever add_generation_prompt says (an
  // assistant header some templates always append): not part of any reply.
  std::string always;
  bool checked_always = false;
  for (size_t i = 0; i < messages.size(); i++) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || m["role"] != "assistant") continue;
    std::string prompt = render_prefix(tmpl, messages, i, true, o, i);
    std::string with = render_prefix(tmpl, messages, i + 1, false, o, i);
    size_t start = prompt.size();
    if (with.compare(0, prompt.size(), prompt) != 0) {
      // The template writes the prompt differently when a reply follows (e.g. Mistral moves the
      // system text): the reply starts after the longest tail of the prompt found in `with`.
      auto [len, pos] = longest_suffix_in(prompt, with, 0);
      start = len == 0 ? 0 : pos + len;
    }
    if (!checked_always) {
      checked_always = true;
      if (render_prefix(tmpl, messages, i, false, o, i) == prompt) {
        ChatOptions none = o;
        none.add_generation_prompt = false;
        try {
          always = tmpl.render(chat_context(json::array(), none));
        } catch (const Error&) {
          always.clear();  // a template that needs messages: no way to see its trailer alone
        }
      }
    }
    std::string turn = with.substr(start);
    if (!always.empty() && str_ends_with(turn, always)) turn.resize(turn.size() - always.size());
    while (!turn.empty() && is_space(turn.back())) turn.pop_back();
    if (turn.empty()) continue;
    size_t at = std::string::npos, len = turn.size();
    if (start >= from && full.compare(start, turn.size(), turn) == 0 && with.size() <= full.size() &&
        full.compare(0, start, with, 0, start) == 0) {
      at = start;  // the template is prefix-stable here: the turn sits where the prompt ends
    } else {
      // Not before the point where the full text and the prompt part: the reply follows its prompt.
      size_t common = 0;
      while (common < prompt.size() && common < full.size() && prompt[common] == full[common]) common++;
      std::tie(len, at) = longest_suffix_in(turn, full, std::max(from, common));
    }
    if (len == 0 || at == std::string::npos)
      fail(
          "chat_template " + tmpl.origin() + ": cannot find assistant message " + std::to_string(i + 1) +
              " in the rendered conversation (the template renders it differently once later turns follow)",
          "give the template {% generation %} blocks (docs/chat_formats.md) or pick one with chat_template=");
    spans.emplace_back(at, at + len);
    from = at + len;
  }
  return spans;
}

}  // namespace

ChatRendered chat_render(const ChatTemplate& tmpl, const json& messages, const ChatOptions& options) {
  LT_CHECK(messages.is_array(), "chat: the conversation must be a list of messages");
  ChatRendered r;
  if (tmpl.has_generation_blocks()) {
    r.text = tmpl.render(chat_context(messages, options), &r.assistant_spans);
    return r;
  }
  r.text = tmpl.render(chat_context(messages, options));
  r.assistant_spans = prefix_spans(tmpl, messages, options, r.text);
  return r;
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
