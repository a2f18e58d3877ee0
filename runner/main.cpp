// runner: luatune's executable. Parses the command line (host/cli/cli.cpp) and carries out
// the verb: run or validate a recipe (or start N ranks of it), list or copy shipped recipes,
// tokenize stdin, show a dataset as trained, print help or versions.
#include <luajit.h>
#include <nlohmann/json.hpp>

#include <alloca.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "bindings/lua_api.h"
#include "host/cli/cli.h"
#include "host/cli/config.h"
#include "host/cli/recipe_docs.h"
#include "host/cli/recipes.h"
#include "host/core/allocator.h"
#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/process.h"
#include "host/core/strings.h"
#include "host/core/term.h"
#include "host/core/version.h"
#include "host/data/preview.h"
#include "host/dist/launch.h"
#include "host/hw/calibration.h"
#include "host/hw/catalog.h"
#include "host/hw/plan_recipe.h"
#include "host/io/gguf_convert.h"
#include "host/io/hub_cache.h"
#include "host/io/jsonl.h"
#include "host/metrics/run_report.h"
#include "host/metrics/wandb.h"
#include "host/sweep/sweep_engine.h"
#include "host/text/tokenizer.h"
#include "runner/recipe_run.h"

using namespace luatune;

// runner tokenize: one JSON string per stdin line -> one JSON array of ids per stdout line (or the
// reverse with --decode). A line that is not what we expect ends the run with exit status 1.
static int run_tokenize(const Command& cmd) {
  auto tok = Tokenizer::load(model_path_from_hub(cmd.tokenizer));
  JsonlReadOptions ro;
  ro.expected = cmd.decode ? "a JSON array of token ids" : "a JSON string";
  ro.skip_blank = false;  // one output line per input line
  JsonlReader lines(stdin, "stdin", ro);
  while (lines.next()) {
    const nlohmann::json& in = lines.value();
    const std::string n = std::to_string(lines.line());
    nlohmann::json out;
    if (!cmd.decode) {
      if (!in.is_string()) fail("stdin:" + n + ": expected a JSON string");
      out = tok->encode(in.get_ref<const std::string&>(), cmd.special);
    } else {
      bool ok = in.is_array();
      std::vector<int32_t> ids;
      for (size_t i = 0; ok && i < in.size(); i++) {
        ok = in[i].is_number_integer();
        if (ok) ids.push_back(in[i].get<int32_t>());
      }
      if (!ok) fail("stdin:" + n + ": expected a JSON array of token ids");
      out = tok->decode(ids);
    }
    std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text += '\n';
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return kExitOk;
}

// runner data: the first --limit records of a JSONL dataset as training sees them (unpacked, one
// record a block), masked tokens in brackets (and dimmed on a terminal, unless NO_COLOR is set).
static int run_data(const Command& cmd) {
  auto tok = Tokenizer::load(model_path_from_hub(cmd.tokenizer));
  DataOptions o;
  if (!cmd.format.empty()) o.format = data_format_parse(cmd.format);
  o.chat_template = cmd.chat_template;
  if (cmd.no_chat) o.chat = false;
  o.max_length = cmd.max_length;
  o.max_records = cmd.limit;
  o.pack = false;
  auto ds = Dataset::from_jsonl(cmd.data_file, *tok, o);
  std::string text = data_preview(*ds, *tok, cmd.data_file, term_color(stdout));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

// runner plan: the recipe's config resolved as `validate` does (nothing runs), mapped to the
// planner's inputs (host/hw/plan_recipe.cpp), and the memory plan printed for every catalog GPU.
// Plan's own keys (kPlanExtraKeys: model_preset=, method=, gpus=/nproc=, shard=, optimizer=, ...)
// are taken out before the recipe sees the rest, so they work on recipes that do not declare them.
static int run_plan(const Command& cmd_in) {
  Command cmd = cmd_in;
  PlanExtras extras;
  cmd.overrides.clear();
  const std::string path = recipe_resolve(cmd.recipe);
  // The trainer's keys the plan takes (shard, optimizer, optimizer_offload) also go to the recipe's
  // config when it declares them under the name given, so the config printed above the plan shows
  // the values the plan used ([command line]); a recipe without the key plans with a note instead.
  const RecipeDocs docs = recipe_docs_read(path);
  auto declared = [&](const std::string& key) {
    for (const auto* list : {&docs.keys, &docs.shared})
      for (const RecipeKeyDoc& d : *list)
        if (d.key == key) return true;
    return false;
  };
  for (const auto& arg : cmd_in.overrides) {
    ConfigOverride o = config_parse_override(arg);
    if (!hw_plan_extra_set(&extras, o.key, o.text)) {
      cmd.overrides.push_back(arg);
    } else if ((o.key == "optimizer" || o.key == "optimizer_offload" || o.key == "shard") &&
               declared(o.key)) {
      // shard= also takes FSDP's names and the ZeRO stage; the config gets the stage's own name.
      cmd.overrides.push_back(o.key == "shard" ? "shard=" + plan_shard_name(plan_shard_parse(o.text)) : arg);
    }
  }
  ConfigValue resolved;
  int rc = recipe_run(path, cmd, &resolved);
  if (rc != kExitOk) return rc;
  PlanRequest req = hw_plan_request(nlohmann::json::parse(config_to_json(resolved)), path, extras);
  const std::vector<GpuSpec> catalog = hw_catalog_load(hw_catalog_default_path());
  std::printf("\nplan (%s; model from %s)\n", path.c_str(), req.model_source.c_str());
  for (const auto& n : req.notes) std::printf("%s\n", n.c_str());
  // The peaks the planner was last checked against, and a margin while the step as built is unmeasured.
  CalibrationStatus calibration =
      hw_calibration_status(hw_calibration_load(hw_calibration_default_path()), hw_step_fingerprint());
  calibration.margin = extras.margin;
  std::string note;
  if (req.phases.empty()) {
    std::fputs(hw_plan_text(hw_plan_calibrated(req.model, req.options, catalog, calibration, &note)).c_str(),
               stdout);
  } else {
    // One plan per phase, then the phase that peaks and where every phase fits.
    std::vector<Plan> plans;
    for (const PlanPhase& ph : req.phases) {
      plans.push_back(hw_plan_calibrated(ph.model, ph.options, catalog, calibration, &note));
      std::printf("\n== phase %s: %s\n", ph.name.c_str(), ph.what.c_str());
      std::fputs(hw_plan_text(plans.back()).c_str(), stdout);
    }
    size_t peak = 0;
    for (size_t i = 1; i < plans.size(); i++)
      if (plans[i].components.total > plans[peak].components.total) peak = i;
    std::printf("\nthe %s phase peaks: %.2f GiB per GPU", req.phases[peak].name.c_str(),
                plans[peak].components.total / kGiB);
    for (size_t i = 0; i < plans.size(); i++)
      if (i != peak) std::printf(" (%s: %.2f)", req.phases[i].name.c_str(), plans[i].components.total / kGiB);
    std::vector<std::string> all;
    for (size_t g = 0; g < catalog.size(); g++) {
      bool every = true;
      for (const Plan& p : plans) every = every && p.gpus[g].fits;
      if (every) all.push_back(catalog[g].name);
    }
    std::printf("\nevery phase fits: %s\n", all.empty() ? "no catalog GPU" : str_join(all, ", ").c_str());
  }
  std::fputs(note.c_str(), stdout);
  std::printf("formulas and constants: docs/hardware.md; nothing was run\n");
  return kExitOk;
}

// runner --nproc N: N ranks of this same runner on this machine (host/dist/launch.cpp), each given
// the recipe (resolved here, so a missing one fails once) and the same --config files and overrides.
static int run_nproc(const Command& cmd) {
  LaunchOptions o;
  o.nproc = cmd.nproc;
  o.runner = process_self_exe("runner --nproc");
  o.args.push_back(recipe_resolve(cmd.recipe));
  for (const auto& f : cmd.config_files) {
    o.args.push_back("--config");
    o.args.push_back(f);
  }
  for (const auto& kv : cmd.overrides) o.args.push_back(kv);
  return dist_launch_local(o);
}

// runner help RECIPE: the recipe's own words (host/cli/recipe_docs.h) next to its resolved config.
// The recipe runs only up to config{}, silently; a script without config{} is not run at all.
static int run_recipe_help(const Command& cmd) {
  const std::string path = recipe_resolve(cmd.recipe);
  RecipeDocs docs = recipe_docs_read(path);
  ConfigValue resolved;
  if (docs.has_config) {
    int rc = recipe_run(path, cmd, &resolved);
    if (rc != kExitOk) return rc;
  }
  std::string name = path_basename(path);
  if (str_ends_with(name, ".lua")) name.resize(name.size() - 4);
  std::fputs(recipe_help_text(name, docs, docs.has_config ? &resolved : nullptr,
                              static_cast<size_t>(term_width(stdout)))
                 .c_str(),
             stdout);
  return kExitOk;
}

static int run_command(const Command& cmd) {
  // --traceback is LUATUNE_TRACEBACK=1 (runner/recipe_run.cpp), for this run and the ranks and
  // sweep trials it starts.
  if (cmd.traceback) setenv("LUATUNE_TRACEBACK", "1", 1);
  switch (cmd.verb) {
    case Command::Verb::help:
      std::fputs((cmd.help_topic.empty() ? cli_help() : cli_verb_help(cmd.help_topic)).c_str(), stdout);
      return kExitOk;
    case Command::Verb::version:
      std::fputs(version_report(LUAJIT_VERSION).c_str(), stdout);
      // The training step's fingerprint, which the planner's calibration points record
      // (host/hw/calibration.h).
      std::printf("training step %s (host/hw/step_files.txt)\n", hw_step_fingerprint());
      return kExitOk;
    case Command::Verb::ls: {
      auto recipes = recipe_list();
      size_t width = 0;
      for (const auto& r : recipes) width = std::max(width, r.name.size());
      for (const auto& r : recipes)  // the whole first sentence, wrapped under its column
        std::printf("%-*s  %s\n", static_cast<int>(width), r.name.c_str(),
                    text_wrap(r.description, static_cast<size_t>(term_width(stdout)), width + 2).c_str());
      if (recipes.empty())
        std::printf("no recipes found (looked in '%s/recipes'; set LUATUNE_HOME)\n", luatune_home().c_str());
      return kExitOk;
    }
    case Command::Verb::recipe_help:
      return run_recipe_help(cmd);
    case Command::Verb::cp:
      std::printf("copied to %s\n", recipe_copy(cmd.recipe, cmd.dest).c_str());
      return kExitOk;
    case Command::Verb::tokenize:
      return run_tokenize(cmd);
    case Command::Verb::data:
      return run_data(cmd);
    case Command::Verb::convert:  // host/io/gguf_convert.h
      gguf_convert(cmd.data_file, cmd.dest, GgufConvertOptions{cmd.dtype});
      std::printf("converted %s -> %s\n", cmd.data_file.c_str(), cmd.dest.c_str());
      return kExitOk;
    case Command::Verb::sweep_report:
      std::fputs(sweep_report(cmd.dest).c_str(), stdout);
      return kExitOk;
    case Command::Verb::wandb_sync:
      return wandb_sync(cmd.dest, stdout, cmd.trust_spool_host);
    case Command::Verb::report:  // host/metrics/run_report.h
      std::printf("report: %s\n", run_report_write(run_report_jsonl_of(cmd.dest), cmd.out_file).c_str());
      return kExitOk;
    case Command::Verb::plan:
      return run_plan(cmd);
    case Command::Verb::run:
      if (cmd.nproc > 1) return run_nproc(cmd);
      return recipe_run(recipe_resolve(cmd.recipe), cmd);
    case Command::Verb::validate:
    case Command::Verb::sweep:
      return recipe_run(recipe_resolve(cmd.recipe), cmd);
  }
  return kExitFailed;
}

// OpenMP's wait policy (host/core/device.h): libgomp reads OMP_WAIT_POLICY in its initialiser, and
// glibc runs an executable's .preinit_array after loading every library but before any library's
// initialiser, libc's included. So this runs then, on the kernel's argv and envp (libc's getenv and
// setenv do not work yet), and when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set it executes
// this same binary again with OMP_WAIT_POLICY=PASSIVE added. That loads the libraries a second time
// (about 0.5 s here), so the verbs that run no LibTorch kernels (help, ls, validate, plan, ...)
// skip it; if the exec fails, the run goes on with libgomp's default.
namespace {
bool env_has(char** envp, const char* name) {
  for (char** e = envp; *e; e++) {
    const char* a = *e;
    const char* b = name;
    while (*b && *a == *b) a++, b++;
    if (!*b && *a == '=') return true;
  }
  return false;
}

bool same(const char* a, const char* b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

// The first argument of a command that computes nothing with LibTorch (host/cli/cli.cpp's verbs).
bool light_verb(const char* arg) {
  static const char* const kLight[] = {"help", "--help",   "-h",   "--version", "-V",     "version",  "ls",
                                       "cp",   "validate", "plan", "api",       "report", "tokenize", "data"};
  for (const char* verb : kLight)
    if (same(arg, verb)) return true;
  return false;
}

// Whether this process was started through the dynamic linker (`ld-linux-x86-64.so.2 runner ...`):
// /proc/self/exe is then the linker, which would take the first argument for the program.
bool started_by_dynamic_linker() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return true;  // no /proc: the exec would fail anyway
  path[n] = '\0';
  const char* base = path;
  for (const char* p = path; *p; p++)
    if (*p == '/') base = p + 1;
  return base[0] == 'l' && base[1] == 'd' && (base[2] == '-' || base[2] == '.');
}

void runner_preinit(int argc, char** argv, char** envp) {
  if (!envp || (argc > 1 && light_verb(argv[1])) || env_has(envp, "OMP_WAIT_POLICY") ||
      env_has(envp, "GOMP_SPINCOUNT") || started_by_dynamic_linker())
    return;
  size_t n = 0;
  while (envp[n]) n++;
  char** env = static_cast<char**>(alloca((n + 3) * sizeof(char*)));
  for (size_t i = 0; i < n; i++) env[i] = envp[i];
  env[n] = const_cast<char*>("OMP_WAIT_POLICY=PASSIVE");
  env[n + 1] = const_cast<char*>(kOpenmpWaitDefaultMark);
  env[n + 2] = nullptr;
  execve("/proc/self/exe", argv, env);  // returns only when it failed
}
__attribute__((section(".preinit_array"), used)) void (*const kRunnerPreinit)(int, char**,
                                                                              char**) = runner_preinit;
}  // namespace

int main(int argc, char** argv) {
  allocator_init();  // before LibTorch's first large buffer (host/core/allocator.h)
  std::setvbuf(stdout, nullptr, _IOLBF,
               0);  // progress lines appear as they are printed, in order with stderr
  try {
    cpu_threads_init();
    std::vector<std::string> args(argv + 1, argv + argc);
    // A developer tool, not in --help: regenerate or check types/luatune.d.lua and docs/lua_api.md.
    if (!args.empty() && args[0] == "api")
      return lt_api_main(std::vector<std::string>(args.begin() + 1, args.end()));
    return run_command(cli_parse(args));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitFailed;
  }
}
