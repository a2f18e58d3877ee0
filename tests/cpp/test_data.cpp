// The data module (host/data): each format's ids and loss mask, hand-checked on the tiny
// byte-level fixture tokenizer and, when the npm reference packages are installed, on the real
// Llama 3.1 tokenizer (the trained targets decode to exactly the answer and its end token);
// packing keeps every document's (ids, targets, positions) exactly as when it is alone; the seeded
// order, resume at a step, split, truncation and bad records with FILE:LINE.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "host/core/error.h"
#include "host/data/dataset.h"
#include "host/data/file_check.h"
#include "host/data/preference.h"
#include "host/data/preview.h"
#include "host/text/tokenizer.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
using json = nlohmann::ordered_json;

namespace {

// Fixture vocabulary (tests/fixtures/tokenizers/bytelevel): hello=11, " world"=16, "!"=18,
// "lll" = ll(9) l(2), <|bos|>=20 (added by the post-processor), EOS <|special|>=21; characters
// outside the vocabulary are dropped.
std::shared_ptr<Tokenizer> bytelevel() {
  static auto tok = Tokenizer::load("tests/fixtures/tokenizers/bytelevel");
  return tok;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

std::shared_ptr<Tokenizer> llama3_or_null() {
  static std::shared_ptr<Tokenizer> tok = [] {
    std::string dir = "tokenizers/llama3_1";
    return std::ifstream(dir + "/tokenizer.json") ? Tokenizer::load(dir) : nullptr;
  }();
  return tok;
}

DataOptions unpacked(int64_t max_length = 64) {
  DataOptions o;
  o.pack = false;
  o.max_length = max_length;
  o.chat = false;
  return o;
}

std::vector<int64_t> v(std::initializer_list<int64_t> x) {
  return x;
}
constexpr int64_t X = kIgnoreTarget;

// The decoded text of every trained target of a row, in order.
std::string trained_text(const Tokenizer& tok, const DataRow& r) {
  std::vector<int32_t> ids;
  for (int64_t t : r.targets)
    if (t != kIgnoreTarget) ids.push_back(static_cast<int32_t>(t));
  return tok.decode(ids);
}

// The decoded text of the tokens no target points at (the prompt side of a one-document row).
std::string masked_text(const Tokenizer& tok, const DataRow& r) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < r.ids.size(); i++)
    if (i == 0 || r.targets[i - 1] == kIgnoreTarget) ids.push_back(static_cast<int32_t>(r.ids[i]));
  return tok.decode(ids);
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// (ids, targets, positions) of each document of each row, in row order: a batch of one row has
// `tokens` real columns, split where the segment changes.
struct Doc {
  std::vector<int64_t> ids, targets, positions;
  bool operator==(const Doc& o) const {
    return ids == o.ids && targets == o.targets && positions == o.positions;
  }
};
std::vector<Doc> documents_of(const Dataset& ds) {
  std::vector<Doc> out;
  for (int64_t r = 0; r < ds.size(); r++) {
    Batch b = ds.batch({r});
    auto ids = b.ids.accessor<int64_t, 2>(), tg = b.targets.accessor<int64_t, 2>();
    auto pos = b.positions.accessor<int64_t, 2>(), seg = b.segments.accessor<int64_t, 2>();
    for (int64_t t = 0; t < b.tokens; t++) {
      if (t == 0 || seg[0][t] != seg[0][t - 1]) out.emplace_back();
      out.back().ids.push_back(ids[0][t]);
      out.back().targets.push_back(tg[0][t]);
      out.back().positions.push_back(pos[0][t]);
    }
  }
  return out;
}

std::vector<json> text_records(int n) {
  const char* texts[] = {"hello world", "hello", "hello world!", "lll", "hello hello world", "world!"};
  std::vector<json> out;
  for (int i = 0; i < n; i++) out.push_back({{"text", texts[i % 6]}});
  return out;
}

}  // namespace

// ============================================================================================
// Formats on the byte-level fixture, by hand

TEST(DataFormat, TextTrainsOnEveryTokenAndEos) {
  auto ds = Dataset::from_records({{{"text", "hello world"}}}, *bytelevel(), unpacked());
  EXPECT_EQ(ds->format(), DataFormat::text);
  DataRow r = ds->row(0);
  EXPECT_EQ(r.ids, v({20, 11, 16, 21}));
  EXPECT_EQ(r.targets, v({11, 16, 21, X}));  // BOS predicts hello, ..., EOS predicts nothing
  EXPECT_EQ(r.positions, v({0, 1, 2, 3}));
  EXPECT_EQ(r.segments, v({0, 0, 0, 0}));
  EXPECT_EQ(ds->stats().target_tokens, 3);
}

