// A stop that saves (docs/checkpoints.md): the first SIGINT/SIGTERM only asks the run to stop. The
// trainers then stop at a safe point, where the step they were running has finished and been
// logged: the batches iterator's next call (bindings/data.cpp), the next trainer:step, or
// trainer:save. There every live trainer with an output_dir saves the steps it has not saved yet,
// and StopRequested unwinds the recipe; the runner closes the metric sinks as preempted and exits
// 130. With data-parallel ranks the decision is agreed with one all-reduce per safe point, so
// every rank stops after the same step.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace luatune {

class Trainer;

struct StopRequested : std::runtime_error {
  explicit StopRequested(const std::string& what) : std::runtime_error(what) {}
};

void stop_request(int sig) noexcept;  // async-signal-safe: records the first signal
int stop_signal() noexcept;           // that signal, or 0

// The live trainers (Trainer registers itself while it exists).
void stop_register(Trainer* t);
void stop_unregister(Trainer* t);

// Whether an interrupt should wait for a safe point instead of stopping the recipe where it is:
// a trainer's step has returned and its safe point is not reached yet (the step is not logged), or
// a data-parallel training loop is running (ranks must stop after the same step).
bool stop_defer_to_safe_point();

// Called by the batches iterator (`in_loop` 1: it is yielding a batch, 0: it has ended) and by the
// trainer (-1: the loop state is unchanged). Writes the checkpoints save_steps deferred to here, then, when a
// stop is asked for (on any rank), saves every live trainer's unsaved steps and throws StopRequested.
void stop_safe_point(int in_loop = -1);

// The runner's own stop where no safe point is due (one process only): saves every live trainer's
// unsaved steps. Returns a message for the user.
std::string stop_save_now();

// What the stop did, for the runner's last line "runner: stopped by SIGTERM<report>": e.g.
// " after step 7; checkpoint DIR; continue with resume=true". stop_note replaces it (sweep.run).
std::string stop_report();
void stop_note(const std::string& report);

}  // namespace luatune
