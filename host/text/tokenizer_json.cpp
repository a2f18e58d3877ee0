// Reading tokenizer.json fast: a SAX handler builds the JSON tree as usual except for
// model.vocab and model.merges (half a million entries in Gemma 3's 33 MB file), which it streams
// into flat lists instead of a tree of maps and arrays. Anything unexpected in those two fields
// (or a syntax error) makes it give up; the caller then parses the plain way and reports the
// problem with its JSON path.
#include "host/core/error.h"
#include "host/core/json.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

using Json = nlohmann::json;

class StreamingReader : public nlohmann::json_sax<Json> {
 public:
  explicit StreamingReader(BpeData& bpe) : bpe_(bpe) {}
  Json root;

  bool null() override { return add(Json()); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::vocab)
      return v >= 0 && v <= INT32_MAX && (bpe_.vocab.emplace_back(std::move(key_), v), true);
    return add(Json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::vocab)
      return v <= INT32_MAX && (bpe_.vocab.emplace_back(std::move(key_), static_cast<int64_t>(v)), true);
    return add(Json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return add(Json(v)); }
  bool string(string_t& s) override {
    if (mode_ == Mode::merges) return bpe_.merges.push_back({std::move(s), "", true}), true;
    if (mode_ == Mode::merge_pair) {
      if (pair_count_ >= 2) return false;
      (pair_count_++ == 0 ? pair_.a : pair_.b) = std::move(s);
      return true;
    }
    return add(Json(std::move(s)));
  }
  bool binary(binary_t&) override { return false; }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return mode_ == Mode::dom || mode_ == Mode::vocab;
  }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::dom) return false;
    return stream_model_field("vocab", Mode::vocab, bpe_.streamed_vocab) || open(Json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) return mode_ = Mode::dom, true;
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_count_ = 0;
      return true;
    }
    if (mode_ != Mode::dom) return false;
    return stream_model_field("merges", Mode::merges, bpe_.streamed_merges) || open(Json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      if (pair_count_ != 2) return false;
      pair_.legacy = false;
      bpe_.merges.push_back(std::move(pair_));
      pair_ = BpeData::Merge{};
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) return mode_ = Mode::dom, true;
    return close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum class Mode { dom, vocab, merges, merge_pair };

  // True when the container about to open is model.<field> of the top-level object.
  bool at_model_field(const char* field) const {
    return stack_.size() == 2 && keys_[1] == "model" && stack_[1]->is_object() && key_ == field;
  }
  // At model.<field>, switches to `mode` (which streams it into bpe_, noted in `streamed`): true.
  bool stream_model_field(const char* field, Mode mode, bool& streamed) {
    if (!at_model_field(field)) return false;
    mode_ = mode;
    streamed = true;
    return true;
  }
  // Adds a value at the current position (under key_ in an object, appended in an array).
  Json* place(Json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json& parent = *stack_.back();
    if (parent.is_object()) {
      Json& slot = parent[key_];
      slot = std::move(v);
      return &slot;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }
  bool add(Json v) {
    if (mode_ != Mode::dom) return false;
    place(std::move(v));
    return true;
  }
  bool open(Json container) {
    std::string k = stack_.empty() || !stack_.back()->is_object() ? std::string() : key_;
    stack_.push_back(place(std::move(container)));
    keys_.push_back(std::move(k));
    return true;
  }
  bool close() {
    if (mode_ != Mode::dom || stack_.empty()) return false;
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  BpeData& bpe_;
  Mode mode_ = Mode::dom;
  std::vector<Json*> stack_;       // the open containers; pointers stay valid while they are open
  std::vector<std::string> keys_;  // the key each open container sits under ("" in arrays)
  std::string key_;
  BpeData::Merge pair_;
  int pair_count_ = 0;
};

}  // namespace

nlohmann::json tokenizer_json_parse(const std::string& path, const std::string& text, BpeData& bpe) {
  json_check_depth(text, path);
  {
    StreamingReader reader(bpe);
    if (Json::sax_parse(text, &reader)) return std::move(reader.root);
  }
  bpe = BpeData{};
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& err) {
    fail(path + ": not valid JSON (" + err.what() + ")");
  }
}

}  // namespace luatune
