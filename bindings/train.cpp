// Lua module `train`: train.new(model, opts) makes a Trainer (host/train/trainer.h) whose
// trainer:step(batch) runs one optimizer step in C++ and returns a small table of statistics; the
// recipe keeps the loop. train.batch{...} builds a Batch from tensors for recipes with their own data.
#include <ATen/ATen.h>

#include "bindings/batch_class.h"
#include "bindings/dataset_class.h"
#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/preference_class.h"
#include "bindings/tensor_class.h"
#include "bindings/tokenizer_class.h"
#include "host/cli/config.h"
#include "host/core/error.h"
#include "host/core/tensor_ops.h"
#include "host/train/preference.h"
#include "host/train/profiler.h"
#include "host/train/rejection.h"
#include "host/train/reward.h"
#include "host/train/trainer.h"

namespace luatune {

using TrainerPtr = std::shared_ptr<Trainer>;
using PreferenceLossPtr = std::shared_ptr<PreferenceLoss>;
using RewardModelPtr = std::shared_ptr<RewardModel>;

LT_CLASS(TrainerPtr, "Trainer");
LT_CLASS(PreferenceLossPtr, "PreferenceLoss");
LT_CLASS(RewardModelPtr, "RewardModel");

namespace {
std::vector<HookGetter>& hook_getters() {
  static std::vector<HookGetter> getters;
  return getters;
}
}  // namespace

void lt_register_hook_getter(HookGetter getter) {
  for (HookGetter g : hook_getters())
    if (g == getter) return;
  hook_getters().push_back(getter);
}

std::shared_ptr<TrainerHook> lt_test_hook(lua_State* L, int idx) {
  for (HookGetter g : hook_getters())
    if (auto h = g(L, idx)) return h;
  return nullptr;
}

namespace {

// A table of numbers that keeps the trainer's order for log:write (a Lua table has none): its
// metatable's __order lists the keys in order, and bindings/metrics.cpp writes them so.
void push_numbers(lua_State* L, const std::vector<std::pair<std::string, double>>& values) {
  lua_createtable(L, 0, static_cast<int>(values.size()));
  for (const auto& [k, v] : values) lt_set_number(L, k.c_str(), v);
  lua_createtable(L, 0, 1);
  std::vector<std::string> order;
  for (const auto& kv : values) order.push_back(kv.first);
  lt_set_list(L, "__order", order);
  lua_setmetatable(L, -2);
}

std::string describe_trainer(const TrainerPtr& t) {
  const TrainOptions& o = t->options();
  return "Trainer(" + o.optimizer + ", lr " + std::to_string(o.learning_rate) + ", " + o.schedule +
         ", step " + std::to_string(t->step_count()) + ", " + std::to_string(t->parameters().size()) +
         " trainable tensors)";
}
LT_REGISTER_CLASS("train", TrainerPtr, describe_trainer);

// The resolved config goes into checkpoints (trainer:resume diffs it).
int l_train_new(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  TrainOptions o;
  const RunState& st = lt_run_state(L);
  if (st.config_resolved) {
    o.config_json = config_to_json(st.resolved);
    auto it = st.resolved.fields.find("overwrite");
    if (it != st.resolved.fields.end() && it->second.kind == ConfigValue::Kind::boolean)
      o.overwrite = it->second.boolean;
  }
  std::vector<std::shared_ptr<TrainerHook>> hooks;
  if (lt_check_options(L, 2, lt_api("train.new"))) {
    o.optimizer = lt_opt_string(L, 2, "optimizer", o.optimizer);
    o.learning_rate = lt_opt_number(L, 2, "learning_rate", o.learning_rate);
    o.eps = lt_opt_number(L, 2, "eps", o.eps);
    o.weight_decay = lt_opt_number(L, 2, "weight_decay", o.weight_decay);
    o.momentum = lt_opt_number(L, 2, "momentum", o.momentum);
    o.schedule = lt_opt_string(L, 2, "schedule", o.schedule);
    o.warmup_steps = lt_opt_int(L, 2, "warmup_steps", 0);
    o.max_steps = lt_opt_int(L, 2, "max_steps", 0);
    o.min_lr_ratio = lt_opt_number(L, 2, "min_lr_ratio", 0);
    o.batch_size = lt_opt_int(L, 2, "batch_size", 0);
    o.max_grad_norm = lt_opt_number(L, 2, "max_grad_norm", o.max_grad_norm);
    o.master_weights = lt_opt_bool(L, 2, "master_weights", o.master_weights);
    o.gradient_checkpointing = lt_opt_bool(L, 2, "gradient_checkpointing", false);
    o.loss_chunk = lt_opt_int(L, 2, "loss_chunk", o.loss_chunk);
    o.output_dir = lt_opt_string(L, 2, "output_dir", "");
    o.save_steps = lt_opt_int(L, 2, "save_steps", 0);
    o.keep_last = lt_opt_int(L, 2, "keep_last", o.keep_last);
    o.shard = lt_opt_string(L, 2, "shard", o.shard);
    o.optimizer_offload = lt_opt_string(L, 2, "optimizer_offload", o.optimizer_offload);
    o.overwrite = lt_opt_bool(L, 2, "overwrite", o.overwrite);
    o.profile.dir = lt_opt_string(L, 2, "profile", o.profile.dir);
    o.profile.steps =
        profile_count("profile_steps", lt_opt_number(L, 2, "profile_steps", o.profile.steps), 1);
    o.profile.skip = profile_count("profile_skip", lt_opt_number(L, 2, "profile_skip", o.profile.skip), 0);
    lt_check_defaults(L, 2,
                      {{"betas", ConfigValue::of_list(
                                     {ConfigValue::of_number(o.beta1), ConfigValue::of_number(o.beta2)})}});
    lua_getfield(L, 2, "betas");
    if (!lua_isnil(L, -1)) {
      LT_CHECK(lua_istable(L, -1) && lua_objlen(L, -1) == 2,
               "train.new: betas must be a list of two numbers");
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      o.beta1 = luaL_checknumber(L, -2);
      o.beta2 = luaL_checknumber(L, -1);
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
    lua_getfield(L, 2, "hooks");
    if (!lua_isnil(L, -1)) {
      LT_CHECK(lt_is_list(L, -1), "train.new: hooks must be a list (of pruners, distillers)");
      int list = lua_gettop(L);
      for (size_t i = 1; i <= lua_objlen(L, list); i++) {
        lua_rawgeti(L, list, static_cast<int>(i));
        auto h = lt_test_hook(L, lua_gettop(L));
        LT_CHECK(h != nullptr,
                 "train.new: hooks["
                     << i << "] is a " << luaL_typename(L, -1)
                     << ", expected a pruner, distiller, preference loss or reward model (prune.sheared, "
                        "distill.new, train.preference, train.reward_model)");
        hooks.push_back(h);
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  lt_push<TrainerPtr>(L, std::make_shared<Trainer>(model, o, hooks));
  return 1;
}
LT_REGISTER("train.new", l_train_new);

int l_train_batch(lua_State* L) {
  lt_check_required_options(L, 1, lt_api("train.batch"));
  auto field = [&](const char* key) -> at::Tensor {
    lua_getfield(L, 1, key);
    at::Tensor t;
    if (!lua_isnil(L, -1)) t = lt_check<at::Tensor>(L, lua_gettop(L)).to(at::kLong);
    lua_pop(L, 1);
    return t;
  };
  Batch b;
  b.ids = field("ids");
  LT_CHECK(b.ids.defined() && b.ids.dim() == 2, "train.batch: ids must be a (rows, length) tensor");
  b.targets = field("targets");
  if (!b.targets.defined()) {
    b.targets = at::full(b.ids.sizes(), kIgnoreTarget, at::kLong);
    b.targets.narrow(1, 0, b.ids.size(1) - 1).copy_(b.ids.narrow(1, 1, b.ids.size(1) - 1));
  }
  b.positions = field("positions");
  b.segments = field("segments");
  for (const at::Tensor* t : {&b.targets, &b.positions, &b.segments})
    LT_CHECK(!t->defined() || t->sizes() == b.ids.sizes(),
             "train.batch: targets, positions and segments must "
             "have the shape of ids "
                 << shape_str(b.ids.sizes().vec()));
  b.target_tokens = b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  b.tokens = b.ids.numel();
  lt_push<Batch>(L, b);
  return 1;
}
LT_REGISTER("train.batch", l_train_batch);

int l_train_step(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  StepStats s = t.step(lt_check<Batch>(L, 2));
  // The order metrics.jsonl, W&B and the console show: what to watch first, then the counts, then
  // the hooks' statistics in the hooks' order.
  std::vector<std::pair<std::string, double>> v = {{"loss", s.loss},
                                                   {"lr", s.lr},
                                                   {"grad_norm", s.grad_norm},
                                                   {"tokens_per_s", s.tokens_per_s},
                                                   {"tokens", static_cast<double>(s.tokens)},
                                                   {"target_tokens", static_cast<double>(s.target_tokens)},
                                                   {"step_time", s.step_time}};
  if (s.peak_memory_gb > 0) v.emplace_back("peak_memory_gb", s.peak_memory_gb);
  v.insert(v.end(), s.extra.begin(), s.extra.end());
  push_numbers(L, v);
  return 1;
}
LT_REGISTER("Trainer:step", l_train_step);

void push_eval(lua_State* L, const EvalStats& e) {
  std::vector<std::pair<std::string, double>> v = {{"loss", e.loss}};
  if (e.perplexity > 0) v.emplace_back("perplexity", e.perplexity);
  v.emplace_back("tokens", static_cast<double>(e.target_tokens));
  v.insert(v.end(), e.extra.begin(), e.extra.end());
  push_numbers(L, v);
}

// perplexity only when the loss is per token.
int l_train_evaluate(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  auto* ds = lt_test<std::shared_ptr<Dataset>>(L, 2);
  auto* pds = lt_test<std::shared_ptr<PreferenceDataset>>(L, 2);
  if (ds || pds) {
    int64_t batch_size = 8, max_batches = 0;
    if (lt_check_options(L, 3, lt_api("Trainer:evaluate"))) {
      batch_size = static_cast<int64_t>(lt_opt_number(L, 3, "batch_size", 8));
      max_batches = static_cast<int64_t>(lt_opt_number(L, 3, "max_batches", 0));
    }
    push_eval(L, ds ? t.evaluate(**ds, batch_size, max_batches) : t.evaluate(**pds, batch_size, max_batches));
    return 1;
  }
  luaL_checktype(L, 2, LUA_TTABLE);
  std::vector<Batch> batches;
  size_t n = lua_objlen(L, 2);
  for (size_t i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, static_cast<int>(i));
    batches.push_back(lt_check<Batch>(L, lua_gettop(L)));
    lua_pop(L, 1);
  }
  push_eval(L, t.evaluate(batches));
  return 1;
}
LT_REGISTER("Trainer:evaluate", l_train_evaluate);

// ============================================================================================
// Preference optimisation (host/train/preference.h)

std::string describe_preference(const PreferenceLossPtr& p) {
  const PreferenceOptions& o = p->options();
  char buf[128];
  std::snprintf(buf, sizeof(buf), "PreferenceLoss(%s, beta %g, label_smoothing %g)", o.loss.c_str(), o.beta,
                o.label_smoothing);
  return buf;
}
LT_REGISTER_HOOK_CLASS("train", PreferenceLossPtr, describe_preference);

int l_train_preference(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  PreferenceOptions o;
  std::shared_ptr<Model> reference;
  std::string cache_path;
  if (lt_check_options(L, 2, lt_api("train.preference"))) {
    o.loss = lt_opt_string(L, 2, "loss", o.loss);
    o.beta = lt_opt_number(L, 2, "beta", o.beta);
    o.label_smoothing = lt_opt_number(L, 2, "label_smoothing", o.label_smoothing);
    o.chunk = static_cast<int64_t>(lt_opt_number(L, 2, "chunk", static_cast<double>(o.chunk)));
    lua_getfield(L, 2, "reference");
    if (lua_type(L, -1) == LUA_TSTRING) {
      std::string r = lua_tostring(L, -1);
      if (r == "adapters_off")
        reference = model;
      else
        cache_path = r;
    } else if (!lua_isnil(L, -1)) {
      auto* m = lt_test<std::shared_ptr<Model>>(L, -1);
      LT_CHECK(m != nullptr,
               "train.preference: reference must be a Model, \"adapters_off\" or a cache file path "
               "(train.reference_logprobs), got a "
                   << luaL_typename(L, -1));
      reference = *m;
    }
    lua_pop(L, 1);
  }
  if (o.loss != "orpo" && !reference && cache_path.empty())
    fail("train.preference: loss \"" + o.loss + "\" needs a reference",
         "reference = a frozen Model, \"adapters_off\" (LoRA/QLoRA), or a cache from "
         "train.reference_logprobs");
  auto hook = std::make_shared<PreferenceLoss>(model, reference, o);
  if (!cache_path.empty()) hook->set_reference_cache(reference_cache_load(cache_path), cache_path);
  lt_push<PreferenceLossPtr>(L, hook);
  return 1;
}
LT_REGISTER("train.preference", l_train_preference);

// One file for a train and a held-out set; keyed by each pair's content.
int l_train_reference_logprobs(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  std::vector<std::shared_ptr<PreferenceDataset>> sets;
  if (auto* one = lt_test<std::shared_ptr<PreferenceDataset>>(L, 2)) {
    sets.push_back(*one);
  } else {
    LT_CHECK(
        lua_istable(L, 2) && lt_is_list(L, 2),
        "train.reference_logprobs: argument 2 must be a PreferenceSet (data.preferences) or a list of them");
    for (size_t i = 1; i <= lua_objlen(L, 2); i++) {
      lua_rawgeti(L, 2, static_cast<int>(i));
      sets.push_back(lt_check<std::shared_ptr<PreferenceDataset>>(L, lua_gettop(L)));
      lua_pop(L, 1);
    }
  }
  lt_check_required_options(L, 3, lt_api("train.reference_logprobs"));
  std::string path = lt_opt_string(L, 3, "path", "");
  LT_CHECK(!path.empty(), "train.reference_logprobs: option 'path' (the cache file to write) is required");
  ReferenceCache cache;
  for (const auto& set : sets)
    cache = reference_logprobs(*model, lt_opt_bool(L, 3, "adapters_off", false), *set,
                               static_cast<int64_t>(lt_opt_number(L, 3, "batch_size", 4)),
                               static_cast<int64_t>(lt_opt_number(L, 3, "chunk", 1024)), std::move(cache));
  reference_cache_save(cache, path);
  lua_pushinteger(L, static_cast<lua_Integer>(cache.size()));
  return 1;
}
LT_REGISTER("train.reference_logprobs", l_train_reference_logprobs);

// ============================================================================================
// Reward models (host/train/reward.h) and rejection sampling (host/train/rejection.h)

std::string describe_reward(const RewardModelPtr& r) {
  return "RewardModel(" + r->model()->config.arch_name() + ", hidden " + std::to_string(r->head().size(1)) +
         ")";
}
LT_REGISTER_HOOK_CLASS("train", RewardModelPtr, describe_reward);

int l_train_reward_model(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  uint64_t seed = 0;
  std::string load;
  if (lt_check_options(L, 2, lt_api("train.reward_model"))) {
    seed = static_cast<uint64_t>(lt_opt_number(L, 2, "seed", 0));
    load = lt_opt_string(L, 2, "load", "");
  }
  auto reward = std::make_shared<RewardModel>(model, seed);
  if (!load.empty()) reward_load_head(*reward, load);
  lt_push<RewardModelPtr>(L, reward);
  return 1;
}
LT_REGISTER("train.reward_model", l_train_reward_model);

int l_train_reward_score(lua_State* L) {
  RewardModel& r = *lt_check<RewardModelPtr>(L, 1);
  if (auto* pds = lt_test<std::shared_ptr<PreferenceDataset>>(L, 2)) {
    int64_t batch_size = 8;
    if (lt_check_options(L, 3, lt_api("RewardModel:score"))) {
      batch_size = static_cast<int64_t>(lt_opt_number(L, 3, "batch_size", 8));
    }
    lt_push<at::Tensor>(L, r.score_pairs(**pds, batch_size));
    return 1;
  }
  lt_push<at::Tensor>(L, r.score(lt_check<Batch>(L, 2)));
  return 1;
}
LT_REGISTER("RewardModel:score", l_train_reward_score);

// HF reads each row's reward before its first pad token.
int l_train_reward_save(lua_State* L) {
  RewardModel& r = *lt_check<RewardModelPtr>(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  int64_t pad = -1;
  std::vector<std::string> files;
  if (lt_check_options(L, 3, lt_api("RewardModel:save"))) {
    pad = static_cast<int64_t>(lt_opt_number(L, 3, "pad_token_id", -1));
    lua_getfield(L, 3, "tokenizer");
    if (!lua_isnil(L, -1)) {
      auto& tok = lt_check<std::shared_ptr<Tokenizer>>(L, lua_gettop(L));
      files = tok->files();
      if (pad < 0) pad = tok->special().pad;
    }
    lua_pop(L, 1);
  }
  // No pad token (Llama 3.1 has none): the vocabulary's last id, a reserved token no response ends with.
  if (pad < 0) pad = r.model()->config.vocab_size - 1;
  reward_save(r, dir, pad, files);
  return 0;
}
LT_REGISTER("RewardModel:save", l_train_reward_save);

int l_train_reward_model_of(lua_State* L) {
  lt_push<std::shared_ptr<Model>>(L, lt_check<RewardModelPtr>(L, 1)->model());
  return 1;
}
LT_REGISTER("RewardModel:model", l_train_reward_model_of);

// The options train.rejection_sample and train.generate share, from the table at idx: the tokenizer, the
// sampling settings (temperature's default differs: `temperature`) and how prompts are read.
std::shared_ptr<Tokenizer> prompt_sampling_options(lua_State* L, int idx, const char* fname,
                                                   double temperature, GenerateOptions* g, DataOptions* d) {
  lua_getfield(L, idx, "tokenizer");
  auto* tok = lt_test<std::shared_ptr<Tokenizer>>(L, -1);
  LT_CHECK(tok != nullptr, fname << ": option 'tokenizer' expects a Tokenizer (tokenizer.load(dir)), got "
                                 << luaL_typename(L, -1));
  std::shared_ptr<Tokenizer> tokenizer = *tok;
  lua_pop(L, 1);
  g->max_new_tokens = lt_opt_int(L, idx, "max_new_tokens", 128);
  g->temperature = lt_opt_number(L, idx, "temperature", temperature);
  g->top_k = lt_opt_int(L, idx, "top_k", 0);
  g->top_p = lt_opt_number(L, idx, "top_p", 1.0);
  g->seed = static_cast<uint64_t>(lt_opt_int(L, idx, "seed", 0, 0));
  d->max_length = lt_opt_int(L, idx, "max_length", d->max_length);
  d->max_records = lt_opt_int(L, idx, "max_records", -1);
  if (lt_has_field(L, idx, "chat")) d->chat = lt_opt_bool(L, idx, "chat", true);
  d->chat_template = lt_opt_string(L, idx, "chat_template", "");
  return tokenizer;
}

// Under runner --nproc N the prompts are split over the ranks; the file is the one a single process writes.
int l_train_rejection_sample(lua_State* L) {
  auto policy = lt_check<std::shared_ptr<Model>>(L, 1);
  RewardModel& reward = *lt_check<RewardModelPtr>(L, 2);
  lt_check_required_options(L, 3, lt_api("train.rejection_sample"));
  RejectionOptions o;
  std::shared_ptr<Tokenizer> tokenizer =
      prompt_sampling_options(L, 3, "train.rejection_sample", 1.0, &o.generate, &o.data);
  std::string prompts = lt_opt_string(L, 3, "prompts", "");
  LT_CHECK(!prompts.empty(),
           "train.rejection_sample: option 'prompts' (a JSONL file of prompts) is required");
  o.n = lt_opt_int(L, 3, "n", o.n);
  o.batch_size = lt_opt_int(L, 3, "batch_size", o.batch_size);
  RejectionStats st =
      rejection_sample(*policy, reward, *tokenizer, prompts, lt_opt_string(L, 3, "out", ""), o);
  lt_push_numbers(L, {{"prompts", st.prompts},
                      {"candidates", st.candidates},
                      {"mean_best", st.mean_best},
                      {"mean_reward", st.mean_reward},
                      {"mean_new_tokens", st.mean_new_tokens},
                      {"seconds", st.seconds}});
  return 1;
}
LT_REGISTER("train.rejection_sample", l_train_rejection_sample);

int l_train_generate(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  lt_check_required_options(L, 2, lt_api("train.generate"));
  CompletionOptions o;
  std::shared_ptr<Tokenizer> tokenizer =
      prompt_sampling_options(L, 2, "train.generate", 0.0, &o.generate, &o.data);
  o.batch_size = lt_opt_int(L, 2, "batch_size", o.batch_size);
  o.progress = lt_opt_bool(L, 2, "progress", true);
  CompletionStats st = generate_completions(*model, *tokenizer, lt_opt_string(L, 2, "prompts", ""),
                                            lt_opt_string(L, 2, "out", ""), o);
  lt_push_numbers(L, {{"prompts", static_cast<double>(st.prompts)},
                      {"new_tokens", static_cast<double>(st.new_tokens)},
                      {"seconds", st.seconds},
                      {"tokens_per_s", st.tokens_per_s}});
  return 1;
}
LT_REGISTER("train.generate", l_train_generate);

int l_train_save(lua_State* L) {
  std::string path = lt_check<TrainerPtr>(L, 1)->save();
  lua_pushstring(L, path.c_str());
  return 1;
}
LT_REGISTER("Trainer:save", l_train_save);

int l_train_resume(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  std::string dir = lua_isnoneornil(L, 2) ? "" : luaL_checkstring(L, 2);
  lua_pushnumber(L, static_cast<double>(t.resume(dir)));
  return 1;
}
LT_REGISTER("Trainer:resume", l_train_resume);

int l_train_step_count(lua_State* L) {
  lua_pushnumber(L, static_cast<double>(lt_check<TrainerPtr>(L, 1)->step_count()));
  return 1;
}
LT_REGISTER("Trainer:step_count", l_train_step_count);

int l_train_lr(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  int64_t step = lua_isnoneornil(L, 2) ? t.step_count() + 1 : lt_check_int(L, 2);
  lua_pushnumber(L, t.lr_at(step));
  return 1;
}
LT_REGISTER("Trainer:lr", l_train_lr);

int l_train_memory(lua_State* L) {
  TrainMemory m = lt_check<TrainerPtr>(L, 1)->memory();
  lt_push_numbers(L, {{"weights", m.weights},
                      {"masters", m.masters},
                      {"gradients", m.gradients},
                      {"optimizer", m.optimizer},
                      {"full_weights", m.full_weights},
                      {"full_masters", m.full_masters},
                      {"full_gradients", m.full_gradients},
                      {"full_optimizer", m.full_optimizer},
                      {"host", m.host}});
  return 1;
}
LT_REGISTER("Trainer:memory", l_train_memory);

}  // namespace

}  // namespace luatune
