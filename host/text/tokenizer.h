// Hugging Face tokenizer.json (+ tokenizer_config.json): byte-level BPE with regex Split (Llama 3,
// Qwen) and SentencePiece-style BPE with Metaspace/byte_fallback (Llama 2, Mistral, Gemma), added
// and special tokens matched in raw text, normalizers, post-processor (BOS/EOS) and decoders.
// Interface shared by host/text/*.cpp, bindings/tokenizer.cpp, the runner's `tokenize` verb and the
// chat formats; the implementation is split by concern under host/text/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace luatune {

struct TokenizerImpl;  // host/text/tokenizer.cpp

// One encoded text. offsets[i] is the half-open byte range [first, second) of token i in the
// original (un-normalized) input; tokens the post-processor adds (BOS/EOS) get an empty range at
// the position they were inserted.
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
};

struct SpecialTokens {
  int32_t bos = -1;          // -1 when the tokenizer has none
  std::vector<int32_t> eos;  // every end-of-sequence id (generation stops on any); may be empty
  int32_t pad = -1;
  int32_t unk = -1;
  std::string bos_text, eos_text, pad_text;  // as written in tokenizer_config.json
};

class Tokenizer {
 public:
  // `path` is a model directory holding tokenizer.json (and usually tokenizer_config.json), or the
  // tokenizer.json file itself. Errors name the file and the unsupported/malformed field. A Hub name
  // ("org/name") is the caller's to resolve first (model_path_from_hub, host/io/hub_cache.h).
  static std::shared_ptr<Tokenizer> load(const std::string& path);
  ~Tokenizer();

  // add_special: apply the post-processor (BOS/EOS as the tokenizer's template says).
  // Added/special tokens written literally in `text` are always matched (as HF does by default).
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  Encoding encode_with_offsets(std::string_view text, bool add_special) const;
  // skip_special: drop special added tokens from the output (HF's skip_special_tokens).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  int32_t vocab_size() const;                         // model vocab plus added tokens (max id + 1)
  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  std::string id_to_token(int32_t id) const;          // "" when out of range
  bool is_special(int32_t id) const;
  const SpecialTokens& special() const;
  // tokenizer_config.json "chat_template" (a chat_template.jinja file beside it wins): the one named
  // "default" or the only one; "" if none.
  const std::string& chat_template() const;
  // Every template by name: a single template is named "default"; a list keeps its names
  // ("default", "tool_use", ...). Empty if none. The file they came from: chat_template_origin().
  const std::vector<std::pair<std::string, std::string>>& chat_templates() const;
  const std::string& chat_template_origin() const;
  // The special tokens a chat template sees, as transformers passes them: ("bos_token", "<s>"),
  // ("eos_token", ...), and unk/sep/pad/cls/mask where tokenizer_config.json sets them.
  const std::vector<std::pair<std::string, std::string>>& template_tokens() const;
  const std::string& source_dir() const;  // directory the files came from (model:save copies them)
  // The files that make up this tokenizer (tokenizer.json, tokenizer_config.json,
  // special_tokens_map.json, chat_template.jinja, ... whichever exist), for copying into a saved model.
  const std::vector<std::string>& files() const;

 private:
  Tokenizer();
  std::unique_ptr<TokenizerImpl> impl_;
};

}  // namespace luatune
