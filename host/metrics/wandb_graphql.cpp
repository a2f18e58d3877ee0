// UpsertBucket (see wandb_graphql.h): the request body and the reply's bucket.
#include "host/metrics/wandb_graphql.h"

#include <nlohmann/json.hpp>

#include "host/core/version.h"
#include "host/metrics/wandb_json.h"

namespace luatune {

using ojson = nlohmann::ordered_json;

namespace {

// The official client's mutation text, verbatim (docs/wandb.md, "Protocol sources"): the server
// matches on the operation, so the text is the client's own.
const char* const kUpsertBucket = R"(mutation UpsertBucket(
    $id: String, $name: String, $project: String, $entity: String, $groupName: String,
    $description: String, $displayName: String, $notes: String, $commit: String,
    $config: JSONString, $host: String, $debug: Boolean, $program: String, $repo: String,
    $jobType: String, $state: String, $sweep: String, $tags: [String!], $summaryMetrics: JSONString,
) {
    upsertBucket(input: {
        id: $id, name: $name, groupName: $groupName, modelName: $project, entityName: $entity,
        description: $description, displayName: $displayName, notes: $notes, config: $config,
        commit: $commit, host: $host, debug: $debug, jobProgram: $program, jobRepo: $repo,
        jobType: $jobType, state: $state, sweep: $sweep, tags: $tags, summaryMetrics: $summaryMetrics,
    }) {
        bucket {
            id name displayName description config sweepName
            project { id name entity { id name } }
            historyLineCount
        }
        inserted
    }
})";

ojson or_null(const std::string& s) {
  return s.empty() ? ojson(nullptr) : ojson(s);
}

}  // namespace

std::string wandb_upsert_body(const WandbRunInfo& run) {
  ojson config = ojson::object();
  ojson resolved = wandb_json_parse(run.config_json.empty() ? "{}" : run.config_json);
  if (resolved.is_object())
    for (auto it = resolved.begin(); it != resolved.end(); ++it) config[it.key()] = {{"value", it.value()}};
  config["_wandb"] = {{"value", {{"cli_version", "luatune " + version_luatune()}}}};

  ojson vars = ojson::object();
  vars["id"] = or_null(run.storage_id);
  vars["name"] = run.run_id;
  vars["project"] = or_null(run.project);
  vars["entity"] = or_null(run.entity);
  vars["groupName"] = or_null(run.group);
  vars["displayName"] = or_null(run.name);
  vars["notes"] = or_null(run.notes);
  vars["jobType"] = or_null(run.job_type);
  vars["tags"] = run.tags.empty() ? ojson(nullptr) : ojson(run.tags);
  vars["config"] = wandb_json_dump(config);
  vars["host"] = or_null(run.host);

  ojson body = ojson::object();
  body["query"] = kUpsertBucket;
  body["variables"] = vars;
  body["operationName"] = "UpsertBucket";
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool wandb_upsert_parse(const std::string& body, WandbBucket* out, std::string* error) {
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "the reply is not JSON";
    return false;
  }
  const ojson* bucket = nullptr;
  auto data = j.find("data");
  if (data != j.end() && data->is_object()) {
    auto ub = data->find("upsertBucket");
    if (ub != data->end() && ub->is_object()) {
      auto b = ub->find("bucket");
      if (b != ub->end() && b->is_object()) bucket = &*b;
    }
  }
  if (!bucket) {
    auto errors = j.find("errors");
    if (errors != j.end() && errors->is_array() && !errors->empty() && (*errors)[0].is_object())
      *error = (*errors)[0].value("message", std::string("unknown GraphQL error"));
    else
      *error = "the reply has no data.upsertBucket.bucket";
    return false;
  }
  auto str = [](const ojson& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  out->id = str(*bucket, "id");
  out->name = str(*bucket, "name");
  auto project = bucket->find("project");
  if (project != bucket->end() && project->is_object()) {
    out->project = str(*project, "name");
    auto entity = project->find("entity");
    if (entity != project->end() && entity->is_object()) out->entity = str(*entity, "name");
  }
  auto count = bucket->find("historyLineCount");
  out->history_line_count = count != bucket->end() && count->is_number() ? count->get<int64_t>() : 0;
  if (out->entity.empty() || out->project.empty()) {
    *error = "the reply's bucket has no project.name or project.entity.name";
    return false;
  }
  return true;
}

}  // namespace luatune
