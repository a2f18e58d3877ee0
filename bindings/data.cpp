// Lua module `data`: data.jsonl(path, opts) and data.from_records(list, opts) build a Dataset
// (host/data/dataset.h); ds:batches{size=, max_steps=, start=} yields (step, Batch) for the trainer.
// Rows and steps are numbered from 1 like Lua lists; token ids are 0-based values as in HF.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "bindings/batch_class.h"
#include "bindings/dataset_class.h"
#include "bindings/preference_class.h"
#include "bindings/tensor_class.h"
#include "bindings/tokenizer_class.h"
#include "host/core/error.h"
#include "host/dist/dist.h"
#include "host/train/stop.h"

namespace luatune {

namespace {

using DatasetPtr = std::shared_ptr<Dataset>;
using PreferencePtr = std::shared_ptr<PreferenceDataset>;
using json = nlohmann::json;

std::string dataset_describe(const DatasetPtr& ds) {
  return "Dataset(rows=" + std::to_string(ds->size()) + ", records=" + std::to_string(ds->stats().records) +
         ", format=" + data_format_name(ds->format()) +
         ", max_length=" + std::to_string(ds->options().max_length) +
         (ds->options().pack ? ", packed)" : ")");
}
LT_REGISTER_CLASS("data", DatasetPtr, dataset_describe);

std::string preference_describe(const PreferencePtr& ds) {
  return "PreferenceSet(pairs=" + std::to_string(ds->size()) +
         ", max_length=" + std::to_string(ds->options().max_length) + ")";
}
LT_REGISTER_CLASS("data", PreferencePtr, preference_describe);

std::string batch_describe(const Batch& b) {
  return "Batch(" + std::to_string(b.ids.size(0)) + "x" + std::to_string(b.ids.size(1)) +
         ", tokens=" + std::to_string(b.tokens) + ", target_tokens=" + std::to_string(b.target_tokens) + ")";
}
LT_REGISTER_CLASS("data", Batch, batch_describe);

// The options table (DataOpts) at idx, after the path or records, of data.jsonl, data.from_records
// and data.preferences -> tokenizer and DataOptions (rules and templates: docs/data.md).
std::shared_ptr<Tokenizer> check_data_options(lua_State* L, int idx, DataOptions* o) {
  lt_check_options(L, idx, lt_api_table("DataOpts"));
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "tokenizer");
  auto* tok = lt_test<std::shared_ptr<Tokenizer>>(L, -1);
  if (!tok) {
    std::string msg = std::string("option 'tokenizer' expects a Tokenizer (tokenizer.load(dir)), got ") +
                      luaL_typename(L, -1);
    luaL_argerror(L, idx, msg.c_str());
  }
  std::shared_ptr<Tokenizer> out = *tok;
  lua_pop(L, 1);
  std::string format = lt_opt_string(L, idx, "format", "");
  if (!format.empty()) o->format = data_format_parse(format);
  o->max_length = lt_opt_int(L, idx, "max_length", o->max_length);
  o->pack = lt_opt_bool(L, idx, "pack", o->pack);
  o->pad_to_max_length = lt_opt_bool(L, idx, "pad_to_max_length", o->pad_to_max_length);
  o->train_on_prompt = lt_opt_bool(L, idx, "train_on_prompt", o->train_on_prompt);
  o->add_eos = lt_opt_bool(L, idx, "add_eos", o->add_eos);
  int64_t seed = lt_opt_int(L, idx, "seed", 0);
  if (seed < 0) luaL_argerror(L, idx, "option 'seed' expects a number >= 0");
  o->seed = static_cast<uint64_t>(seed);
  o->skip_bad = lt_opt_bool(L, idx, "skip_bad", o->skip_bad);
  if (lt_has_field(L, idx, "chat")) o->chat = lt_opt_bool(L, idx, "chat", true);
  o->chat_template = lt_opt_string(L, idx, "chat_template", "");
  if (lt_has_field(L, idx, "chat_template_kwargs")) {
    lua_getfield(L, idx, "chat_template_kwargs");
    o->chat_template_kwargs =
        lt_to_json(L, lua_gettop(L), std::string(lt_fname(L)) + ": chat_template_kwargs");
    lua_pop(L, 1);
    LT_CHECK(
        o->chat_template_kwargs.is_object(),
        lt_fname(L)
            << ": option 'chat_template_kwargs' expects a table of names, e.g. {enable_thinking = false}");
  }
  o->max_records = lt_opt_int(L, idx, "max_records", o->max_records);
  return out;
}

// ============================================================================================
// Module functions

int l_data_jsonl(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  DataOptions o;
  auto tok = check_data_options(L, 2, &o);
  lt_push(L, Dataset::from_jsonl(path, *tok, o));
  return 1;
}
LT_REGISTER("data.jsonl", l_data_jsonl);

int l_data_from_records(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!lt_is_list(L, 1)) luaL_argerror(L, 1, "expected a list of records (tables)");
  DataOptions o;
  auto tok = check_data_options(L, 2, &o);
  std::vector<nlohmann::ordered_json> records;
  for (size_t i = 1; i <= lua_objlen(L, 1); i++) {
    lua_rawgeti(L, 1, static_cast<int>(i));
    records.push_back(lt_to_json(L, -1, std::string(lt_fname(L)) + ": records[" + std::to_string(i) + "]"));
    lua_pop(L, 1);
  }
  lt_push(L, Dataset::from_records(records, *tok, o));
  return 1;
}
LT_REGISTER("data.from_records", l_data_from_records);

