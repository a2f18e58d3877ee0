// JSONL record formats: turns one record (a parsed JSON object) into token ids and a per-token
// loss mask. Five formats, detected from the first record's keys or named:
//   text             {"text": ...}                              loss on every token (pretraining)
//   prompt_response  {"prompt": ..., "response": ...}           MosaicML instruct-v3
//   alpaca           {"instruction", "input", "output"}         Stanford Alpaca's prompt template
//   chat             {"messages": [{"role", "content"}, ...]}   the tokenizer's chat format
//   guanaco          {"text": "### Human: ... ### Assistant: ..."}  OpenAssistant-Guanaco turns
// The rules (templates, where EOS goes, what is masked) are in docs/data.md.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/text/chat.h"

namespace luatune {

class Tokenizer;  // host/text/tokenizer.h

enum class DataFormat { text, prompt_response, alpaca, chat, guanaco };

// "text", "prompt_response", "alpaca", "chat", "guanaco"; an error lists them.
DataFormat data_format_parse(const std::string& name);
const char* data_format_name(DataFormat format);
// From a record's keys: messages -> chat; prompt+response -> prompt_response; instruction+output ->
// alpaca; text -> guanaco when it starts with "### Human:", else text. `where` ("FILE:LINE") prefixes
// the error when no format fits.
DataFormat data_format_detect(const nlohmann::ordered_json& record, const std::string& where);

// Stanford Alpaca's prompt (with or without the input paragraph); the response follows it directly.
std::string data_alpaca_prompt(const std::string& instruction, const std::string& input);

struct EncodeOptions {
  DataFormat format = DataFormat::text;
  bool train_on_prompt = false;  // loss on every token, prompts and chat headers included
  bool add_eos = true;           // append the tokenizer's EOS (trained) to non-chat formats
  // Render prompt/response, alpaca and guanaco records (and chat ones, always) as a conversation
  // with this chat template; null means plain text templates.
  std::shared_ptr<const ChatSetup> chat;
};

// One tokenized record. mask[i] = 1 when token i is a target (the model is trained to predict it
// from tokens 0..i-1); mask[0] is always 0, nothing comes before it.
struct Document {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

// Errors: "WHERE: expected ..., got ..." for a record of the wrong shape, and a chat format's own
// error (unknown role, ...) prefixed by WHERE.
Document data_encode_record(const Tokenizer& tokenizer, const EncodeOptions& options,
                            const nlohmann::ordered_json& record, const std::string& where);

// The shape checks data_encode_record makes, without a tokenizer: fails with the same "WHERE: expected ...,
// got ..." for a record that loading would refuse as `format` (`runner validate` reads data files with it).
void data_check_record(DataFormat format, const nlohmann::ordered_json& record, const std::string& where);

// The first `limit` characters of a record's JSON text, for "got ..." in messages.
std::string data_record_excerpt(const nlohmann::ordered_json& record, size_t limit = 60);

}  // namespace luatune
