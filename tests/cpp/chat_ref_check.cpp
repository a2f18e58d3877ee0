// Compares luatune's chat_render with reference renderings of the same conversations through the
// real chat templates (tests/reference/chat_ref.{mjs,py} write them). Usage, from the repository
// root: chat_ref_check RESULTS.json...  Prints per oracle and format how many cases matched byte
// for byte (a template that raised must make chat_render fail too); exit 1 on any mismatch, 77
// when every result was skipped (reference engine or packages absent).
#include <array>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "host/core/error.h"
#include "host/text/chat.h"

using json = nlohmann::json;
using namespace luatune;

namespace {

json read_json(const std::string& path) {
  std::ifstream f(path);
  LT_CHECK(f, "cannot open " << path);
  return json::parse(f);
}

// The first byte where a and b differ, with a little context from each, JSON-escaped.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) i++;
  size_t from = i > 30 ? i - 30 : 0;
  std::ostringstream os;
  os << "first difference at byte " << i << ": reference " << json(want.substr(from, 60)).dump()
     << " vs luatune " << json(got.substr(from, 60)).dump();
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: chat_ref_check RESULTS.json...\n";
    return 2;
  }
  std::map<std::string, json> cases;
  const json case_doc = read_json("tests/fixtures/chat_cases.json");
  for (const auto& c : case_doc["cases"]) {
    cases[c["name"].get<std::string>()] = c;
  }

  int mismatches = 0, compared = 0;
  for (int a = 1; a < argc; a++) {
    json doc = read_json(argv[a]);
    std::string oracle = doc["oracle"];
    // format -> {matched, compared, skipped}
    std::map<std::string, std::array<int, 3>> tally;
    for (const auto& r : doc["results"]) {
      const std::string format = r["format"].get<std::string>(), name = r["case"].get<std::string>();
      auto& t = tally[format];
      if (r.contains("skipped")) {
        t[2]++;
        continue;
      }
      const json& c = cases.at(name);
      std::vector<ChatMessage> msgs;
      for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
      ChatOptions o;
      o.add_generation_prompt = c.value("add_generation_prompt", false);
      json opts = c.value("options", json::object());
      o.date_string = opts.value("date_string", o.date_string);
      o.enable_thinking = opts.value("enable_thinking", o.enable_thinking);
      o.bos_text = r.value("bos", "");
      o.eos_text = r.value("eos", "");

      t[1]++;
      compared++;
      std::string what = oracle + " / " + format + " / " + name + ": ";
      bool ok = false;
      try {
        ChatRendered got = chat_render(chat_format_parse(format), msgs, o);
        if (r.contains("error")) {
          std::cout << "MISMATCH " << what << "the template raised \"" << r["error"].get<std::string>()
                    << "\" but chat_render did not\n";
        } else if (got.text != r["text"].get<std::string>()) {
          std::cout << "MISMATCH " << what << first_difference(r["text"], got.text) << "\n";
        } else {
          ok = true;
        }
      } catch (const Error& e) {
        if (r.contains("error")) {
          ok = true;
        } else {
          std::cout << "MISMATCH " << what << "chat_render failed: " << e.what() << "\n";
        }
      }
      if (ok)
        t[0]++;
      else
        mismatches++;
    }
    for (const auto& [format, t] : tally) {
      std::cout << oracle << ": " << format << " " << t[0] << "/" << t[1] << " matched";
      if (t[2]) std::cout << ", " << t[2] << " skipped";
      std::cout << "\n";
    }
  }
  if (compared == 0) {
    std::cout << "no reference renderings to compare (all skipped)\n";
    return 77;
  }
  std::cout << (mismatches ? "FAILED: " : "OK: ") << mismatches << " mismatches in " << compared
            << " comparisons\n";
  return mismatches ? 1 : 0;
}
