// Output and checkpoint directories (host/train/run_dir.h): completeness by manifest, atomic
// replacement, leftovers of killed saves, the fresh-run claim (refuse / move aside, never delete)
// over every output a run writes and what a trainer's own claim counts, run.json, and the config
// diff resume warns with.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "host/core/files.h"
#include "host/train/run_dir.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A checkpoint directory with a state file of `bytes` bytes and a manifest listing it.
void make_checkpoint(const std::string& dir, int64_t step, const std::string& run_id, size_t bytes = 16) {
  fs::create_directories(dir);
  file_write_atomic(dir + "/state.safetensors", std::string(bytes, 'x'));
  json meta = {{"step", step}, {"run_id", run_id}, {"files", checkpoint_file_sizes(dir)}};
  file_write_atomic(dir + "/trainer.json", meta.dump());
}

}  // namespace

TEST(RunDir, ACheckpointIsCompleteOnlyWithEveryListedFileAtItsSize) {
  TempDir t;
  const std::string dir = t.path + "/step-0000003";
  make_checkpoint(dir, 3, "a");
  std::string why;
  EXPECT_TRUE(checkpoint_complete(dir, &why));
  file_write_atomic(dir + "/state.safetensors", "short");  // truncated
  EXPECT_FALSE(checkpoint_complete(dir, &why));
  EXPECT_EQ(why, "state.safetensors has 5 bytes, the manifest says 16");
  fs::remove(dir + "/state.safetensors");  // a kill between the deletes of a replace, as before
  EXPECT_FALSE(checkpoint_complete(dir, &why));
  EXPECT_EQ(why, "state.safetensors is missing");
  fs::remove(dir + "/trainer.json");
  EXPECT_FALSE(checkpoint_complete(dir, &why));
  EXPECT_EQ(why, "no readable trainer.json");
  // A manifest written before files were listed: the state file must be there.
  fs::create_directories(t.path + "/old");
  file_write_atomic(t.path + "/old/trainer.json", R"({"step": 1})");
  EXPECT_FALSE(checkpoint_complete(t.path + "/old"));
  file_write_atomic(t.path + "/old/state.safetensors", "x");
  EXPECT_TRUE(checkpoint_complete(t.path + "/old"));
}

TEST(RunDir, ListingSkipsIncompleteAndForeignNames) {
  TempDir t;
  make_checkpoint(t.path + "/step-0000002", 2, "a");
  make_checkpoint(t.path + "/step-0000010", 10, "b");
  make_checkpoint(t.path + "/step-0000004", 4, "a");
  fs::remove(t.path + "/step-0000010/state.safetensors");
  make_checkpoint(t.path + "/step-0000005.tmp-123", 5, "a");
  make_checkpoint(t.path + "/step-00000x6", 6, "a");
  std::vector<std::string> incomplete;
  auto all = checkpoints_list(t.path, &incomplete);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 2);
  EXPECT_EQ(all[1].step, 4);
  EXPECT_EQ(all[1].run_id, "a");
  ASSERT_EQ(incomplete.size(), 1u);
  EXPECT_EQ(incomplete[0], t.path + "/step-0000010");
}

TEST(RunDir, PublishReplacesAnExistingCheckpointByRename) {
  TempDir t;
  const std::string final_dir = t.path + "/step-0000003";
  make_checkpoint(final_dir, 3, "old", 8);
  make_checkpoint(final_dir + ".tmp-1", 3, "new", 32);
  checkpoint_publish(final_dir + ".tmp-1", final_dir);
  EXPECT_TRUE(checkpoint_complete(final_dir));
  EXPECT_EQ(fs::file_size(final_dir + "/state.safetensors"), 32u);
  EXPECT_FALSE(fs::exists(final_dir + ".tmp-1"));
  EXPECT_FALSE(fs::exists(final_dir + ".old-" + std::to_string(::getpid())));
  // Into an empty place too.
  make_checkpoint(t.path + "/step-0000004.tmp-1", 4, "new");
  checkpoint_publish(t.path + "/step-0000004.tmp-1", t.path + "/step-0000004");
  EXPECT_TRUE(checkpoint_complete(t.path + "/step-0000004"));
}