int l_data_preferences(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  DataOptions o;
  auto tok = check_data_options(L, 2, &o);
  lt_push(L, PreferenceDataset::from_jsonl(path, *tok, o));
  return 1;
}
LT_REGISTER("data.preferences", l_data_preferences);

// ============================================================================================
// Dataset methods

int l_data_split(lua_State* L) {
  if (auto* pds = lt_test<PreferencePtr>(L, 1)) {
    auto [train, held] = (*pds)->split(luaL_checknumber(L, 2));
    lt_push(L, train);
    lt_push(L, held);
    return 2;
  }
  DatasetPtr& ds = lt_check<DatasetPtr>(L, 1);
  auto [train, val] = ds->split(luaL_checknumber(L, 2));
  lt_push(L, train);
  lt_push(L, val);
  return 2;
}
LT_REGISTER("data.split", l_data_split);
LT_REGISTER("Dataset:split", l_data_split);
LT_REGISTER("PreferenceSet:split", l_data_split);

// data.eval_split_warning(items, eval_fraction, unit): the line run.sets and `runner validate` print
// when eval_fraction holds none of the items out, or nil.
int l_data_eval_split_warning(lua_State* L) {
  std::string w =
      data_eval_split_warning(lt_check_int(L, 1), luaL_checknumber(L, 2), luaL_optstring(L, 3, "records"));
  if (w.empty()) return lua_pushnil(L), 1;
  lua_pushlstring(L, w.data(), w.size());
  return 1;
}
LT_REGISTER("data.eval_split_warning", l_data_eval_split_warning);

int l_data_size(lua_State* L) {
  if (auto* pds = lt_test<PreferencePtr>(L, 1)) {
    lua_pushinteger(L, static_cast<lua_Integer>((*pds)->size()));
    return 1;
  }
  lua_pushinteger(L, static_cast<lua_Integer>(lt_check<DatasetPtr>(L, 1)->size()));
  return 1;
}
LT_REGISTER("data.size", l_data_size);
LT_REGISTER("Dataset:size", l_data_size);
LT_REGISTER("PreferenceSet:size", l_data_size);
LT_REGISTER("Dataset:__len", l_data_size);
LT_REGISTER("PreferenceSet:__len", l_data_size);

int l_data_preference_stats(lua_State* L) {
  PreferenceStats s = lt_check<PreferencePtr>(L, 1)->stats();
  lt_push_numbers(L, {{"pairs", s.pairs},
                      {"skipped_bad", s.skipped_bad},
                      {"dropped_empty", s.dropped_empty},
                      {"truncated", s.truncated},
                      {"tokens", s.tokens},
                      {"target_tokens", s.target_tokens}});
  return 1;
}
LT_REGISTER("PreferenceSet:stats", l_data_preference_stats);

