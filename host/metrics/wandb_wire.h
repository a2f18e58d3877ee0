// W&B's wire, one header per concern, for the sink (wandb.cpp), `runner wandb-sync`
// (wandb_sync.cpp), the spool and the tests. No threads, no files: those callers drive it.
//   wandb_json.h         extended JSON (NaN, Infinity, -Infinity as bare tokens)
//   wandb_http.h         libcurl POSTs with basic auth, the retry policy, backoff, Retry-After
//   wandb_graphql.h      the UpsertBucket mutation and its reply
//   wandb_file_stream.h  file_stream request bodies cut from a queue of lines, and replies
// What the protocol is and where it is written down: docs/wandb.md, "Protocol sources".
// Internal to host/metrics/.
#pragma once

#include "host/metrics/wandb_file_stream.h"
#include "host/metrics/wandb_graphql.h"
#include "host/metrics/wandb_http.h"
#include "host/metrics/wandb_json.h"
