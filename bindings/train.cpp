// Lua module `train`: train.new(model, opts) makes a Trainer (host/train/trainer.h) whose
// trainer:step(batch) runs one optimizer step in C++ and returns a small table of statistics; the
// recipe keeps the loop. train.batch{...} builds a Batch from tensors for recipes with their own data.
#include <ATen/ATen.h>

#include "bindings/batch_class.h"
#include "bindings/dataset_class.h"
#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/modules.h"
#include "bindings/preference_class.h"
#include "bindings/tensor_class.h"
#include "bindings/tokenizer_class.h"
#include "host/cli/config.h"
#include "host/core/error.h"
#include "host/core/tensor_ops.h"
#include "host/train/preference.h"
#include "host/train/rejection.h"
#include "host/train/reward.h"
#include "host/train/trainer.h"

namespace luatune {

using TrainerPtr = std::shared_ptr<Trainer>;
using PreferenceLossPtr = std::shared_ptr<PreferenceLoss>;
using RewardModelPtr = std::shared_ptr<RewardModel>;

template <>
struct LuaClass<TrainerPtr> {
  static constexpr const char* name = "Trainer";
};
template <>
struct LuaClass<PreferenceLossPtr> {
  static constexpr const char* name = "PreferenceLoss";
};
template <>
struct LuaClass<RewardModelPtr> {
  static constexpr const char* name = "RewardModel";
};

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
  lua_createtable(L, static_cast<int>(values.size()), 0);
  for (size_t i = 0; i < values.size(); i++) {
    lua_pushstring(L, values[i].first.c_str());
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  lua_setfield(L, -2, "__order");
  lua_setmetatable(L, -2);
}

std::string describe_trainer(const TrainerPtr& t) {
  const TrainOptions& o = t->options();
  return "Trainer(" + o.optimizer + ", lr " + std::to_string(o.lr) + ", " + o.schedule + ", step " +
         std::to_string(t->step_count()) + ", " + std::to_string(t->parameters().size()) +
         " trainable tensors)";
}

// The resolved config goes into checkpoints (trainer:resume diffs it).
const LtFunc kTrainNew{
    "train",
    "new",
    "model: Model, opts?: Opts",
    "Trainer",
    "a Trainer over the model's trainable weights (all, or only the adapters); optimizer state is allocated "
    "at "
    "the first step",
    {{"optimizer", "string", "\"adamw\"",
      "\"adamw\" (decoupled weight decay), \"adamw8bit\" (blockwise 8-bit moments, docs/adamw8bit.md) or "
      "\"sgd\""},
     {"lr", "number", "2e-5", "the peak learning rate"},
     {"betas", "number[]", "{0.9, 0.999}", "AdamW's beta1, beta2"},
     {"eps", "number", "1e-8", "AdamW's epsilon"},
     {"weight_decay", "number", "0", "decoupled weight decay"},
     {"momentum", "number", "0", "sgd's momentum"},
     {"schedule", "string", "\"cosine\"", "\"constant\", \"linear\" or \"cosine\" after the warmup"},
     {"warmup", "integer", "0", "steps of linear warmup from 0"},
     {"steps", "integer", "0", "total steps, over which the schedule decays"},
     {"min_lr_ratio", "number", "0", "the schedule decays to min_lr_ratio * lr"},
     {"micro_batch_size", "integer", "0", "rows per forward/backward (0: the whole batch)"},
     {"max_grad_norm", "number", "1", "clip the total gradient norm (0: no clipping)"},
     {"master_weights", "boolean", "true", "fp32 copies of bf16/f16 weights for the update"},
     {"checkpoint_layers", "boolean", "false", "recompute each layer in backward (random state replayed)"},
     {"loss_chunk", "integer", "4096",
      "rows of full-vocabulary logits that exist at once, forward or backward"},
     {"output_dir", "string", "", "checkpoints go to output_dir/checkpoints/step-NNNNNNN"},
     {"save_every", "integer", "0",
      "save a checkpoint every N steps, written at the next safe point (0: only trainer:save)"},
     {"keep_last", "integer", "2", "this run's checkpoints kept (older ones deleted)"},
     {"hooks", "(ShearedPruner|Distiller|PreferenceLoss|RewardModel)[]", "{}",
      "pruners, distillers, preference losses, reward models: their own tensors, forward and loss changes, "
      "statistics"},
     {"shard", "string", "\"none\"",
      "ZeRO over data-parallel ranks: \"optimizer\", \"gradients\" or \"full\" (FSDP's names accepted; "
      "docs/zero.md)"},
     {"optimizer_offload", "string", "\"none\"",
      "\"cpu\": masters and optimizer states in host memory, updated there"},
     {"overwrite", "boolean", "",
      "a fresh run into an output_dir with another run's checkpoints moves them to previous-<time>/ "
      "(default: the "
      "config's overwrite, else it fails)"}}};
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
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lt_check_options(L, 2, kTrainNew);
    o.optimizer = lt_opt_string(L, 2, "optimizer", o.optimizer);
    o.lr = lt_opt_number(L, 2, "lr", o.lr);
    o.eps = lt_opt_number(L, 2, "eps", o.eps);
    o.weight_decay = lt_opt_number(L, 2, "weight_decay", o.weight_decay);
    o.momentum = lt_opt_number(L, 2, "momentum", o.momentum);
    o.schedule = lt_opt_string(L, 2, "schedule", o.schedule);
    o.warmup = lt_opt_int(L, 2, "warmup", 0);
    o.steps = lt_opt_int(L, 2, "steps", 0);
    o.min_lr_ratio = lt_opt_number(L, 2, "min_lr_ratio", 0);
    o.micro_batch_size = lt_opt_int(L, 2, "micro_batch_size", 0);
    o.max_grad_norm = lt_opt_number(L, 2, "max_grad_norm", o.max_grad_norm);
    o.master_weights = lt_opt_bool(L, 2, "master_weights", o.master_weights);
    o.checkpoint_layers = lt_opt_bool(L, 2, "checkpoint_layers", false);
    o.loss_chunk = lt_opt_int(L, 2, "loss_chunk", o.loss_chunk);
    o.output_dir = lt_opt_string(L, 2, "output_dir", "");
    o.save_every = lt_opt_int(L, 2, "save_every", 0);
    o.keep_last = lt_opt_int(L, 2, "keep_last", o.keep_last);
    o.shard = lt_opt_string(L, 2, "shard", o.shard);
    o.optimizer_offload = lt_opt_string(L, 2, "optimizer_offload", o.optimizer_offload);
    o.overwrite = lt_opt_bool(L, 2, "overwrite", o.overwrite);
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

const LtFunc kTrainBatch{
    "train",
    "batch",
    "opts: Opts",
    "Batch",
    "a Batch from (rows, length) tensors, for recipes with their own data",
    {{"ids", "Tensor", "required", "(B, T) token ids"},
     {"targets", "Tensor", "", "(B, T), -100 = no target; default: the next token of each row"},
     {"positions", "Tensor", "", "(B, T) positions"},
     {"segments", "Tensor", "", "(B, T) document numbers within each row"}}};
int l_train_batch(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lt_check_options(L, 1, kTrainBatch);
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

const LtFunc kTrainerStep{"Trainer", "step", "batch: Batch",
                          "table # {loss, lr, grad_norm, tokens_per_s, tokens, target_tokens, step_time, "
                          "peak_memory_gb (CUDA), hook statistics}",
                          "one optimizer step; a NaN/inf loss stops the run before the update"};
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

void push_eval(lua_State* L, const EvalStats& e) {
  std::vector<std::pair<std::string, double>> v = {{"loss", e.loss}};
  if (e.perplexity > 0) v.emplace_back("perplexity", e.perplexity);
  v.emplace_back("tokens", static_cast<double>(e.target_tokens));
  v.insert(v.end(), e.extra.begin(), e.extra.end());
  push_numbers(L, v);
}

// perplexity only when the loss is per token.
const LtFunc kTrainerEvaluate{
    "Trainer",
    "evaluate",
    "data: Dataset|PreferenceSet|Batch[], opts?: Opts",
    "table # {loss, perplexity, tokens, hook statistics}",
    "the loss without gradients over a Dataset's rows in order, a PreferenceSet or a list of batches",
    {{"batch_size", "integer", "8", "rows (a preference set: pairs) per batch"},
     {"max_batches", "integer", "0", "stop after this many batches (0: all)"}}};
int l_train_evaluate(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  auto* ds = lt_test<std::shared_ptr<Dataset>>(L, 2);
  auto* pds = lt_test<std::shared_ptr<PreferenceDataset>>(L, 2);
  if (ds || pds) {
    int64_t batch_size = 8, max_batches = 0;
    if (!lua_isnoneornil(L, 3)) {
      lt_check_options(L, 3, kTrainerEvaluate);
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

// ============================================================================================
// Preference optimisation (host/train/preference.h)

std::string describe_preference(const PreferenceLossPtr& p) {
  const PreferenceOptions& o = p->options();
  char buf[128];
  std::snprintf(buf, sizeof(buf), "PreferenceLoss(%s, beta %g, label_smoothing %g)", o.loss.c_str(), o.beta,
                o.label_smoothing);
  return buf;
}

std::shared_ptr<TrainerHook> preference_hook(lua_State* L, int idx) {
  PreferenceLossPtr* p = lt_test<PreferenceLossPtr>(L, idx);
  return p ? *p : nullptr;
}

const LtFunc kTrainPreference{
    "train",
    "preference",
    "model: Model, opts?: Opts",
    "PreferenceLoss # a hook for train.new",
    "a preference loss on pairs (docs/alignment.md); steps report rewards, margins and accuracies",
    {{"loss", "string", "\"sigmoid\"", "\"sigmoid\" (DPO), \"ipo\", \"hinge\" or \"orpo\" (no reference)"},
     {"beta", "number", "0.1", "DPO's temperature; ORPO's lambda"},
     {"label_smoothing", "number", "0", "sigmoid: the chance a label is flipped (cDPO), in [0, 0.5)"},
     {"chunk", "integer", "1024", "rows of logits that exist at once"},
     {"reference", "Model|string", "",
      "a frozen Model, \"adapters_off\" (the model with its adapters off) or a train.reference_logprobs "
      "cache path"}}};
int l_train_preference(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  PreferenceOptions o;
  std::shared_ptr<Model> reference;
  std::string cache_path;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lt_check_options(L, 2, kTrainPreference);
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

// One file for a train and a held-out set; keyed by each pair's content.
const LtFunc kTrainReferenceLogprobs{
    "train",
    "reference_logprobs",
    "model: Model, pairs: PreferenceSet|PreferenceSet[], opts: Opts",
    "integer # the pairs cached",
    "the model's summed log-probs of every pair's responses, computed once and written to path",
    {{"path", "string", "required", "the cache file to write"},
     {"adapters_off", "boolean", "false", "score with the model's adapters off"},
     {"batch_size", "integer", "4", "pairs per forward"},
     {"chunk", "integer", "1024", "rows of logits that exist at once"}}};
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
  luaL_checktype(L, 3, LUA_TTABLE);
  lt_check_options(L, 3, kTrainReferenceLogprobs);
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

// ============================================================================================
// Reward models (host/train/reward.h) and rejection sampling (host/train/rejection.h)

std::string describe_reward(const RewardModelPtr& r) {
  return "RewardModel(" + r->model()->config.arch_name() + ", hidden " + std::to_string(r->head().size(1)) +
         ")";
}

std::shared_ptr<TrainerHook> reward_hook(lua_State* L, int idx) {
  RewardModelPtr* r = lt_test<RewardModelPtr>(L, idx);
  return r ? *r : nullptr;
}

const LtFunc kTrainRewardModel{
    "train",
    "reward_model",
    "model: Model, opts?: Opts",
    "RewardModel # also a hook for train.new",
    "a (1, hidden) score head read at each row's last token; trains with a Bradley-Terry loss on pairs",
    {{"seed", "integer", "0", "seed of the head's initialisation"},
     {"load", "string", "", "read the head of a saved reward model (whose body models.load reads)"}}};
int l_train_reward_model(lua_State* L) {
  auto model = lt_check<std::shared_ptr<Model>>(L, 1);
  uint64_t seed = 0;
  std::string load;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lt_check_options(L, 2, kTrainRewardModel);
    seed = static_cast<uint64_t>(lt_opt_number(L, 2, "seed", 0));
    load = lt_opt_string(L, 2, "load", "");
  }
  auto reward = std::make_shared<RewardModel>(model, seed);
  if (!load.empty()) reward_load_head(*reward, load);
  lt_push<RewardModelPtr>(L, reward);
  return 1;
}

const LtFunc kRewardModelScore{"RewardModel",
                               "score",
                               "data: PreferenceSet|Batch, opts?: Opts",
                               "Tensor # (pairs, 2) chosen and rejected rewards, or (rows) for a Batch",
                               "rewards of pairs or of a batch's rows",
                               {{"batch_size", "integer", "8", "pairs per forward"}}};
int l_train_reward_score(lua_State* L) {
  RewardModel& r = *lt_check<RewardModelPtr>(L, 1);
  if (auto* pds = lt_test<std::shared_ptr<PreferenceDataset>>(L, 2)) {
    int64_t batch_size = 8;
    if (!lua_isnoneornil(L, 3)) {
      lt_check_options(L, 3, kRewardModelScore);
      batch_size = static_cast<int64_t>(lt_opt_number(L, 3, "batch_size", 8));
    }
    lt_push<at::Tensor>(L, r.score_pairs(**pds, batch_size));
    return 1;
  }
  lt_push<at::Tensor>(L, r.score(lt_check<Batch>(L, 2)));
  return 1;
}

// HF reads each row's reward before its first pad token.
const LtFunc kRewardModelSave{
    "RewardModel",
    "save",
    "dir: string, opts?: Opts",
    "",
    "writes an HF <Family>ForSequenceClassification directory (num_labels 1, score.weight); merge LoRA first",
    {{"tokenizer", "Tokenizer", "", "its files are copied; its pad token is the default pad_token_id"},
     {"pad_token_id", "integer", "", "default: the tokenizer's pad token, else the vocabulary's last id"}}};
int l_train_reward_save(lua_State* L) {
  RewardModel& r = *lt_check<RewardModelPtr>(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  int64_t pad = -1;
  std::vector<std::string> files;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lt_check_options(L, 3, kRewardModelSave);
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

const LtFunc kRewardModelModel{"RewardModel", "model", "", "Model", "the body Model"};
int l_train_reward_model_of(lua_State* L) {
  lt_push<std::shared_ptr<Model>>(L, lt_check<RewardModelPtr>(L, 1)->model());
  return 1;
}

// Under runner --nproc N the prompts are split over the ranks; the file is the one a single process writes.
const LtFunc kTrainRejectionSample{
    "train",
    "rejection_sample",
    "policy: Model, reward: RewardModel, opts: Opts",
    "table # {prompts, candidates, mean_best, mean_reward, mean_new_tokens, seconds}",
    "best-of-N: n samples per prompt scored by the reward model, the best written atomically to out as SFT "
    "records",
    {{"prompts", "string", "required", "a JSONL file of {\"prompt\"} or {\"messages\"} records"},
     {"out", "string", "required", "the JSONL file written"},
     {"tokenizer", "Tokenizer", "required", "the policy's tokenizer"},
     {"n", "integer", "4", "candidates per prompt"},
     {"max_new_tokens", "integer", "128", "tokens per candidate at most"},
     {"temperature", "number", "1", "sampling temperature"},
     {"top_k", "integer", "0", "0: off"},
     {"top_p", "number", "1", "1: off"},
     {"seed", "integer", "0", "candidate k of prompt i uses seed + i * n + k"},
     {"max_length", "integer", "2048", "tokens per scored sequence"},
     {"chat", "boolean", "", "render prompts as conversations (default: the tokenizer has a chat template)"},
     {"chat_format", "string", "", "the chat format by name"},
     {"max_records", "integer", "-1", "read at most this many prompts (-1: all)"},
     {"batch_size", "integer", "8", "candidates scored per forward"}}};
int l_train_rejection_sample(lua_State* L) {
  auto policy = lt_check<std::shared_ptr<Model>>(L, 1);
  RewardModel& reward = *lt_check<RewardModelPtr>(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  lt_check_options(L, 3, kTrainRejectionSample);
  lua_getfield(L, 3, "tokenizer");
  auto* tok = lt_test<std::shared_ptr<Tokenizer>>(L, -1);
  LT_CHECK(tok != nullptr,
           "train.rejection_sample: option 'tokenizer' expects a Tokenizer (tokenizer.load(dir)), got "
               << luaL_typename(L, -1));
  std::shared_ptr<Tokenizer> tokenizer = *tok;
  lua_pop(L, 1);
  std::string prompts = lt_opt_string(L, 3, "prompts", "");
  LT_CHECK(!prompts.empty(),
           "train.rejection_sample: option 'prompts' (a JSONL file of prompts) is required");
  RejectionOptions o;
  o.n = static_cast<int64_t>(lt_opt_number(L, 3, "n", static_cast<double>(o.n)));
  o.batch_size = static_cast<int64_t>(lt_opt_number(L, 3, "batch_size", static_cast<double>(o.batch_size)));
  o.generate.max_new_tokens = static_cast<int64_t>(lt_opt_number(L, 3, "max_new_tokens", 128));
  o.generate.temperature = lt_opt_number(L, 3, "temperature", 1.0);
  o.generate.top_k = static_cast<int64_t>(lt_opt_number(L, 3, "top_k", 0));
  o.generate.top_p = lt_opt_number(L, 3, "top_p", 1.0);
  o.generate.seed = static_cast<uint64_t>(lt_opt_number(L, 3, "seed", 0));
  o.data.max_length =
      static_cast<int64_t>(lt_opt_number(L, 3, "max_length", static_cast<double>(o.data.max_length)));
  o.data.max_records = static_cast<int64_t>(lt_opt_number(L, 3, "max_records", -1));
  if (lt_has_field(L, 3, "chat")) o.data.chat = lt_opt_bool(L, 3, "chat", true);
  o.data.chat_format = lt_opt_string(L, 3, "chat_format", "");
  RejectionStats st =
      rejection_sample(*policy, reward, *tokenizer, prompts, lt_opt_string(L, 3, "out", ""), o);
  lua_createtable(L, 0, 6);
  lt_set_number(L, "prompts", static_cast<double>(st.prompts));
  lt_set_number(L, "candidates", static_cast<double>(st.candidates));
  lt_set_number(L, "mean_best", st.mean_best);
  lt_set_number(L, "mean_reward", st.mean_reward);
  lt_set_number(L, "mean_new_tokens", st.mean_new_tokens);
  lt_set_number(L, "seconds", st.seconds);
  return 1;
}

const LtFunc kTrainerSave{"Trainer", "save", "", "string # the checkpoint's path",
                          "writes output_dir/checkpoints/step-NNNNNNN (a temporary directory renamed into "
                          "place); a step already saved "
                          "is not written again"};
int l_train_save(lua_State* L) {
  std::string path = lt_check<TrainerPtr>(L, 1)->save();
  lua_pushstring(L, path.c_str());
  return 1;
}

const LtFunc kTrainerResume{
    "Trainer", "resume", "dir?: string", "integer # the step it continues from (0: no checkpoint)",
    "loads the newest complete checkpoint (or dir); refuses another world size, shard stage or tensor shape"};
int l_train_resume(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  std::string dir = lua_isnoneornil(L, 2) ? "" : luaL_checkstring(L, 2);
  lua_pushnumber(L, static_cast<double>(t.resume(dir)));
  return 1;
}

const LtFunc kTrainerStepCount{"Trainer", "step_count", "", "integer", "steps taken"};
int l_train_step_count(lua_State* L) {
  lua_pushnumber(L, static_cast<double>(lt_check<TrainerPtr>(L, 1)->step_count()));
  return 1;
}

const LtFunc kTrainerLr{"Trainer", "lr", "step?: integer", "number",
                        "the learning rate of a step (default: the next step)"};
int l_train_lr(lua_State* L) {
  Trainer& t = *lt_check<TrainerPtr>(L, 1);
  int64_t step = lua_isnoneornil(L, 2) ? t.step_count() + 1 : lt_check_int(L, 2);
  lua_pushnumber(L, t.lr_at(step));
  return 1;
}

const LtFunc kTrainerMemory{
    "Trainer", "memory", "",
    "table # {weights, masters, gradients, optimizer, host, full_weights, full_masters, full_gradients, "
    "full_optimizer}",
    "bytes of training state this rank holds, and what an unsharded replica holds (full_*)"};
int l_train_memory(lua_State* L) {
  TrainMemory m = lt_check<TrainerPtr>(L, 1)->memory();
  lua_createtable(L, 0, 9);
  lt_set_number(L, "weights", static_cast<double>(m.weights));
  lt_set_number(L, "masters", static_cast<double>(m.masters));
  lt_set_number(L, "gradients", static_cast<double>(m.gradients));
  lt_set_number(L, "optimizer", static_cast<double>(m.optimizer));
  lt_set_number(L, "full_weights", static_cast<double>(m.full_weights));
  lt_set_number(L, "full_masters", static_cast<double>(m.full_masters));
  lt_set_number(L, "full_gradients", static_cast<double>(m.full_gradients));
  lt_set_number(L, "full_optimizer", static_cast<double>(m.full_optimizer));
  lt_set_number(L, "host", static_cast<double>(m.host));
  return 1;
}

const luaL_Reg trainer_methods[] = {{"step", l_train_step},
                                    {"evaluate", l_train_evaluate},
                                    {"save", l_train_save},
                                    {"resume", l_train_resume},
                                    {"step_count", l_train_step_count},
                                    {"lr", l_train_lr},
                                    {"memory", l_train_memory},
                                    {nullptr, nullptr}};
const luaL_Reg train_funcs[] = {{"new", l_train_new},
                                {"batch", l_train_batch},
                                {"preference", l_train_preference},
                                {"reference_logprobs", l_train_reference_logprobs},
                                {"reward_model", l_train_reward_model},
                                {"rejection_sample", l_train_rejection_sample},
                                {nullptr, nullptr}};
const luaL_Reg preference_methods[] = {{nullptr, nullptr}};
const luaL_Reg reward_methods[] = {{"score", l_train_reward_score},
                                   {"save", l_train_reward_save},
                                   {"model", l_train_reward_model_of},
                                   {nullptr, nullptr}};

}  // namespace

LtModuleApi lt_api_train() {
  return {
      "train",
      "Trainers (one optimizer step in C++ per call; the recipe keeps the loop), batches, preference losses, "
      "reward models and rejection sampling",
      {kTrainNew, kTrainBatch, kTrainPreference, kTrainReferenceLogprobs, kTrainRewardModel,
       kTrainRejectionSample, kTrainerStep, kTrainerEvaluate, kTrainerSave, kTrainerResume, kTrainerStepCount,
       kTrainerLr, kTrainerMemory, kRewardModelScore, kRewardModelSave, kRewardModelModel},
      {{"Trainer", "the optimizer, schedule and checkpoints over a model's trainable weights"},
       {"PreferenceLoss", "a preference-loss hook for train.new"},
       {"RewardModel", "a score head on a model; a hook for train.new"}}};
}

}  // namespace luatune

extern "C" int luaopen_train(lua_State* L) {
  using namespace luatune;
  lt_register_class<TrainerPtr, describe_trainer>(L, trainer_methods);
  lua_pop(L, 1);
  lt_register_class<PreferenceLossPtr, describe_preference>(L, preference_methods);
  lua_pop(L, 1);
  lt_register_class<RewardModelPtr, describe_reward>(L, reward_methods);
  lua_pop(L, 1);
  lt_register_hook_getter(preference_hook);
  lt_register_hook_getter(reward_hook);
  lt_new_module(L, train_funcs);
  return 1;
}
