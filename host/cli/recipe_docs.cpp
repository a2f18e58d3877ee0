// A recipe's self-description, read from its Lua source (see recipe_docs.h). A small Lua lexer
// (strings, long strings, comments, names, numbers, punctuation) is enough: the config table is a
// constructor of `name = value` fields whose values are plain literals or short expressions.
#include "host/cli/recipe_docs.h"

#include <cctype>
#include <sstream>

#include "host/cli/config.h"
#include "host/cli/recipes.h"
#include "host/core/files.h"
#include "host/core/strings.h"

namespace luatune {

namespace {

struct Token {
  enum Kind { name, string, number, punct, comment, eof } kind = eof;
  std::string text;  // a comment's body (after "--", trimmed), a name, the punctuation
  int line = 0;      // where the token starts
  int end_line = 0;  // where it ends (long strings and comments span lines)
  bool long_comment = false;
};

class Lexer {
 public:
  explicit Lexer(const std::string& s) : s_(s) {}

  std::vector<Token> all() {
    std::vector<Token> out;
    for (;;) {
      Token t = next();
      out.push_back(t);
      if (t.kind == Token::eof) return out;
    }
  }

 private:
  char at(size_t k) const { return k < s_.size() ? s_[k] : '\0'; }

  // "[[", "[==[": the number of '=' of a long bracket at i_, or -1 when there is none.
  int long_bracket_level() const {
    if (at(i_) != '[') return -1;
    size_t k = i_ + 1;
    while (at(k) == '=') k++;
    return at(k) == '[' ? static_cast<int>(k - i_ - 1) : -1;
  }

  // Skips a long bracket of `level` starting at i_; returns its contents.
  std::string skip_long(int level) {
    i_ += static_cast<size_t>(level) + 2;
    std::string close = "]" + std::string(static_cast<size_t>(level), '=') + "]";
    size_t end = s_.find(close, i_);
    if (end == std::string::npos) end = s_.size();
    std::string body = s_.substr(i_, end - i_);
    for (char c : body) line_ += c == '\n';
    i_ = std::min(s_.size(), end + close.size());
    return body;
  }

  Token next() {
    for (;;) {  // whitespace
      char c = at(i_);
      if (c == '\n') line_++;
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v')
        i_++;
      else
        break;
    }
    Token t;
    t.line = line_;
    if (i_ >= s_.size()) {
      t.end_line = line_;
      return t;
    }
    char c = s_[i_];
    if (c == '-' && at(i_ + 1) == '-') {
      t.kind = Token::comment;
      i_ += 2;
      if (int level = long_bracket_level(); level >= 0) {
        t.long_comment = true;
        t.text = str_trim(skip_long(level));
      } else {
        size_t end = s_.find('\n', i_);
        if (end == std::string::npos) end = s_.size();
        t.text = str_trim(s_.substr(i_, end - i_));
        i_ = end;
      }
    } else if (c == '"' || c == '\'') {
      t.kind = Token::string;
      i_++;
      while (i_ < s_.size() && s_[i_] != c && s_[i_] != '\n') {
        if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
          if (s_[i_ + 1] == '\n') line_++;
          i_++;
        }
        t.text += s_[i_++];
      }
      i_++;
    } else if (int level = long_bracket_level(); level >= 0) {
      t.kind = Token::string;
      t.text = skip_long(level);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Token::name;
      while (std::isalnum(static_cast<unsigned char>(at(i_))) || at(i_) == '_') t.text += s_[i_++];
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && std::isdigit(static_cast<unsigned char>(at(i_ + 1))))) {
      t.kind = Token::number;
      bool hex = c == '0' && (at(i_ + 1) == 'x' || at(i_ + 1) == 'X');
      while (std::isalnum(static_cast<unsigned char>(at(i_))) || at(i_) == '.' || at(i_) == '_') {
        char d = s_[i_++];
        t.text += d;
        bool exp = hex ? (d == 'p' || d == 'P') : (d == 'e' || d == 'E');
        if (exp && (at(i_) == '+' || at(i_) == '-')) t.text += s_[i_++];
      }
    } else {
      t.kind = Token::punct;
      static const char* multi[] = {"...", "..", "==", "~=", "<=", ">=", "::"};
      for (const char* m : multi) {
        if (s_.compare(i_, std::char_traits<char>::length(m), m) == 0) {
          t.text = m;
          break;
        }
      }
      if (t.text.empty()) t.text = std::string(1, c);
      i_ += t.text.size();
    }
    t.end_line = line_;
    return t;
  }

