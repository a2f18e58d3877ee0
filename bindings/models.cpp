// Lua module `models`: load, initialise, run and save Hugging Face decoder-only models
// (host/model/). Token ids are plain numbers (HF's 0-based vocabulary ids: values, not indices).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/qlora_options.h"
#include "bindings/tensor_class.h"
#include "bindings/tokenizer_class.h"
#include "host/adapt/qlora.h"
#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/tensor_ops.h"
#include "host/model/checkpoint.h"
#include "host/model/generate.h"

namespace luatune {

namespace {

using ModelPtr = std::shared_ptr<Model>;
using json = nlohmann::json;

// 8030261248 -> "8B", 4194304 -> "4.2M", 1234 -> "1234".
std::string count_str(int64_t count) {
  std::ostringstream os;
  double n = static_cast<double>(count);
  if (n >= 1e9)
    os << std::round(n / 1e8) / 10 << "B";
  else if (n >= 1e6)
    os << std::round(n / 1e5) / 10 << "M";
  else
    os << n;
  return os.str();
}

// "Model(llama, 32 layers, hidden 4096, 8B params, bfloat16, cuda:0)"; once some weights are
// frozen (LoRA) the trainable count follows: "..., 8B params, 21M trainable, ...".
std::string describe_model(const ModelPtr& m) {
  const ModelConfig& c = m->config;
  ParamCounts n = m->count_parameters();
  std::ostringstream os;
  os << "Model(" << c.model_type() << ", " << c.num_layers << " layers, hidden " << c.hidden_size << ", "
     << count_str(n.total) << " params, ";
  if (n.trainable != n.total) os << count_str(n.trainable) << " trainable, ";
  QuantConfig q;
  if (qlora_config_of(*m, &q)) os << qlora_count(*m) << " Linears " << quant_type_name(q.type) << ", ";
  os << dtype_name(m->dtype()) << ", " << device_name(m->device()) << ")";
  return os.str();
}
LT_REGISTER_CLASS("models", ModelPtr, describe_model);

// Token ids from a Tensor (T) or (B, T), a list of numbers, or a list of equal-length lists -> (B, T) int64.
at::Tensor check_ids(lua_State* L, int idx) {
  if (auto* t = lt_test<at::Tensor>(L, idx)) {
    LT_CHECK(!at::isFloatingType(t->scalar_type()) || t->eq(t->floor()).all().item<bool>(),
             lt_fname(L) << ": ids must be whole numbers");
    at::Tensor ids = t->to(at::kLong);
    LT_CHECK(ids.dim() == 1 || ids.dim() == 2, lt_fname(L)
                                                   << ": ids must be (length) or (batch, length), got "
                                                   << shape_str(ids.sizes().vec()));
    return ids.dim() == 1 ? ids.unsqueeze(0) : ids;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  std::vector<std::vector<int64_t>> rows;
  auto read_row = [&](int at, std::vector<int64_t>& out) {
    LT_CHECK(lt_is_list(L, at), lt_fname(L) << ": ids must be a list of token ids");
    size_t n = lua_objlen(L, at);
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, at, static_cast<int>(i));
      out.push_back(lt_check_int(L, -1));
      lua_pop(L, 1);
    }
  };
  lua_rawgeti(L, idx, 1);
  bool nested = lua_istable(L, -1);
  lua_pop(L, 1);
  if (!nested) {
    rows.emplace_back();
    read_row(idx, rows.back());
  } else {
    size_t n = lua_objlen(L, idx);
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, static_cast<int>(i));
      rows.emplace_back();
      read_row(lua_gettop(L), rows.back());
      lua_pop(L, 1);
      LT_CHECK(rows.back().size() == rows.front().size(),
               lt_fname(L) << ": every row of ids must have the same length (row 1 has "
                           << rows.front().size() << ", row " << i << " has " << rows.back().size() << ")");
    }
  }
  LT_CHECK(!rows.empty() && !rows[0].empty(), lt_fname(L) << ": ids is empty");
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat, at::kLong)
      .view({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

// ============================================================================================
// Module functions

// dir may be a Hub id "org/name[@revision]" found in the Hugging Face cache (host/io/hub_cache.h).
int l_models_load(lua_State* L) {
  std::string dir = luaL_checkstring(L, 1);
  LoadOptions o;
  if (lt_check_options(L, 2, lt_api("models.load"))) {
    o.dtype = lt_opt_string(L, 2, "dtype", "auto");
    o.device = lt_opt_string(L, 2, "device", "cpu");
    lua_getfield(L, 2, "quantize");
    o.quantize = lt_quant_options(L, -1, "models.load: quantize", &o.quant, &o.quantize_skip);
    lua_pop(L, 1);
  }
  lt_push<ModelPtr>(L, model_load(dir, o));
  return 1;
}
LT_REGISTER("models.load", l_models_load);

int l_models_init(lua_State* L) {
  lt_check_required_options(L, 1, lt_api("models.init"));
  std::string arch = lt_opt_string(L, 1, "arch", "");
  LT_CHECK(!arch.empty(), "models.init: arch is required (llama, mistral, qwen2, qwen3 or gemma2)");
  uint64_t seed = static_cast<uint64_t>(lt_opt_int(L, 1, "seed", 0, 0));
  at::ScalarType dtype = dtype_parse(lt_opt_string(L, 1, "dtype", "float32"));
  c10::Device device = device_parse(lt_opt_string(L, 1, "device", "cpu"));
  std::shared_ptr<Tokenizer> tok;
  // Copy the config.json fields (everything but our own keys) into a plain table.
  lua_newtable(L);
  int fields = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    std::string key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
    if (key == "tokenizer") {
      tok = lt_check<std::shared_ptr<Tokenizer>>(L, lua_gettop(L));
    } else if (key != "arch" && key != "seed" && key != "dtype" && key != "device") {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, fields);
      continue;
    }
    lua_pop(L, 1);
  }
  json j = json::parse(config_to_json(lt_to_config(L, fields, "models.init")));
  if (j.is_array()) j = json::object();  // an empty Lua table reads as an empty list
  if (tok) {
    // The tokenizer decides the vocabulary and special ids unless given explicitly.
    if (!j.contains("vocab_size")) j["vocab_size"] = tok->vocab_size();
    const SpecialTokens& sp = tok->special();
    if (!j.contains("bos_token_id")) j["bos_token_id"] = sp.bos >= 0 ? json(sp.bos) : json();
    if (!j.contains("eos_token_id") && !sp.eos.empty())
      j["eos_token_id"] = sp.eos.size() == 1 ? json(sp.eos[0]) : json(sp.eos);
    if (!j.contains("pad_token_id") && sp.pad >= 0) j["pad_token_id"] = sp.pad;
  }
  ModelConfig c = model_config_with(arch, j.dump(), "models.init");
  lt_push<ModelPtr>(L, model_init(c, seed, dtype, device));
  return 1;
}
LT_REGISTER("models.init", l_models_init);