TEST(DataFormat, PromptResponseTrainsOnResponseAndEos) {
  DataOptions o = unpacked();
  auto ds = Dataset::from_jsonl("tests/fixtures/data/prompt_response.jsonl", *bytelevel(), o);
  EXPECT_EQ(ds->format(), DataFormat::prompt_response);
  ASSERT_EQ(ds->size(), 2);
  DataRow r = ds->row(0);  // "hello" + " world!"
  EXPECT_EQ(r.ids, v({20, 11, 16, 18, 21}));
  EXPECT_EQ(r.targets, v({X, 16, 18, 21, X}));
  r = ds->row(1);  // "hello world" + "!"
  EXPECT_EQ(r.ids, v({20, 11, 16, 18, 21}));
  EXPECT_EQ(r.targets, v({X, X, 18, 21, X}));

  o.train_on_prompt = true;
  ds = Dataset::from_jsonl("tests/fixtures/data/prompt_response.jsonl", *bytelevel(), o);
  EXPECT_EQ(ds->row(1).targets, v({11, 16, 18, 21, X}));
}

TEST(DataFormat, DetectedFromKeys) {
  const std::string w = "f.jsonl:1";
  EXPECT_EQ(data_format_detect({{"text", "a"}}, w), DataFormat::text);
  EXPECT_EQ(data_format_detect({{"text", "### Human: a### Assistant: b"}}, w), DataFormat::guanaco);
  EXPECT_EQ(data_format_detect({{"prompt", "a"}, {"response", "b"}}, w), DataFormat::prompt_response);
  EXPECT_EQ(data_format_detect({{"instruction", "a"}, {"input", ""}, {"output", "b"}}, w),
            DataFormat::alpaca);
  EXPECT_EQ(data_format_detect({{"messages", json::array()}}, w), DataFormat::chat);
  EXPECT_EQ(
      error_of([&] {
        data_format_detect({{"question", "a"}}, w);
      }),
      "f.jsonl:1: expected a JSON object with \"text\", \"prompt\"+\"response\", \"instruction\"+\"output\" "
      "or \"messages\" (the format is detected from the first record), got {\"question\":\"a\"}");
  EXPECT_EQ(error_of([] { data_format_parse("sharegpt"); }),
            "data: unknown format 'sharegpt'; expected one of text, prompt_response, alpaca, chat, guanaco");
}

TEST(DataFormat, AlpacaPromptIsTheAlpacaTemplate) {
  EXPECT_EQ(
      data_alpaca_prompt("Add.", "1 2"),
      "Below is an instruction that describes a task, paired with an input that provides further context. "
      "Write a response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n1 "
      "2\n\n### Response:\n");
  EXPECT_EQ(
      data_alpaca_prompt("Add.", ""),
      "Below is an instruction that describes a task. Write a response that appropriately completes the "
      "request.\n\n### Instruction:\nAdd.\n\n### Response:\n");
}

// ============================================================================================
// Formats on the real Llama 3.1 tokenizer: what is trained decodes to exactly the answer + EOS