  const std::string& s_;
  size_t i_ = 0;
  int line_ = 1;
};

bool is(const Token& t, const char* punct) {
  return t.kind == Token::punct && t.text == punct;
}

class ConfigParser {
 public:
  ConfigParser(const std::vector<Token>& toks, RecipeDocs& out) : t_(toks), out_(out) {}

  // Index of the config table's '{', or npos: `config {`, `config({`, or a set's call inside the
  // parentheses, `config(keys.training {` / `config(keys.training({`, which sets *set_local ("keys")
  // and *set ("training").
  size_t find_config(std::string* set_local, std::string* set) const {
    for (size_t k = 0; k + 1 < t_.size(); k++) {
      if (t_[k].kind != Token::name || t_[k].text != "config") continue;
      if (k > 0 && (is(t_[k - 1], ".") || is(t_[k - 1], ":"))) continue;
      size_t j = next_code(k + 1);
      if (j < t_.size() && is(t_[j], "{")) return j;
      if (j >= t_.size() || !is(t_[j], "(")) continue;
      size_t m = next_code(j + 1);
      if (m < t_.size() && is(t_[m], "{")) return m;
      size_t dot = next_code(m + 1), name = next_code(dot + 1), open = next_code(name + 1);
      if (open < t_.size() && is(t_[open], "(")) open = next_code(open + 1);
      if (open < t_.size() && t_[m].kind == Token::name && is(t_[dot], ".") && t_[name].kind == Token::name &&
          is(t_[open], "{")) {
        *set_local = t_[m].text;
        *set = t_[name].text;
        return open;
      }
    }
    return std::string::npos;
  }

  // The module `local NAME = require("MOD")` (or `require "MOD"`) loads, or "".
  std::string required_module(const std::string& local) const {
    for (size_t k = 0; k + 4 < t_.size(); k++) {
      if (t_[k].kind != Token::name || t_[k].text != local || !is(t_[next_code(k + 1)], "=")) continue;
      size_t r = next_code(next_code(k + 1) + 1);
      if (r >= t_.size() || t_[r].kind != Token::name || t_[r].text != "require") continue;
      size_t s = next_code(r + 1);
      if (s < t_.size() && is(t_[s], "(")) s = next_code(s + 1);
      if (s < t_.size() && t_[s].kind == Token::string) return t_[s].text;
    }
    return "";
  }

  // In a set module: the '{' of `M.NAME = set(M.INCLUDED, {` (any table and function names), or npos;
  // *included is the set named before the table ("" for nil).
  size_t find_set(const std::string& name, std::string* included) const {
    for (size_t k = 0; k + 3 < t_.size(); k++) {
      if (t_[k].kind != Token::name || t_[k].text != name || k == 0 || !is(t_[k - 1], ".")) continue;
      size_t j = next_code(k + 1);
      if (j >= t_.size() || !is(t_[j], "=")) continue;
      included->clear();
      for (j = next_code(j + 1); j < t_.size() && t_[j].kind != Token::eof; j = next_code(j + 1)) {
        if (is(t_[j], "{")) return j;
        if (included->empty() && is(t_[j], ".") && j + 1 < t_.size() && t_[j + 1].kind == Token::name)
          *included = t_[j + 1].text;
      }
    }
    return std::string::npos;
  }

