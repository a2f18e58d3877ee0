// The debug view of a dataset (`runner data`): each document's text and token ids with the masked
// ones (no loss on them) in [brackets], so a user can see what the model is trained to say.
#pragma once

#include <string>

#include "host/data/dataset.h"

namespace luatune {

// One block per document ("line N: T tokens, K targets", the text, the ids), then the stats line.
// Newlines and tabs in the text are written \n and \t. `color`: masked runs are also dimmed (ANSI;
// callers pass term_color(out), which honours NO_COLOR).
std::string data_preview(const Dataset& dataset, const Tokenizer& tokenizer, const std::string& source,
                         bool color);

}  // namespace luatune
