// Lua module `eval`: multiple-choice accuracy by log-likelihood (host/train/eval.cpp) and
// perplexity (the model's own model:perplexity). Answers are 0-based choice indices, as in the
// JSONL files (MMLU's "answer" field), or letters "A".."Z".
#include "host/train/eval.h"

#include <memory>

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tokenizer_class.h"
#include "host/core/error.h"
#include "host/text/chat.h"

namespace luatune {

namespace {

// {question = "...", choices = {"...", ...}, answer = 0 | "A"} at idx.
McRecord check_record(lua_State* L, int idx, const std::string& where) {
  LT_CHECK(lua_istable(L, idx),
           where << ": expected {question = , choices = {...}, answer = }, got " << luaL_typename(L, idx));
  McRecord r;
  lua_getfield(L, idx, "question");
  LT_CHECK(lua_type(L, -1) == LUA_TSTRING, where << ": question must be a string");
  r.question = lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, idx, "choices");
  LT_CHECK(lua_istable(L, -1) && lt_is_list(L, -1), where << ": choices must be a list of strings");
  for (size_t i = 1; i <= lua_objlen(L, -1); i++) {
    lua_rawgeti(L, -1, static_cast<int>(i));
    LT_CHECK(lua_type(L, -1) == LUA_TSTRING, where << ": choices must be a list of strings");
    r.choices.push_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getfield(L, idx, "answer");
  if (lua_type(L, -1) == LUA_TSTRING) {
    std::string s = lua_tostring(L, -1);
    LT_CHECK(s.size() == 1 && s[0] >= 'A' && s[0] <= 'Z',
             where << ": answer must be a 0-based index or a letter A-Z, got \"" << s << "\"");
    r.answer = s[0] - 'A';
  } else {
    LT_CHECK(lua_type(L, -1) == LUA_TNUMBER,
             where << ": answer must be a 0-based index or a letter A-Z, got " << luaL_typename(L, -1));
    r.answer = lt_check_int(L, lua_gettop(L));
  }
  lua_pop(L, 1);
  mc_check_record(r, where);
  return r;
}

// A JSONL path or a Lua list of records.
std::vector<McRecord> check_records(lua_State* L, int idx, const std::string& what) {
  if (lua_type(L, idx) == LUA_TSTRING) return mc_read_jsonl(lua_tostring(L, idx));
  LT_CHECK(lua_istable(L, idx) && lt_is_list(L, idx),
           what << " must be a JSONL path or a list of {question, choices, answer} records, got "
                << luaL_typename(L, idx));
  std::vector<McRecord> out;
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  for (size_t i = 1; i <= lua_objlen(L, idx); i++) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    out.push_back(check_record(L, lua_gettop(L), what + " record " + std::to_string(i)));
    lua_pop(L, 1);
  }
  LT_CHECK(!out.empty(), what << " holds no records");
  return out;
}

// Scored as lm-evaluation-harness scores it (docs/eval.md).
int l_eval_multiple_choice(lua_State* L) {
  Model& model = lt_check_model(L, 1);
  const Tokenizer& tok = *lt_check<std::shared_ptr<Tokenizer>>(L, 2);
  std::vector<McRecord> records = check_records(L, 3, "eval.multiple_choice: the task");
  McOptions o;
  if (lt_check_options(L, 4, lt_api("eval.multiple_choice"))) {
    o.shots = lt_opt_int(L, 4, "shots", 0);
    o.limit = lt_opt_int(L, 4, "limit", 0);
    o.batch_size = lt_opt_int(L, 4, "batch_size", 0);
    o.max_length = lt_opt_int(L, 4, "max_length", 0);
    o.description = lt_opt_string(L, 4, "description", "");
    o.add_special = lt_opt_bool(L, 4, "special", true);
    std::string as = lt_opt_string(L, 4, "choices_as", "letters");
    LT_CHECK(as == "letters" || as == "text",
             "eval.multiple_choice: choices_as must be \"letters\" or \"text\", got \"" << as << "\"");
    o.choices_as = as == "letters" ? McChoicesAs::letters : McChoicesAs::text;
    // chat: true = the tokenizer's own template; a string = a chat_template choice (a .jinja file, a
    // tokenizer_config.json, a named or shipped template).
    lua_getfield(L, 4, "chat");
    const int chat_type = lua_type(L, -1);
    LT_CHECK(
        chat_type == LUA_TNIL || chat_type == LUA_TBOOLEAN || chat_type == LUA_TSTRING,
        "eval.multiple_choice: option 'chat' expects true or a chat template (a .jinja file or a template "
        "name), got "
            << luaL_typename(L, -1));
    if ((chat_type == LUA_TBOOLEAN && lua_toboolean(L, -1)) || chat_type == LUA_TSTRING) {
      std::string choice = chat_type == LUA_TSTRING ? lua_tostring(L, -1) : "";
      std::shared_ptr<const ChatTemplate> tmpl = chat_template_resolve(tok, choice);
      ChatOptions co = chat_options_for(tok, ChatOptions());
      co.add_generation_prompt = true;
      o.chat = [tmpl, co](const std::vector<std::pair<std::string, std::string>>& turns) {
        std::vector<ChatMessage> messages;
        for (const auto& [role, content] : turns) messages.push_back({role, content});
        return chat_render_text(*tmpl, chat_messages_json(messages), co);
      };
    }
    lua_pop(L, 1);
    lua_getfield(L, 4, "fewshot");
    if (!lua_isnil(L, -1)) o.fewshot = check_records(L, lua_gettop(L), "eval.multiple_choice: fewshot");
    lua_pop(L, 1);
  }
  McResult r = mc_evaluate(model, tok, records, o);
  lua_createtable(L, 0, 3);
  lt_set_number(L, "acc", r.acc);
  lt_set_number(L, "acc_norm", r.acc_norm);
  lt_set_number(L, "n", static_cast<double>(r.n));
  return 1;
}
LT_REGISTER("eval.multiple_choice", l_eval_multiple_choice);

int l_eval_perplexity(lua_State* L) {
  lt_check<std::shared_ptr<Model>>(L, 1);
  int nargs = lua_gettop(L);
  lua_getfield(L, 1, "perplexity");
  lua_insert(L, 1);
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L);
}
LT_REGISTER("eval.perplexity", l_eval_perplexity);

}  // namespace

}  // namespace luatune