// ============================================================================================
// Model methods

int l_models_forward(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  at::Tensor ids = check_ids(L, 2);
  at::NoGradGuard no_grad;
  lt_push<at::Tensor>(L, m.forward(ids));
  return 1;
}
LT_REGISTER("Model:forward", l_models_forward);

// model:generate's options (and generate_batch's: the same keys), from the table at index 4.
GenerateOptions generate_options(lua_State* L, const char* api) {
  GenerateOptions o;
  if (lt_check_options(L, 4, lt_api(api))) {
    o.max_new_tokens = lt_opt_int(L, 4, "max_new_tokens", 64);
    o.temperature = lt_opt_number(L, 4, "temperature", 0.0);
    o.top_k = lt_opt_int(L, 4, "top_k", 0);
    o.top_p = lt_opt_number(L, 4, "top_p", 1.0);
    o.seed = static_cast<uint64_t>(lt_opt_int(L, 4, "seed", 0, 0));
    o.use_cache = lt_opt_bool(L, 4, "use_cache", true);
    o.fast_decode = lt_opt_bool(L, 4, "fast_decode", true);
    lt_opt_strings(L, 4, "stop", "model:generate", &o.stop);
  }
  return o;
}

// The info table model:generate returns for one result.
void push_generate_info(lua_State* L, const GenerateResult& r) {
  lua_createtable(L, 0, 5);
  std::vector<int64_t> all = r.prompt_ids;
  all.insert(all.end(), r.new_ids.begin(), r.new_ids.end());
  lt_set_list(L, "ids", all);
  lt_set_number(L, "new_tokens", static_cast<double>(r.new_ids.size()));
  lt_set_string(L, "finish_reason", r.finish_reason);
  lt_set_number(L, "seconds", r.seconds);
}

int l_models_generate(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  auto& tok = lt_check<std::shared_ptr<Tokenizer>>(L, 2);
  std::string prompt = luaL_checkstring(L, 3);
  GenerateOptions o = generate_options(L, "Model:generate");
  GenerateResult r = model_generate(m, *tok, prompt, o);
  lua_pushlstring(L, r.text.data(), r.text.size());
  push_generate_info(L, r);
  return 2;
}
LT_REGISTER("Model:generate", l_models_generate);