TEST(DataFormatLlama3, EveryFormatTrainsOnExactlyTheAnswer) {
  auto tok = llama3_or_null();
  if (!tok) GTEST_SKIP() << "tests/reference/node/node_modules not installed";
  DataOptions plain = unpacked(4096), chat = unpacked(4096);
  chat.chat.reset();  // default: the tokenizer has a chat template (llama3.1)
  struct Case {
    json record;
    const DataOptions* options;
    std::string trained, masked;
  };
  std::string alpaca_prompt = data_alpaca_prompt("Name the capital.", "France");
  std::vector<Case> cases = {
      {{{"text", "The sky is blue."}}, &plain, "The sky is blue.<|eot_id|>", "<|begin_of_text|>"},
      {{{"prompt", "What is 2+2?\n"}, {"response", "4, of course."}},
       &plain,
       "4, of course.<|eot_id|>",
       "<|begin_of_text|>What is 2+2?\n"},
      {{{"instruction", "Name the capital."}, {"input", "France"}, {"output", "Paris."}},
       &plain,
       "Paris.<|eot_id|>",
       "<|begin_of_text|>" + alpaca_prompt},
      {{{"text", "### Human: Hi there ### Assistant: Hello, friend. ### Human: Bye ### Assistant: Goodbye!"}},
       &plain,
       " Hello, friend. Goodbye!<|eot_id|>",
       "<|begin_of_text|>### Human: Hi there ### Assistant: ### Human: Bye ### Assistant:"},
      {{{"prompt", "What is 2+2?"}, {"response", "4, of course."}}, &chat, "4, of course.<|eot_id|>", ""},
      {{{"instruction", "Name the capital."}, {"input", "France"}, {"output", "Paris."}},
       &chat,
       "Paris.<|eot_id|>",
       ""},
      {{{"messages",
         {{{"role", "system"}, {"content", "Be brief."}},
          {{"role", "user"}, {"content", "Hello"}},
          {{"role", "assistant"}, {"content", "Hi there!"}},
          {{"role", "user"}, {"content", "2+2?"}},
          {{"role", "assistant"}, {"content", "4"}}}}},
       &chat,
       "Hi there!<|eot_id|>4<|eot_id|>",
       ""},
      {{{"text", "### Human: Hi there ### Assistant: Hello, friend. ### Human: Bye ### Assistant: Goodbye!"}},
       &chat,
       "Hello, friend.<|eot_id|>Goodbye!<|eot_id|>",
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.record.dump());
    auto ds = Dataset::from_records({c.record}, *tok, *c.options);
    ASSERT_EQ(ds->size(), 1);
    DataRow r = ds->row(0);
    EXPECT_EQ(trained_text(*tok, r), c.trained);
    if (!c.masked.empty()) {
      EXPECT_EQ(masked_text(*tok, r), c.masked);
    }
    EXPECT_EQ(ds->chat() != nullptr, c.options == &chat);
    if (c.options == &chat) {
      // The conversation as the tokenizer's own chat template renders it, with exactly one BOS.
      EXPECT_EQ(r.ids[0], tok->token_to_id("<|begin_of_text|>"));
      EXPECT_NE(r.ids[1], tok->token_to_id("<|begin_of_text|>"));
      EXPECT_EQ(ds->chat()->tmpl->source(), tok->chat_template());
    }
  }
}

TEST(DataFormatLlama3, ChatRecordErrorsNameTheRecord) {
  auto tok = llama3_or_null();
  if (!tok) GTEST_SKIP() << "tests/reference/node/node_modules not installed";
  DataOptions o;
  std::vector<json> records = {
      {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}}},
      {{"messages", "oops"}}};
  EXPECT_EQ(error_of([&] { Dataset::from_records(records, *tok, o); }),
            "records[2]: expected a JSON object with \"messages\" (a list of {role, content}), got "
            "{\"messages\":\"oops\"}");
  records[1] = {{"messages", {{{"role", "user"}, {"text", "Hi"}}}}};
  EXPECT_EQ(
      error_of([&] { Dataset::from_records(records, *tok, o); }),
      "records[2]: expected messages[0] to be {\"role\": string, \"content\": string or list of parts}, got "
      "{\"role\":\"user\","
      "\"text\":\"Hi\"}");
}

TEST(DataFormat, ChatNeedsAChatTemplate) {
  // A tokenizer without a chat template: conversations need chat_template=, plain records do not.
  std::string dir = test_temp_dir("data_no_template", true);
  write_text(dir + "/tokenizer.json", read_file("tests/fixtures/tokenizers/bytelevel/tokenizer.json"));
  write_text(dir + "/tokenizer_config.json", R"({"bos_token": "<|bos|>", "eos_token": "<|special|>"})");
  auto bare = Tokenizer::load(dir);
  DataOptions o;
  std::string m = error_of([&] {
    Dataset::from_records({{{"messages", {{{"role", "user"}, {"content", "a"}}}}}}, *bare, o);
  });
  EXPECT_EQ(first_line(m),
            "data: chat records are rendered as conversations but " + dir + " has no chat_template");
  EXPECT_NE(
      m.find("HINT: set chat_template = FILE.jinja or one luatune ships (chatml, gemma, llama3, mistral)"),
      std::string::npos)
      << m;
  EXPECT_EQ(error_of([&] {
              Dataset::from_records({{{"prompt", "a"}, {"response", "b"}}}, *bare, o);
            }),
            "(no error)");  // plain records use the plain text template
  o.chat_template = "chatml2";
  EXPECT_EQ(error_of([&] {
              Dataset::from_records({{{"text", "a"}}}, *bare, o);
            }),
            "(no error)");  // never a chat
  m = error_of([&] { Dataset::from_records({{{"prompt", "a"}, {"response", "b"}}}, *bare, o); });
  EXPECT_EQ(m.rfind("chat_template: 'chatml2' is no file, no template of " + dir, 0), 0u) << m;
  EXPECT_NE(m.find("did you mean 'chatml'?"), std::string::npos) << m;
  // A shipped template by name: ChatML, its {% generation %} blocks giving the mask.
  o.chat_template = "chatml";
  auto ds = Dataset::from_records({{{"prompt", "a"}, {"response", "b"}}}, *bare, o);
  EXPECT_EQ(ds->chat()->tmpl->origin(), std::string(LUATUNE_SOURCE_DIR) + "/templates/chat/chatml.jinja");
}

