// The JSON dialect of W&B's wire: history and summary values may be NaN, Infinity or -Infinity,
// written as bare tokens (the official client's "extended JSON"; nlohmann would write null).
// docs/wandb.md, "The protocol": what the client sends and where that is written down.
// Internal to host/metrics/.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace luatune {

std::string wandb_json_dump(const nlohmann::ordered_json& j);
nlohmann::ordered_json wandb_json_parse(const std::string& text);  // reads those tokens back as doubles

// A JSON string literal, quotes included. Invalid UTF-8 (a console line cut mid-character)
// becomes U+FFFD rather than failing the run.
std::string wandb_json_quote(const std::string& s);

}  // namespace luatune