// The 1-based number at idx of one of `n` items (rows, pairs), as a 0-based index.
int64_t check_item(lua_State* L, int idx, int64_t n, const char* item) {
  int64_t i = lt_check_int(L, idx);
  if (i < 1 || i > n) {
    std::string msg =
        std::string(item) + " " + std::to_string(i) + " out of range (1 to " + std::to_string(n) + ")";
    luaL_argerror(L, idx, msg.c_str());
  }
  return i - 1;
}

int l_data_preference_pair(lua_State* L) {
  PreferencePtr& ds = lt_check<PreferencePtr>(L, 1);
  const int64_t i = check_item(L, 2, ds->size(), "pair");
  lua_createtable(L, 0, 3);
  lt_set_number(L, "line", static_cast<double>(ds->origin(i)));
  for (int side = 0; side < 2; side++) {
    Document d = ds->document(i, side);
    lua_createtable(L, 0, 2);
    lt_set_list(L, "ids", d.ids);
    lt_set_list(L, "mask", d.mask);
    lua_setfield(L, -2, side == 0 ? "chosen" : "rejected");
  }
  return 1;
}
LT_REGISTER("PreferenceSet:pair", l_data_preference_pair);

int l_data_stats(lua_State* L) {
  DataStats s = lt_check<DatasetPtr>(L, 1)->stats();
  lt_push_numbers(L, {{"records", s.records},
                      {"skipped_bad", s.skipped_bad},
                      {"dropped_empty", s.dropped_empty},
                      {"rows", s.rows},
                      {"tokens", s.tokens},
                      {"target_tokens", s.target_tokens},
                      {"truncated", s.truncated}});
  return 1;
}
LT_REGISTER("data.stats", l_data_stats);
LT_REGISTER("Dataset:stats", l_data_stats);

int l_data_row(lua_State* L) {
  DatasetPtr& ds = lt_check<DatasetPtr>(L, 1);
  DataRow r = ds->row(check_item(L, 2, ds->size(), "row"));
  lua_createtable(L, 0, 4);
  lt_set_list(L, "ids", r.ids);
  lt_set_list(L, "targets", r.targets);
  lt_set_list(L, "positions", r.positions);
  lt_set_list(L, "segments", r.segments);
  return 1;
}
LT_REGISTER("data.row", l_data_row);
LT_REGISTER("Dataset:row", l_data_row);

// The iterator ds:batches returns. Upvalues: dataset, size, last step, step done so far, shuffle,
// cycle. It runs behind the exception bridge like every other binding.
int batches_next(lua_State* L) {
  int64_t size = static_cast<int64_t>(lua_tonumber(L, lua_upvalueindex(2)));
  int64_t steps = static_cast<int64_t>(lua_tonumber(L, lua_upvalueindex(3)));
  int64_t step = static_cast<int64_t>(lua_tonumber(L, lua_upvalueindex(4))) + 1;
  // The previous step is logged by now: its deferred checkpoint, or the stop a signal asked for.
  stop_safe_point(step <= steps ? 1 : 0);
  if (step > steps) return 0;
  bool shuffle = lua_toboolean(L, lua_upvalueindex(5));
  bool cycle = lua_toboolean(L, lua_upvalueindex(6));
  // Data parallel (host/dist): each rank takes its slice of a batch N times as large.
  // A preference set's batches take `size` pairs (2 * size rows).
  Batch b;
  if (auto* pds = lt_test<PreferencePtr>(L, lua_upvalueindex(1))) {
    std::vector<int64_t> pairs =
        (*pds)->shard_pairs(step, size, shuffle, cycle, dist_rank(), dist_world_size());
    b = pairs.empty() ? (*pds)->empty_batch() : (*pds)->batch(pairs);
  } else {
    DatasetPtr& ds = lt_check<DatasetPtr>(L, lua_upvalueindex(1));
    std::vector<int64_t> rows = ds->shard_rows(step, size, shuffle, cycle, dist_rank(), dist_world_size());
    b = rows.empty() ? ds->empty_batch() : ds->batch(rows);
  }
  lua_pushnumber(L, static_cast<lua_Number>(step));
  lua_replace(L, lua_upvalueindex(4));
  lua_pushinteger(L, static_cast<lua_Integer>(step));
  lt_push(L, std::move(b));
  return 2;
}

