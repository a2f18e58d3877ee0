# cmake -DIN=FILE -DOUT=FILE.cpp -DNAME=symbol -P cmake/embed_text.cmake writes FILE's text into
# FILE.cpp as `const char luatune::symbol[]` (a raw string literal), so a data file kept in git
# (bindings/lua_api.yaml) ships inside the binary without a generated copy in git.
file(READ "${IN}" text)
set(delim "lt_embed")
string(FIND "${text}" ")${delim}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN}: contains ')${delim}\"', which would end the raw string; reword that line")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by cmake/embed_text.cmake: do not edit.\n"
                        "namespace luatune {\nextern const char ${NAME}[];\nconst char ${NAME}[] = R\"${delim}(")
file(APPEND "${OUT}.tmp" "${text}")
file(APPEND "${OUT}.tmp" ")${delim}\";\n}  // namespace luatune\n")
file(RENAME "${OUT}.tmp" "${OUT}")
