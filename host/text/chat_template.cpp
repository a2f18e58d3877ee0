// ChatTemplate (see chat.h): one compiled Jinja template over the C ABI of host/text/jinja, and
// where a run's template comes from (the tokenizer's own, a file, a named or a shipped template).
#include <nlohmann/json.hpp>

#include <algorithm>

#include "host/cli/recipes.h"  // luatune_home(): where templates/chat/ is
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/text/chat.h"
#include "host/text/jinja/luatune_jinja.h"
#include "host/text/tokenizer.h"

namespace luatune {

struct ChatTemplate::Handle {
  LtJinjaHandle* h = nullptr;
  ~Handle() { lt_jinja_free(h); }
};

namespace {

// The marker characters the engine writes around {% generation %} output (U+E000, U+E001).
const char kGenOpen[] = "\xEE\x80\x80";
const char kGenClose[] = "\xEE\x80\x81";

// "chat_template FILE.jinja:3: ..." for a template file, "chat_template FILE (template line 3): ..."
// where the template sits inside another file (tokenizer_config.json, a GGUF).
std::string where(const std::string& origin, uint32_t line) {
  if (line == 0) return "chat_template " + origin + ": ";
  if (str_ends_with(origin, ".jinja")) return "chat_template " + origin + ":" + std::to_string(line) + ": ";
  return "chat_template " + origin + " (template line " + std::to_string(line) + "): ";
}

}  // namespace

std::shared_ptr<const ChatTemplate> ChatTemplate::compile(const std::string& source,
                                                          const std::string& origin) {
  std::shared_ptr<ChatTemplate> t(new ChatTemplate());
  t->source_ = source;
  t->origin_ = origin;
  char* err = nullptr;
  uint32_t line = 0;
  LtJinjaHandle* h = lt_jinja_compile(source.data(), source.size(), kFuel, &err, &line);
  if (!h) {
    std::string msg = err ? err : "unknown error";
    lt_jinja_free_error(err);
    fail(where(origin, line) + msg,
         "the template does not parse as Jinja; fix it or pick another with chat_template=");
  }
  t->handle_ = new Handle{h};
  return t;
}

ChatTemplate::~ChatTemplate() {
  delete handle_;
}

bool ChatTemplate::has_generation_blocks() const {
  return lt_jinja_has_generation(handle_->h) != 0;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 std::vector<std::pair<size_t, size_t>>* generation_spans) const {
  std::string ctx = context.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // User text holding the marker characters would be read as generation blocks.
  if (has_generation_blocks() &&
      (ctx.find(kGenOpen) != std::string::npos || ctx.find(kGenClose) != std::string::npos))
    fail("chat_template " + origin_ +
         ": the conversation holds U+E000 or U+E001, which mark {% generation %} output");
  char* out = nullptr;
  size_t out_len = 0;
  char* err = nullptr;
  uint32_t line = 0;
  int rc = lt_jinja_render(handle_->h, ctx.data(), ctx.size(), kMaxOutputBytes, &out, &out_len, &err, &line);
  if (rc != 0) {
    std::string msg = err ? err : "unknown error";
    lt_jinja_free_error(err);
    fail(where(origin_, line) + msg);
  }
  std::string text(out, out_len);
  lt_jinja_free_output(out, out_len);
  if (!has_generation_blocks()) return text;
  // Cut the markers out, recording where each block's output starts and ends.
  std::string clean;
  clean.reserve(text.size());
  size_t open = std::string::npos;
  int depth = 0;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, kGenOpen) == 0) {
      if (depth++ == 0) open = clean.size();
      i += 3;
    } else if (text.compare(i, 3, kGenClose) == 0) {
      if (depth > 0 && --depth == 0 && generation_spans && clean.size() > open)
        generation_spans->emplace_back(open, clean.size());
      i += 3;
    } else {
      clean += text[i++];
    }
  }
  return clean;
}

// ---------------------------------------------------------------------------------------------
// Where the template comes from

