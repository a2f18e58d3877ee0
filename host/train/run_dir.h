// A training run's output directory as a contract (docs/checkpoints.md):
//   OUTPUT_DIR/run.json                       what made the directory (config, seed, versions, host)
//   OUTPUT_DIR/checkpoints/step-NNNNNNN/      one complete checkpoint: trainer.json (the manifest,
//                                             written last) and the files it lists with their sizes
//   OUTPUT_DIR/previous-<time>/               an earlier run moved aside by overwrite=true
// A fresh run refuses a directory that holds another run's outputs (output_dir_run_outputs);
// checkpoints replace each other by rename (never delete-then-write); keep_last deletes only the
// current run's checkpoints.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace luatune {

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
  std::string run_id;  // "" for checkpoints written before run ids existed
};

std::string checkpoint_dir_name(int64_t step);  // "step-0000042"
std::string checkpoint_rank_file(
    int rank);  // a sharded checkpoint's file of one rank: "rank-00003.safetensors"

// Complete checkpoints under `root`, oldest first. A step directory whose trainer.json is missing
// or unreadable, or that lacks a file the manifest lists (or has it at another size), is skipped
// and its path appended to `incomplete` when given.
std::vector<CheckpointEntry> checkpoints_list(const std::string& root,
                                              std::vector<std::string>* incomplete = nullptr);

// Whether `dir` is a complete checkpoint; `why` says what is missing when it is not.
bool checkpoint_complete(const std::string& dir, std::string* why = nullptr);

// The manifest's "files" entry: every file in `dir` but trainer.json, with its size in bytes.
nlohmann::json checkpoint_file_sizes(const std::string& dir);

// Moves the finished `tmp` directory to `final_dir` atomically: an existing `final_dir` is first
// renamed aside (to final_dir.old-PID) and only deleted once the new one is in place, so a kill at
// any point leaves either the old or the new checkpoint complete under some name.
void checkpoint_publish(const std::string& tmp, const std::string& final_dir);

// Deletes what killed saves leave under `root`: step-*.tmp-PID of processes no longer running,
// step-*.tmp-zero (sharded saves), step-*.old-*; returns how many were removed.
int checkpoints_clean_leftovers(const std::string& root);

// A new run id: UTC time, host and pid, e.g. "20261125T231806Z-host-4242".
std::string run_id_new();

// What a new run writes as OUTPUT_DIR/run.json (config may be null).
struct RunInfo {
  std::string run_id;
  nlohmann::json config;  // the resolved recipe config, when there is one
  std::string recipe;
  double seed = 0;
  bool has_seed = false;
  int world_size = 1;
  std::string git_describe;  // of the luatune tree that ran, when it is a git checkout
};
nlohmann::json run_json_new(const RunInfo& info);

// What a claim counts as another run's work in its directory.
enum class OutputDirScope {
  outputs,      // every output a run writes: a claim made before the run wrote anything (config{})
  marks,        // run.json and checkpoints only: a trainer's own claim at its first step or save, when
                // the script may already have written its metrics.jsonl there
  checkpoints,  // checkpoints only: resume=true finding none to continue (it writes over the rest)
};

// The entries of `dir` that a luatune run writes, as "model/", "run.json", "checkpoints/" (only when
// it holds a step-* entry), sorted; empty when there are none. Other files (the user's own notes or
// data, hidden files) and earlier previous-* directories are not a run's.
std::vector<std::string> output_dir_run_outputs(const std::string& dir,
                                                OutputDirScope scope = OutputDirScope::outputs);

// Claims `dir` for a new run: when it holds another run's outputs (counted by `scope`), fails with
// one line naming the directory, what it holds and the two ways out, unless `overwrite`, which first
// moves every entry of `dir` except earlier previous-* directories into dir/previous-<time>/ (never
// deletes). Then writes run.json. Returns the path the old run went to ("" when nothing moved). Ranks
// other than the first pass main=false: they check (and fail alike, not counting the run.json the
// first rank may be writing) but move and write nothing.
std::string output_dir_claim(const std::string& dir, bool overwrite, const nlohmann::json& run_json,
                             bool main = true, OutputDirScope scope = OutputDirScope::outputs);

// This process's claims: the run that owns each output directory it claimed or resumed (the
// recipe's config{} claims before anything is written; a trainer adopts that claim).
void output_dir_register(const std::string& dir, const std::string& run_id);
bool output_dir_owner(const std::string& dir, std::string* run_id);

// A resumed run: appends {time, step, checkpoint, changed} to run.json's "resumes" (creating
// run.json from `fallback` when the directory has none).
void run_json_note_resume(const std::string& dir, const nlohmann::json& resume_entry,
                          const nlohmann::json& fallback);

// Leaf keys whose values differ between two resolved configs ("lora.r"), sorted; keys only one
// side has count as differing. `ignore` lists keys never reported (resume, overwrite, ...).
std::vector<std::string> config_changed_keys(const nlohmann::json& before, const nlohmann::json& after,
                                             const std::vector<std::string>& ignore);

}  // namespace luatune
