// The registry of every binding file's declarations (lua_api.h) and what `runner api` writes from
// it: types/luatune.d.lua for lua-language-server and the option tables of docs/lua_api.md.
#include "bindings/lua_api.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "bindings/modules.h"
#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/sweep/sweep.h"

namespace luatune {

// ============================================================================================
// Declarations

const std::vector<LtOpt>& lt_func_options(const LtFunc& f) {
  return f.shared ? f.shared->keys : f.options;
}

static std::string camel(const std::string& s) {
  std::string out;
  bool up = true;
  for (char c : s) {
    if (c == '_' || c == '.') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

std::string lt_func_options_class(const LtFunc& f) {
  if (f.shared) return f.shared->cls;
  return camel(f.module) + camel(f.name) + "Opts";  // lora.apply -> LoraApplyOpts
}

static bool is_class_name(const char* module) {
  return std::isupper(static_cast<unsigned char>(module[0])) != 0;
}

std::string lt_func_full_name(const LtFunc& f) {
  return std::string(f.module) + (is_class_name(f.module) ? ":" : ".") + f.name;
}

// ============================================================================================
// The registry

const std::vector<LtModuleApi>& lt_api_registry() {
  static const std::vector<LtModuleApi> registry = {
      lt_api_config(),  lt_api_torch(), lt_api_train(), lt_api_tokenizer(), lt_api_models(), lt_api_data(),
      lt_api_metrics(), lt_api_eval(),  lt_api_lora(),  lt_api_qlora(),     lt_api_prune(),  lt_api_dist(),
      lt_api_distill(), lt_api_sweep(), lt_api_hw(),    lt_api_export(),
  };
  return registry;
}

namespace {

struct Param {
  std::string name;  // "model", "...", with "?" removed
  std::string type;
  bool optional = false;
};

// Splits at `sep` outside brackets and quotes.
std::vector<std::string> split_top(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (char c : s) {
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == '(' || c == '{' || c == '<' || c == '[')) depth++;
    if (!quoted && (c == ')' || c == '}' || c == '>' || c == ']')) depth--;
    if (c == sep && depth == 0 && !quoted) {
      out.push_back(str_trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!str_trim(cur).empty()) out.push_back(str_trim(cur));
  return out;
}

// `Opts` as a whole word in a type -> the function's option class.
std::string resolve_type(const LtFunc& f, std::string type) {
  const std::string cls = lt_func_options_class(f);
  for (size_t at = type.find("Opts"); at != std::string::npos; at = type.find("Opts", at + 1)) {
    bool word_start =
        at == 0 || !(std::isalnum(static_cast<unsigned char>(type[at - 1])) || type[at - 1] == '_');
    bool word_end = at + 4 == type.size() ||
                    !(std::isalnum(static_cast<unsigned char>(type[at + 4])) || type[at + 4] == '_');
    if (word_start && word_end) {
      type.replace(at, 4, cls);
      at += cls.size() - 1;
    }
  }
  return type;
}

std::vector<Param> parse_params(const LtFunc& f) {
  std::vector<Param> out;
  for (const std::string& p : split_top(f.params, ',')) {
    Param q;
    size_t colon = p.find(':');
    q.name = str_trim(p.substr(0, colon));
    q.type = colon == std::string::npos ? "any" : resolve_type(f, str_trim(p.substr(colon + 1)));
    if (!q.name.empty() && q.name.back() == '?') {
      q.optional = true;
      q.name.pop_back();
    }
    out.push_back(q);
  }
  return out;
}

// Documentation text on one line (a declaration's doc must not break the generated files).
std::string one_line(const std::string& s) {
  std::string out = s;
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out;
}

// Every option table: each function's (own or shared) and the modules' nested ones, by class.
std::map<std::string, const std::vector<LtOpt>*> option_tables() {
  std::map<std::string, const std::vector<LtOpt>*> out;
  for (const LtModuleApi& m : lt_api_registry()) {
    for (const LtTable* t : m.tables) out.emplace(t->cls, &t->keys);
    for (const LtFunc& f : m.funcs)
      if (!lt_func_options(f).empty()) out.emplace(lt_func_options_class(f), &lt_func_options(f));
  }
  return out;
}

// ============================================================================================
// lua-language-server annotations

void write_option_class(std::ostringstream& os, const std::string& cls, const std::vector<LtOpt>& keys,
                        std::set<std::string>& written) {
  if (!written.insert(cls).second) return;
  os << "---@class " << cls << "\n";
  for (const LtOpt& o : keys) {
    std::string name = o.name;
    std::string def = o.def;
    bool required = def == "required";
    if (name == "[string]")
      os << "---@field [string] " << o.type;
    else
      os << "---@field " << name << (required ? " " : "? ") << o.type;
    os << " " << one_line(o.doc);
    if (!def.empty() && !required) os << " (default: " << def << ")";
    os << "\n";
  }
  os << "\n";
}

void write_function(std::ostringstream& os, const LtFunc& f, const std::string& owner, bool method,
                    bool drop_first, std::set<std::string>& written) {
  const auto& keys = lt_func_options(f);
  if (!keys.empty()) write_option_class(os, lt_func_options_class(f), keys, written);
  std::vector<Param> params = parse_params(f);
  if (drop_first && !params.empty()) params.erase(params.begin());
  os << "---" << one_line(f.doc) << "\n";
  std::vector<std::string> names;
  for (const Param& p : params) {
    os << "---@param " << p.name << (p.optional && p.name != "..." ? "? " : " ") << p.type << "\n";
    names.push_back(p.name);
  }
  for (const std::string& r : split_top(f.returns, ';')) os << "---@return " << resolve_type(f, r) << "\n";
  os << "function " << owner << (method ? ":" : ".") << f.name << "(" << str_join(names, ", ") << ") end\n\n";
}

}  // namespace

std::string lt_api_lua_types() {
  std::ostringstream os;
  os << "---@meta\n"
        "-- luatune's Lua API for lua-language-server: completion, hover docs and type checks in recipes.\n"
        "-- Generated by `runner api --write` from the declarations in bindings/*.cpp: do not edit.\n"
        "-- Editors: add this directory to Lua.workspace.library (docs/lua_api.md).\n\n";
  std::set<std::string> written;
  for (const LtModuleApi& m : lt_api_registry()) {
    os << "-- " << std::string(92, '=') << "\n-- " << m.module << "\n\n";
    for (const LtTable* t : m.tables) write_option_class(os, t->cls, t->keys, written);
    os << "---" << one_line(m.doc) << "\n---@class luatune." << m.module << "\n";
    for (const LtFunc& f : m.funcs) {
      if (std::string(f.name) != "__call") continue;  // config { ... }
      std::vector<std::string> ps;
      for (const Param& p : parse_params(f)) ps.push_back(p.name + (p.optional ? "?" : "") + ": " + p.type);
      std::vector<std::string> rs;
      for (const std::string& r : split_top(f.returns, ';')) rs.push_back(split_top(r, ' ').front());
      os << "---@overload fun(" << str_join(ps, ", ") << "): " << str_join(rs, ", ") << "\n";
    }
    os << m.module << " = {}\n\n";
    for (const LtFunc& f : m.funcs)
      if (f.module == std::string(m.module) && std::string(f.name) != "__call")
        write_function(os, f, m.module, false, false, written);
    for (const LtClass& c : m.classes) {
      os << "---" << one_line(c.doc) << "\n---@class " << c.name << "\nlocal " << c.name << " = {}\n\n";
      for (const LtFunc& f : m.funcs) {
        if (f.module == std::string(c.name)) write_function(os, f, c.name, true, false, written);
        if (f.self_class && f.self_class == std::string(c.name))
          write_function(os, f, c.name, true, true, written);
      }
      os << "---Frees what the " << c.name << " holds now (GPU memory included); later use is an error.\n"
         << "function " << c.name << ":release() end\n\n";
    }
  }
  std::string s = os.str();
  while (s.size() > 1 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') s.pop_back();
  return s;
}

// ============================================================================================
// Markdown

namespace {

// Text in a table cell: '|' escaped; in prose (not `code`) '<' and '>' as entities, so a
// "<think>" is not taken for an HTML tag.
std::string md_cell(const std::string& s, bool code = false) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '<' && !code)
      out += "&lt;";
    else if (c == '>' && !code)
      out += "&gt;";
    else
      out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string md_table(const std::string& title, const std::vector<LtOpt>& keys) {
  std::ostringstream os;
  os << title << "\n\n| option | type | default | what it does |\n|---|---|---|---|\n";
  for (const LtOpt& o : keys) {
    std::string name = std::string(o.name) == "[string]" ? "any other key" : "`" + std::string(o.name) + "`";
    std::string def = o.def;
    if (!def.empty() && def != "required") def = "`" + def + "`";
    os << "| " << name << " | `" << md_cell(o.type, true) << "` | " << md_cell(def, true) << " | "
       << md_cell(o.doc) << " |\n";
  }
  return os.str();
}

// The functions whose option table has class `cls`, as "`lora.apply`, ...".
std::string functions_of(const std::string& cls) {
  std::vector<std::string> names;
  for (const LtModuleApi& m : lt_api_registry())
    for (const LtFunc& f : m.funcs)
      if (!lt_func_options(f).empty() && lt_func_options_class(f) == cls)
        names.push_back("`" + lt_func_full_name(f) + "`");
  return str_join(names, ", ");
}

// The block for NAME: a function ("lora.apply", "Model:generate") or an option class ("QuantOpts").
bool block_for(const std::string& name, std::string* text, std::string* cls) {
  for (const LtModuleApi& m : lt_api_registry()) {
    for (const LtFunc& f : m.funcs) {
      if (lt_func_full_name(f) != name || lt_func_options(f).empty()) continue;
      *cls = lt_func_options_class(f);
      *text = md_table("Options of " + functions_of(*cls) + ":", lt_func_options(f));
      return true;
    }
  }
  auto tables = option_tables();
  auto it = tables.find(name);
  if (it == tables.end()) return false;
  *cls = name;
  std::string users = functions_of(name);
  *text = md_table("Keys of `" + name + "`" + (users.empty() ? "" : " (" + users + ")") + ":", *it->second);
  return true;
}

}  // namespace

std::string lt_api_refresh_markdown(const std::string& doc, std::vector<std::string>* problems) {
  const std::string open = "<!-- options:", close = "<!-- /options -->";
  std::string out;
  std::set<std::string> shown;
  size_t pos = 0;
  while (true) {
    size_t at = doc.find(open, pos);
    if (at == std::string::npos) break;
    size_t name_end = doc.find("-->", at);
    size_t end = name_end == std::string::npos ? name_end : doc.find(close, name_end);
    if (end == std::string::npos) {
      problems->push_back("an '" + open + "' block has no '" + close + "' after it");
      break;
    }
    std::string name = str_trim(doc.substr(at + open.size(), name_end - at - open.size()));
    out += doc.substr(pos, name_end + 3 - pos);
    std::string text, cls;
    if (block_for(name, &text, &cls)) {
      shown.insert(cls);
      out += "\n" + text;
    } else {
      problems->push_back("block '" + name + "' names no function with options and no option table");
      out += doc.substr(name_end + 3, end - name_end - 3);
    }
    out += close;
    pos = end + close.size();
  }
  out += doc.substr(pos);
  for (const auto& [cls, keys] : option_tables())
    if (!shown.count(cls))
      problems->push_back("no '" + open + "NAME -->' block shows " + cls + " (" +
                          (functions_of(cls).empty() ? "a nested table" : functions_of(cls)) + ")");
  return out;
}

// ============================================================================================
// Checks

std::vector<std::string> lt_api_problems() {
  std::vector<std::string> out;
  std::set<std::string> seen, classes, modules;
  for (const LtModuleApi& m : lt_api_registry()) {
    modules.insert(m.module);
    for (const LtClass& c : m.classes) classes.insert(c.name);
  }
  auto tables = option_tables();
  for (const LtModuleApi& m : lt_api_registry()) {
    for (const LtFunc& f : m.funcs) {
      const std::string name = lt_func_full_name(f);
      if (!seen.insert(name).second) out.push_back(name + ": declared twice");
      bool in_module = f.module == std::string(m.module);
      bool own_class = std::any_of(m.classes.begin(), m.classes.end(),
                                   [&](const LtClass& c) { return c.name == std::string(f.module); });
      if (!in_module && !own_class)
        out.push_back(name + ": declared in module " + m.module + ", which has no class " + f.module);
      if (f.self_class && !classes.count(f.self_class))
        out.push_back(name + ": self_class " + f.self_class + " is not a declared class");
      const bool has_options = !lt_func_options(f).empty();
      bool uses_opts = false;
      for (const Param& p : parse_params(f)) {
        if (p.type.find(lt_func_options_class(f)) != std::string::npos) uses_opts = true;
        for (const std::string& a : split_top(p.type, '|')) {
          std::string base = a.substr(0, a.find('['));
          if (str_ends_with(base, "Opts") && !tables.count(base))
            out.push_back(name + ": parameter " + p.name + " has the undeclared type " + base);
        }
      }
      if (has_options != uses_opts)
        out.push_back(name + (has_options ? ": has options but no parameter of type Opts"
                                          : ": a parameter of type Opts but no options"));
      for (const LtOpt& o : lt_func_options(f))
        for (const std::string& a : split_top(o.type, '|')) {
          std::string base = a.substr(0, a.find('['));
          if (str_ends_with(base, "Opts") && !tables.count(base))
            out.push_back(name + ": option " + o.name + " has the undeclared type " + base);
        }
    }
  }
  // sweep.run's keys are checked again by host/sweep (sweep_spec_parse): the two lists agree.
  for (const LtModuleApi& m : lt_api_registry())
    for (const LtFunc& f : m.funcs)
      if (lt_func_full_name(f) == "sweep.run") {
        std::vector<std::string> ours, host = sweep_option_names();
        for (const LtOpt& o : lt_func_options(f)) ours.push_back(o.name);
        std::sort(ours.begin(), ours.end());
        std::sort(host.begin(), host.end());
        if (ours != host)
          out.push_back("sweep.run: declared options (" + str_join(ours, ", ") +
                        ") differ from host/sweep's sweep_option_names() (" + str_join(host, ", ") + ")");
      }
  return out;
}

// ============================================================================================
// runner api

int lt_api_main(const std::vector<std::string>& args) {
  const std::string usage = "usage: runner api --check|--write [ROOT] | --lua-types | --markdown";
  if (args.empty()) fail_usage("runner api: missing a mode", usage);
  const std::string mode = args[0];
  std::string root = args.size() > 1 ? args[1] : luatune_home();
  if (args.size() > 2) fail_usage("runner api: too many arguments", usage);
  if (root.empty()) root = ".";
  std::vector<std::string> problems = lt_api_problems();
  if (mode == "--lua-types") {
    std::fputs(lt_api_lua_types().c_str(), stdout);
  } else if (mode == "--markdown") {
    for (const auto& [cls, keys] : option_tables()) {
      std::string text, found;
      block_for(cls, &text, &found);
      std::printf("<!-- options:%s -->\n%s<!-- /options -->\n\n", cls.c_str(), text.c_str());
    }
  } else if (mode == "--check" || mode == "--write") {
    const std::string types_path = root + "/types/luatune.d.lua", doc_path = root + "/docs/lua_api.md";
    const std::string types = lt_api_lua_types();
    const std::string doc = file_read(doc_path);
    const std::string refreshed = lt_api_refresh_markdown(doc, &problems);
    if (mode == "--write") {
      if (problems.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(root + "/types", ec);
        file_write_atomic(types_path, types);
        if (refreshed != doc) file_write_atomic(doc_path, refreshed);
        std::printf("runner api: wrote %s and %s\n", types_path.c_str(), doc_path.c_str());
      }
    } else {
      std::string old_types = file_exists(types_path) ? file_read(types_path) : "";
      if (old_types != types)
        problems.push_back(
            types_path +
            " differs from the declarations in bindings/*.cpp; run `runner api --write` to refresh it");
      if (refreshed != doc)
        problems.push_back(doc_path +
                           "'s option tables differ from the declarations in bindings/*.cpp; run `runner api "
                           "--write` to refresh them");
    }
  } else {
    fail_usage("runner api: unknown mode '" + mode + "'", usage);
  }
  for (const std::string& p : problems) std::fprintf(stderr, "runner api: %s\n", p.c_str());
  return problems.empty() ? kExitOk : kExitFailed;
}

}  // namespace luatune
