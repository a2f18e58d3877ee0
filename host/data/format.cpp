// Record formats -> (ids, loss mask) (see format.h). Plain-text templates are encoded in one piece
// with offsets and masked by byte span, the way chat_encode masks a rendered conversation, so a
// token is cut the same way whether or not it is trained on.
#include "host/data/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "host/core/error.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/text/tokenizer.h"

namespace luatune {

using json = nlohmann::ordered_json;

namespace {

const char* const kFormatNames[] = {"text", "prompt_response", "alpaca", "chat", "guanaco"};
const char kHuman[] = "### Human:";
const char kAssistant[] = "### Assistant:";

// The string at record[key], or nullptr when absent or not a string.
const std::string* field_string(const json& record, const char* key) {
  if (!record.is_object()) return nullptr;
  auto it = record.find(key);
  return it != record.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
}

[[noreturn]] void fail_shape(const std::string& where, const std::string& expected, const json& record) {
  fail(where + ": expected " + expected + ", got " + data_record_excerpt(record));
}

// Encodes `text` once (BOS/EOS as the tokenizer's post-processor says) and marks the tokens that
// overlap `spans` (half-open byte ranges of text) as targets.
Document encode_spans(const Tokenizer& tok, const std::string& text,
                      const std::vector<std::pair<size_t, size_t>>& spans) {
  Encoding enc = tok.encode_with_offsets(text, /*add_special=*/true);
  Document doc;
  doc.mask = chat_mask_from_offsets(enc.offsets, spans);
  doc.ids = std::move(enc.ids);
  return doc;
}

// Appends the tokenizer's EOS as a target (or marks a post-processor's trailing EOS as one).
void append_eos(const Tokenizer& tok, Document& doc, bool trained) {
  const std::vector<int32_t>& eos = tok.special().eos;
  LT_ASSERT(!eos.empty(), "append_eos on a tokenizer without EOS (checked when the dataset is built)");
  bool has = !doc.ids.empty() && std::find(eos.begin(), eos.end(), doc.ids.back()) != eos.end();
  if (!has) {
    doc.ids.push_back(eos.front());
    doc.mask.push_back(0);
  }
  doc.mask.back() = trained ? 1 : 0;
}

// One "### Human:" / "### Assistant:" turn of a Guanaco text: content bytes [begin, end).
struct GuanacoTurn {
  bool assistant = false;
  size_t begin = 0, end = 0;
};

// The turns in order; empty when the text does not start (after whitespace) with "### Human:".
std::vector<GuanacoTurn> guanaco_turns(const std::string& text) {
  std::vector<GuanacoTurn> turns;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text.compare(first, sizeof(kHuman) - 1, kHuman) != 0) return turns;
  size_t pos = first;
  while (pos != std::string::npos) {
    bool assistant = text.compare(pos, sizeof(kAssistant) - 1, kAssistant) == 0;
    size_t begin = pos + (assistant ? sizeof(kAssistant) : sizeof(kHuman)) - 1;
    size_t next_h = text.find(kHuman, begin), next_a = text.find(kAssistant, begin);
    size_t next = std::min(next_h, next_a);
    turns.push_back({assistant, begin, next == std::string::npos ? text.size() : next});
    pos = next;
  }
  return turns;
}

Document encode_chat(const Tokenizer& tok, const ChatSetup& chat, const json& messages,
                     const std::string& where) {
  try {
    ChatEncoding e = chat_encode(tok, *chat.tmpl, messages, chat.options);
    return Document{std::move(e.ids), std::move(e.mask)};
  } catch (const Error& e) {
    fail(where + ": " + e.what());
  }
}

// A prompt followed by its response: as a user/assistant conversation when a chat format is set,
// else the text prompt + response with the response (and the appended EOS) trained on.
Document encode_prompt_response(const Tokenizer& tok, const EncodeOptions& o, const std::string& prompt,
                                const std::string& response, const std::string& where) {
  if (o.chat)
    return encode_chat(tok, *o.chat, chat_messages_json({{"user", prompt}, {"assistant", response}}), where);
  std::string text = prompt + response;
  Document doc = encode_spans(tok, text, {{prompt.size(), text.size()}});
  if (o.add_eos) append_eos(tok, doc, true);
  return doc;
}

Document encode_guanaco(const Tokenizer& tok, const EncodeOptions& o, const std::string& text,
                        const json& record, const std::string& where) {
  std::vector<GuanacoTurn> turns = guanaco_turns(text);
  bool any_assistant =
      std::any_of(turns.begin(), turns.end(), [](const GuanacoTurn& t) { return t.assistant; });
  if (!any_assistant)
    fail_shape(where, "a JSON object with \"text\" holding \"### Human: ... ### Assistant: ...\" turns",
               record);
  if (o.chat) {
    std::vector<ChatMessage> messages;
    for (const GuanacoTurn& t : turns)
      messages.push_back(
          {t.assistant ? "assistant" : "user", str_trim(text.substr(t.begin, t.end - t.begin))});
    return encode_chat(tok, *o.chat, chat_messages_json(messages), where);
  }
  // The answer's bytes without the whitespace before the next marker: a token " ###" that starts
  // there belongs to the next turn's header, not to the answer.
  std::vector<std::pair<size_t, size_t>> spans;
  for (const GuanacoTurn& t : turns) {
    size_t end = t.end;
    while (end > t.begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) end--;
    if (t.assistant) spans.emplace_back(t.begin, end);
  }
  Document doc = encode_spans(tok, text, spans);
  if (o.add_eos) append_eos(tok, doc, turns.back().assistant);
  return doc;
}

// The record's messages as the template will see them: each an object with a string role and a
// content that is a string, a list of parts ({"type": "text", "text": ...}) or, beside tool_calls,
// null or absent. Other keys (tool_calls, tool_call_id, name, reasoning_content, ...) pass through.
const json& chat_messages(const json& record, const std::string& where) {
  const char* expected = "a JSON object with \"messages\" (a list of {role, content})";
  if (!record.is_object()) fail_shape(where, expected, record);
  auto it = record.find("messages");
  if (it == record.end() || !it->is_array() || it->empty()) fail_shape(where, expected, record);
  for (size_t i = 0; i < it->size(); i++) {
    const json& m = (*it)[i];
    const std::string* role = field_string(m, "role");
    auto c = m.is_object() ? m.find("content") : m.end();
    bool content_ok = m.is_object() && c != m.end() && (c->is_string() || c->is_array());
    bool tool_call = m.is_object() && m.contains("tool_calls") && (c == m.end() || c->is_null());
    if (!role || !(content_ok || tool_call))
      fail(where + ": expected messages[" + std::to_string(i) +
           "] to be {\"role\": string, \"content\": string or list of parts}, got " + data_record_excerpt(m));
  }
  return *it;
}

}  // namespace