TEST(RunDir, LeftoversOfKilledSavesAreCleanedButNotALiveProcesssTemporary) {
  TempDir t;
  fs::create_directories(t.path + "/step-0000003.tmp-999999999");  // no such process
  fs::create_directories(t.path + "/step-0000003.old-42");
  fs::create_directories(t.path + "/step-0000004.tmp-zero");
  const std::string live = t.path + "/step-0000005.tmp-" + std::to_string(::getppid());  // alive
  fs::create_directories(live);
  make_checkpoint(t.path + "/step-0000002", 2, "a");
  EXPECT_EQ(checkpoints_clean_leftovers(t.path), 3);
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(t.path + "/step-0000002/trainer.json"));
  EXPECT_FALSE(fs::exists(t.path + "/step-0000003.tmp-999999999"));
}

TEST(RunDir, AFreshRunRefusesAnotherRunsCheckpointsAndOverwriteMovesThemAside) {
  TempDir t;
  const std::string out = t.path + "/out";
  make_checkpoint(out + "/checkpoints/step-0000005", 5, "earlier");
  file_write_atomic(out + "/metrics.jsonl", "{\"step\": 5}\n");
  json run = {{"run_id", "mine"}};
  EXPECT_EQ(
      error_of([&] { output_dir_claim(out, false, run); }),
      "output_dir: " + out +
          " holds another run's outputs (checkpoints/, metrics.jsonl); continue that run with resume=true, "
          "or start afresh with overwrite=true (moves everything in it to " +
          out + "/previous-<time>/, deletes nothing)");
  EXPECT_FALSE(fs::exists(out + "/run.json"));  // refused: nothing written
  std::string owner;
  EXPECT_FALSE(output_dir_owner(out, &owner));
  const std::string moved = output_dir_claim(out, true, run);
  ASSERT_FALSE(moved.empty());
  EXPECT_EQ(moved.rfind(out + "/previous-", 0), 0u);
  EXPECT_TRUE(checkpoint_complete(moved + "/checkpoints/step-0000005"));
  EXPECT_EQ(file_read(moved + "/metrics.jsonl"), "{\"step\": 5}\n");
  EXPECT_FALSE(fs::exists(out + "/checkpoints"));
  EXPECT_EQ(json::parse(file_read(out + "/run.json"))["run_id"], "mine");
  EXPECT_TRUE(output_dir_owner(out + "/.", &owner));  // the same directory however it is spelt
  EXPECT_EQ(owner, "mine");
  // A second overwrite keeps the first previous-* where it is.
  make_checkpoint(out + "/checkpoints/step-0000001", 1, "mine");
  const std::string moved2 = output_dir_claim(out, true, run);
  EXPECT_NE(moved2, moved);
  EXPECT_TRUE(fs::exists(moved + "/checkpoints/step-0000005"));
  EXPECT_TRUE(fs::exists(moved2 + "/checkpoints/step-0000001"));
}