  // Fields of the table whose '{' is at `open`; returns the index after its '}'.
  size_t table(size_t open, const std::string& prefix) {
    size_t k = open + 1;
    int prev_end_line = -1;
    std::string prev_key;
    while (k < t_.size()) {
      k = next_code(k);
      if (k >= t_.size() || t_[k].kind == Token::eof) return k;
      if (is(t_[k], "}")) return k + 1;
      if (t_[k].kind == Token::name && next_code(k + 1) < t_.size() && is(t_[next_code(k + 1)], "=")) {
        RecipeKeyDoc d;
        d.key = prefix.empty() ? t_[k].text : prefix + "." + t_[k].text;
        d.line = t_[k].line;
        if (d.line == prev_end_line)
          out_.problems.push_back(std::to_string(d.line) + ": key '" + d.key + "' shares its line with '" +
                                  prev_key + "' (one key a line, each with its -- doc)");
        size_t v = next_code(next_code(k + 1) + 1);
        size_t entry = out_.keys.size();
        int end_line;
        if (v < t_.size() && is(t_[v], "{") && has_named_fields(v)) {
          d.table = true;
          d.doc = trailing_comment(v + 1, t_[v].line);
          out_.keys.push_back(d);
          k = table(v, d.key);
          end_line = t_[k - 1].end_line;
        } else {
          out_.keys.push_back(d);
          std::string start_doc;
          k = skip_value(v, d.line, &start_doc);
          end_line = last_code_line_;
          std::string end_doc = trailing_comment(skip_separator(k), end_line);
          out_.keys[entry].doc = !end_doc.empty() ? end_doc : start_doc;
        }
        prev_end_line = end_line;
        prev_key = d.key;
      } else {  // a positional item or a [computed] key: not a documented key
        k = skip_value(k, t_[k].line, nullptr);
        prev_end_line = last_code_line_;
      }
      k = skip_separator(k);
    }
    return k;
  }

 private:
  size_t next_code(size_t k) const {
    while (k < t_.size() && t_[k].kind == Token::comment) k++;
    return k;
  }

  size_t skip_separator(size_t k) const {
    size_t j = next_code(k);
    return j < t_.size() && (is(t_[j], ",") || is(t_[j], ";")) ? j + 1 : k;
  }

  // The body of a one-line comment starting on `line` at or after k, before any code token.
  std::string trailing_comment(size_t k, int line) const {
    for (; k < t_.size() && t_[k].kind == Token::comment; k++)
      if (t_[k].line == line && !t_[k].long_comment) return t_[k].text;
    return "";
  }

  // Does the constructor at `open` have `name = ...` fields (a config table) rather than items?
  bool has_named_fields(size_t open) const {
    int depth = 0;
    for (size_t k = open; k < t_.size(); k++) {
      if (t_[k].kind == Token::comment) continue;
      if (is(t_[k], "{") || is(t_[k], "(") || is(t_[k], "[")) depth++;
      if (is(t_[k], "}") || is(t_[k], ")") || is(t_[k], "]")) {
        if (--depth == 0) return false;
      }
      if (depth == 1 && t_[k].kind == Token::name) {
        size_t j = next_code(k + 1);
        if (j < t_.size() && is(t_[j], "=") && !is(t_[k - 1], ".")) return true;
      }
    }
    return false;
  }

  // Skips one value (an expression up to ',' ';' or the enclosing '}'); records in *start_doc a
  // one-line comment on `key_line` seen inside it; sets last_code_line_.
  size_t skip_value(size_t k, int key_line, std::string* start_doc) {
    int depth = 0;
    for (; k < t_.size() && t_[k].kind != Token::eof; k++) {
      const Token& t = t_[k];
      if (t.kind == Token::comment) {
        if (start_doc && start_doc->empty() && t.line == key_line && !t.long_comment) *start_doc = t.text;
        continue;
      }
      if (depth == 0 && (is(t, ",") || is(t, ";") || is(t, "}"))) break;
      if (is(t, "{") || is(t, "(") || is(t, "[")) depth++;
      if (is(t, "}") || is(t, ")") || is(t, "]")) depth--;
      last_code_line_ = t.end_line;
    }
    return k;
  }

  const std::vector<Token>& t_;
  RecipeDocs& out_;
  int last_code_line_ = 0;
};

