// Limits on what luatune reads (docs/limits.md): JSON nested deeper than 128 levels is refused by
// every reader with FILE:LINE (a dump of 100000 levels used to overflow the stack), quoted values
// stay bounded, config.json sizes are checked against sane limits and the weights before anything
// is sized from them, models.init refuses what memory cannot hold, and a failed allocation names
// what it was for.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <new>

#include "host/adapt/peft.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/data/dataset.h"
#include "host/data/format.h"
#include "host/data/preference.h"
#include "host/hw/catalog.h"
#include "host/io/safetensors.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/text/tokenizer.h"
#include "host/train/eval.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string nested(size_t depth, const std::string& inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("limits_" + name, /*create=*/true);
}

std::shared_ptr<Tokenizer> bytelevel() {
  static auto tok = Tokenizer::load("tests/fixtures/tokenizers/bytelevel");
  return tok;
}

const std::string kTooDeep =
    ": JSON nested deeper than 128 levels (luatune's limit for JSON input; see docs/limits.md)";

// A tiny Llama saved as a HF directory, to spoil its config.json.
std::string tiny_model_dir(const std::string& name) {
  std::string dir = temp_dir(name);
  ModelConfig c = model_config_with("llama", R"({"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 2})",
                                    "test");
  model_save(*model_init(c, 1, at::kFloat, at::kCPU), dir);
  return dir;
}

void set_config_field(const std::string& dir, const std::string& key, const std::string& raw_value) {
  json j = json::parse(file_read(dir + "/config.json"));
  std::string text = j.dump(2);
  std::string needle = "\"" + key + "\": " + j[key].dump();
  size_t at = text.find(needle);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, needle.size(), "\"" + key + "\": " + raw_value);
  write_text(dir + "/config.json", text);
}

}  // namespace

// ============================================================================================
// The shared helper

TEST(JsonLimits, DepthScanCountsBracketsOutsideStrings) {
  EXPECT_EQ(json_too_deep_line(nested(128, "1")), 0);
  EXPECT_EQ(json_too_deep_line(nested(129, "1")), 1);
  EXPECT_EQ(json_too_deep_line("{\"a\": [\n1,\n" + nested(200) + "]}"), 3);
  EXPECT_EQ(json_too_deep_line("x\ny\n" + nested(200), 41), 43);  // counted from first_line
  // Brackets inside strings, escaped quotes included, are text.
  EXPECT_EQ(json_too_deep_line("[\"" + std::string(500, '[') + "\"]"), 0);
  EXPECT_EQ(json_too_deep_line("[\"\\\"" + std::string(500, '{') + "\"]"), 0);
  EXPECT_EQ(json_too_deep_line("[\"\\\\\", " + nested(200) + "]"), 1);  // an escaped backslash ends no string
}

TEST(JsonLimits, ParseCheckedMessages) {
  EXPECT_EQ(error_of([] { json_parse_checked("{\n\"a\":\n" + nested(100000) + "}", "f.json"); }),
            "f.json:3" + kTooDeep);
  EXPECT_EQ(error_of([] { ojson_parse_checked(nested(129), "g.json"); }), "g.json:1" + kTooDeep);
  EXPECT_EQ(error_of([] {
              json_parse_checked("{\"a\": ", "h.json");
            }).rfind("h.json: not valid JSON ([json.exception", 0),
            0u);
  EXPECT_EQ(json_parse_checked(nested(128, "7"), "ok.json").dump(), nested(128, "7"));
  EXPECT_TRUE(json_parse_or_discard(nested(100000)).is_discarded());
  EXPECT_TRUE(ojson_parse_or_discard("{").is_discarded());
  EXPECT_EQ(json_parse_or_discard("{\"a\": [1]}").dump(), "{\"a\":[1]}");
}

TEST(JsonLimits, ExcerptIsDumpCutShortAndBoundedOnAnyValue) {
  json small = json::parse(R"({"b": [1, 2.5, "x\"y"], "a": {"k": null, "t": true}, "u": "h\u00e9"})");
  EXPECT_EQ(json_excerpt(small, 1000), small.dump());
  const std::string full = small.dump();
  for (size_t limit : {0, 1, 5, 20, 30}) {
    std::string e = json_excerpt(small, limit);
    ASSERT_TRUE(e.size() >= 3 && e.compare(e.size() - 3, 3, "...") == 0) << e;
    EXPECT_EQ(full.compare(0, e.size() - 3, e, 0, e.size() - 3), 0) << e;
  }
  // 200000 levels built in memory (no parser involved): dump() would overflow the stack here.
  json deep = 1;
  for (int i = 0; i < 200000; i++) deep = json::array({std::move(deep)});
  EXPECT_EQ(json_excerpt(deep, 10), "[[[[[[[[[[...");
  nlohmann::ordered_json record = 1;  // data records keep their keys' order
  for (int i = 0; i < 200000; i++) record = nlohmann::ordered_json::array({std::move(record)});
  EXPECT_EQ(data_record_excerpt(record, 10), "[[[[[[[[[[...");
}