// ============================================================================================
// Truncation, empty records, bad records

TEST(DataLoad, TruncationKeepsTheStartAndEmptyRecordsAreDropped) {
  DataOptions o = unpacked(3);
  std::vector<json> records = {{{"text", "hello world!"}}, {{"text", "hello"}}};  // 5 tokens -> 3; 3 tokens
  auto ds = Dataset::from_records(records, *bytelevel(), o);
  EXPECT_EQ(ds->row(0).ids, v({20, 11, 16}));
  EXPECT_EQ(ds->row(0).targets, v({11, 16, X}));
  EXPECT_EQ(ds->row(1).ids, v({20, 11, 21}));
  EXPECT_EQ(ds->stats().truncated, 1);

  o.format = DataFormat::prompt_response;  // the response is cut away entirely: nothing to learn
  ds = Dataset::from_records(
      {{{"prompt", "hello world"}, {"response", "!"}}, {{"prompt", ""}, {"response", "hello"}}}, *bytelevel(),
      o);
  EXPECT_EQ(ds->stats().records, 1);
  EXPECT_EQ(ds->stats().dropped_empty, 1);
  EXPECT_EQ(ds->row(0).ids, v({20, 11, 21}));
}

TEST(DataLoad, BadRecordsFailWithFileAndLine) {
  DataOptions o = unpacked();
  const std::string path = "tests/fixtures/data/bad_text.jsonl";
  EXPECT_EQ(error_of([&] { Dataset::from_jsonl(path, *bytelevel(), o); }),
            path + ":3: expected a JSON object with \"text\" (a string), got {\"txt\":\"hello\"}");
  o.skip_bad = true;  // line 3 (wrong key) and line 4 (not JSON) skipped; line 2 is blank
  auto ds = Dataset::from_jsonl(path, *bytelevel(), o);
  EXPECT_EQ(ds->stats().skipped_bad, 2);
  EXPECT_EQ(ds->stats().records, 2);
  EXPECT_EQ(ds->document_origin(0), 1);
  EXPECT_EQ(ds->document_origin(1), 5);
  o.skip_bad = false;
  o.format = DataFormat::text;
  std::string p2 = write_temp("not_json.jsonl", "{\"text\": \"hello\"}\nhello world\n");
  EXPECT_EQ(
      error_of([&] { Dataset::from_jsonl(p2, *bytelevel(), o); }),
      p2 + ":2: expected a JSON object, got 'hello world' (not valid JSON at column 1: syntax error while "
           "parsing value - invalid literal; last read: 'h')");
  EXPECT_EQ(error_of([&] { Dataset::from_jsonl("no/such.jsonl", *bytelevel(), o); }),
            "data: cannot open 'no/such.jsonl'");
  // Invalid UTF-8 is a bad record too, named by its byte; skip_bad counts it.
  std::string p3 = write_temp("latin1.jsonl", "{\"text\": \"caf\xE9\"}\n{\"text\": \"ok\"}");
  EXPECT_EQ(error_of([&] { Dataset::from_jsonl(p3, *bytelevel(), o); }),
            p3 + ":1: invalid UTF-8 at byte 14 (JSONL is UTF-8 text)");
  o.skip_bad = true;
  auto ds3 = Dataset::from_jsonl(p3, *bytelevel(), o);
  EXPECT_EQ(ds3->stats().skipped_bad, 1);
  EXPECT_EQ(ds3->document_origin(0), 2);  // the last line, without its '\n'
  o.skip_bad = false;
}