TEST(RunDir, AFinishedRunWithoutCheckpointsIsRefusedToo) {
  // A full fine-tune with max_steps < save_steps: its model, log and run.json, no checkpoint.
  TempDir t;
  const std::string out = t.path + "/out";
  fs::create_directories(out + "/model");
  file_write_atomic(out + "/model/model.safetensors", "weights");
  file_write_atomic(out + "/metrics.jsonl", "{\"step\": 2}\n");
  file_write_atomic(out + "/run.json", "{\"run_id\": \"earlier\"}");
  EXPECT_EQ(output_dir_run_outputs(out), (std::vector<std::string>{"metrics.jsonl", "model/", "run.json"}));
  EXPECT_EQ(
      error_of([&] {
        output_dir_claim(out, false, {{"run_id", "mine"}});
      }),
      "output_dir: " + out +
          " holds another run's outputs (metrics.jsonl, model/, run.json) and no checkpoint; start afresh "
          "with overwrite=true (moves everything in it to " +
          out + "/previous-<time>/, deletes nothing), or write over them with resume=true");
  EXPECT_EQ(file_read(out + "/run.json"), "{\"run_id\": \"earlier\"}");  // refused: nothing written
  const std::string moved = output_dir_claim(out, true, {{"run_id", "mine"}});
  ASSERT_FALSE(moved.empty());
  EXPECT_EQ(file_read(moved + "/model/model.safetensors"), "weights");
  EXPECT_EQ(file_read(moved + "/run.json"), "{\"run_id\": \"earlier\"}");
  EXPECT_FALSE(fs::exists(out + "/model"));
  EXPECT_EQ(json::parse(file_read(out + "/run.json"))["run_id"], "mine");
  // Each output a recipe writes counts alone: an adapter, a GGUF, a pruning summary, a sweep.
  for (const std::string name :
       {"adapter", "merged", "model.gguf", "summary.json", "trials.jsonl", "report.md"}) {
    TempDir u;
    if (name.find('.') == std::string::npos)
      fs::create_directories(u.path + "/" + name);
    else
      file_write_atomic(u.path + "/" + name, "x");
    EXPECT_EQ(error_of([&] {
                output_dir_claim(u.path, false, json::object());
              }).rfind("output_dir: " + u.path + " holds another run's outputs (" + name, 0),
              0u)
        << name;
  }
}

TEST(RunDir, AnEmptyDirectoryOrTheUsersOwnFilesAreNotAnotherRun) {
  TempDir t;
  EXPECT_EQ(output_dir_claim(t.path, false, {{"run_id", "a"}}), "");  // empty: used as it is
  TempDir u;
  file_write_atomic(u.path + "/notes.txt", "mine");
  file_write_atomic(u.path + "/train.jsonl", "{}\n");
  file_write_atomic(u.path + "/.hidden", "");
  fs::create_directories(u.path + "/checkpoints");                      // no step directory in it
  fs::create_directories(u.path + "/previous-20260101T000000Z/model");  // an earlier run already aside
  EXPECT_TRUE(output_dir_run_outputs(u.path).empty());
  EXPECT_EQ(output_dir_claim(u.path, true, {{"run_id", "b"}}), "");  // overwrite moves nothing then
  EXPECT_EQ(file_read(u.path + "/notes.txt"), "mine");
  EXPECT_TRUE(fs::exists(u.path + "/train.jsonl"));
  EXPECT_EQ(json::parse(file_read(u.path + "/run.json"))["run_id"], "b");
}