std::vector<std::string> chat_template_shipped_names() {
  std::vector<std::string> names;
  std::string dir = luatune_home() + "/templates/chat";
  for (const auto& entry : dir_listing(dir))
    if (str_ends_with(entry.first, ".jinja")) names.push_back(entry.first.substr(0, entry.first.size() - 6));
  std::sort(names.begin(), names.end());
  return names;
}

std::shared_ptr<const ChatTemplate> chat_template_from_file(const std::string& path,
                                                            const std::string& name) {
  if (str_ends_with(path, ".jinja")) return ChatTemplate::compile(file_read(path), path);
  nlohmann::ordered_json config = json_parse_checked(file_read(path), path);
  auto it = config.is_object() ? config.find("chat_template") : config.end();
  if (it == config.end())
    fail("chat_template " + path + ": no \"chat_template\" key",
         "point chat_template= at a .jinja file or a tokenizer_config.json that has one");
  if (it->is_string()) {
    if (!name.empty() && name != "default")
      fail("chat_template " + path + ": holds one template, not one named '" + name + "'");
    return ChatTemplate::compile(it->get<std::string>(), path);
  }
  std::vector<std::string> names;
  if (it->is_array()) {
    const std::string want = name.empty() ? "default" : name;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string())
        fail("chat_template " + path +
             ": each entry of the chat_template list must be {\"name\": ..., \"template\": ...}");
      names.push_back(entry["name"].get<std::string>());
      if (names.back() == want)
        return ChatTemplate::compile(entry["template"].get<std::string>(), path + " [" + want + "]");
    }
    fail("chat_template " + path + ": no template named '" + want + "' (it has: " + str_join(names, ", ") +
             ")",
         "set chat_template to one of those names");
  }
  fail("chat_template " + path + ": \"chat_template\" must be a string or a list of {name, template}");
}

std::shared_ptr<const ChatTemplate> chat_template_resolve(const Tokenizer& tok, const std::string& choice,
                                                          bool with_tools) {
  const std::vector<std::string> shipped = chat_template_shipped_names();
  const std::string shipped_list = shipped.empty() ? "(none found)" : str_join(shipped, ", ");
  if (choice.empty()) {
    const std::vector<std::pair<std::string, std::string>>& named = tok.chat_templates();
    if (named.empty())
      fail("chat_template: " + tok.source_dir() +
               " has no chat_template (tokenizer_config.json, chat_template.jinja)",
           "set chat_template = FILE.jinja or one luatune ships: " + shipped_list);
    std::string want = with_tools ? "tool_use" : "default";
    const std::pair<std::string, std::string>* pick = nullptr;
    for (const auto& t : named)
      if (t.first == want) pick = &t;
    if (!pick)
      for (const auto& t : named)
        if (t.first == "default") pick = &t;
    if (!pick && named.size() == 1) pick = &named[0];
    if (!pick) {
      std::vector<std::string> names;
      for (const auto& t : named) names.push_back(t.first);
      fail("chat_template: " + tok.source_dir() + " has several templates and none named 'default' (" +
               str_join(names, ", ") + ")",
           "set chat_template to one of those names");
    }
    std::string origin = tok.chat_template_origin();
    if (named.size() > 1) origin += " [" + pick->first + "]";
    return ChatTemplate::compile(pick->second, origin);
  }
  if (file_exists(choice)) return chat_template_from_file(choice);
  for (const auto& t : tok.chat_templates())
    if (t.first == choice)
      return ChatTemplate::compile(t.second, tok.chat_template_origin() + " [" + choice + "]");
  if (std::find(shipped.begin(), shipped.end(), choice) != shipped.end()) {
    std::string path = luatune_home() + "/templates/chat/" + choice + ".jinja";
    return ChatTemplate::compile(file_read(path), path);
  }
  std::vector<std::string> all = shipped;
  for (const auto& t : tok.chat_templates()) all.push_back(t.first);
  std::string near = str_nearest(choice, all);
  fail("chat_template: '" + choice + "' is no file, no template of " + tok.source_dir() +
           " and none luatune ships (" + shipped_list + ")",
       near.empty() ? "set chat_template = FILE.jinja or one of: " + shipped_list
                    : "did you mean '" + near + "'?");
}

}  // namespace luatune
