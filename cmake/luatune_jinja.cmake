# host/text/jinja: the chat-template engine (MiniJinja behind a C ABI, docs/chat_formats.md), a Rust
# static library cargo builds into the build tree from host/text/jinja/Cargo.lock (crates from
# crates.io, versions pinned there). Defines the imported target lt_jinja.
#   LUATUNE_CARGO          cargo to use (Rust >= 1.70); found on PATH, in ~/.cargo/bin or /usr/bin
#   LUATUNE_JINJA_LIBRARY  a libluatune_jinja.a built elsewhere (offline hosts: scripts/offline-deps.sh)
set(LUATUNE_CARGO "" CACHE FILEPATH "cargo (Rust >= 1.70) that builds host/text/jinja")
set(LUATUNE_JINJA_LIBRARY "" CACHE FILEPATH "A prebuilt libluatune_jinja.a (skips cargo)")
set(LT_JINJA_DIR ${PROJECT_SOURCE_DIR}/host/text/jinja)

if(LUATUNE_JINJA_LIBRARY)
  set(LT_JINJA_LIB ${LUATUNE_JINJA_LIBRARY})
  message(STATUS "luatune: chat-template engine from ${LT_JINJA_LIB}")
else()
  # The first cargo new enough: Debian 12's own cargo (0.66, Rust 1.63) is too old for MiniJinja;
  # scripts/setup.sh installs Debian's cargo-web (Rust 1.96) when no newer one is there.
  if(NOT LUATUNE_CARGO)
    foreach(candidate $ENV{HOME}/.cargo/bin/cargo cargo /usr/bin/cargo)
      unset(lt_cargo CACHE)
      find_program(lt_cargo ${candidate} NO_CACHE)
      if(NOT lt_cargo)
        continue()
      endif()
      execute_process(COMMAND ${lt_cargo} --version OUTPUT_VARIABLE lt_cargo_version ERROR_QUIET)
      if(lt_cargo_version MATCHES "cargo 1\\.([0-9]+)" AND CMAKE_MATCH_1 GREATER_EQUAL 70)
        set(LUATUNE_CARGO ${lt_cargo} CACHE FILEPATH "cargo (Rust >= 1.70) that builds host/text/jinja" FORCE)
        break()
      endif()
    endforeach()
  endif()
  if(NOT LUATUNE_CARGO)
    message(FATAL_ERROR "luatune: no cargo of Rust 1.70 or newer (needed for host/text/jinja, the chat-template "
                        "engine).\n  HINT: run scripts/setup.sh (installs Debian 12's cargo-web), or pass "
                        "-DLUATUNE_CARGO=/path/to/cargo or -DLUATUNE_JINJA_LIBRARY=/path/to/libluatune_jinja.a")
  endif()
  set(LT_JINJA_TARGET_DIR ${PROJECT_BINARY_DIR}/jinja)
  set(LT_JINJA_LIB ${LT_JINJA_TARGET_DIR}/release/libluatune_jinja.a)
  add_custom_command(
    OUTPUT ${LT_JINJA_LIB}
    COMMAND ${CMAKE_COMMAND} -E env CARGO_TARGET_DIR=${LT_JINJA_TARGET_DIR} ${LUATUNE_CARGO} build --release --locked
            --quiet --manifest-path ${LT_JINJA_DIR}/Cargo.toml
    DEPENDS ${LT_JINJA_DIR}/Cargo.toml ${LT_JINJA_DIR}/Cargo.lock ${LT_JINJA_DIR}/src/lib.rs
    COMMENT "cargo: host/text/jinja (the chat-template engine)"
    USES_TERMINAL)
  add_custom_target(lt_jinja_build DEPENDS ${LT_JINJA_LIB})
  message(STATUS "luatune: chat-template engine built with ${LUATUNE_CARGO}")
endif()

add_library(lt_jinja STATIC IMPORTED GLOBAL)
# What a Rust static library needs from the system on Linux (rustc --print native-static-libs).
set_target_properties(lt_jinja PROPERTIES IMPORTED_LOCATION ${LT_JINJA_LIB}
                      INTERFACE_LINK_LIBRARIES "gcc_s;util;rt;pthread;m;dl")
if(TARGET lt_jinja_build)
  add_dependencies(lt_jinja lt_jinja_build)
endif()
