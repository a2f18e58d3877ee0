# cmake -DROOT=DIR -DIN="a.yaml;b.yaml" -DOUT=FILE.cpp -DNAME=symbol -P cmake/embed_text.cmake writes
# the files IN (paths relative to ROOT) into FILE.cpp as `const char* const luatune::symbol[]`: each
# file's path as given, then its text (a raw string literal), ..., then nullptr. Data files kept in
# git (bindings/api/*.yaml) thus ship inside the binary without a generated copy in git, and each
# keeps its own name, so errors can name the file and line.
set(delim "lt_embed")
string(REPLACE ";" ", " files "${IN}")
file(WRITE "${OUT}.tmp" "// Generated from ${files} by cmake/embed_text.cmake: do not edit.\n"
                        "namespace luatune {\nextern const char* const ${NAME}[];\nconst char* const ${NAME}[] = {\n")
foreach(path IN LISTS IN)
  file(READ "${ROOT}/${path}" text)
  string(FIND "${text}" ")${delim}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${path}: contains ')${delim}\"', which would end the raw string; reword that line")
  endif()
  file(APPEND "${OUT}.tmp" "\"${path}\", R\"${delim}(${text})${delim}\",\n")
endforeach()
file(APPEND "${OUT}.tmp" "nullptr};\n}  // namespace luatune\n")
file(RENAME "${OUT}.tmp" "${OUT}")
