// The stop request, the live trainers and their safe points (see stop.h).
#include "host/train/stop.h"

#include <csignal>
#include <set>

#include "host/dist/dist.h"
#include "host/train/trainer.h"

namespace luatune {

namespace {

volatile std::sig_atomic_t g_signal = 0;
bool g_in_loop = false;  // a batches iterator yielded a batch and has not ended
std::string g_report;

std::set<Trainer*>& live() {
  static std::set<Trainer*> trainers;  // touched from the recipe's thread only
  return trainers;
}

// Saves each live trainer's unsaved steps; returns what the runner's last line says about it.
std::string save_all() {
  std::string report;
  for (Trainer* t : live()) {
    const std::string dir = t->save_unsaved();
    if (!dir.empty()) report = " after step " + std::to_string(t->step_count()) + "; checkpoint " + dir;
  }
  if (report.empty()) return "; nothing to save (no trainer with an output_dir had unsaved steps)";
  return report + "; continue with resume=true";
}

}  // namespace

void stop_request(int sig) noexcept {
  if (!g_signal) g_signal = sig;
}

int stop_signal() noexcept {
  return g_signal;
}

void stop_register(Trainer* t) {
  live().insert(t);
}

void stop_unregister(Trainer* t) {
  live().erase(t);
}

bool stop_defer_to_safe_point() {
  for (Trainer* t : live())
    if (t->mid_step() || (dist_active() && g_in_loop)) return true;
  return false;
}

void stop_safe_point(int in_loop) {
  for (Trainer* t : live()) t->reach_safe_point();
  if (in_loop >= 0) g_in_loop = in_loop > 0;
  int64_t sig = g_signal;
  if (dist_active() && !live().empty()) sig = dist_max(sig);  // every rank stops after the same step
  if (!sig) return;
  if (!g_signal) g_signal = static_cast<std::sig_atomic_t>(sig);  // another rank's signal: stop here too
  g_in_loop = false;
  g_report = save_all();
  throw StopRequested(sig == SIGTERM ? "stopped by SIGTERM" : "stopped by Ctrl-C (SIGINT)");
}

std::string stop_save_now() {
  g_report = save_all();
  return g_report;
}

std::string stop_report() {
  return g_report;
}

void stop_note(const std::string& report) {
  g_report = report;
}

}  // namespace luatune
