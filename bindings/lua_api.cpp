// What `runner api` makes of the declarations in bindings/api/*.yaml (lua_api.h): types/luatune.d.lua
// for lua-language-server, the option tables of docs/lua_api.md, and the checks that the declarations
// are sound and match what the modules register with Lua.
#include "bindings/lua_api.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "bindings/lua_util.h"
#include "bindings/modules.h"
#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/sweep/sweep_engine.h"

namespace luatune {

std::vector<std::string> lt_split_top(const std::string& s, char sep) {
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

namespace {

struct Param {
  std::string name;  // "model", "...", with "?" removed
  std::string type;
  bool optional = false;
};

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
  for (const std::string& p : lt_split_top(f.params, ',')) {
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
std::map<std::string, const std::vector<LtOpt>*> option_tables(const LtApi& api) {
  std::map<std::string, const std::vector<LtOpt>*> out;
  for (const LtModuleApi& m : api.modules) {
    for (const LtTable& t : m.tables) out.emplace(t.cls, &t.keys);
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
    bool required = o.def == "required";
    if (!o.renamed.empty()) {
      os << "---@field " << o.name << "? any deprecated: the old name of " << o.renamed << "\n";
      continue;
    }
    if (o.name == "[string]")
      os << "---@field [string] " << o.type;
    else
      os << "---@field " << o.name << (required ? " " : "? ") << o.type;
    os << " " << one_line(o.doc);
    if (!o.def.empty() && !required) os << " (default: " << o.def << ")";
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
  for (const std::string& r : lt_split_top(f.returns, ';')) os << "---@return " << resolve_type(f, r) << "\n";
  os << "function " << owner << (method ? ":" : ".") << f.name << "(" << str_join(names, ", ") << ") end\n\n";
}

}  // namespace

std::string lt_api_lua_types(const LtApi& api) {
  std::ostringstream os;
  os << "---@meta\n"
        "-- luatune's Lua API for lua-language-server: completion, hover docs and type checks in recipes.\n"
        "-- Generated by `runner api --write` from the declarations in bindings/api/*.yaml: do not edit.\n"
        "-- Editors: add this directory to Lua.workspace.library (docs/lua_api.md).\n\n";
  std::set<std::string> written;
  for (const LtModuleApi& m : api.modules) {
    os << "-- " << std::string(92, '=') << "\n-- " << m.module << "\n\n";
    for (const LtTable& t : m.tables) write_option_class(os, t.cls, t.keys, written);
    os << "---" << one_line(m.doc) << "\n---@class luatune." << m.module << "\n";
    for (const LtFunc& f : m.funcs) {
      if (f.name != "__call") continue;  // config { ... }
      std::vector<std::string> ps;
      for (const Param& p : parse_params(f)) ps.push_back(p.name + (p.optional ? "?" : "") + ": " + p.type);
      std::vector<std::string> rs;
      for (const std::string& r : lt_split_top(f.returns, ';')) rs.push_back(lt_split_top(r, ' ').front());
      os << "---@overload fun(" << str_join(ps, ", ") << "): " << str_join(rs, ", ") << "\n";
    }
    os << m.module << " = {}\n\n";
    for (const LtFunc& f : m.funcs)
      if (f.module == m.module && f.name != "__call") write_function(os, f, m.module, false, false, written);
    for (const LtClass& c : m.classes) {
      os << "---" << one_line(c.doc) << "\n---@class " << c.name << "\nlocal " << c.name << " = {}\n\n";
      for (const LtFunc& f : m.funcs) {
        if (f.module == c.name) write_function(os, f, c.name, true, false, written);
        if (f.self_class == c.name) write_function(os, f, c.name, true, true, written);
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

// An option table as Markdown: names, types and defaults as code spans, the docs as prose.
std::string md_options(const std::string& title, const std::vector<LtOpt>& keys) {
  std::vector<std::vector<std::string>> rows;
  for (const LtOpt& o : keys) {
    if (!o.renamed.empty()) {
      rows.push_back({"`" + o.name + "`", "", "",
                      "deprecated: the old name of `" + o.renamed +
                          "`, accepted with a warning until the next release"});
      continue;
    }
    const bool code_default = !o.def.empty() && o.def != "required";
    rows.push_back({o.name == "[string]" ? "any other key" : "`" + o.name + "`", "`" + md_cell(o.type) + "`",
                    code_default ? "`" + md_cell(o.def) + "`" : o.def, md_text(o.doc)});
  }
  return title + "\n\n" + md_table({{"option"}, {"type"}, {"default"}, {"what it does"}}, rows);
}

// The functions whose option table has class `cls`, as "`lora.apply`, ...".
std::string functions_of(const LtApi& api, const std::string& cls) {
  std::vector<std::string> names;
  for (const LtModuleApi& m : api.modules)
    for (const LtFunc& f : m.funcs)
      if (!lt_func_options(f).empty() && lt_func_options_class(f) == cls)
        names.push_back("`" + lt_func_full_name(f) + "`");
  return str_join(names, ", ");
}

// The block for NAME: a function ("lora.apply", "Model:generate") or an option class ("QuantOpts").
bool block_for(const LtApi& api, const std::string& name, std::string* text, std::string* cls) {
  auto f = api.funcs.find(name);
  if (f != api.funcs.end() && !lt_func_options(*f->second).empty()) {
    *cls = lt_func_options_class(*f->second);
    *text = md_options("Options of " + functions_of(api, *cls) + ":", lt_func_options(*f->second));
    return true;
  }
  auto tables = option_tables(api);
  auto it = tables.find(name);
  if (it == tables.end()) return false;
  *cls = name;
  std::string users = functions_of(api, name);
  *text = md_options("Keys of `" + name + "`" + (users.empty() ? "" : " (" + users + ")") + ":", *it->second);
  return true;
}

}  // namespace

std::string lt_api_refresh_markdown(const LtApi& api, const std::string& doc,
                                    std::vector<std::string>* problems) {
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
    if (block_for(api, name, &text, &cls)) {
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
  for (const auto& [cls, keys] : option_tables(api))
    if (!shown.count(cls))
      problems->push_back("no '" + open + "NAME -->' block shows " + cls + " (" +
                          (functions_of(api, cls).empty() ? "a nested table" : functions_of(api, cls)) + ")");
  return out;
}

// ============================================================================================
// Checks

namespace {

// "bindings/api/lora.yaml:12: lora.apply", for a problem with a declaration.
std::string where(const LtFunc& f) {
  return f.file + ":" + std::to_string(f.line) + ": " + lt_func_full_name(f);
}

// The declarations on their own: names, classes, option tables and the Opts parameter agree.
std::vector<std::string> declaration_problems(const LtApi& api) {
  std::vector<std::string> out;
  std::set<std::string> seen, classes;
  for (const LtModuleApi& m : api.modules)
    for (const LtClass& c : m.classes) classes.insert(c.name);
  auto tables = option_tables(api);
  for (const LtModuleApi& m : api.modules) {
    for (const LtFunc& f : m.funcs) {
      const std::string name = where(f);
      if (!seen.insert(lt_func_full_name(f)).second) out.push_back(name + ": declared twice");
      bool in_module = f.module == m.module;
      bool own_class = std::any_of(m.classes.begin(), m.classes.end(),
                                   [&](const LtClass& c) { return c.name == f.module; });
      if (!in_module && !own_class)
        out.push_back(name + ": declared in module " + m.module + ", which has no class " + f.module);
      if (!f.self_class.empty() && !classes.count(f.self_class))
        out.push_back(name + ": self_class " + f.self_class + " is not a declared class");
      const bool has_options = !lt_func_options(f).empty();
      bool uses_opts = false;
      for (const Param& p : parse_params(f)) {
        if (p.type.find(lt_func_options_class(f)) != std::string::npos) uses_opts = true;
        for (const std::string& a : lt_split_top(p.type, '|')) {
          std::string base = a.substr(0, a.find('['));
          if (str_ends_with(base, "Opts") && !tables.count(base))
            out.push_back(name + ": parameter " + p.name + " has the undeclared type " + base);
        }
      }
      if (has_options != uses_opts)
        out.push_back(name + (has_options ? ": has options but no parameter of type Opts"
                                          : ": a parameter of type Opts but no options"));
      for (const LtOpt& o : lt_func_options(f))
        for (const std::string& a : lt_split_top(o.type, '|')) {
          std::string base = a.substr(0, a.find('['));
          if (str_ends_with(base, "Opts") && !tables.count(base))
            out.push_back(name + ": option " + o.name + " has the undeclared type " + base);
        }
    }
  }
  // sweep.run's keys are checked again by host/sweep (sweep_spec_parse): the two lists agree.
  auto run = api.funcs.find("sweep.run");
  if (run != api.funcs.end()) {
    std::vector<std::string> ours, host = sweep_option_names();
    for (const LtOpt& o : lt_func_options(*run->second)) ours.push_back(o.name);
    std::sort(ours.begin(), ours.end());
    std::sort(host.begin(), host.end());
    if (ours != host)
      out.push_back(where(*run->second) + ": declared options (" + str_join(ours, ", ") +
                    ") differ from host/sweep's sweep_option_names() (" + str_join(host, ", ") + ")");
  }
  return out;
}

// What the modules register in a fresh Lua state: each module's functions (with "__call" for a
// callable module: config { ... }) and each class's methods (release() aside: every class has it).
struct Registered {
  std::vector<std::string> modules;  // in the order the runner opens them
  std::map<std::string, std::set<std::string>> functions, methods;
  std::map<std::string, std::string> where;  // "lora.merge" -> "bindings/lora.cpp:160", its LT_REGISTER
};

std::string registration_place(const LtRegistration& r) {
  return r.file + ":" + std::to_string(r.line);
}

// Records the function at the top of the stack as owner + sep + name ("lora.merge").
void add_function(lua_State* L, Registered& r, std::set<std::string>& names, const std::string& owner,
                  const char* sep, const std::string& name) {
  names.insert(name);
  if (const LtRegistration* reg = lt_registration_of(L, -1))
    r.where[owner + sep + name] = registration_place(*reg);
}

// Every function in the table at idx (a module's, or a class's methods).
std::set<std::string> function_keys(lua_State* L, int idx, Registered& r, const std::string& owner,
                                    const char* sep) {
  std::set<std::string> out;
  if (idx < 0) idx = lua_gettop(L) + idx + 1;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1))
      add_function(L, r, out, owner, sep, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return out;
}

Registered registered_functions() {
  Registered r;
  lua_State* L = luaL_newstate();
  LT_CHECK(L, "runner api: cannot create a Lua state (out of memory)");
  luaL_openlibs(L);
  lt_open_modules(L);
  for (const std::string& m : lt_modules()) {
    r.modules.push_back(m);
    lua_getglobal(L, m.c_str());
    std::set<std::string>& names = r.functions[m] = function_keys(L, -1, r, m, ".");
    if (lua_getmetatable(L, -1)) {
      lua_getfield(L, -1, "__call");
      if (lua_isfunction(L, -1)) add_function(L, r, names, m, ".", "__call");
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
  }
  const std::string prefix = lt_metatable_name("");  // "luatune."
  lua_pushnil(L);
  while (lua_next(L, LUA_REGISTRYINDEX)) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1) &&
        str_starts_with(lua_tostring(L, -2), prefix)) {
      const std::string cls = std::string(lua_tostring(L, -2)).substr(prefix.size());
      lua_getfield(L, -1, "methods");
      if (lua_istable(L, -1)) {
        r.methods[cls] = function_keys(L, -1, r, cls, ":");
        r.methods[cls].erase("release");
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_close(L);
  return r;
}

// Each LT_REGISTER names a module that the runner opens ("lora.merge") or a class that a module
// registers ("Model:generate"), and each LT_ON_OPEN such a module: anything else never runs.
std::vector<std::string> registration_name_problems(const Registered& reg) {
  std::vector<std::string> out;
  for (const LtRegistration& r : lt_registrations()) {
    const std::string module = r.owner + "." + r.name, method = r.owner + ":" + r.name;
    const bool is_module = reg.functions.count(r.owner) > 0, is_class = reg.methods.count(r.owner) > 0;
    if ((is_module && r.full_name == module) || (is_class && r.full_name == method)) continue;
    std::string expected = is_module ? module : is_class ? method : "\"module.name\" or \"Class:name\"";
    out.push_back(registration_place(r) + ": " + r.full_name +
                  ": registered under a name no module or class opens (expected " + expected + ")");
  }
  for (const LtOpenStep& step : lt_open_steps())
    if (!reg.functions.count(step.module))
      out.push_back(step.file + ":" + std::to_string(step.line) + ": an open step of module " + step.module +
                    ", which the runner does not open");
  return out;
}

// The declarations against what the modules register: the same modules in the same order, the
// same classes, and every function registered declared and every declared one registered.
std::vector<std::string> registration_problems(const LtApi& api) {
  const Registered reg = registered_functions();
  std::vector<std::string> out = registration_name_problems(reg);
  auto place = [&](const std::string& full) {
    auto it = reg.where.find(full);
    return it == reg.where.end() ? std::string() : it->second + ": ";
  };
  std::vector<std::string> declared_modules;
  std::map<std::string, std::string> class_module;  // declared class -> its module
  std::map<std::string, const LtFunc*> declared;    // "lora.apply", "Model:generate", "Tensor:exp"
  for (const LtModuleApi& m : api.modules) {
    declared_modules.push_back(m.module);
    for (const LtClass& c : m.classes) class_module[c.name] = m.module;
    for (const LtFunc& f : m.funcs) {
      declared.emplace(lt_func_full_name(f), &f);
      if (!f.self_class.empty()) declared.emplace(f.self_class + ":" + f.name, &f);
    }
  }
  if (declared_modules != reg.modules)
    out.push_back(api.path + ": declares the modules " + str_join(declared_modules, ", ") +
                  "; the runner opens " + str_join(reg.modules, ", ") + " (the same, in the same order)");
  for (const auto& [cls, names] : reg.methods)
    if (!class_module.count(cls))
      out.push_back(cls + ": a class the modules register, not declared in " + api.path);
  for (const auto& [cls, module] : class_module)
    if (!reg.methods.count(cls))
      out.push_back(api.path + ": class " + cls + " of module " + module +
                    " is declared, but no module registers it");

  auto has = [](const std::map<std::string, std::set<std::string>>& m, const std::string& owner,
                const std::string& name) {
    auto it = m.find(owner);
    return it != m.end() && it->second.count(name) > 0;
  };
  for (const auto& [module, names] : reg.functions)
    for (const std::string& n : names)
      if (!declared.count(module + "." + n))
        out.push_back(place(module + "." + n) + module + "." + n + ": the " + module +
                      " module registers it, but " + api.path + " does not declare it");
  for (const auto& [cls, names] : reg.methods) {
    for (const std::string& n : names)
      if (!declared.count(cls + ":" + n))
        out.push_back(place(cls + ":" + n) + cls + ":" + n + ": a method registered for class " + cls +
                      ", but " + api.path + " does not declare it");
  }
  for (const auto& [full, f] : declared) {
    const size_t sep = full.find_first_of(".:");
    const std::string owner = full.substr(0, sep), name = full.substr(sep + 1);
    if (full[sep] == '.' && !has(reg.functions, owner, name))
      out.push_back(where(*f) + ": declared, but the " + owner + " module registers no function " + name);
    if (full[sep] == ':' && !has(reg.methods, owner, name))
      out.push_back(where(*f) + ": declared, but class " + owner + " registers no method " + name +
                    (full == lt_func_full_name(*f) ? "" : " (self_class " + owner + ")"));
  }
  return out;
}

}  // namespace

std::vector<std::string> lt_api_problems(const LtApi& api) {
  std::vector<std::string> out = declaration_problems(api);
  for (std::string& p : registration_problems(api)) out.push_back(std::move(p));
  return out;
}

// ============================================================================================
// runner api

int lt_api_main(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: runner api --check|--write [ROOT] | --lua-types | --markdown | --parse [--spec DIR]";
  if (args.empty()) fail_usage("runner api: missing a mode", usage);
  const std::string mode = args[0];
  std::string root, spec;
  for (size_t i = 1; i < args.size(); i++) {
    if (args[i] == "--spec" && i + 1 < args.size())
      spec = args[++i];
    else if (args[i] == "--spec" || !root.empty())
      fail_usage("runner api: unexpected argument '" + args[i] + "'", usage);
    else
      root = args[i];
  }
  if (root.empty()) root = luatune_home();
  if (root.empty()) root = ".";
  // --spec DIR: data files other than those embedded (tests of the checks, a quick look).
  std::unique_ptr<LtApi> from_file;
  if (!spec.empty()) from_file = std::make_unique<LtApi>(lt_api_parse(lt_api_read_dir(spec), spec));
  const LtApi& api = from_file ? *from_file : lt_api_registry();
  if (mode == "--parse") return kExitOk;  // the build's check that the file parses (CMakeLists.txt)
  std::vector<std::string> problems = lt_api_problems(api);
  if (mode == "--lua-types") {
    std::fputs(lt_api_lua_types(api).c_str(), stdout);
  } else if (mode == "--markdown") {
    for (const auto& [cls, keys] : option_tables(api)) {
      std::string text, found;
      block_for(api, cls, &text, &found);
      std::printf("<!-- options:%s -->\n%s<!-- /options -->\n\n", cls.c_str(), text.c_str());
    }
  } else if (mode == "--check" || mode == "--write") {
    const std::string types_path = root + "/types/luatune.d.lua", doc_path = root + "/docs/lua_api.md";
    const std::string types = lt_api_lua_types(api);
    const std::string doc = file_read(doc_path);
    const std::string refreshed = lt_api_refresh_markdown(api, doc, &problems);
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
        problems.push_back(types_path + " differs from the declarations in " + api.path +
                           "; run `runner api --write` to refresh it");
      if (refreshed != doc)
        problems.push_back(doc_path + "'s option tables differ from the declarations in " + api.path +
                           "; run `runner api --write` to refresh them");
    }
  } else {
    fail_usage("runner api: unknown mode '" + mode + "'", usage);
  }
  for (const std::string& p : problems) std::fprintf(stderr, "runner api: %s\n", p.c_str());
  return problems.empty() ? kExitOk : kExitFailed;
}

}  // namespace luatune
