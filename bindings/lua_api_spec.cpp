// Reads bindings/api/*.yaml (the Lua API's declarations, see lua_api.h) into an LtApi, and the
// registry: the copies the build embedded in the runner, parsed once and looked up by full name.
// Plus the names a declaration implies (full name, option class).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "bindings/lua_api.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"

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

static bool is_class_name(const std::string& module) {
  return !module.empty() && std::isupper(static_cast<unsigned char>(module[0])) != 0;
}

std::string lt_func_full_name(const LtFunc& f) {
  return f.module + (is_class_name(f.module) ? ":" : ".") + f.name;
}

// Every bindings/api/*.yaml, written into the build directory by cmake/embed_text.cmake: its path
// (from the checkout's root) and its text, alternating, then nullptr.
extern const char* const lt_api_yaml_files[];

namespace {

// ============================================================================================
// Reading the YAML: every error is one line "FILE:LINE:COLUMN: what was expected".

struct Reader {
  std::string path;

  std::string where(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (m.is_null()) return path;
    return path + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  [[noreturn]] void error(const YAML::Node& at, const std::string& what) const {
    fail(where(at) + ": " + what);
  }
  std::string text(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar()) error(n, what + ": expected a string");
    return n.Scalar();
  }
  // The map's entries in file order; each key a string, none twice, each in `allowed` when given.
  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& n, const std::string& what,
                                                         const std::vector<std::string>& allowed = {}) const {
    if (!n.IsMap())
      error(n, what + ": expected a map" + (allowed.empty() ? "" : " of " + str_join(allowed, ", ")));
    std::vector<std::pair<YAML::Node, YAML::Node>> out;
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = text(it->first, what + ": a key");
      if (!seen.insert(key).second) error(it->first, what + ": '" + key + "' appears twice");
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        error(it->first, what + ": unknown key '" + key + "'; expected " + str_join(allowed, ", "));
      out.emplace_back(it->first, it->second);
    }
    return out;
  }

  // KEY: {type: T, default: D, doc: DOC}, or OLD_KEY: {renamed: KEY} (KEY.SUBKEY: a key of the
  // table option KEY), in order.
  std::vector<LtOpt> options(const YAML::Node& n, const std::string& what) const {
    std::vector<LtOpt> out;
    for (const auto& [k, v] : entries(n, what)) {
      LtOpt o;
      o.name = k.Scalar();
      const std::string owhat = what + ": option '" + o.name + "'";
      if (v.IsMap() && v["renamed"]) {
        entries(v, owhat, {"renamed"});
        o.renamed = text(v["renamed"], owhat + ": renamed");
        const std::string head = o.renamed.substr(0, o.renamed.find('.'));
        if (std::none_of(out.begin(), out.end(), [&](const LtOpt& x) { return x.name == head; }))
          error(v, owhat + ": renamed names '" + head + "', which is not an option declared above it");
        out.push_back(std::move(o));
        continue;
      }
      for (const auto& [field, value] : entries(v, owhat, {"type", "default", "doc"})) {
        const std::string f = field.Scalar();
        (f == "type" ? o.type : f == "default" ? o.def : o.doc) = text(value, owhat + ": " + f);
      }
      if (o.type.empty()) error(v, owhat + ": expected a type (type: integer, ...)");
      if (o.doc.empty()) error(v, owhat + ": expected a doc (one line)");
      out.push_back(std::move(o));
    }
    return out;
  }
};

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