// The record sources behind from_records and from_jsonl (datasets and preference pairs alike).
TEST(DataLoad, RecordReadersNameEachRecord) {
  const std::vector<json> records = {{{"text", "a"}}, {{"text", "b"}}};
  json r;
  int64_t origin = 0;
  std::string where, error = "stale";
  DataRecordReader next = data_records_reader(records);
  ASSERT_TRUE(next(r, origin, where, error));
  EXPECT_EQ(r, records[0]);
  EXPECT_EQ(origin, 1);
  EXPECT_EQ(where, "records[1]");
  EXPECT_EQ(error, "");
  ASSERT_TRUE(next(r, origin, where, error));
  EXPECT_EQ(origin, 2);
  EXPECT_EQ(where, "records[2]");
  EXPECT_FALSE(next(r, origin, where, error));

  // A JSONL file: blank lines skipped, a bad line is a record with its error (and a null value).
  const std::string path = write_temp("readers.jsonl", "{\"text\": \"a\"}\n\n[1]\nnot json\n");
  std::vector<std::string> seen;
  data_jsonl_read(path, "data", "tokens", [&](const DataRecordReader& in) {
    while (in(r, origin, where, error))
      seen.push_back(std::to_string(origin) + " " + where + " " + r.dump() + " " +
                     error.substr(0, error.find(',')));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"1 " + path + ":1 {\"text\":\"a\"} ",
                                            "3 " + path + ":3 [1] ",  // JSON: the build decides
                                            "4 " + path + ":4 null " + path + ":4: expected a JSON object"}));

  EXPECT_EQ(
      error_of([] { data_jsonl_read("no/such.jsonl", "data.preferences", "pairs", [](const auto&) {}); }),
      "data.preferences: cannot open 'no/such.jsonl'");
  // Out of memory while building names the line reached; other errors pass unchanged.
  EXPECT_EQ(error_of([&] {
              data_jsonl_read(path, "data", "tokens", [&](const DataRecordReader& in) {
                in(r, origin, where, error);
                in(r, origin, where, error);
                throw std::bad_alloc();
              });
            }),
            "data: " + path + ":3: holding the tokens read so far: out of memory (std::bad_alloc)");
  EXPECT_EQ(
      error_of([&] { data_jsonl_read(path, "data", "tokens", [](const auto&) { fail("data: mine"); }); }),
      "data: mine");
}

TEST(DataLoad, MaxRecordsReadsTheFirstOnes) {
  DataOptions o = unpacked();
  o.max_records = 1;
  auto ds = Dataset::from_jsonl("tests/fixtures/data/prompt_response.jsonl", *bytelevel(), o);
  EXPECT_EQ(ds->stats().records, 1);
  EXPECT_EQ(ds->row(0).targets, v({X, 16, 18, 21, X}));
}

// ============================================================================================
// Packing