TEST(RunDir, ATrainersOwnClaimCountsRunJsonAndCheckpointsOnly) {
  TempDir t;
  file_write_atomic(t.path + "/metrics.jsonl", "");  // the script opened its log before the first step
  fs::create_directories(t.path + "/adapter");
  EXPECT_EQ(output_dir_run_outputs(t.path, OutputDirScope::marks), std::vector<std::string>{});
  file_write_atomic(t.path + "/run.json", "{}");
  EXPECT_EQ(output_dir_run_outputs(t.path, OutputDirScope::marks), std::vector<std::string>{"run.json"});
  EXPECT_EQ(output_dir_run_outputs(t.path, OutputDirScope::checkpoints), std::vector<std::string>{});
  make_checkpoint(t.path + "/checkpoints/step-0000001", 1, "earlier");
  EXPECT_EQ(output_dir_run_outputs(t.path, OutputDirScope::checkpoints),
            std::vector<std::string>{"checkpoints/"});
  // Another rank checks while the first writes its run.json: only the first counts that file.
  TempDir r;
  file_write_atomic(r.path + "/run.json", "{}");
  EXPECT_EQ(output_dir_claim(r.path, false, json::object(), /*main=*/false), "");
  EXPECT_NE(error_of([&] { output_dir_claim(r.path, false, json::object(), /*main=*/true); }), "(no error)");

  // The trainer passes those scopes: its first step takes a directory holding only the script's own
  // log, refuses another run's run.json there, and resume=true with nothing to resume writes over it.
  TrainOptions o;
  o.schedule = "constant";
  o.output_dir = t.path + "/own_log";
  fs::create_directories(o.output_dir);
  file_write_atomic(o.output_dir + "/metrics.jsonl", "");
  Trainer fresh(tiny_model61(), o);
  fresh.step(random_batch(61, 2, 6, 1));
  EXPECT_TRUE(fs::exists(o.output_dir + "/run.json"));
  o.output_dir = t.path + "/finished";
  fs::create_directories(o.output_dir);
  file_write_atomic(o.output_dir + "/run.json", "{\"run_id\": \"earlier\"}");
  file_write_atomic(o.output_dir + "/metrics.jsonl", "");
  Trainer again(tiny_model61(), o);
  EXPECT_EQ(error_of([&] { again.step(random_batch(61, 2, 6, 1)); }),
            "output_dir: " + o.output_dir +
                " holds another run's outputs (run.json) and no checkpoint; start afresh with overwrite=true "
                "(moves everything in it to " +
                o.output_dir + "/previous-<time>/, deletes nothing), or write over them with resume=true");
  o.output_dir = t.path + "/finished_too";
  fs::create_directories(o.output_dir);
  file_write_atomic(o.output_dir + "/run.json", "{\"run_id\": \"earlier\"}");
  Trainer resumed(tiny_model61(), o);
  EXPECT_EQ(resumed.resume(), 0);
  resumed.step(random_batch(61, 2, 6, 1));
}

TEST(RunDir, RunJsonSaysWhatMadeTheDirectoryAndNotesResumes) {
  TempDir t;
  RunInfo info;
  info.run_id = run_id_new();
  info.config = {{"lr", 2e-4}, {"lora", {{"r", 16}}}};
  info.recipe = "recipes/lora_finetune.lua";
  info.seed = 7;
  info.has_seed = true;
  info.git_describe = "v0.1-3-gabc";
  json j = run_json_new(info);
  for (const char* key : {"run_id", "started", "luatune", "git_describe", "host", "pid", "world_size",
                          "recipe", "seed", "config"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["seed"], 7);
  output_dir_claim(t.path, false, j);
  run_json_note_resume(t.path, {{"step", 3}, {"changed", {"lr"}}}, json::object());
  run_json_note_resume(t.path, {{"step", 5}, {"changed", json::array()}}, json::object());
  json back = json::parse(file_read(t.path + "/run.json"));
  EXPECT_EQ(back["run_id"], info.run_id);
  ASSERT_EQ(back["resumes"].size(), 2u);
  EXPECT_EQ(back["resumes"][0]["step"], 3);
  EXPECT_EQ(back["resumes"][1]["step"], 5);
  EXPECT_TRUE(back["resumes"][1].contains("time"));
}

TEST(RunDir, ConfigDiffNamesEveryChangedLeaf) {
  json a = {{"lr", 2e-4}, {"steps", 3}, {"resume", false}, {"lora", {{"r", 16}, {"targets", {"q", "v"}}}}};
  json b = {
      {"lr", 1e-4}, {"steps", 3}, {"resume", true}, {"lora", {{"r", 16}, {"targets", {"q"}}}}, {"new", 1}};
  EXPECT_EQ(config_changed_keys(a, b, {"resume"}), (std::vector<std::string>{"lora.targets", "lr", "new"}));
  EXPECT_TRUE(config_changed_keys(a, a, {}).empty());
}
