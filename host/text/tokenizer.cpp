// Tokenizer: loads tokenizer.json (+ tokenizer_config.json, generation_config.json and
// chat_template.jinja when present) into its components and runs them: added tokens are split out
// of the raw text, the rest is normalized, pre-tokenized and run through the BPE model, then the
// post-processor adds BOS/EOS. Decoding maps ids to token strings and through the decoder.
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

struct TokenizerImpl {
  std::string dir, json_path;
  std::vector<std::string> files;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;  // id -> index in `added`
  std::unordered_map<std::string, int32_t> added_by_text;
  AddedTokenMatcher raw_matcher;         // tokens matched in the raw text (normalized: false)
  AddedTokenMatcher normalized_matcher;  // tokens matched after normalization (normalized: true)
  SpecialTokens special;
  std::string chat_template;  // the default one (named "default", or the only one)
  std::vector<std::pair<std::string, std::string>> chat_templates;  // (name, Jinja text)
  std::string chat_template_origin;
  std::vector<std::pair<std::string, std::string>> template_tokens;  // ("bos_token", "<s>"), ...
  int32_t vocab_size = 0;

  std::string_view token_text(int32_t id) const {
    auto it = added_by_id.find(id);
    if (it != added_by_id.end()) return added[it->second].content;
    const std::string* t = model->id_to_token(id);
    return t ? std::string_view(*t) : std::string_view();
  }
  void encode_plain(std::string_view text, uint32_t base, Encoding& e) const;
  void encode_piece(Piece p, Encoding& e) const;
};

