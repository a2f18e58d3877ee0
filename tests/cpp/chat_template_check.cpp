// chat_template_check TRANSFORMERS.json [HF_JINJA.json]: renders every conversation of
// tests/fixtures/chat_conversations.json through every template of
// tests/reference/chat_template_manifest.json with luatune (host/text/chat.h) and compares with what
// transformers' apply_chat_template gave (tests/reference/chat_template_ref.py): the text byte for byte,
// the ids of tokenize=True, and the assistant masks where the template has {% generation %} blocks. A
// template that raised there must fail here too. @huggingface/jinja's renders (chat_template_ref.mjs),
// when given, are a second opinion: where they differ from transformers they are listed, not failed.
// Prints one line per template and conversation; exit 1 on any mismatch or on a template or
// conversation missing from the results (fewer than 12 conversations a template counts as missing).
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "host/core/error.h"
#include "host/text/chat.h"
#include "host/text/tokenizer.h"

using namespace luatune;
using json = nlohmann::ordered_json;

namespace {

json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::cerr << "chat_template_check: cannot read " << path << "\n";
    std::exit(2);
  }
  return json::parse(f);
}

// The first difference of two strings, for the report: where and a few bytes of each side.
std::string first_difference(const std::string& a, const std::string& b, const char* who = "luatune") {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) i++;
  auto excerpt = [&](const std::string& s) { return json(s.substr(i > 20 ? i - 20 : 0, 60)).dump(); };
  return "byte " + std::to_string(i) + ": " + who + " " + excerpt(a) + " vs transformers " + excerpt(b);
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: chat_template_check TRANSFORMERS.json [HF_JINJA.json]\n";
    return 2;
  }
  const json manifest = read_json("tests/reference/chat_template_manifest.json");
  const json conversations = read_json("tests/fixtures/chat_conversations.json")["conversations"];
  const json tf = read_json(argv[1]);
  std::map<std::pair<std::string, std::string>, json> hf;  // (template, case) -> @huggingface/jinja's result
  const json hf_out = argc > 2 ? read_json(argv[2]) : json::object();
  if (argc > 2)
    for (const json& r : hf_out["results"]) hf[{r["template"], r["case"]}] = r;

  std::map<std::string, json> templates;  // id -> what chat_template_ref.py resolved
  for (const json& t : tf["templates"]) templates[t["id"]] = t;
  std::map<std::pair<std::string, std::string>, json> results;
  for (const json& r : tf["results"]) results[{r["template"], r["case"]}] = r;

  int failures = 0, compared = 0, hf_differs = 0, hf_compared = 0;
  double seconds = 0;
  for (const json& entry : manifest["templates"]) {
    const std::string id = entry["id"];
    if (!templates.count(id)) {
      std::cout << "MISSING template " << id << ": not in " << argv[1] << "\n";
      failures++;
      continue;
    }
    const json& t = templates[id];
    std::shared_ptr<Tokenizer> tok;
    try {
      tok = Tokenizer::load(t["tokenizer_dir"]);
    } catch (const Error& e) {
      std::cout << "FAIL " << id << ": tokenizer: " << first_line(e.what()) << "\n";
      failures++;
      continue;
    }
    int cases = 0;
    for (const json& c : conversations) {
      const std::string name = c["name"];
      auto it = results.find({id, name});
      if (it == results.end()) {
        std::cout << "MISSING " << id << " / " << name << ": transformers gave no result\n";
        failures++;
        continue;
      }
      cases++;
      const json& want = it->second;
      ChatOptions o;
      o.add_generation_prompt = c.value("add_generation_prompt", false);
      if (c.contains("tools")) o.tools = c["tools"];
      if (c.contains("documents")) o.documents = c["documents"];
      if (c.contains("chat_template_kwargs")) o.kwargs = c["chat_template_kwargs"];
      o = chat_options_for(*tok, o);
      // Fixtures are rendered with the bos/eos the manifest gives (the python side sets the same).
      for (const char* key : {"bos", "eos"})
        if (entry.contains(key)) o.kwargs[std::string(key) + "_token"] = entry[key];
      ChatEncoding got;
      ChatRendered rendered;
      std::string error;
      auto start = std::chrono::steady_clock::now();
      try {
        std::shared_ptr<const ChatTemplate> tmpl;
        const bool tools = !o.tools.is_null();
        if (entry.contains("fixture")) {
          tmpl = chat_template_from_file(entry["fixture"]);
        } else if (entry.contains("config")) {
          // Its tokenizer folder holds that tokenizer_config.json: the name given, else tool_use when
          // tools are given and default otherwise, as transformers picks among named templates.
          tmpl = chat_template_resolve(*tok, entry.value("name", ""), tools);
        } else {
          tmpl = chat_template_resolve(*tok, "", tools);  // the model's own, as a run picks it
        }
        rendered = chat_render(*tmpl, c["messages"], o);
        got = chat_encode(*tok, *tmpl, c["messages"], o);
      } catch (const Error& e) {
        error = first_line(e.what());
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      compared++;
      const std::string what = id + " / " + name;
      if (want.contains("error") && !want["error"].is_null()) {
        if (error.empty()) {
          std::cout << "MISMATCH " << what << ": transformers raised \"" << want["error"].get<std::string>()
                    << "\" but luatune rendered\n";
          failures++;
        } else {
          std::cout << "ok " << what << " (both raise: " << error << ")\n";
        }
        continue;
      }
      if (!error.empty()) {
        std::cout << "MISMATCH " << what << ": luatune failed: " << error << "\n";
        failures++;
        continue;
      }
      const std::string text = want["text"];
      std::vector<std::string> bad;
      if (rendered.text != text) bad.push_back("text differs at " + first_difference(rendered.text, text));
      if (want.contains("ids") && want["ids"].get<std::vector<int32_t>>() != got.ids)
        bad.push_back("ids differ");
      bool masks = want.contains("assistant_masks") && !want["assistant_masks"].is_null();
      if (masks && want["assistant_masks"].get<std::vector<uint8_t>>() != got.mask)
        bad.push_back("assistant masks differ");
      if (!bad.empty()) {
        std::cout << "MISMATCH " << what << ": ";
        for (size_t i = 0; i < bad.size(); i++) std::cout << (i ? "; " : "") << bad[i];
        std::cout << "\n";
        failures++;
      } else {
        std::cout << "ok " << what << " (" << rendered.text.size() << " bytes, " << got.ids.size() << " ids"
                  << (masks ? ", masks equal" : "") << ")\n";
      }
      auto h = hf.find({id, name});
      if (h != hf.end() && h->second.contains("text") && h->second["text"].is_string()) {
        hf_compared++;
        if (h->second["text"] != text) {
          hf_differs++;
          std::cout << "  note: @huggingface/jinja differs at "
                    << first_difference(h->second["text"].get<std::string>(), text, "@huggingface/jinja")
                    << "\n";
        }
      }
    }
    if (cases < 12) {
      std::cout << "MISSING " << id << ": " << cases << " conversations compared, at least 12 wanted\n";
      failures++;
    }
  }
  std::cout << compared << " renders compared with transformers (" << seconds << " s in luatune), "
            << failures << " failures; @huggingface/jinja differs from transformers on " << hf_differs
            << " of " << hf_compared << "\n";
  return failures == 0 ? 0 : 1;
}