int batches_next_protected(lua_State* L) {
  return lt_call_protected(L, batches_next);
}

// Without max_steps: one pass over the rows (the last batch may be short); with it the epochs cycle,
// epoch e shuffled with seed + e, so start=K resumes exactly where a run stopped after step K.
int l_data_batches(lua_State* L) {
  auto* pds = lt_test<PreferencePtr>(L, 1);
  const int64_t items = pds ? (*pds)->size() : lt_check<DatasetPtr>(L, 1)->size();  // rows, or pairs
  lt_check_options(L, 2, lt_api_table("BatchesOpts"));
  if (!lt_has_field(L, 2, "size")) luaL_argerror(L, 2, "option 'size' (rows per batch) is required");
  if (lt_opt_number(L, 2, "size", 1) < 1) luaL_argerror(L, 2, "option 'size' must be at least 1");
  // Before anything is sized from it: a size of batch_size * grad_accum = 1e18 is refused here.
  data_check_batch_size(lt_opt_number(L, 2, "size", 1), dist_world_size(), items, pds ? "pairs" : "rows");
  const int64_t size = lt_opt_int(L, 2, "size", 1);
  bool cycle = lt_has_field(L, 2, "max_steps");
  const int64_t global = size * dist_world_size();  // rows a step takes over all ranks
  // Row positions run to steps * global, which must stay a 64-bit count.
  const int64_t max_steps = std::numeric_limits<int64_t>::max() / global;
  int64_t steps =
      cycle ? lt_opt_int(L, 2, "max_steps", 0, -kLuaMaxExactInt, std::min(max_steps, kLuaMaxExactInt))
            : (items + global - 1) / global;
  int64_t start = lt_opt_int(L, 2, "start", 0);
  if (start < 0) luaL_argerror(L, 2, "option 'start' must be >= 0 (the last step already done)");
  lua_pushvalue(L, 1);
  lua_pushnumber(L, static_cast<lua_Number>(size));
  lua_pushnumber(L, static_cast<lua_Number>(steps));
  lua_pushnumber(L, static_cast<lua_Number>(start));
  lua_pushboolean(L, lt_opt_bool(L, 2, "shuffle", true));
  lua_pushboolean(L, cycle);
  lua_pushcclosure(L, batches_next_protected, 6);
  return 1;
}
LT_REGISTER("data.batches", l_data_batches);
LT_REGISTER("Dataset:batches", l_data_batches);
LT_REGISTER("PreferenceSet:batches", l_data_batches);

// ============================================================================================
// Batch methods: the tensors (CPU, int64, (B, T)) and the counts

template <at::Tensor Batch::*field>
int l_data_batch_tensor(lua_State* L) {
  lt_push(L, lt_check<Batch>(L, 1).*field);
  return 1;
}
LT_REGISTER("Batch:ids", l_data_batch_tensor<&Batch::ids>);
LT_REGISTER("Batch:targets", l_data_batch_tensor<&Batch::targets>);
LT_REGISTER("Batch:positions", l_data_batch_tensor<&Batch::positions>);
LT_REGISTER("Batch:segments", l_data_batch_tensor<&Batch::segments>);

template <int64_t Batch::*field>
int l_data_batch_count(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(lt_check<Batch>(L, 1).*field));
  return 1;
}
LT_REGISTER("Batch:tokens", l_data_batch_count<&Batch::tokens>);
LT_REGISTER("Batch:target_tokens", l_data_batch_count<&Batch::target_tokens>);

}  // namespace

}  // namespace luatune