TEST(JsonLimits, OutOfMemoryIsRethrownNamingTheAllocation) {
  auto as = [](auto thrown) {
    return error_of([&] {
      try {
        throw thrown;
      } catch (...) {
        rethrow_out_of_memory("models.init: allocating w");
      }
    });
  };
  EXPECT_EQ(as(std::bad_alloc()), "models.init: allocating w: out of memory (std::bad_alloc)");
  EXPECT_EQ(as(c10::Error(
                c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: "
                "you tried to allocate 80 bytes.")),
            "models.init: allocating w: out of memory (DefaultCPUAllocator: can't allocate memory: you tried "
            "to allocate "
            "80 bytes.)");
  EXPECT_EQ(as(Error("shape mismatch")), "shape mismatch");  // anything else passes through unchanged
  EXPECT_THROW(
      {
        try {
          throw std::runtime_error("x");
        } catch (...) {
          rethrow_out_of_memory("y");
        }
      },
      std::runtime_error);
}

// ============================================================================================
// Every reader of outside JSON

TEST(JsonLimits, DatasetLinesTooDeepAreBadRecords) {
  std::string dir = temp_dir("data");
  write_text(dir + "/d.jsonl", "{\"text\": \"hello\"}\n{\"text\": " + nested(100000) + "}\n");
  DataOptions o;
  EXPECT_EQ(error_of([&] { Dataset::from_jsonl(dir + "/d.jsonl", *bytelevel(), o); }),
            dir + "/d.jsonl:2" + kTooDeep);
  o.skip_bad = true;
  auto ds = Dataset::from_jsonl(dir + "/d.jsonl", *bytelevel(), o);
  EXPECT_EQ(ds->stats().records, 1);
  EXPECT_EQ(ds->stats().skipped_bad, 1);
  // The first record decides the format; one 100000 deep is quoted in no message.
  write_text(dir + "/e.jsonl", nested(100000) + "\n");
  EXPECT_EQ(error_of([&] { Dataset::from_jsonl(dir + "/e.jsonl", *bytelevel(), DataOptions{}); }),
            dir + "/e.jsonl:1" + kTooDeep);
  fs::remove_all(dir);
}

TEST(JsonLimits, PreferenceLinesTooDeepAreBadRecords) {
  std::string dir = temp_dir("pref");
  write_text(dir + "/p.jsonl",
             "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n\n{\"prompt\": " + nested(100000) +
                 ", \"chosen\": \"b\", \"rejected\": \"c\"}\n");
  DataOptions o;
  o.chat = false;
  EXPECT_EQ(error_of([&] { PreferenceDataset::from_jsonl(dir + "/p.jsonl", *bytelevel(), o); }),
            dir + "/p.jsonl:3" + kTooDeep);
  o.skip_bad = true;
  EXPECT_EQ(PreferenceDataset::from_jsonl(dir + "/p.jsonl", *bytelevel(), o)->stats().skipped_bad, 1);
  fs::remove_all(dir);
}

TEST(JsonLimits, ModelConfigTooDeep) {
  std::string text =
      "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"extra\": " + nested(100000) + "\n}";
  EXPECT_EQ(error_of([&] { model_config_parse(text, "m/config.json"); }), "m/config.json:3" + kTooDeep);
}

TEST(JsonLimits, TokenizerFilesTooDeep) {
  std::string dir = temp_dir("tok");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    fs::copy_file(std::string("tests/fixtures/tokenizers/bytelevel/") + f, dir + "/" + f);
  const std::string config = file_read(dir + "/tokenizer_config.json");
  write_text(dir + "/tokenizer_config.json", "{\"deep\": " + nested(100000) + ", " + config.substr(1));
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }), dir + "/tokenizer_config.json:1" + kTooDeep);
  write_text(dir + "/tokenizer_config.json", config);
  const std::string tok = file_read(dir + "/tokenizer.json");
  write_text(dir + "/tokenizer.json", "{\n\"deep\": " + nested(100000) + ", " + tok.substr(1));
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }), dir + "/tokenizer.json:2" + kTooDeep);
  fs::remove_all(dir);
}

TEST(JsonLimits, SafetensorsHeaderAndIndexTooDeep) {
  std::string dir = temp_dir("st");
  std::string header = "{\"__metadata__\": {\"x\": " + nested(100000) + "}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; i++) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_text(dir + "/model.safetensors", bytes + header);
  std::string e = error_of([&] { SafetensorsReader r(dir); });
  EXPECT_NE(e.find("the header nests JSON deeper than 128 levels (not a safetensors file?)"),
            std::string::npos)
      << e;
  fs::remove(dir + "/model.safetensors");
  write_text(dir + "/model.safetensors.index.json",
             "{\"weight_map\": {},\n\"metadata\": " + nested(100000) + "}");
  e = error_of([&] { SafetensorsReader r(dir); });
  EXPECT_NE(e.find("model.safetensors.index.json': line 2: JSON nested deeper than 128 levels"),
            std::string::npos)
      << e;
  fs::remove_all(dir);
}

