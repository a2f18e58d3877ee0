// Lua module `export`: a model as a file another runtime runs. export.gguf writes llama.cpp's GGUF
// (host/export/gguf_export.h; facts in docs/gguf.md).
#include "host/export/gguf_export.h"

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tokenizer_class.h"
#include "host/adapt/lora.h"
#include "host/core/error.h"
#include "host/io/hub_cache.h"
#include "host/model/checkpoint.h"

namespace luatune {

namespace {

// Facts and sources: docs/gguf.md.
int l_export_gguf(lua_State* L) {
  std::shared_ptr<Model> model;
  std::string dir;
  if (lua_type(L, 1) == LUA_TSTRING) {
    dir = lua_tostring(L, 1);
  } else {
    model = lt_check<std::shared_ptr<Model>>(L, 1);
  }
  std::string path = luaL_checkstring(L, 2);
  GgufExportOptions o;
  std::shared_ptr<Tokenizer> tok;
  std::string adapter;
  if (lt_check_options(L, 3, lt_api("export.gguf"))) {
    o.outtype = lt_opt_string(L, 3, "outtype", o.outtype);
    o.name = lt_opt_string(L, 3, "name", "");
    adapter = lt_opt_string(L, 3, "adapter", "");
    lua_getfield(L, 3, "tokenizer");
    if (lua_type(L, -1) == LUA_TSTRING) {
      tok = Tokenizer::load(model_path_from_hub(lua_tostring(L, -1)));
    } else if (!lua_isnil(L, -1)) {
      tok = lt_check<std::shared_ptr<Tokenizer>>(L, lua_gettop(L));
    }
    lua_pop(L, 1);
  }
  // Cheap checks first: a bad outtype fails before a model is loaded.
  gguf_tensor_type("x.weight", {1, 32}, o.outtype, 0, 1, false);
  if (model) {
    LT_CHECK(
        tok,
        "export.gguf: a Model needs {tokenizer = tok or a directory} (the GGUF file carries the vocabulary)");
    LT_CHECK(adapter.empty(),
             "export.gguf: adapter applies to a model directory; for a Model, lora.load and "
             "lora.merge it first");
  } else {
    // With an adapter, float32: the merge then rounds once, into the outtype, not into bf16 first.
    model = model_load(dir, LoadOptions(adapter.empty() ? "auto" : "float32", "cpu"));
    if (!tok) tok = Tokenizer::load(model->source_dir);  // dir, a Hub name resolved
    if (!adapter.empty()) {
      lora_load(*model, adapter);
      lora_merge(*model);
    }
  }
  GgufExportResult r = gguf_export(*model, *tok, path, o);
  lua_newtable(L);
  lt_set_string(L, "path", r.path);
  lt_set_number(L, "bytes", static_cast<double>(r.bytes));
  lt_set_number(L, "tensors", static_cast<double>(r.tensors));
  lt_set_string(L, "outtype", r.outtype);  // what the file holds (a q4_k whose rows all fell back: q8_0)
  lt_set_string(L, "note", r.note);        // "" unless tensors fell back (already printed)
  return 1;
}
LT_REGISTER("export.gguf", l_export_gguf);

}  // namespace

}  // namespace luatune