namespace {

nlohmann::json read_json(const std::string& path) {
  return json_parse_checked(file_read(path), path);
}

// tokenizer_config.json writes special tokens as "text", {"content": "text", ...} or null.
std::string config_token(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

void read_added_tokens(const JsonNode& root, TokenizerImpl& t) {
  if (!root.has("added_tokens")) return;
  JsonNode list = root.at("added_tokens");
  for (size_t i = 0; i < list.size(); i++) {
    JsonNode n = list.at(i);
    AddedToken a;
    int64_t id = n.integer("id");
    if (id < 0 || id > INT32_MAX)
      n.at("id").fail("should be a non-negative token id, got " + std::to_string(id));
    a.id = static_cast<int32_t>(id);
    a.content = n.str("content");
    if (a.content.empty()) n.at("content").fail("should not be empty");
    a.special = n.boolean_or("special", false);
    a.single_word = n.boolean_or("single_word", false);
    a.lstrip = n.boolean_or("lstrip", false);
    a.rstrip = n.boolean_or("rstrip", false);
    a.normalized = n.boolean_or("normalized", !a.special);
    t.added_by_id[a.id] = t.added.size();
    t.added_by_text.emplace(a.content, a.id);
    t.added.push_back(std::move(a));
  }
  std::vector<const AddedToken*> raw, normalized;
  for (const AddedToken& a : t.added) (a.normalized && t.normalizer ? normalized : raw).push_back(&a);
  t.raw_matcher.build(raw);
  t.normalized_matcher.build(normalized);
}

// bos/eos/pad/unk from tokenizer_config.json; every eos id generation_config.json lists as well.
void read_special(const std::string& dir, TokenizerImpl& t, const Tokenizer& tok) {
  nlohmann::json config;
  std::string config_path = dir + "/tokenizer_config.json";
  if (file_exists(config_path)) config = read_json(config_path);
  SpecialTokens& s = t.special;
  s.bos_text = config_token(config, "bos_token");
  s.eos_text = config_token(config, "eos_token");
  s.pad_text = config_token(config, "pad_token");
  std::string unk_text = config_token(config, "unk_token");
  if (!s.bos_text.empty()) s.bos = tok.token_to_id(s.bos_text);
  if (!s.pad_text.empty()) s.pad = tok.token_to_id(s.pad_text);
  s.unk = !unk_text.empty() ? tok.token_to_id(unk_text) : t.model->unk_id();
  auto add_eos = [&](int64_t id) {
    if (id >= 0 && std::find(s.eos.begin(), s.eos.end(), id) == s.eos.end())
      s.eos.push_back(static_cast<int32_t>(id));
  };
  if (!s.eos_text.empty()) add_eos(tok.token_to_id(s.eos_text));
  std::string gen_path = dir + "/generation_config.json";
  if (file_exists(gen_path)) {
    nlohmann::json gen = read_json(gen_path);
    const nlohmann::json& e =
        gen.is_object() && gen.contains("eos_token_id") ? gen["eos_token_id"] : nlohmann::json();
    if (e.is_number_integer()) add_eos(e.get<int64_t>());
    if (e.is_array())
      for (const auto& v : e)
        if (v.is_number_integer()) add_eos(v.get<int64_t>());
  }

  // The special tokens a chat template sees (transformers' special_tokens_map: those set).
  for (const char* key :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::string text = config_token(config, key);
    if (!text.empty()) t.template_tokens.emplace_back(key, text);
  }

  // Chat template: chat_template.jinja beside the config wins over the config's field, which is a
  // string or a list of {"name", "template"} (a named set: "default", "tool_use", ...).
  std::string jinja = dir + "/chat_template.jinja";
  if (file_exists(jinja)) {
    t.chat_templates.emplace_back("default", file_read(jinja));
    t.chat_template_origin = jinja;
  } else if (config.is_object() && config.contains("chat_template")) {
    const nlohmann::json& c = config["chat_template"];
    t.chat_template_origin = config_path;
    if (c.is_string()) {
      t.chat_templates.emplace_back("default", c.get<std::string>());
    } else if (c.is_array()) {
      for (const auto& entry : c) {
        if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) continue;
        std::string name =
            entry.contains("name") && entry["name"].is_string() ? entry["name"].get<std::string>() : "";
        t.chat_templates.emplace_back(name, entry["template"].get<std::string>());
      }
    }
  }
  for (const auto& named : t.chat_templates)
    if (named.first == "default") t.chat_template = named.second;
  if (t.chat_template.empty() && t.chat_templates.size() == 1) t.chat_template = t.chat_templates[0].second;
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<TokenizerImpl>()) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::shared_ptr<Tokenizer> tok(new Tokenizer());
  TokenizerImpl& t = *tok->impl_;
  if (dir_exists(path)) {
    t.dir = path;
    t.json_path = path + "/tokenizer.json";
    LT_CHECK(file_exists(t.json_path), "tokenizer: no tokenizer.json in '"
                                           << path
                                           << "' (expected a Hugging Face fast tokenizer; a SentencePiece "
                                              "tokenizer.model alone is not supported)");
  } else {
    LT_CHECK(file_exists(path), "tokenizer: '" << path
                                               << "' does not exist (expected a model directory holding "
                                                  "tokenizer.json, or a tokenizer.json file)");
    t.json_path = path;
    t.dir = path_dirname(path);
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "chat_template.jinja", "added_tokens.json", "tokenizer.model"}) {
    std::string f = t.dir + "/" + name;
    if (file_exists(f)) t.files.push_back(f);
  }

  BpeData bpe;
  nlohmann::json root_json = tokenizer_json_parse(t.json_path, file_read(t.json_path), bpe);
  JsonNode root(root_json, t.json_path, "");
  root.expect_object();
  t.normalizer = Normalizer::create(root.get("normalizer"));
  t.pre_tokenizer = PreTokenizer::create(root.get("pre_tokenizer"));
  JsonNode model = root.at("model");
  model.expect_object();
  if (model.has("type") && model.type() != "BPE") model.unsupported({"BPE"});
  t.model = std::make_unique<BpeModel>(model, std::move(bpe));
  t.post_processor = PostProcessor::create(root.get("post_processor"));
  t.decoder = Decoder::create(root.get("decoder"));
  read_added_tokens(root, t);
  t.vocab_size = t.model->size();
  for (const AddedToken& a : t.added) t.vocab_size = std::max(t.vocab_size, a.id + 1);
  read_special(t.dir, t, *tok);
  return tok;
}

