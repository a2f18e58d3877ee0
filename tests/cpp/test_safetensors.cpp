// safetensors: a hand-made file read against the format spec, bit-exact round trips of every
// dtype, zero-copy views, the header our writer produces (parsed here independently), sharded
// directories, and every malformed-file error with its exact text.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/io/safetensors.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using Named = std::vector<std::pair<std::string, at::Tensor>>;

namespace {

// The message of the luatune::Error that fn throws, or "" when it throws none.
std::string le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// Little-endian bytes of an integer bit pattern, built without relying on the host's byte order.
std::string le_bytes(uint64_t bits, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((bits >> (8 * i)) & 0xff);
  return s;
}

std::string bytes_of(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Random bytes in the tensor's storage (bools are 0 or 1): NaN payloads and denormals included,
// so a round trip that converts anything shows up as a byte difference.
at::Tensor random_tensor(std::vector<int64_t> shape, at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
  at::Tensor bytes =
      at::randint(0, dtype == at::kBool ? 2 : 256, {static_cast<int64_t>(t.nbytes())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data_ptr(), t.nbytes());
  return t;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "lt-test-st-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir = templ;
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string path(const std::string& name) const { return dir + "/" + name; }
  // A file of the 8-byte header length, the header text and `data_bytes` zero bytes.
  std::string raw(const std::string& name, const std::string& header, size_t data_bytes = 0) const {
    file_write_atomic(path(name), le64(header.size()) + header + std::string(data_bytes, '\0'));
    return path(name);
  }
  std::set<std::string> listing() const {
    std::set<std::string> out;
    for (const auto& de : fs::directory_iterator(dir)) out.insert(de.path().filename().string());
    return out;
  }

  std::string dir;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Against the spec: a file built byte by byte

TEST_F(Safetensors, ReadsAHandMadeFile) {
  // Keys in header order differ from the offsets' order; I64 first keeps everything aligned.
  std::string header = R"({"__metadata__":{"format":"pt","note":"hand made"},)"
                       R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                       R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                       R"("s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data = le_bytes(7, 8) +                                     // s = 7
                     le_bytes(0x3FC00000, 4) + le_bytes(0xC0000000, 4) +  // 1.5, -2
                     le_bytes(0x3E800000, 4) + le_bytes(0x40400000, 4) +  // 0.25, 3
                     le_bytes(0x3F80, 2) + le_bytes(0xBF00, 2);           // 1, -0.5
  file_write_atomic(path("hand.safetensors"), le64(header.size()) + header + data);

  auto f = SafetensorsFile::open(path("hand.safetensors"));
  ASSERT_EQ(f->entries().size(), 3u);
  EXPECT_EQ(f->entries()[0].name, "w");
  EXPECT_EQ(f->entries()[1].name, "b");
  EXPECT_EQ(f->entries()[2].name, "s");
  EXPECT_EQ(f->entries()[1].dtype_name, "BF16");
  EXPECT_EQ(f->entries()[1].dtype, at::kBFloat16);
  EXPECT_EQ(f->entries()[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f->entries()[0].begin, 8u);
  EXPECT_EQ(f->entries()[0].end, 24u);
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hand made"}}));

  at::Tensor w = f->tensor("w");
  EXPECT_TRUE(at::equal(w, at::tensor({1.5f, -2.0f, 0.25f, 3.0f}).reshape({2, 2})));
  EXPECT_TRUE(at::equal(f->tensor("b").to(at::kFloat), at::tensor({1.0f, -0.5f})));
  at::Tensor s = f->tensor("s");
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.scalar_type(), at::kLong);
  EXPECT_EQ(s.item<int64_t>(), 7);
  EXPECT_EQ(f->find("nope"), nullptr);
}

TEST_F(Safetensors, CopiesTensorsAtMisalignedAddresses) {
  // 8 + N = 8 + 57: the F32 data starts at an odd file offset, so the reader must copy it.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8 + 1, ' ');
  file_write_atomic(path("odd.safetensors"),
                    le64(header.size()) + header + le_bytes(0x3FC00000, 4) + le_bytes(0xC0000000, 4));
  auto f = SafetensorsFile::open(path("odd.safetensors"));
  at::Tensor a = f->tensor("w"), b = f->tensor("w");
  EXPECT_TRUE(at::equal(a, at::tensor({1.5f, -2.0f})));
  EXPECT_NE(a.data_ptr(), b.data_ptr());  // two copies
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % 4, 0u);
}

// ---------------------------------------------------------------------------------------------
// Round trips and zero copy

TEST_F(Safetensors, RoundTripsEveryDtypeBitExact) {
  Named tensors;
  for (at::ScalarType t :
       {at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16,
        at::kFloat, at::kDouble, at::kComplexFloat, at::kFloat8_e5m2, at::kFloat8_e4m3fn, at::kFloat8_e8m0fnu,
        at::kFloat8_e4m3fnuz, at::kFloat8_e5m2fnuz, at::kUInt16, at::kUInt32, at::kUInt64})
    tensors.emplace_back(std::string("t_") + c10::toString(t), random_tensor({3, 5}, t));
  tensors.emplace_back("scalar", random_tensor({}, at::kFloat));
  tensors.emplace_back("empty", random_tensor({0, 4}, at::kBFloat16));
  tensors.emplace_back("transposed", random_tensor({4, 6}, at::kBFloat16).t());
  tensors.emplace_back("sliced", random_tensor({10}, at::kDouble).slice(0, 3, 9, 2));
  ASSERT_FALSE(tensors[tensors.size() - 2].second.is_contiguous());
  safetensors_save_file(path("all.safetensors"), tensors);

  SafetensorsReader r(path("all.safetensors"));
  EXPECT_EQ(r.names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    at::Tensor back = r.tensor(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type());
    EXPECT_EQ(back.sizes(), t.sizes());
    EXPECT_TRUE(back.is_contiguous());
    EXPECT_EQ(bytes_of(back), bytes_of(t));
    EXPECT_EQ(r.file_of(name), path("all.safetensors"));
  }
  EXPECT_EQ(r.tensor("scalar").dim(), 0);
  EXPECT_EQ(r.entry("t_BFloat16").dtype_name, "BF16");
  EXPECT_EQ(r.entry("t_Bool").dtype_name, "BOOL");
  EXPECT_EQ(r.entry("t_ComplexFloat").dtype_name, "C64");
}

TEST_F(Safetensors, TensorsViewTheMappingWithoutCopying) {
  Named tensors = {{"a", at::arange(16, at::kFloat).reshape({4, 4})},
                   {"b", at::arange(3, at::kByte)},
                   {"c", at::arange(5, at::kDouble)},
                   {"d", at::arange(3, at::kHalf)}};
  safetensors_save_file(path("z.safetensors"), tensors);
  const std::string on_disk = file_read(path("z.safetensors"));
  auto f = SafetensorsFile::open(path("z.safetensors"));

  // The same address twice, and tensors placed relative to each other exactly as in the file.
  at::Tensor a1 = f->tensor("a"), a2 = f->tensor("a");
  EXPECT_EQ(a1.data_ptr(), a2.data_ptr());
  for (const char* name : {"b", "c", "d"}) {
    at::Tensor t = f->tensor(name);
    EXPECT_EQ(static_cast<char*>(t.data_ptr()) - static_cast<char*>(a1.data_ptr()),
              static_cast<int64_t>(f->find(name)->begin) - static_cast<int64_t>(f->find("a")->begin));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % t.element_size(), 0u) << name;
  }

  // Writes land in the private mapping (both views see them), never in the file.
  a1.fill_(7.0f);
  EXPECT_EQ(a2[3][3].item<float>(), 7.0f);
  EXPECT_EQ(file_read(path("z.safetensors")), on_disk);
  EXPECT_TRUE(at::equal(SafetensorsFile::open(path("z.safetensors"))->tensor("a"), tensors[0].second));

  // A tensor keeps its mapping alive after the file object is gone.
  at::Tensor c = f->tensor("c");
  f.reset();
  EXPECT_TRUE(at::equal(c, tensors[2].second));
}

// ---------------------------------------------------------------------------------------------
// What the writer puts on disk, parsed without the reader

TEST_F(Safetensors, WritesAPaddedHeaderWithMetadataFirstAndHfOrder) {
  Named tensors = {{"z.bias", at::ones({3}, at::kHalf)},
                   {"a.weight", at::ones({2, 3}, at::kFloat)},
                   {"m.mask", at::ones({5}, at::kBool)},
                   {"b.weight", at::ones({1}, at::kFloat)},
                   {"c.ids", at::ones({2}, at::kLong)}};
  safetensors_save_file(path("h.safetensors"), tensors, {{"step", "12"}});
  const std::string bytes = file_read(path("h.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_TRUE(str_starts_with(header, R"({"__metadata__":{"format":"pt","step":"12"},)")) << header;
  size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);  // only the padding, all spaces

  // Entries by element size descending, then by name; offsets contiguous from 0.
  auto h = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& item : h.items()) keys.push_back(item.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"__metadata__", "c.ids", "a.weight", "b.weight", "z.bias", "m.mask"}));
  uint64_t at = 0;
  for (size_t i = 1; i < keys.size(); ++i) {
    EXPECT_EQ(h[keys[i]]["data_offsets"][0].get<uint64_t>(), at) << keys[i];
    at = h[keys[i]]["data_offsets"][1].get<uint64_t>();
  }
  EXPECT_EQ(8 + n + at, bytes.size());
  EXPECT_EQ(h["a.weight"]["dtype"], "F32");
  EXPECT_EQ(h["a.weight"]["shape"].get<std::vector<int64_t>>(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h["m.mask"]["dtype"], "BOOL");
}

TEST_F(Safetensors, WriterRejectsBadInputAndLeavesNoFile) {
  const std::string p = path("bad.safetensors");
  const at::Tensor t = at::zeros({2});
  EXPECT_EQ(error_of([&] {
              safetensors_save_file(p, {{"a", t}, {"a", t}});
            }),
            "cannot write safetensors '" + p + "': tensor 'a' is given twice");
  EXPECT_EQ(error_of([&] {
              safetensors_save_file(p, {{"__metadata__", t}});
            }),
            "cannot write safetensors '" + p + "': '__metadata__' is reserved and cannot name a tensor");
  EXPECT_EQ(
      error_of([&] {
        safetensors_save_file(p, {{"a", t}, {"z", at::zeros({2}, at::kComplexDouble)}});
      }),
      "cannot write safetensors '" + p + "': tensor 'z': dtype ComplexDouble has no safetensors equivalent");
  EXPECT_EQ(error_of([&] {
              safetensors_save_dir(dir, {{"a", t}, {"a", t}});
            }),
            "cannot write checkpoint '" + dir + "': tensor 'a' is given twice");
  EXPECT_TRUE(listing().empty());  // no temporaries left behind either
}

// ---------------------------------------------------------------------------------------------
// Directories and shards

TEST_F(Safetensors, ShardsWithAnIndexAndRemovesStaleFiles) {
  Named tensors;
  for (int i = 0; i < 6; ++i) {
    tensors.emplace_back("layer" + std::to_string(i), random_tensor({250}, at::kFloat));  // 1000 bytes
    if (i == 3) tensors.emplace_back("big", random_tensor({1000}, at::kFloat));           // 4000 bytes
  }
  file_write_atomic(path("notes.txt"), "keep me");
  file_write_atomic(path("other.safetensors"), "keep me too");
  SafetensorsWriteOptions options;
  options.max_shard_bytes = 2500;
  std::vector<std::string> written = safetensors_save_dir(dir, tensors, options);

  // layer0+1 | layer2+3 | big alone (over the limit) | layer4+5
  std::vector<std::string> shards = {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                     "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
  std::vector<std::string> expected;
  for (const auto& s : shards) expected.push_back(path(s));
  expected.push_back(path("model.safetensors.index.json"));
  EXPECT_EQ(written, expected);

  auto index = nlohmann::json::parse(file_read(path("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 10000u);
  EXPECT_EQ(index["weight_map"], (nlohmann::json{{"layer0", shards[0]},
                                                 {"layer1", shards[0]},
                                                 {"layer2", shards[1]},
                                                 {"layer3", shards[1]},
                                                 {"big", shards[2]},
                                                 {"layer4", shards[3]},
                                                 {"layer5", shards[3]}}));

  SafetensorsReader r(dir);
  EXPECT_EQ(r.names(),
            (std::vector<std::string>{"big", "layer0", "layer1", "layer2", "layer3", "layer4", "layer5"}));
  EXPECT_EQ(r.total_bytes(), 10000u);
  EXPECT_EQ(r.file_of("big"), path(shards[2]));
  for (const auto& [name, t] : tensors) EXPECT_EQ(bytes_of(r.tensor(name)), bytes_of(t)) << name;
  SafetensorsReader by_index(path("model.safetensors.index.json"));  // the index path works too
  EXPECT_EQ(by_index.names(), r.names());

  // Fewer shards: the four old ones go.
  options.max_shard_bytes = 6000;
  safetensors_save_dir(dir, tensors, options);
  EXPECT_EQ(listing(),
            (std::set<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                   "model.safetensors.index.json", "notes.txt", "other.safetensors"}));

  // Unsharded: the shards and the index go; files that only look alike stay.
  file_write_atomic(path("model-extra.safetensors"), "not ours");
  EXPECT_EQ(safetensors_save_dir(dir, tensors), (std::vector<std::string>{path("model.safetensors")}));
  EXPECT_EQ(listing(), (std::set<std::string>{"model.safetensors", "model-extra.safetensors", "notes.txt",
                                              "other.safetensors"}));
  SafetensorsReader single(dir);
  EXPECT_EQ(single.file_of("layer5"), path("model.safetensors"));
  EXPECT_EQ(bytes_of(single.tensor("big")), bytes_of(tensors[4].second));
}

TEST_F(Safetensors, DirectoryErrorsNameTheFiles) {
  EXPECT_EQ(error_of([&] { SafetensorsReader r(dir); }),
            "no checkpoint in directory '" + dir +
                "': looked for model.safetensors.index.json and model.safetensors");
  safetensors_save_file(path("adapter_model.safetensors"), {{"weight", at::zeros({2})}});
  EXPECT_EQ(error_of([&] { SafetensorsReader r(dir); }),
            "no checkpoint in directory '" + dir +
                "': looked for model.safetensors.index.json and model.safetensors (found "
                "adapter_model.safetensors; "
                "pass a file path to read one)");
  EXPECT_EQ(error_of([&] { SafetensorsReader r(path("missing")); }),
            "cannot read checkpoint '" + path("missing") + "': no such file or directory");

  SafetensorsReader direct(path("adapter_model.safetensors"));
  EXPECT_EQ(error_of([&] { direct.entry("wieght"); }),
            "checkpoint '" + path("adapter_model.safetensors") +
                "' has no tensor 'wieght' (did you mean 'weight'?)");

  // Shards s1 = {a, b} and s2 = {b, c}; the index decides what each test case claims.
  safetensors_save_file(path("s1.safetensors"), {{"a", at::zeros({1})}, {"b", at::zeros({1})}});
  safetensors_save_file(path("s2.safetensors"), {{"b", at::zeros({1})}, {"c", at::zeros({1})}});
  const std::string index = path("model.safetensors.index.json");
  auto with_map = [&](const std::string& weight_map) {
    file_write_atomic(index, R"({"metadata":{"total_size":12},"weight_map":)" + weight_map + "}");
    return error_of([&] { SafetensorsReader r(dir); });
  };
  const std::string prefix = "cannot read checkpoint index '" + index + "': ";
  EXPECT_EQ(
      with_map(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"})"),
      prefix + "tensor 'b' is in both '" + path("s1.safetensors") + "' and '" + path("s2.safetensors") + "'");
  EXPECT_EQ(with_map(R"({"a":"s1.safetensors","x":"s1.safetensors"})"),
            prefix + "tensor 'x' is listed in shard 's1.safetensors', but '" + path("s1.safetensors") +
                "' has no such tensor");
  EXPECT_EQ(with_map(R"({"a":"s1.safetensors","q":"s3.safetensors"})"),
            prefix + "tensor 'q' is in shard 's3.safetensors', but '" + path("s3.safetensors") +
                "' does not exist");
  EXPECT_EQ(with_map(R"({"a":"s1.safetensors"})"),
            prefix + "tensor 'b' in '" + path("s1.safetensors") + "' is not in the weight_map");
  EXPECT_EQ(with_map(R"({"a":"../s1.safetensors"})"),
            prefix + "tensor 'a': shard '../s1.safetensors' must be a file name relative to the index");
  EXPECT_EQ(with_map(R"({"a":"s1.safetensors","a":"s1.safetensors"})"),
            prefix + "key 'a' appears twice in 'weight_map'");
  EXPECT_EQ(with_map("[]"), prefix + "expected an object with a 'weight_map' object");
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one line each, naming the file and the tensor

TEST_F(Safetensors, RejectsMalformedFilesWithOneLineEach) {
  const std::string entry_w = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  struct Case {
    std::string header;  // "" with `raw_bytes`: the whole file is raw_bytes
    size_t data_bytes;
    std::string expected;  // after "cannot read safetensors 'PATH': "
  };
  const std::vector<Case> cases = {
      {R"({"w":1})", 0, "tensor 'w': expected an object with dtype, shape and data_offsets, found number"},
      {R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, "tensor 'w': missing 'dtype'"},
      {R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, "tensor 'w': missing 'shape'"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", 4, "tensor 'w': missing 'data_offsets'"},
      {R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 'w': 'dtype' must be a string, found number"},
      {R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4,
       "tensor 'w': 'shape' must be an array of integers, found string"},
      {R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
       "tensor 'w': 'shape' must be an array of integers, found [1.5]"},
      {R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", 4,
       "tensor 'w': negative dimension -3 in shape [2, -3]"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
       "tensor 'w': 'data_offsets' must be [begin, end] with non-negative integers, found [0]"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
       "tensor 'w': 'data_offsets' must be [begin, end] with non-negative integers, found [-4, 0]"},
      {R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 'w': unknown dtype 'Q4' (known: BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, "
       "F8_E8M0, "
       "F8_E4M3FNUZ, F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64)"},
      {R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1,
       "tensor 'w': dtype 'F4' is not supported: luatune reads no sub-byte dtypes"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
       "tensor 'w': data_offsets [8, 4] have begin after end"},
      {R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12,
       "tensor 'w': data_offsets [0, 12] hold 12 bytes, expected 16 for shape [2, 2] of F32"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, "tensor 'b': data_offsets [8, 12] leave bytes [4, 8) of the data buffer unused (a hole)"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
       "tensor 'a': data_offsets [4, 8] leave bytes [0, 4) of the data buffer unused (a hole)"},
      {"{" + entry_w + "}", 6,
       "2 trailing bytes after the last tensor (the data buffer has 6 bytes, tensors cover 4)"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10,
       "the file is truncated: tensor 'w' ends at byte 16 of the data buffer, which has 10 bytes"},
      {"{" + entry_w + "," + entry_w + "}", 4, "tensor 'w' appears twice in the header"},
      {R"({"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 'w': key 'dtype' appears twice"},
      {R"({"__metadata__":{"format":1}})", 0,
       "'__metadata__' value of 'format' must be a string, found number"},
      {R"({"__metadata__":"pt"})", 0, "'__metadata__' must be an object of strings, found string"},
      {R"({"__metadata__":{"format":"pt","format":"pt"}})", 0, "'__metadata__': key 'format' appears twice"},
      {"[1]", 0, "the header does not start with '{' (not a safetensors file?)"},
      {" {}", 0, "the header does not start with '{' (not a safetensors file?)"},
      {"", 0, "the header does not start with '{' (not a safetensors file?)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string p =
        raw("case" + std::to_string(i) + ".safetensors", cases[i].header, cases[i].data_bytes);
    EXPECT_EQ(error_of([&] { SafetensorsFile::open(p); }),
              "cannot read safetensors '" + p + "': " + cases[i].expected)
        << "case " << i << ": " << cases[i].header;
  }

  // Files broken before the header is even read.
  auto file_error = [&](const std::string& name, const std::string& bytes) {
    file_write_atomic(path(name), bytes);
    return error_of([&] { SafetensorsReader r(path(name)); });
  };
  EXPECT_EQ(file_error("short.safetensors", "abc"),
            "cannot read safetensors '" + path("short.safetensors") +
                "': the file is 3 bytes, too short for the 8-byte header length");
  EXPECT_EQ(file_error("huge.safetensors", le64(100000001) + "{}"),
            "cannot read safetensors '" + path("huge.safetensors") +
                "': header length 100000001 is over the limit of 100000000 bytes (not a safetensors file?)");
  EXPECT_EQ(file_error("past.safetensors", le64(100) + "{}"),
            "cannot read safetensors '" + path("past.safetensors") +
                "': header length 100 runs past the end of the 10-byte file");

  // Not JSON: the parser's own reason follows, so only the start is pinned.
  for (const std::string& header :
       {std::string("{bad}"), std::string("{\"w\":"), std::string("{\"\xff\":1}")}) {
    const std::string p = raw("json.safetensors", header);
    const std::string msg = error_of([&] { SafetensorsFile::open(p); });
    EXPECT_TRUE(str_starts_with(msg, "cannot read safetensors '" + p + "': the header is not valid JSON ("))
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(Safetensors, Float8ReadsLikeAnyOtherDtype) {
  const std::string p =
      raw("f8.safetensors", R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4);
  at::Tensor w = SafetensorsFile::open(p)->tensor("w");
  EXPECT_EQ(w.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_EQ(w.numel(), 4);
  EXPECT_EQ(w.to(at::kFloat).sum().item<float>(), 0.0f);
}

TEST(SafetensorsDtype, NamesAndTypesAgree) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                           "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"})
    EXPECT_EQ(safetensors_dtype_name(safetensors_dtype_parse(name)), name);
  EXPECT_EQ(safetensors_dtype_parse("BF16"), at::kBFloat16);
  EXPECT_EQ(error_of([] { safetensors_dtype_parse("bf16"); }).substr(0, 32),
            "unknown dtype 'bf16' (known: BOO");
  EXPECT_EQ(error_of([] { safetensors_dtype_name(at::kComplexDouble); }),
            "dtype ComplexDouble has no safetensors equivalent");
}
