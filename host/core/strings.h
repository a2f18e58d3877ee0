// Small string helpers shared by the CLI, config resolution and error messages, and the Markdown
// table writer of the reports (run, sweep and hardware reports).
#pragma once

#include <string>
#include <vector>

namespace luatune {

std::vector<std::string> str_split(const std::string& s, char sep);
std::string str_trim(const std::string& s);
std::string str_join(const std::vector<std::string>& parts, const std::string& sep);
bool str_starts_with(const std::string& s, const std::string& prefix);
bool str_ends_with(const std::string& s, const std::string& suffix);
// Levenshtein distance (insertions, deletions, substitutions), for "did you mean" hints.
size_t str_edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `word`, or "" when none is close enough to be a plausible typo.
std::string str_nearest(const std::string& word, const std::vector<std::string>& candidates);
// Parses a whole string as a number (strtod rules, surrounding blanks allowed); false if not one.
bool str_to_number(const std::string& s, double* out);
// Shortest text that reads back to the same double ("0.0002", "1000", "1e-12").
std::string str_from_number(double v);

// ============================================================================================
// Markdown tables

// One line of text that cannot break a table row: each "|" escaped with a backslash, newlines
// ('\n' and '\r') as spaces.
std::string md_cell(const std::string& s);
// Prose in a cell: md_cell's escapes, then a "<" that could open a tag ("<think>", "</b>", "<!--"),
// every ">" and the "&" of a character reference as entities, so neither a "<think>" in the text nor
// a user-editable name can pass for HTML (viewers show the characters; "W&B" and "$<0.01" stay as
// written, and read so in the raw file too). A code span takes md_cell alone: inside backticks an
// entity would show as written.
std::string md_text(const std::string& s);

struct MdColumn {
  std::string header;
  bool right = false;  // right-aligned ("---:"), for numbers
};

// "| a | b |\n|---|---:|\n| 1 | 2 |\n": headers and cells are written as given (escape text with
// md_cell first); a row shorter than the header is padded with empty cells, extra cells are dropped.
std::string md_table(const std::vector<MdColumn>& cols, const std::vector<std::vector<std::string>>& rows);

}  // namespace luatune
