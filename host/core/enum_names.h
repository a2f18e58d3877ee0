// An enum's text form from one table of rows {value, name, ...}: the name of a value, the value of a
// name, and the "a, b or c" list an "expected ..." message ends with, so each name is written once.
// A row type needs members `value` and `name`; more columns (sizes, aliases) may follow them.
#pragma once

#include <cstddef>
#include <string>

namespace luatune {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of the first row holding `value` (aliases go after the main name), or `fallback`.
template <class Row, size_t N>
const char* enum_name(const Row (&table)[N], decltype(Row::value) value, const char* fallback = "?") {
  for (const Row& row : table)
    if (row.value == value) return row.name;
  return fallback;
}

// The row named `name`, or nullptr.
template <class Row, size_t N>
const Row* enum_row(const Row (&table)[N], const std::string& name) {
  for (const Row& row : table)
    if (name == row.name) return &row;
  return nullptr;
}

// "a, b or c" (each name between `quote`s), every row's name in table order.
template <class Row, size_t N>
std::string enum_names_list(const Row (&table)[N], const std::string& quote = "") {
  std::string out;
  for (size_t i = 0; i < N; i++)
    out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + quote + table[i].name + quote;
  return out;
}

}  // namespace luatune
