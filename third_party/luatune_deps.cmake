# Finds everything luatune builds against and exposes each as an imported target:
#   Torch (variable TORCH_LIBRARIES), LuaJIT::LuaJIT, nlohmann_json::nlohmann_json, CURL::libcurl,
#   PCRE2::PCRE2, utf8proc::utf8proc, yaml-cpp::yaml-cpp, and (when tests are on) GTest::gtest /
#   GTest::gtest_main and httplib::httplib.
# Works from system packages (Debian 12) and from an unpacked prefix of Debian packages
# (-DLUATUNE_DEPS_PREFIX=/opt/deps after `dpkg -x pkg.deb /opt/deps`), for offline GPU hosts where
# pkg-config files point at absolute /usr paths that do not exist. See third_party/VERSIONS.md.

if(LUATUNE_DEPS_PREFIX)
  get_filename_component(LUATUNE_DEPS_PREFIX "${LUATUNE_DEPS_PREFIX}" ABSOLUTE)
  # A dpkg -x prefix mirrors the root file system: /usr/include, /usr/lib/<arch>, /usr/share/cmake.
  list(PREPEND CMAKE_PREFIX_PATH "${LUATUNE_DEPS_PREFIX}/usr" "${LUATUNE_DEPS_PREFIX}")
  list(PREPEND CMAKE_LIBRARY_PATH "${LUATUNE_DEPS_PREFIX}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
  list(PREPEND CMAKE_INCLUDE_PATH "${LUATUNE_DEPS_PREFIX}/usr/include")
  message(STATUS "luatune: looking for dependencies in ${LUATUNE_DEPS_PREFIX} first")
endif()

# ---------------------------------------------------------------------------------------------
# LibTorch: Debian's libtorch-dev 1.13 (CPU) or a CUDA LibTorch 2.x through CMAKE_PREFIX_PATH.
find_package(Torch REQUIRED)
set(LUATUNE_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
  set(LUATUNE_TORCH_HAS_CUDA ON)
endif()
message(STATUS "luatune: LibTorch ${Torch_VERSION} (CUDA: ${LUATUNE_TORCH_HAS_CUDA})")

# ---------------------------------------------------------------------------------------------
# LuaJIT (Lua 5.1 API). Found by header and library name so an unpacked prefix works too.
find_path(LUAJIT_INCLUDE_DIR luajit.h PATH_SUFFIXES luajit-2.1 luajit-2.0 luajit REQUIRED)
find_library(LUAJIT_LIBRARY NAMES luajit-5.1 luajit REQUIRED)
if(NOT TARGET LuaJIT::LuaJIT)
  add_library(LuaJIT::LuaJIT UNKNOWN IMPORTED)
  set_target_properties(LuaJIT::LuaJIT PROPERTIES IMPORTED_LOCATION "${LUAJIT_LIBRARY}"
                                                  INTERFACE_INCLUDE_DIRECTORIES "${LUAJIT_INCLUDE_DIR}")
endif()
message(STATUS "luatune: LuaJIT ${LUAJIT_LIBRARY}")

# ---------------------------------------------------------------------------------------------
# nlohmann_json: its CMake package, or the bare header (header-only).
find_package(nlohmann_json 3 CONFIG QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                        INTERFACE_INCLUDE_DIRECTORIES "${NLOHMANN_JSON_INCLUDE_DIR}")
endif()

# ---------------------------------------------------------------------------------------------
# libcurl (W&B over HTTP) and PCRE2 (tokenizer regexes).
find_package(CURL REQUIRED)
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
find_library(PCRE2_LIBRARY NAMES pcre2-8 REQUIRED)
if(NOT TARGET PCRE2::PCRE2)
  add_library(PCRE2::PCRE2 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::PCRE2 PROPERTIES IMPORTED_LOCATION "${PCRE2_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}"
                                                INTERFACE_COMPILE_DEFINITIONS "PCRE2_CODE_UNIT_WIDTH=8")
endif()

# ---------------------------------------------------------------------------------------------
# utf8proc (Unicode normalization and character properties for the tokenizer).
find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
find_library(UTF8PROC_LIBRARY NAMES utf8proc REQUIRED)
if(NOT TARGET utf8proc::utf8proc)
  add_library(utf8proc::utf8proc UNKNOWN IMPORTED)
  set_target_properties(utf8proc::utf8proc PROPERTIES IMPORTED_LOCATION "${UTF8PROC_LIBRARY}"
                                                      INTERFACE_INCLUDE_DIRECTORIES "${UTF8PROC_INCLUDE_DIR}")
endif()

# ---------------------------------------------------------------------------------------------
# yaml-cpp (--config FILE.yaml). Debian 12's 0.7 ships a CMake package whose target is plain
# `yaml-cpp`; 0.8 names it yaml-cpp::yaml-cpp. Without either (a bare prefix), header and library.
find_package(yaml-cpp CONFIG QUIET)
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp INTERFACE IMPORTED)
  if(TARGET yaml-cpp)
    set_target_properties(yaml-cpp::yaml-cpp PROPERTIES INTERFACE_LINK_LIBRARIES yaml-cpp)
  else()
    find_path(YAML_CPP_INCLUDE_DIR yaml-cpp/yaml.h REQUIRED)
    find_library(YAML_CPP_LIBRARY NAMES yaml-cpp REQUIRED)
    set_target_properties(yaml-cpp::yaml-cpp PROPERTIES INTERFACE_LINK_LIBRARIES "${YAML_CPP_LIBRARY}"
                                                        INTERFACE_INCLUDE_DIRECTORIES "${YAML_CPP_INCLUDE_DIR}")
  endif()
endif()

# ---------------------------------------------------------------------------------------------
# GoogleTest and cpp-httplib, only for tests.
if(LUATUNE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(Threads REQUIRED)
  # cpp-httplib, the loopback W&B server's HTTP (tests only). Debian ships it compiled
  # (libcpp-httplib.so, built with OpenSSL, zlib and Brotli on); those macros change the layout of
  # its classes, so code including the header must define them too. Upstream's single header
  # needs neither.
  find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
  find_library(HTTPLIB_LIBRARY NAMES cpp-httplib)
  if(NOT TARGET httplib::httplib)
    add_library(httplib::httplib INTERFACE IMPORTED)
    set_target_properties(httplib::httplib PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${HTTPLIB_INCLUDE_DIR}")
    target_link_libraries(httplib::httplib INTERFACE Threads::Threads)
    if(HTTPLIB_LIBRARY)
      target_link_libraries(httplib::httplib INTERFACE ${HTTPLIB_LIBRARY})
      target_compile_definitions(httplib::httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT
                                                            CPPHTTPLIB_BROTLI_SUPPORT)
    endif()
  endif()
endif()

# ---------------------------------------------------------------------------------------------
# CUDA toolkit and NCCL: optional, switched on only when the LibTorch itself has CUDA, so a CPU
# LibTorch on a machine with nvcc installed still builds a plain CPU runner.
set(LUATUNE_CUDA OFF)
set(LUATUNE_NCCL OFF)
if(LUATUNE_TORCH_HAS_CUDA AND LUATUNE_WITH_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(LUATUNE_CUDA ON)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(LUATUNE_NCCL ON)
      add_library(luatune_nccl UNKNOWN IMPORTED)
      set_target_properties(luatune_nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    endif()
  endif()
endif()
message(STATUS "luatune: CUDA ${LUATUNE_CUDA}, NCCL ${LUATUNE_NCCL}")