// Normalizes, pre-tokenizes and runs the model on text that holds no raw added token. `base` is
// the offset of `text` in the caller's input.
void TokenizerImpl::encode_plain(std::string_view text, uint32_t base, Encoding& e) const {
  Piece p = Piece::of_original(text, base);
  if (normalizer) normalizer->normalize(p);
  if (normalized_matcher.empty()) {
    encode_piece(std::move(p), e);
    return;
  }
  // Tokens that match normalized text: split them out now; each run between them is pre-tokenized
  // on its own, in order.
  for (const Segment& s : normalized_matcher.split(p.text)) {
    if (s.id >= 0) {
      e.ids.push_back(s.id);
      e.offsets.push_back(p.source_range(s.begin, s.end));
    } else {
      encode_piece(p.slice(s.begin, s.end), e);
    }
  }
}

// Pre-tokenizes normalized text `p` and runs the model on each piece that gives.
void TokenizerImpl::encode_piece(Piece p, Encoding& e) const {
  std::vector<Piece> pieces;
  pieces.push_back(std::move(p));
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
  std::vector<ModelToken> toks;
  for (const Piece& w : pieces) {
    toks.clear();
    model->tokenize(w.text, toks);
    for (const ModelToken& m : toks) {
      e.ids.push_back(m.id);
      e.offsets.push_back(w.source_range(m.begin, m.end));
    }
  }
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, bool add_special) const {
  const TokenizerImpl& t = *impl_;
  size_t bad = utf8_invalid_at(text);
  LT_CHECK(bad == std::string_view::npos,
           "tokenizer: text is not valid UTF-8 (byte " << bad << " of " << text.size() << ")");
  Encoding e;
  if (t.raw_matcher.empty()) {
    if (!text.empty()) t.encode_plain(text, 0, e);
  } else {
    for (const Segment& s : t.raw_matcher.split(text)) {
      if (s.id >= 0) {
        e.ids.push_back(s.id);
        e.offsets.push_back({s.begin, s.end});
      } else {
        t.encode_plain(text.substr(s.begin, s.end - s.begin), s.begin, e);
      }
    }
  }
  if (t.post_processor)
    t.post_processor->process(e, add_special, [&t](int32_t id) { return t.token_text(id); });
  return e;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  return encode_with_offsets(text, add_special).ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    auto it = t.added_by_id.find(id);
    if (it != t.added_by_id.end()) {
      tokens.push_back(t.added[it->second].content);
    } else if (const std::string* s = t.model->id_to_token(id)) {
      tokens.push_back(*s);
    }  // ids that name no token are skipped, as HF does
  }
  if (!t.decoder) return str_join(tokens, " ");
  t.decoder->decode_chain(tokens);
  std::string out;
  for (const std::string& s : tokens) out += s;
  return out;
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_text.find(std::string(token));
  if (it != impl_->added_by_text.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  return std::string(impl_->token_text(id));
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

const SpecialTokens& Tokenizer::special() const {
  return impl_->special;
}
const std::vector<std::pair<std::string, std::string>>& Tokenizer::chat_templates() const {
  return impl_->chat_templates;
}
const std::string& Tokenizer::chat_template_origin() const {
  return impl_->chat_template_origin;
}
const std::vector<std::pair<std::string, std::string>>& Tokenizer::template_tokens() const {
  return impl_->template_tokens;
}

const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}
const std::string& Tokenizer::source_dir() const {
  return impl_->dir;
}
const std::vector<std::string>& Tokenizer::files() const {
  return impl_->files;
}

}  // namespace luatune