TEST(JsonLimits, AdapterConfigCatalogAndEvalFilesTooDeep) {
  std::string dir = temp_dir("misc");
  write_text(dir + "/adapter_config.json", "{\"peft_type\": \"LORA\", \"x\": " + nested(100000) + "}");
  EXPECT_EQ(error_of([&] { peft_config_read(dir); }), dir + "/adapter_config.json:1" + kTooDeep);
  EXPECT_EQ(error_of([&] { hw_catalog_parse("{\"gpus\": " + nested(100000) + "}", "c.json"); }),
            "hw.catalog: c.json:1" + kTooDeep);
  write_text(dir + "/mc.jsonl",
             "{\"question\": \"q\", \"choices\": [\"a\", \"b\"], \"answer\": 0}\n" + nested(100000) + "\n");
  EXPECT_EQ(error_of([&] { mc_read_jsonl(dir + "/mc.jsonl"); }), dir + "/mc.jsonl:2" + kTooDeep);
  fs::remove_all(dir);
}

// ============================================================================================
// Sizes

TEST(ModelLimits, ConfigSizesBeyondAnyModelFailBeforeAllocating) {
  auto with = [](const std::string& fields) {
    return error_of([&] { model_config_with("llama", fields, "models.init"); });
  };
  EXPECT_EQ(
      with(R"({"num_hidden_layers": 1000000})"),
      "models.init: num_hidden_layers is 1000000, more than luatune's limit of 1024 (Llama 3.1 405B has 126; "
      "docs/limits.md)");
  EXPECT_EQ(
      with(R"({"vocab_size": 100000000})"),
      "models.init: vocab_size is 100000000, more than luatune's limit of 16777216 (Gemma 3 has 262144; "
      "docs/limits.md)");
  EXPECT_EQ(with(R"({"num_hidden_layers": 1e300})"),
            "models.init: field \"num_hidden_layers\" must be an integer between -2^53 and 2^53, got 1e+300");
  EXPECT_EQ(with(R"({"hidden_size": 18446744073709551615})"),
            "models.init: field \"hidden_size\" must be an integer between -2^53 and 2^53, got "
            "18446744073709551615");
  EXPECT_EQ(with(R"({"hidden_size": 2.5})"),
            "models.init: field \"hidden_size\" must be an integer, got 2.5");
}

TEST(ModelLimits, LayerCountMustMatchTheWeights) {
  std::string dir = tiny_model_dir("layers");
  set_config_field(dir, "num_hidden_layers", "3");
  EXPECT_EQ(error_of([&] { model_load(dir, LoadOptions{}); }),
            dir + "/config.json: num_hidden_layers is 3, but the weights in " + dir +
                " have 2 layers (model.layers.0 to model.layers.1)");
  set_config_field(dir, "num_hidden_layers", "1000000000");
  EXPECT_EQ(
      error_of([&] { model_load(dir, LoadOptions{}); }),
      dir +
          "/config.json: num_hidden_layers is 1000000000, more than luatune's limit of 1024 (Llama 3.1 405B "
          "has 126; docs/limits.md)");
  set_config_field(dir, "num_hidden_layers", "2");
  EXPECT_EQ(model_load(dir, LoadOptions{})->layers.size(), 2u);
  fs::remove_all(dir);
}

TEST(ModelLimits, InitRefusesWhatMemoryCannotHold) {
  // Within every per-field limit, but 1.8 PiB of float32 weights.
  ModelConfig c = model_config_with("llama", R"({"vocab_size": 1024, "hidden_size": 131072,
      "intermediate_size": 1048576, "num_hidden_layers": 1024, "num_attention_heads": 1024})",
                                    "models.init");
  std::string e = error_of([&] { model_init(c, 0, at::kFloat, at::kCPU); });
  EXPECT_EQ(
      e.rfind("models.init: a llama of these sizes (1024 layers, hidden_size 131072, vocab_size 1024) needs "
              "1.8 PiB for its 492581746245632 parameters as float32, more than this machine's ",
              0),
      0u)
      << e;
}

TEST(DataLimits, BatchSizeBeyondTheDataAndAnySensibleBatch) {
  EXPECT_EQ(
      error_of([] { data_check_batch_size(4e18, 1, 1000, "rows"); }),
      "data: batches: option 'size' is 4e+18 rows per step, more than the dataset's 1000 rows and more than "
      "65536 (recipes pass batch_size * gradient_accumulation_steps as size; see docs/limits.md)");
  EXPECT_EQ(error_of([] { data_check_batch_size(40000, 2, 10, "pairs"); }),
            "data: batches: option 'size' is 40000 pairs per step on each of 2 ranks, more than the "
            "dataset's 10 pairs and more than 65536 (recipes pass batch_size * gradient_accumulation_steps "
            "as size; see docs/limits.md)");
  EXPECT_EQ(error_of([] { data_check_batch_size(2.5, 1, 10, "rows"); }),
            "data: batches: option 'size' must be a whole number of rows >= 1, got 2.5");
  EXPECT_EQ(error_of([] { data_check_batch_size(65536, 1, 10, "rows"); }),
            "(no error)");  // small data, sane batch
  EXPECT_EQ(error_of([] { data_check_batch_size(200000, 1, 300000, "rows"); }), "(no error)");  // big data
}
