// Placeholder until the W&B sink lands (see wandb.h): W&B is never enabled.
#include "host/metrics/wandb.h"

#include "host/core/error.h"
#include "host/metrics/metrics.h"

namespace luatune {

bool wandb_enabled(const WandbOptions&) { return false; }

std::unique_ptr<MetricSink> wandb_sink_new(const WandbOptions&) { fail("wandb: not implemented yet"); }

int wandb_sync(const std::string&, std::FILE*) { fail("runner wandb-sync: not implemented yet"); }

}  // namespace luatune