DataFormat data_format_parse(const std::string& name) {
  for (size_t i = 0; i < std::size(kFormatNames); i++)
    if (name == kFormatNames[i]) return static_cast<DataFormat>(i);
  fail_usage("data: unknown format '" + name +
             "'; expected one of text, prompt_response, alpaca, chat, guanaco");
}

const char* data_format_name(DataFormat format) {
  return kFormatNames[static_cast<size_t>(format)];
}

DataFormat data_format_detect(const json& record, const std::string& where) {
  auto has = [&](const char* key) { return record.is_object() && record.contains(key); };
  if (has("messages")) return DataFormat::chat;
  if (has("prompt") && has("response")) return DataFormat::prompt_response;
  if (has("instruction") && has("output")) return DataFormat::alpaca;
  if (const std::string* text = field_string(record, "text"))
    return guanaco_turns(*text).empty() ? DataFormat::text : DataFormat::guanaco;
  fail(where +
       ": expected a JSON object with \"text\", \"prompt\"+\"response\", \"instruction\"+\"output\" or "
       "\"messages\" (the format is detected from the first record), got " +
       data_record_excerpt(record));
}

std::string data_alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return "Below is an instruction that describes a task. Write a response that appropriately completes "
           "the request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:\n";
  return "Below is an instruction that describes a task, paired with an input that provides further "
         "context. Write a response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