int l_models_generate_batch(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  auto& tok = lt_check<std::shared_ptr<Tokenizer>>(L, 2);
  luaL_argcheck(L, lua_istable(L, 3) && lt_is_list(L, 3), 3, "a list of prompt strings");
  std::vector<std::vector<int64_t>> prompts;
  const int n = static_cast<int>(lua_objlen(L, 3));
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 3, i);
    if (!lua_isstring(L, -1)) luaL_error(L, "model:generate_batch: prompts[%d] is not a string", i);
    prompts.push_back(generate_prompt_ids(*tok, lua_tostring(L, -1)));
    lua_pop(L, 1);
  }
  GenerateOptions o = generate_options(L, "Model:generate_batch");
  std::vector<GenerateResult> rs = model_generate_batch(m, prompts, o, tok.get());
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushlstring(L, rs[i].text.data(), rs[i].text.size());
    lua_rawseti(L, -2, i + 1);
  }
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_generate_info(L, rs[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 2;
}
LT_REGISTER("Model:generate_batch", l_models_generate_batch);

int l_models_perplexity(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  int64_t max_length = 2048;
  std::shared_ptr<Tokenizer> tok;
  if (lt_check_options(L, 3, lt_api("Model:perplexity"))) {
    max_length = lt_opt_int(L, 3, "max_length", 2048);
    lua_getfield(L, 3, "tokenizer");
    if (!lua_isnil(L, -1)) tok = lt_check<std::shared_ptr<Tokenizer>>(L, lua_gettop(L));
    lua_pop(L, 1);
  }
  std::vector<std::vector<int64_t>> seqs;
  auto add_text = [&](const char* s, size_t n) {
    LT_CHECK(tok, "model:perplexity: text data needs {tokenizer = tok}");
    std::vector<int32_t> ids = tok->encode(std::string_view(s, n), true);
    seqs.emplace_back(ids.begin(), ids.end());
  };
  if (lua_type(L, 2) == LUA_TSTRING) {
    size_t n;
    const char* s = lua_tolstring(L, 2, &n);
    add_text(s, n);
  } else if (lt_test<at::Tensor>(L, 2)) {
    at::Tensor ids = check_ids(L, 2).contiguous();
    for (int64_t i = 0; i < ids.size(0); i++) {
      at::Tensor row = ids[i];
      seqs.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
    }
  } else {
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = lua_objlen(L, 2);
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, 2, static_cast<int>(i));
      if (lua_type(L, -1) == LUA_TSTRING) {
        size_t len;
        const char* s = lua_tolstring(L, -1, &len);
        add_text(s, len);
      } else {
        at::Tensor row = check_ids(L, lua_gettop(L)).flatten().contiguous();
        seqs.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      }
      lua_pop(L, 1);
    }
  }
  PerplexityResult r = model_perplexity(m, seqs, max_length);
  lua_pushnumber(L, r.perplexity);
  lua_createtable(L, 0, 2);
  lt_set_number(L, "nll", r.nll);
  lt_set_number(L, "tokens", static_cast<double>(r.tokens));
  return 2;
}
LT_REGISTER("Model:perplexity", l_models_perplexity);

int l_models_save(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  SaveOptions o;
  if (lt_check_options(L, 3, lt_api("Model:save"))) {
    double shard = lt_opt_number(L, 3, "max_shard_size", 5e9);
    LT_CHECK(shard >= 1, "model:save: max_shard_size must be a positive number of bytes");
    o.max_shard_bytes = static_cast<uint64_t>(shard);
    lua_getfield(L, 3, "tokenizer");
    if (!lua_isnil(L, -1))
      o.tokenizer_files = lt_check<std::shared_ptr<Tokenizer>>(L, lua_gettop(L))->files();
    lua_pop(L, 1);
  }
  model_save(m, dir, o);
  return 0;
}
LT_REGISTER("Model:save", l_models_save);

int l_models_num_params(lua_State* L) {
  ParamCounts n = lt_check_model(L, 1).count_parameters();
  lt_push_numbers(L, {{"total", n.total},
                      {"trainable", n.trainable},
                      {"embedding", n.embedding},
                      {"attention", n.attention},
                      {"mlp", n.mlp},
                      {"norm", n.norm},
                      {"lm_head", n.lm_head},
                      {"adapter", n.adapter}});
  return 1;
}
LT_REGISTER("Model:num_params", l_models_num_params);

int l_models_config(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  ModelConfig c = m.config;
  c.torch_dtype = dtype_name(m.dtype());
  lt_push_json(L, json::parse(model_config_to_json(c)));
  return 1;
}
LT_REGISTER("Model:config", l_models_config);

int l_models_parameters(lua_State* L) {
  lt_push_named_tensors(L, lt_check_model(L, 1).named_parameters());
  return 1;
}
LT_REGISTER("Model:parameters", l_models_parameters);

int l_models_to(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  at::ScalarType dtype = m.dtype();
  c10::Device device = m.device();
  if (lua_type(L, 2) == LUA_TSTRING) {
    std::string s = lua_tostring(L, 2);
    if (!dtype_try_parse(s, &dtype)) device = device_parse(s);
  } else {
    lt_check_required_options(L, 2, lt_api("Model:to"));
    if (lt_has_field(L, 2, "dtype")) dtype = dtype_parse(lt_opt_string(L, 2, "dtype", ""));
    if (lt_has_field(L, 2, "device")) device = device_parse(lt_opt_string(L, 2, "device", ""));
  }
  m.to(device, dtype);
  lua_settop(L, 1);
  return 1;
}
LT_REGISTER("Model:to", l_models_to);

int l_models_dtype(lua_State* L) {
  lua_pushstring(L, dtype_name(lt_check_model(L, 1).dtype()).c_str());
  return 1;
}
LT_REGISTER("Model:dtype", l_models_dtype);

int l_models_device(lua_State* L) {
  lua_pushstring(L, device_name(lt_check_model(L, 1).device()).c_str());
  return 1;
}
LT_REGISTER("Model:device", l_models_device);

}  // namespace

}  // namespace luatune
