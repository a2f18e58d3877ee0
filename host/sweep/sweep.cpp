// Placeholder for the sweep engine (see sweep.h).
#include "host/sweep/sweep.h"

#include "host/core/error.h"

namespace luatune {

std::string sweep_report(const std::string&) { fail("runner sweep --report: not implemented yet"); }

}  // namespace luatune