// Where the first sentence of `prose` ends (the index after its '.'), or npos.
size_t first_sentence_end(const std::string& prose) {
  static const char* abbreviations[] = {"e.g.", "i.e.", "vs.", "cf.", "etc.", "approx."};
  for (size_t k = 0; k < prose.size(); k++) {
    if (prose[k] != '.' && prose[k] != '!' && prose[k] != '?') continue;
    if (k + 1 < prose.size() && prose[k + 1] != ' ') continue;  // "docs/x.md", "3.1", "..."
    size_t word = prose.rfind(' ', k);
    word = word == std::string::npos ? 0 : word + 1;
    std::string w = prose.substr(word, k + 1 - word);
    bool abbr = false;
    for (const char* a : abbreviations) abbr = abbr || w == a || str_ends_with(w, std::string("(") + a);
    if (!abbr) return k + 1;
  }
  return std::string::npos;
}

}  // namespace

RecipeDocs recipe_docs_parse(const std::string& source, const std::string& path) {
  RecipeDocs d;
  d.path = path;
  // The leading comment block (after an optional #! line).
  std::istringstream in(source);
  std::string line;
  std::vector<std::string> prose;
  bool started = false;
  for (int n = 1; std::getline(in, line); n++) {
    std::string s = str_trim(line);
    if (n == 1 && str_starts_with(s, "#!")) continue;
    if (s.empty() && !started) continue;
    if (!str_starts_with(s, "--") || str_starts_with(s, "--[[")) break;
    started = true;
    std::string text = str_trim(s.substr(2));
    if (prose.empty() && d.usage.empty()) {  // "recipes/quickstart.lua: what it does" -> "what it does"
      size_t colon = text.find(": ");
      if (colon != std::string::npos && str_ends_with(text.substr(0, colon), ".lua"))
        text = text.substr(colon + 2);
    }
    if (str_starts_with(text, "runner "))
      d.usage.push_back(text);
    else if (!text.empty())
      prose.push_back(text);
  }
  d.prose = str_join(prose, " ");
  size_t end = first_sentence_end(d.prose);
  if (end != std::string::npos) d.first_sentence = d.prose.substr(0, end);

  std::vector<Token> toks = Lexer(source).all();
  ConfigParser parser(toks, d);
  std::string set_local;
  size_t open = parser.find_config(&set_local, &d.include_set);
  if (open != std::string::npos) {
    d.has_config = true;
    d.config_line = toks[open].line;
    parser.table(open, "");
  }
  if (!set_local.empty()) {
    d.include_module = parser.required_module(set_local);
    if (d.include_module.empty())
      d.problems.push_back(std::to_string(d.config_line) + ": config(" + set_local + "." + d.include_set +
                           " {...}): no `local " + set_local + " = require(\"...\")` names the set's module");
  }
  return d;
}

namespace {

// The keys of `set` in a set module's tokens, the included set's first (a key both give keeps the
// included set's place and takes this set's doc and line).
void set_keys(const std::vector<Token>& toks, const std::string& set, int depth, RecipeDocs& out) {
  RecipeDocs own;
  ConfigParser parser(toks, own);
  std::string included;
  size_t open = parser.find_set(set, &included);
  if (open == std::string::npos || depth > 8) {
    out.problems.push_back("no set '" + set + "' (`M." + set + " = set(..., { ... })`) in " + out.path);
    return;
  }
  if (!included.empty()) set_keys(toks, included, depth + 1, out);
  parser.table(open, "");
  for (auto& k : own.keys) {
    bool replaced = false;
    for (auto& s : out.shared)
      if (s.key == k.key) s = k, replaced = true;
    if (!replaced) out.shared.push_back(k);
  }
  for (auto& p : own.problems) out.problems.push_back(p);
}

}  // namespace

void recipe_docs_include(RecipeDocs& docs, const std::string& module_source, const std::string& module_path) {
  RecipeDocs module;
  module.path = module_path;
  set_keys(Lexer(module_source).all(), docs.include_set, 0, module);
  docs.shared = module.shared;
  for (auto& p : module.problems) docs.problems.push_back(module_path + ":" + p);
}