Document data_encode_record(const Tokenizer& tok, const EncodeOptions& o, const json& record,
                            const std::string& where) {
  Document doc;
  switch (o.format) {
    case DataFormat::text: {
      const std::string* text = field_string(record, "text");
      if (!text) fail_shape(where, "a JSON object with \"text\" (a string)", record);
      doc.ids = tok.encode(*text, /*add_special=*/true);
      doc.mask.assign(doc.ids.size(), 1);
      if (o.add_eos) append_eos(tok, doc, true);
      break;
    }
    case DataFormat::prompt_response: {
      const std::string* prompt = field_string(record, "prompt");
      const std::string* response = field_string(record, "response");
      if (!prompt || !response)
        fail_shape(where, "a JSON object with \"prompt\" and \"response\" (strings)", record);
      doc = encode_prompt_response(tok, o, *prompt, *response, where);
      break;
    }
    case DataFormat::alpaca: {
      const std::string* instruction = field_string(record, "instruction");
      const std::string* output = field_string(record, "output");
      const std::string* input = field_string(record, "input");
      bool input_ok = input || !record.is_object() || !record.contains("input") || record["input"].is_null();
      if (!instruction || !output || !input_ok)
        fail_shape(where, "a JSON object with \"instruction\", \"output\" and optionally \"input\" (strings)",
                   record);
      std::string in = input ? *input : "";
      if (o.chat)
        doc = encode_prompt_response(tok, o, in.empty() ? *instruction : *instruction + "\n\n" + in, *output,
                                     where);
      else
        doc = encode_prompt_response(tok, o, data_alpaca_prompt(*instruction, in), *output, where);
      break;
    }
    case DataFormat::chat: {
      LT_ASSERT(o.chat, "chat records need a chat format (resolved when the dataset is built)");
      doc = encode_chat(tok, *o.chat, chat_messages(record, where), where);
      break;
    }
    case DataFormat::guanaco: {
      const std::string* text = field_string(record, "text");
      if (!text)
        fail_shape(where, "a JSON object with \"text\" holding \"### Human: ... ### Assistant: ...\" turns",
                   record);
      doc = encode_guanaco(tok, o, *text, record, where);
      break;
    }
  }
  if (o.train_on_prompt) std::fill(doc.mask.begin(), doc.mask.end(), 1);
  if (!doc.mask.empty()) doc.mask[0] = 0;  // nothing before the first token predicts it
  return doc;
}

void data_check_record(DataFormat format, const json& record, const std::string& where) {
  switch (format) {
    case DataFormat::text:
      if (!field_string(record, "text")) fail_shape(where, "a JSON object with \"text\" (a string)", record);
      return;
    case DataFormat::prompt_response:
      if (!field_string(record, "prompt") || !field_string(record, "response"))
        fail_shape(where, "a JSON object with \"prompt\" and \"response\" (strings)", record);
      return;
    case DataFormat::alpaca: {
      const bool input_ok = field_string(record, "input") || !record.is_object() ||
                            !record.contains("input") || record["input"].is_null();
      if (!field_string(record, "instruction") || !field_string(record, "output") || !input_ok)
        fail_shape(where, "a JSON object with \"instruction\", \"output\" and optionally \"input\" (strings)",
                   record);
      return;
    }
    case DataFormat::chat:
      chat_messages(record, where);
      return;
    case DataFormat::guanaco: {
      const char* expected =
          "a JSON object with \"text\" holding \"### Human: ... ### Assistant: ...\" turns";
      const std::string* text = field_string(record, "text");
      if (!text) fail_shape(where, expected, record);
      std::vector<GuanacoTurn> turns = guanaco_turns(*text);
      if (std::none_of(turns.begin(), turns.end(), [](const GuanacoTurn& t) { return t.assistant; }))
        fail_shape(where, expected, record);
      return;
    }
  }
}

std::string data_record_excerpt(const json& record, size_t limit) {
  return json_excerpt(record, limit);  // bounded whatever the record's size and depth
}

}  // namespace luatune