TEST(DataPack, RowsOfMaxLengthWithWholeDocuments) {
  DataOptions o = unpacked(8);
  o.pack = true;
  // lengths 4 ("hello world"), 3 ("hello"), 5 ("hello world!"): rows [4+3 | 5]
  auto ds = Dataset::from_records(text_records(3), *bytelevel(), o);
  ASSERT_EQ(ds->size(), 2);
  DataRow r = ds->row(0);
  EXPECT_EQ(r.ids, v({20, 11, 16, 21, 20, 11, 21, 0}));
  EXPECT_EQ(r.targets, v({11, 16, 21, X, 11, 21, X, X}));  // no target across the boundary
  EXPECT_EQ(r.positions, v({0, 1, 2, 3, 0, 1, 2, 0}));
  EXPECT_EQ(r.segments, v({0, 0, 0, 0, 1, 1, 1, 2}));  // padding is its own segment
  r = ds->row(1);
  EXPECT_EQ(r.segments, v({0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(ds->stats().rows, 2);
  EXPECT_EQ(ds->stats().tokens, 12);
}

// The key property: every document has the same (ids, targets, positions) packed, alone, and
// padded in a batch, so with segment-masked attention its loss is the same.
TEST(DataPack, DocumentsAreIdenticalPackedAloneAndPadded) {
  DataOptions o = unpacked(12);
  auto alone = Dataset::from_records(text_records(40), *bytelevel(), o);
  o.pack = true;
  auto packed = Dataset::from_records(text_records(40), *bytelevel(), o);
  EXPECT_LT(packed->size(), alone->size());
  std::vector<Doc> a = documents_of(*alone), p = documents_of(*packed);
  ASSERT_EQ(a.size(), 40u);
  EXPECT_TRUE(a == p);

  // Padded: a batch of all unpacked rows; each row's real columns are its document.
  std::vector<int64_t> all(alone->size());
  for (size_t i = 0; i < all.size(); i++) all[i] = static_cast<int64_t>(i);
  Batch b = alone->batch(all);
  EXPECT_EQ(b.ids.size(1), 6);  // the longest document ("hello hello world" + BOS/EOS)
  for (int64_t i = 0; i < b.ids.size(0); i++) {
    int64_t n = static_cast<int64_t>(a[i].ids.size());
    EXPECT_EQ(std::vector<int64_t>(b.targets[i].data_ptr<int64_t>(), b.targets[i].data_ptr<int64_t>() + n),
              a[i].targets);
    for (int64_t t = n; t < b.ids.size(1); t++) {
      EXPECT_EQ(b.targets[i][t].item<int64_t>(), kIgnoreTarget);
      EXPECT_EQ(b.segments[i][t].item<int64_t>(), 1);
    }
  }
  EXPECT_EQ(b.target_tokens, alone->stats().target_tokens);
  std::vector<int64_t> all_packed(packed->size());
  for (size_t i = 0; i < all_packed.size(); i++) all_packed[i] = static_cast<int64_t>(i);
  Batch pb = packed->batch(all_packed);
  EXPECT_EQ(pb.ids.size(1), 12);
  EXPECT_EQ(b.target_tokens, pb.target_tokens);
  EXPECT_EQ(b.tokens, pb.tokens);
}

// ============================================================================================
// Order: seeded epochs, resume, split

TEST(DataOrder, PermutationIsSeededAndComplete) {
  std::vector<int64_t> p = data_permutation(100, 7);
  EXPECT_EQ(p, data_permutation(100, 7));
  EXPECT_NE(p, data_permutation(100, 8));
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; i++) EXPECT_EQ(sorted[i], i);
}

TEST(DataOrder, EpochsCoverEveryRowOnceAndResumeMatchesAStraightRun) {
  DataOptions o = unpacked();
  o.seed = 3;
  auto ds = Dataset::from_records(text_records(10), *bytelevel(), o);
  // steps of 4 rows: steps 1-2 and half of 3 are epoch 0; the rest of 3, 4, 5 epoch 1
  std::vector<int64_t> seen;
  for (int64_t s = 1; s <= 5; s++)
    for (int64_t r : ds->step_rows(s, 4, true, true)) seen.push_back(r);
  std::set<int64_t> e0(seen.begin(), seen.begin() + 10), e1(seen.begin() + 10, seen.end());
  EXPECT_EQ(e0.size(), 10u);
  EXPECT_EQ(e1.size(), 10u);
  EXPECT_NE(std::vector<int64_t>(seen.begin(), seen.begin() + 10),
            std::vector<int64_t>(seen.begin() + 10, seen.end()));
  EXPECT_EQ(std::vector<int64_t>(seen.begin(), seen.begin() + 10), data_permutation(10, 3));
  EXPECT_EQ(std::vector<int64_t>(seen.begin() + 10, seen.end()), data_permutation(10, 4));

  // A fresh dataset (as after a restart) gives the same batches from step 4 as the straight run.
  auto again = Dataset::from_records(text_records(10), *bytelevel(), o);
  for (int64_t s = 4; s <= 5; s++) {
    Batch a = ds->batch(ds->step_rows(s, 4, true, true)),
          b = again->batch(again->step_rows(s, 4, true, true));
    EXPECT_TRUE(at::equal(a.ids, b.ids) && at::equal(a.targets, b.targets) &&
                at::equal(a.positions, b.positions) && at::equal(a.segments, b.segments));
  }
  // One pass without cycling ends with a short batch; without shuffle rows come in order.
  EXPECT_EQ(ds->step_rows(3, 4, false, false), v({8, 9}));
  EXPECT_TRUE(ds->step_rows(4, 4, false, false).empty());
}

// Data parallel: the slice each rank of a step takes (Dataset::shard_rows, PreferenceDataset::shard_pairs).
TEST(DataOrder, ShardGivesEachRankAContiguousSlice) {
  int64_t asked = 0;
  auto draw = [&](int64_t n) {
    asked = n;
    std::vector<int64_t> items;
    for (int64_t i = 0; i < n; i++) items.push_back(100 + i);
    return items;
  };
  EXPECT_EQ(data_shard(2, true, 1, 3, draw), v({102, 103}));
  EXPECT_EQ(asked, 6);  // size * world
  // A short last step of 5 items over 3 ranks: slices of 2, 2 and 1; of 1 item: the others get none.
  auto five = [](int64_t) { return v({10, 11, 12, 13, 14}); };
  EXPECT_EQ(data_shard(2, false, 0, 3, five), v({10, 11}));
  EXPECT_EQ(data_shard(2, false, 1, 3, five), v({12, 13}));
  EXPECT_EQ(data_shard(2, false, 2, 3, five), v({14}));
  EXPECT_EQ(data_shard(4, false, 2, 3, [](int64_t) { return v({7}); }), v({}));
  asked = 0;
  EXPECT_EQ(error_of([&] { data_shard(2, true, 3, 3, draw); }), "data: rank 3 outside [0, 3)");
  EXPECT_EQ(asked, 0);  // checked before drawing
}

TEST(DataOrder, SplitIsSeededDisjointAndByRecord) {
  DataOptions o = unpacked(16);
  o.pack = true;
  auto ds = Dataset::from_records(text_records(50), *bytelevel(), o);
  auto [train, val] = ds->split(0.8);
  auto [train2, val2] = ds->split(0.8);
  EXPECT_EQ(train->stats().records, 40);
  EXPECT_EQ(val->stats().records, 10);
  std::set<int64_t> a, b;
  for (int64_t d = 0; d < train->documents(); d++) a.insert(train->document_origin(d));
  for (int64_t d = 0; d < val->documents(); d++) b.insert(val->document_origin(d));
  for (int64_t x : b) EXPECT_EQ(a.count(x), 0u);
  EXPECT_EQ(a.size() + b.size(), 50u);
  for (int64_t d = 0; d < val->documents(); d++) EXPECT_EQ(val->document_origin(d), val2->document_origin(d));
  EXPECT_EQ(train->size(), train2->size());
  // Packed per part: the parts' documents are the same documents as in the whole.
  EXPECT_EQ(train->stats().tokens + val->stats().tokens, ds->stats().tokens);
  o.seed = 1;
  auto other = Dataset::from_records(text_records(50), *bytelevel(), o)->split(0.8).second;
  std::set<int64_t> c;
  for (int64_t d = 0; d < other->documents(); d++) c.insert(other->document_origin(d));
  EXPECT_NE(b, c);
}

// The held-out split decided before a run starts: when eval_fraction holds out none of the records,
// the warning run.sets and `runner validate` print says so and names an eval_fraction that holds one out.
TEST(DataSplit, EvalSplitWarningWhenNothingIsHeldOut) {
  EXPECT_EQ(
      data_eval_split_warning(16, 0.02),
      "data: eval_fraction = 0.02 holds out none of the 16 records (16 x 0.02 = 0.32 rounds to 0), so "
      "this run trains without evaluation; hint: eval_fraction = 0.063 holds out 1 of them (eval_fraction "
      "= 0: no evaluation, no warning)");
  EXPECT_EQ(data_eval_split_warning(16, 0.063), "");
  EXPECT_EQ(data_eval_split_warning(16, 0), "");    // no evaluation asked for
  EXPECT_EQ(data_eval_split_warning(0, 0.02), "");  // no data: not this warning's to say
  EXPECT_EQ(
      data_eval_split_warning(1, 0.3, "pairs"),
      "data: eval_fraction = 0.3 holds out none of the 1 pairs (1 x 0.3 = 0.3 rounds to 0), so this run "
      "trains without evaluation; hint: give more data (1 pair cannot be both trained on and held out) "
      "(eval_fraction = 0: no evaluation, no warning)");
  // The warning comes exactly when Dataset::split holds nothing out, and its hint holds out one.
  DataOptions o = unpacked(16);
  for (int n : {1, 2, 3, 7, 16, 24, 49, 60}) {
    auto ds = Dataset::from_records(text_records(n), *bytelevel(), o);
    for (double f : {0.01, 0.02, 0.05, 0.1, 0.3}) {
      const std::string w = data_eval_split_warning(n, f);
      EXPECT_EQ(w.empty(), ds->split(1 - f).second->stats().records > 0) << n << " records, " << f;
    }
  }
  for (int64_t n = 2; n <= 5000; n += 7) {
    const std::string w = data_eval_split_warning(n, 1e-4);
    const std::string key = "hint: eval_fraction = ";
    ASSERT_NE(w.find(key), std::string::npos) << w;
    const double suggest = std::stod(w.substr(w.find(key) + key.size()));
    EXPECT_EQ(n - data_split_train_count(n, 1 - suggest), 1) << w;
  }
}

// What `runner validate` reads of a data file says what loading it would say, line by line.
TEST(DataCheck, FileProblemsAreWhatLoadingSays) {
  const std::string bad = "tests/fixtures/data/bad_text.jsonl";  // line 3 a wrong key, line 4 not JSON
  DataFileCheck c = data_check_file(bad, DataFileKind::records);
  EXPECT_EQ(c.records, 4);  // blank line 2 is no record
  EXPECT_EQ(c.bad, 2);
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_EQ(c.problems[0], error_of([&] { Dataset::from_jsonl(bad, *bytelevel(), unpacked()); }));
  EXPECT_EQ(c.problems[1], bad +
                               ":4: expected a JSON object, got 'hello world' (not valid JSON at column 1: "
                               "syntax error while parsing value - invalid literal; last read: 'h')");
  c = data_check_file(bad, DataFileKind::records, std::nullopt, /*max_problems=*/1);
  EXPECT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.bad, 2);

  // Line 8 of a prompt/response file: not JSON, then of another format; the rest is fine.
  auto with_line8 = [](const std::string& line8) {
    std::string lines;
    for (int i = 1; i <= 10; i++)
      lines += i == 8 ? line8 + "\n" : "{\"prompt\": \"hello\", \"response\": \" world\"}\n";
    return lines;
  };
  const std::string p = write_temp("line8.jsonl", with_line8("{\"prompt\": \"hello\", \"response\": \"!\""));
  c = data_check_file(p, DataFileKind::records);
  EXPECT_EQ(c.format.value_or(DataFormat::text), DataFormat::prompt_response);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0], error_of([&] { Dataset::from_jsonl(p, *bytelevel(), unpacked()); }));
  EXPECT_EQ(c.problems[0].rfind(p + ":8: expected a JSON object, got '", 0), 0u) << c.problems[0];
  const std::string q = write_temp("line8_format.jsonl", with_line8("{\"text\": \"hello\"}"));
  c = data_check_file(q, DataFileKind::records);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0], error_of([&] { Dataset::from_jsonl(q, *bytelevel(), unpacked()); }));
  EXPECT_EQ(c.problems[0], q + ":8: expected a JSON object with \"prompt\" and \"response\" (strings), got "
                               "{\"text\":\"hello\"}");
  // A format given (a recipe's format key) is checked from the first line; a good file has no problems.
  EXPECT_EQ(data_check_file(q, DataFileKind::records, DataFormat::text).bad, 9);
  c = data_check_file("tests/fixtures/data/text_small.jsonl", DataFileKind::records);
  EXPECT_EQ(c.records, 60);
  EXPECT_TRUE(c.problems.empty()) << c.problems[0];
  EXPECT_EQ(error_of([] { data_check_file("no/such.jsonl", DataFileKind::records); }),
            "cannot open 'no/such.jsonl': No such file or directory");

  // Pairs: the shapes preference loading takes, without a tokenizer.
  const std::string pairs = write_temp("pairs.jsonl",
                                       "{\"prompt\": \"q\", \"chosen\": \"a\", \"rejected\": \"b\"}\n"
                                       "{\"chosen\": [{\"role\": \"user\", \"content\": \"q\"}], "
                                       "\"rejected\": [{\"role\": \"user\", \"content\": \"q\"}]}\n"
                                       "{\"prompt\": \"q\", \"chosen\": \"a\"}\n"
                                       "{\"chosen\": \"a\", \"rejected\": \"b\"}\n");
  c = data_check_file(pairs, DataFileKind::pairs);
  EXPECT_EQ(c.records, 4);
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_EQ(c.problems[0],
            pairs +
                ":3: expected a JSON object with \"chosen\" and \"rejected\" (strings with a "
                "\"prompt\" string, or message lists), got {\"prompt\":\"q\",\"chosen\":\"a\"}");
  EXPECT_EQ(c.problems[1].rfind(pairs + ":4: expected a \"prompt\" (string or message list)", 0), 0u)
      << c.problems[1];
  // Any JSON object a line (prompts).
  EXPECT_EQ(
      data_check_file(write_temp("objects.jsonl", "{}\n[1]\n"), DataFileKind::objects).problems,
      std::vector<std::string>{::testing::TempDir() + "objects.jsonl:2: expected a JSON object, got [1]"});
}

TEST(DataPreview, MasksInBrackets) {
  auto ds = Dataset::from_jsonl("tests/fixtures/data/prompt_response.jsonl", *bytelevel(), unpacked());
  EXPECT_EQ(
      data_preview(*ds, *bytelevel(), "pr.jsonl", false),
      "pr.jsonl: format prompt_response (plain text template), max_length 64; [bracketed] tokens are masked "
      "(no loss on them)\n"
      "line 1: 5 tokens, 3 targets\n"
      "  text: [<|bos|>hello] world!<|special|>\n"
      "  ids:  [20 11] 16 18 21\n"
      "line 2: 5 tokens, 2 targets\n"
      "  text: [<|bos|>hello world]!<|special|>\n"
      "  ids:  [20 11 16] 18 21\n"
      "records 2, skipped_bad 0, dropped_empty 0, tokens 10, target_tokens 5, truncated 0\n");
}
