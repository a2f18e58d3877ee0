// Lua module `tokenizer`: tokenizer.load(dir) gives a Tokenizer (host/text/tokenizer.h) with
// encode/decode, vocabulary look-ups, the special token ids and the chat template. Token ids are
// 0-based values exactly as in Hugging Face (they are ids, not Lua indices).
#include "bindings/tokenizer_class.h"
#include "host/core/error.h"
#include "host/io/hub_cache.h"
#include "host/text/chat.h"

namespace luatune {

namespace {

using TokenizerPtr = std::shared_ptr<Tokenizer>;

std::string tokenizer_describe(const TokenizerPtr& t) {
  return "Tokenizer(vocab_size=" + std::to_string(t->vocab_size()) + ", dir=" + t->source_dir() + ")";
}
LT_REGISTER_CLASS("tokenizer", TokenizerPtr, tokenizer_describe);

Tokenizer& check_tokenizer(lua_State* L) {
  return *lt_check<TokenizerPtr>(L, 1);
}

void push_id_or_nil(lua_State* L, int32_t id) {
  if (id < 0)
    lua_pushnil(L);
  else
    lua_pushinteger(L, id);
}

// A text, or nil when it is empty (no such token, no chat template).
int push_text_or_nil(lua_State* L, const std::string& s) {
  if (s.empty())
    lua_pushnil(L);
  else
    lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// Hub ids are found in the Hugging Face cache (host/io/hub_cache.h).
int l_tokenizer_load(lua_State* L) {
  lt_push(L, Tokenizer::load(model_path_from_hub(luaL_checkstring(L, 1))));
  return 1;
}
LT_REGISTER("tokenizer.load", l_tokenizer_load);

int l_tokenizer_encode(lua_State* L) {
  Tokenizer& tok = check_tokenizer(L);
  size_t len = 0;
  const char* text = luaL_checklstring(L, 2, &len);
  lt_check_options(L, 3, lt_api("tokenizer.encode"));
  lt_push_list(L, tok.encode(std::string_view(text, len), lt_opt_bool(L, 3, "special", false)));
  return 1;
}
LT_REGISTER("tokenizer.encode", l_tokenizer_encode);
LT_REGISTER("Tokenizer:encode", l_tokenizer_encode);

int l_tokenizer_decode(lua_State* L) {
  Tokenizer& tok = check_tokenizer(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lt_is_list(L, 2)) luaL_argerror(L, 2, "expected a list of token ids");
  lt_check_options(L, 3, lt_api("tokenizer.decode"));
  std::vector<int32_t> ids(lua_objlen(L, 2));
  for (size_t i = 0; i < ids.size(); i++) {
    lua_rawgeti(L, 2, static_cast<int>(i + 1));
    if (!lua_isnumber(L, -1)) {
      std::string msg =
          "token ids must be numbers (item " + std::to_string(i + 1) + " is a " + luaL_typename(L, -1) + ")";
      luaL_argerror(L, 2, msg.c_str());
    }
    ids[i] = static_cast<int32_t>(lt_check_int(L, -1));
    lua_pop(L, 1);
  }
  std::string text = tok.decode(ids, lt_opt_bool(L, 3, "skip_special", false));
  lua_pushlstring(L, text.data(), text.size());
  return 1;
}
LT_REGISTER("tokenizer.decode", l_tokenizer_decode);
LT_REGISTER("Tokenizer:decode", l_tokenizer_decode);

int l_tokenizer_token_to_id(lua_State* L) {
  Tokenizer& tok = check_tokenizer(L);
  size_t len = 0;
  const char* s = luaL_checklstring(L, 2, &len);
  push_id_or_nil(L, tok.token_to_id(std::string_view(s, len)));
  return 1;
}
LT_REGISTER("tokenizer.token_to_id", l_tokenizer_token_to_id);
LT_REGISTER("Tokenizer:token_to_id", l_tokenizer_token_to_id);

int l_tokenizer_id_to_token(lua_State* L) {
  Tokenizer& tok = check_tokenizer(L);
  int64_t id = lt_check_int(L, 2);
  return push_text_or_nil(L,
                          id >= 0 && id < tok.vocab_size() ? tok.id_to_token(static_cast<int32_t>(id)) : "");
}
LT_REGISTER("tokenizer.id_to_token", l_tokenizer_id_to_token);
LT_REGISTER("Tokenizer:id_to_token", l_tokenizer_id_to_token);

int l_tokenizer_vocab_size(lua_State* L) {
  lua_pushinteger(L, check_tokenizer(L).vocab_size());
  return 1;
}
LT_REGISTER("tokenizer.vocab_size", l_tokenizer_vocab_size);
LT_REGISTER("Tokenizer:vocab_size", l_tokenizer_vocab_size);

int l_tokenizer_special(lua_State* L) {
  const SpecialTokens& s = check_tokenizer(L).special();
  lua_createtable(L, 0, 7);
  push_id_or_nil(L, s.bos);
  lua_setfield(L, -2, "bos");
  lt_set_list(L, "eos", s.eos);
  push_id_or_nil(L, s.pad);
  lua_setfield(L, -2, "pad");
  push_id_or_nil(L, s.unk);
  lua_setfield(L, -2, "unk");
  for (const auto& [key, text] : {std::pair<const char*, const std::string*>{"bos_text", &s.bos_text},
                                  {"eos_text", &s.eos_text},
                                  {"pad_text", &s.pad_text}}) {
    push_text_or_nil(L, *text);
    lua_setfield(L, -2, key);
  }
  return 1;
}
LT_REGISTER("tokenizer.special", l_tokenizer_special);
LT_REGISTER("Tokenizer:special", l_tokenizer_special);

int l_tokenizer_chat_template(lua_State* L) {
  return push_text_or_nil(L, check_tokenizer(L).chat_template());
}
LT_REGISTER("tokenizer.chat_template", l_tokenizer_chat_template);
LT_REGISTER("Tokenizer:chat_template", l_tokenizer_chat_template);

// ============================================================================================
// Chat templates (host/text/chat.h); the engine, the variables and the mask rule: docs/chat_formats.md.

int l_tokenizer_chat_templates(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L);
  std::vector<std::string> names;
  for (const auto& t : tok.chat_templates()) names.push_back(t.first);
  lt_push_list(L, names);
  return 1;
}
LT_REGISTER("tokenizer.chat_templates", l_tokenizer_chat_templates);
LT_REGISTER("Tokenizer:chat_templates", l_tokenizer_chat_templates);

// The messages as JSON: a list of tables, each with a string role (content, tool_calls, ... as given).
nlohmann::ordered_json check_messages(lua_State* L, int idx) {
  luaL_checktype(L, idx, LUA_TTABLE);
  if (!lt_is_list(L, idx)) luaL_argerror(L, idx, "expected a list of {role = ..., content = ...} messages");
  nlohmann::ordered_json messages = lt_to_json(L, idx, std::string(lt_fname(L)) + ": messages");
  if (!messages.is_array()) messages = nlohmann::ordered_json::array();  // {} converts to an object
  for (size_t i = 0; i < messages.size(); i++) {
    const nlohmann::ordered_json& m = messages[i];
    LT_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
             lt_fname(L) << ": message " << i + 1
                         << " must be a table with a string role {role = ..., content = ...}");
  }
  return messages;
}

nlohmann::ordered_json opt_json(lua_State* L, int idx, const char* key) {
  if (lua_isnoneornil(L, idx) || !lt_has_field(L, idx, key)) return nullptr;
  lua_getfield(L, idx, key);
  nlohmann::ordered_json j = lt_to_json(L, lua_gettop(L), std::string(lt_fname(L)) + ": " + key);
  lua_pop(L, 1);
  return j;
}

// The arguments of render_chat and encode_chat: (tok, messages [, opts]).
struct ChatCall {
  Tokenizer* tok;
  nlohmann::ordered_json messages;
  ChatOptions options;
  std::shared_ptr<const ChatTemplate> tmpl;
};

ChatCall check_chat_call(lua_State* L) {
  ChatCall c{&check_tokenizer(L), check_messages(L, 2), ChatOptions(), nullptr};
  lt_check_options(L, 3, lt_api_table("ChatOpts"));
  c.options.add_generation_prompt = lt_opt_bool(L, 3, "add_generation_prompt", false);
  c.options.tools = opt_json(L, 3, "tools");
  c.options.documents = opt_json(L, 3, "documents");
  nlohmann::ordered_json kwargs = opt_json(L, 3, "chat_template_kwargs");
  LT_CHECK(kwargs.is_null() || kwargs.is_object(),
           lt_fname(L)
               << ": option 'chat_template_kwargs' expects a table of names, e.g. {enable_thinking = false}");
  if (kwargs.is_object()) c.options.kwargs = kwargs;
  c.options = chat_options_for(*c.tok, c.options);
  c.tmpl =
      chat_template_resolve(*c.tok, lt_opt_string(L, 3, "chat_template", ""), !c.options.tools.is_null());
  return c;
}

int l_tokenizer_render_chat(lua_State* L) {
  ChatCall c = check_chat_call(L);
  ChatRendered r = chat_render(*c.tmpl, c.messages, c.options);
  lua_pushlstring(L, r.text.data(), r.text.size());
  lua_createtable(L, static_cast<int>(r.assistant_spans.size()), 0);
  for (size_t i = 0; i < r.assistant_spans.size(); i++) {
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, static_cast<lua_Integer>(r.assistant_spans[i].first + 1));
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, static_cast<lua_Integer>(r.assistant_spans[i].second));
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 2;
}
LT_REGISTER("tokenizer.render_chat", l_tokenizer_render_chat);
LT_REGISTER("Tokenizer:render_chat", l_tokenizer_render_chat);

int l_tokenizer_encode_chat(lua_State* L) {
  ChatCall c = check_chat_call(L);
  ChatEncoding e = chat_encode(*c.tok, *c.tmpl, c.messages, c.options);
  lt_push_list(L, e.ids);
  lt_push_list(L, e.mask);
  return 2;
}
LT_REGISTER("tokenizer.encode_chat", l_tokenizer_encode_chat);
LT_REGISTER("Tokenizer:encode_chat", l_tokenizer_encode_chat);

}  // namespace

}  // namespace luatune
