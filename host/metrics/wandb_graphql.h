// W&B's GraphQL call: the UpsertBucket mutation that creates or resumes a run with its config,
// and the reply's bucket (the server's run id, entity, project, and the history lines it holds).
// Request and reply as the official client sends and reads them: docs/wandb.md, "Protocol sources".
// Internal to host/metrics/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace luatune {

struct WandbRunInfo {
  std::string run_id, entity, project, name, group, job_type, notes, host;
  std::vector<std::string> tags;
  std::string config_json = "{}";  // the resolved config, a JSON object
  std::string storage_id;          // the server's id for the run once known (bucket.id)
};

// The GraphQL body {"query", "variables", "operationName"}: config sent as a JSON string of
// {"key": {"value": v}} per top-level key plus _wandb.cli_version; empty fields as null.
std::string wandb_upsert_body(const WandbRunInfo& run);

struct WandbBucket {
  std::string id, name, entity, project;
  int64_t history_line_count = 0;
};
// Reads data.upsertBucket.bucket; false with *error set (the server's GraphQL error message, or
// what was missing) when the reply has no bucket.
bool wandb_upsert_parse(const std::string& body, WandbBucket* out, std::string* error);

}  // namespace luatune
