// Placeholder: the report renderer is being written (see report.h).
#include "host/hw/report.h"

#include <nlohmann/json.hpp>

#include "host/core/error.h"

namespace luatune {

std::string hw_report_markdown(const nlohmann::json&) { fail("hw.report: not implemented yet"); }
std::string hw_report_html(const nlohmann::json&) { fail("hw.report: not implemented yet"); }

}  // namespace luatune