LtApi lt_api_parse(const std::vector<LtApiFile>& files, const std::string& path) {
  LtApi api;
  api.path = path;
  // Each file's root: the list of modules (a sequence) or MODULE: {...} entries (a map).
  struct Declared {
    Reader r;
    YAML::Node key, value;
  };
  std::map<std::string, Declared> declared;
  std::optional<Reader> order_reader;
  YAML::Node order;
  for (const LtApiFile& file : files) {
    Reader r{file.path};
    YAML::Node root;
    try {
      root = YAML::Load(file.text);
    } catch (const YAML::Exception& e) {
      fail(file.path +
           (e.mark.is_null()
                ? ""
                : ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1)) +
           ": not valid YAML: " + e.msg);
    }
    if (root.IsSequence()) {
      if (order_reader)
        r.error(root,
                "a second list of modules (" + order_reader->path + " lists them); expected MODULE: {...}");
      order_reader = r;
      order = root;
      continue;
    }
    for (const auto& [k, v] : r.entries(root, "the file (MODULE: {doc, classes, tables, functions})")) {
      auto [it, fresh] = declared.emplace(k.Scalar(), Declared{r, k, v});
      if (!fresh)
        r.error(k, "module " + k.Scalar() + " is declared twice (also at " +
                       it->second.r.where(it->second.key) + ")");
    }
  }
  if (!order_reader)
    fail(path + ": no file lists the modules in the order the runner opens them (a YAML list: modules.yaml)");

  // The modules in the listed order, each with the file that declares it.
  std::vector<const Declared*> modules;
  std::set<std::string> listed;
  for (const YAML::Node& item : order) {
    const std::string name = order_reader->text(item, "the list of modules: an entry");
    if (!listed.insert(name).second) order_reader->error(item, "module " + name + " is listed twice");
    auto it = declared.find(name);
    if (it == declared.end())
      order_reader->error(item, "module " + name + " is listed, but no file of " + path + " declares it");
    modules.push_back(&it->second);
  }
  for (const auto& [name, d] : declared)
    if (!listed.count(name))
      d.r.error(d.key, "module " + name + " is declared, but " + order_reader->path + " does not list it");
  api.modules.reserve(modules.size());  // no reallocation: tables and functions are pointed at

  // Modules, classes and tables first: any function may name any module's table.
  std::vector<std::pair<const Reader*, YAML::Node>> functions;
  for (const Declared* d : modules) {
    const Reader& r = d->r;
    const YAML::Node& k = d->key;
    const YAML::Node& v = d->value;
    LtModuleApi m;
    m.module = k.Scalar();
    if (!is_identifier(m.module)) r.error(k, "'" + m.module + "': expected a module name (an identifier)");
    for (const auto& [field, value] : r.entries(v, m.module, {"doc", "classes", "tables", "functions"})) {
      const std::string f = field.Scalar();
      if (f == "doc") {
        m.doc = r.text(value, m.module + ": doc");
      } else if (f == "classes") {
        for (const auto& [ck, cv] : r.entries(value, m.module + ": classes (Class: doc)"))
          m.classes.push_back({ck.Scalar(), r.text(cv, m.module + ": class " + ck.Scalar())});
      } else if (f == "tables") {
        for (const auto& [tk, tv] : r.entries(value, m.module + ": tables (ClassOpts: {KEY: OPTION})")) {
          if (api.tables.count(tk.Scalar())) r.error(tk, "table " + tk.Scalar() + " is declared twice");
          m.tables.push_back({tk.Scalar(), r.options(tv, "table " + tk.Scalar())});
          api.tables[tk.Scalar()] = nullptr;  // a placeholder until the vector stops growing
        }
      }
    }
    if (m.doc.empty()) r.error(v, m.module + ": expected a doc (one line)");
    if (!v["functions"])
      r.error(v, m.module + ": expected functions (FULL_NAME: {params, returns, doc, ...})");
    functions.emplace_back(&r, v["functions"]);
    api.modules.push_back(std::move(m));
  }
  for (const LtModuleApi& m : api.modules)
    for (const LtTable& t : m.tables) api.tables[t.cls] = &t;

  // Functions.
  for (size_t i = 0; i < api.modules.size(); i++) {
    LtModuleApi& m = api.modules[i];
    const Reader& r = *functions[i].first;
    for (const auto& [k, v] : r.entries(functions[i].second, m.module + ": functions")) {
      const std::string full = k.Scalar();
      const size_t sep = full.find_first_of(".:");
      LtFunc f;
      f.file = r.path;
      f.line = k.Mark().line + 1;
      f.module = sep == std::string::npos ? "" : full.substr(0, sep);
      f.name = sep == std::string::npos ? "" : full.substr(sep + 1);
      if (!is_identifier(f.module) || !is_identifier(f.name) || lt_func_full_name(f) != full)
        r.error(k, "'" + full + "': expected module.name or Class:name (a class name starts upper-case)");
      for (const auto& [field, value] :
           r.entries(v, full, {"params", "returns", "doc", "options", "self_class"})) {
        const std::string fk = field.Scalar();
        if (fk == "params") {
          f.params = r.text(value, full + ": params");
        } else if (fk == "returns") {
          f.returns = r.text(value, full + ": returns");
        } else if (fk == "doc") {
          f.doc = r.text(value, full + ": doc");
        } else if (fk == "self_class") {
          f.self_class = r.text(value, full + ": self_class");
        } else if (value.IsScalar()) {  // options: the name of a table declared apart
          auto t = api.tables.find(value.Scalar());
          if (t == api.tables.end())
            r.error(value, full + ": options names the table '" + value.Scalar() +
                               "', which no module declares under tables");
          f.shared = t->second;
        } else {
          f.options = r.options(value, full + ": options");
        }
      }
      if (f.doc.empty()) r.error(v, full + ": expected a doc (one line)");
      m.funcs.push_back(std::move(f));
    }
  }
  for (const LtModuleApi& m : api.modules)
    for (const LtFunc& f : m.funcs) api.funcs.emplace(lt_func_full_name(f), &f);
  return api;
}

// ============================================================================================
// The registry

const LtApi& lt_api_registry() {
  static const LtApi api = [] {
    std::vector<LtApiFile> files;
    for (const char* const* p = lt_api_yaml_files; *p; p += 2) files.push_back({p[0], p[1]});
    return lt_api_parse(files, "bindings/api");
  }();
  return api;
}

std::vector<LtApiFile> lt_api_read_dir(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") paths.push_back(e.path().string());
  if (ec) fail(dir + ": cannot list the directory: " + ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<LtApiFile> files;
  for (const std::string& p : paths) files.push_back({p, file_read(p)});
  return files;
}

const LtFunc& lt_api(const std::string& full_name) {
  const LtApi& api = lt_api_registry();
  auto it = api.funcs.find(full_name);
  if (it == api.funcs.end()) {
    std::vector<std::string> names;
    for (const auto& [name, f] : api.funcs) names.push_back(name);
    const std::string near = str_nearest(full_name, names);
    fail("lt_api: a binding asks for " + full_name + ", which " + api.path + " does not declare" +
         (near.empty() ? "" : " (did you mean " + near + "?)"));
  }
  return *it->second;
}

const LtTable& lt_api_table(const std::string& cls) {
  const LtApi& api = lt_api_registry();
  auto it = api.tables.find(cls);
  if (it == api.tables.end())
    fail("lt_api_table: a binding asks for the option table " + cls + ", which " + api.path +
         " does not declare under any module's tables");
  return *it->second;
}

}  // namespace luatune