RecipeDocs recipe_docs_read(const std::string& path) {
  RecipeDocs d = recipe_docs_parse(file_read(path), path);
  if (d.include_module.empty()) return d;
  const std::string file = "scripts/lua/" + d.include_module + ".lua";
  for (const std::string& dir : {luatune_home(), path_dirname(path) + "/.."}) {
    if (!dir.empty() && file_exists(dir + "/" + file)) {
      recipe_docs_include(d, file_read(dir + "/" + file), dir + "/" + file);
      return d;
    }
  }
  d.problems.push_back(path + ": the set '" + d.include_set + "' is in " + file +
                       ", found under neither LUATUNE_HOME nor the recipe's directory's parent");
  return d;
}

std::string recipe_key_doc(const RecipeDocs& docs, const std::string& key) {
  for (const auto& k : docs.keys)
    if (k.key == key && !k.doc.empty()) return k.doc;
  for (const auto& k : docs.shared)
    if (k.key == key) return k.doc;
  return "";
}

namespace {

void collect_leaves(const ConfigValue& v, const std::string& prefix,
                    std::vector<std::pair<std::string, const ConfigValue*>>* out) {
  for (const auto& [name, f] : v.fields) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    if (f.kind == ConfigValue::Kind::table)
      collect_leaves(f, key, out);
    else
      out->push_back({key, &f});
  }
}

std::string kind_label(const ConfigValue& v) {
  if (v.kind != ConfigValue::Kind::list) return config_kind_name(v.kind);
  if (v.items.empty()) return "list";
  return std::string("list of ") + config_kind_name(v.items.front().kind) + "s";
}

}  // namespace

std::string recipe_help_text(const std::string& name, const RecipeDocs& docs, const ConfigValue* resolved,
                             size_t width) {
  std::string out = name + " (" + docs.path + ")\n";
  if (!docs.prose.empty()) out += "  " + text_wrap(docs.prose, width, 2) + "\n";
  if (!docs.usage.empty()) {
    out += "\nusage:\n";
    for (const auto& u : docs.usage) out += "  " + text_wrap(u, width, 4) + "\n";
  }
  if (!resolved) return out + "\n(no config{} table: this script takes no key=value overrides)\n";
  std::vector<std::pair<std::string, const ConfigValue*>> leaves;
  collect_leaves(*resolved, "", &leaves);
  // Source order (the recipe's own grouping) where the docs know the key; the rest after, by name;
  // then the shared set's keys the recipe does not give, in the set's order.
  std::vector<std::pair<std::string, const ConfigValue*>> own, shared;
  auto taken = [&](const std::string& key) {
    for (const auto& o : own)
      if (o.first == key) return true;
    for (const auto& o : shared)
      if (o.first == key) return true;
    return false;
  };
  for (const auto& k : docs.keys)
    for (const auto& l : leaves)
      if (l.first == k.key) own.push_back(l);
  for (const auto& k : docs.shared)
    for (const auto& l : leaves)
      if (l.first == k.key && !taken(l.first)) shared.push_back(l);
  for (const auto& l : leaves)
    if (!taken(l.first)) own.push_back(l);
  auto list = [&](const std::vector<std::pair<std::string, const ConfigValue*>>& keys) {
    for (const auto& [key, v] : keys) {
      std::string doc = recipe_key_doc(docs, key);
      std::string value = config_value_str(*v);
      if (value.size() > 60) value = value.substr(0, 57) + "...";
      out += "  " + key + "  (" + kind_label(*v) + ") = " + value + "\n";
      out += "      " + text_wrap(doc.empty() ? "(no doc)" : doc, width, 6) + "\n";
    }
  };
  out += "\nkeys (override with key=value or --config FILE; docs/recipes.md has the shared vocabulary):\n";
  list(own);
  if (!shared.empty()) {
    out += "\nshared keys (set '" + docs.include_set + "' of scripts/lua/" + docs.include_module +
           ".lua; key=value overrides these too):\n";
    list(shared);
  }
  return out;
}

std::string text_wrap(const std::string& text, size_t width, size_t indent) {
  const size_t room = width > indent + 20 ? width - indent : 20;  // every line starts at `indent`
  std::string out, line;
  std::istringstream words(text);
  std::string w;
  while (words >> w) {
    if (!line.empty() && line.size() + 1 + w.size() > room) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + line;
}

}  // namespace luatune
