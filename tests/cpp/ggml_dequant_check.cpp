// ggml_dequant_check DIR: luatune's dequantization of every ggml type it reads (host/io/ggml_quants.cpp)
// against the gguf package's (tests/reference/ggml_dequant_ref.py wrote DIR/<name>.bin and the expected
// float32 values DIR/<name>.f32: random blocks of each type, and real tensors of SmolLM2-135M-Instruct's
// GGUF as smollm2_<type>). Bit for bit; NaNs equal NaNs. One line per file; exit 1 on any difference.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "host/core/error.h"
#include "host/io/gguf.h"

using namespace luatune;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: ggml_dequant_check DIR\n";
    return 2;
  }
  const GgmlType all[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                          GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                          GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  int files = 0, failures = 0;
  std::vector<std::string> random_types;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".bin") continue;
    std::string name = entry.path().stem().string();
    const std::string type_name = name.rfind("smollm2_", 0) == 0 ? name.substr(8) : name;
    const GgmlType* type = nullptr;
    for (const GgmlType& t : all)
      if (type_name == ggml_type_name(t)) type = &t;
    if (!type) {
      std::cout << "FAIL " << name << ": no ggml type named " << type_name << "\n";
      failures++;
      continue;
    }
    const std::string bytes = read_bytes(path);
    const std::string want_bytes = read_bytes(path.substr(0, path.size() - 4) + ".f32");
    const int64_t n = int64_t(bytes.size()) / ggml_type_bytes(*type) * ggml_block_size(*type);
    std::vector<float> want(want_bytes.size() / 4);
    std::memcpy(want.data(), want_bytes.data(), want.size() * 4);
    files++;
    if (name == type_name) random_types.push_back(type_name);
    std::vector<float> got;
    try {
      got = ggml_dequantize(*type, bytes, n);
    } catch (const Error& e) {
      std::cout << "FAIL " << name << ": " << e.what() << "\n";
      failures++;
      continue;
    }
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < got.size() && i < want.size(); i++) {
      const bool same = std::memcmp(&got[i], &want[i], 4) == 0 || (std::isnan(got[i]) && std::isnan(want[i]));
      if (!same && differ++ == 0) first = int64_t(i);
    }
    if (got.size() != want.size() || differ > 0) {
      std::cout << "FAIL " << name << ": " << differ << " of " << want.size() << " values differ";
      if (first >= 0)
        std::cout << " (first at " << first << ": " << got[first] << " vs gguf's " << want[first] << ")";
      if (got.size() != want.size()) std::cout << "; " << got.size() << " values vs " << want.size();
      std::cout << "\n";
      failures++;
    } else {
      std::cout << "ok   " << name << ": " << got.size() << " values bit for bit\n";
    }
  }
  // Every type luatune reads but f32 (stored as is) has its random blocks.
  for (const GgmlType& t : all) {
    if (t == GgmlType::F32) continue;
    bool found = false;
    for (const std::string& s : random_types) found |= s == ggml_type_name(t);
    if (!found) {
      std::cout << "MISSING " << ggml_type_name(t) << ": no random blocks in " << argv[1] << "\n";
      failures++;
    }
  }
  std::cout << files << " files compared, " << failures << " failures\n";
  return failures == 0 ? 0 : 1;
}
