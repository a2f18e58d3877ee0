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
# LibTorch and the CUDA toolkit: from the Python environment scripts/setup.sh makes (.venv in the
# checkout, or $LUATUNE_VENV), pinned by third_party/python/requirements.lock: PyPI's torch wheel
# (LibTorch 2.11, CUDA 13.0) and NVIDIA's CUDA wheels beside it (nvcc, headers, cudart, cuDNN, NCCL).
# A LibTorch given through CMAKE_PREFIX_PATH (or Torch_DIR) still wins: the environment is appended.
set(LUATUNE_VENV "" CACHE PATH "The Python environment with torch and the CUDA wheels (default: .venv, or $LUATUNE_VENV)")
set(LUATUNE_VENV_USED "${LUATUNE_VENV}")
if(NOT LUATUNE_VENV_USED)
  if(DEFINED ENV{LUATUNE_VENV} AND NOT "$ENV{LUATUNE_VENV}" STREQUAL "")
    set(LUATUNE_VENV_USED "$ENV{LUATUNE_VENV}")
  else()
    set(LUATUNE_VENV_USED "${PROJECT_SOURCE_DIR}/.venv")
  endif()
endif()
# The directories the runner and the tests load LibTorch's shared libraries from at run time: the
# wheels' libraries carry no RUNPATH to each other (Python preloads them; an executable cannot), so
# every executable gets them all on its RPATH (luatune_link_torch_rpath, CMakeLists.txt).
set(LUATUNE_TORCH_RPATH "")
file(GLOB LUATUNE_VENV_SITE "${LUATUNE_VENV_USED}/lib/python3*/site-packages")
if(LUATUNE_VENV_SITE)
  list(GET LUATUNE_VENV_SITE 0 LUATUNE_VENV_SITE)
  if(EXISTS "${LUATUNE_VENV_SITE}/torch/share/cmake/Torch/TorchConfig.cmake")
    list(APPEND CMAKE_PREFIX_PATH "${LUATUNE_VENV_SITE}/torch/share/cmake")
    list(APPEND LUATUNE_TORCH_RPATH "${LUATUNE_VENV_SITE}/torch/lib")
  endif()
  file(GLOB LUATUNE_VENV_NVIDIA_LIBS LIST_DIRECTORIES true "${LUATUNE_VENV_SITE}/nvidia/*/lib")
  list(SORT LUATUNE_VENV_NVIDIA_LIBS)
  list(APPEND LUATUNE_TORCH_RPATH ${LUATUNE_VENV_NVIDIA_LIBS})
  # NVIDIA's CUDA 13 wheels share one toolkit-shaped root: bin/nvcc, include/, lib/, nvvm/.
  file(GLOB LUATUNE_VENV_CUDA_ROOT LIST_DIRECTORIES true "${LUATUNE_VENV_SITE}/nvidia/cu[0-9]*")
  if(LUATUNE_VENV_CUDA_ROOT)
    list(GET LUATUNE_VENV_CUDA_ROOT 0 LUATUNE_VENV_CUDA_ROOT)
    if(EXISTS "${LUATUNE_VENV_CUDA_ROOT}/bin/nvcc" AND NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT})
      set(CUDAToolkit_ROOT "${LUATUNE_VENV_CUDA_ROOT}")
      set(CUDA_TOOLKIT_ROOT_DIR "${LUATUNE_VENV_CUDA_ROOT}" CACHE PATH "CUDA toolkit (FindCUDA, LibTorch's CMake)")
      if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
        set(CMAKE_CUDA_COMPILER "${LUATUNE_VENV_CUDA_ROOT}/bin/nvcc" CACHE FILEPATH "nvcc")
      endif()
    endif()
  endif()
  message(STATUS "luatune: Python environment ${LUATUNE_VENV_USED}")
endif()
# The environment's Python: what the tests run their Hugging Face references with (transformers,
# peft, tokenizers, torch for PyTorch eager), so each compares with the versions the lock pins.
if(EXISTS "${LUATUNE_VENV_USED}/bin/python3")
  set(LUATUNE_PYTHON "${LUATUNE_VENV_USED}/bin/python3")
else()
  message(STATUS "luatune: no Python environment at ${LUATUNE_VENV_USED} (scripts/setup.sh makes it); "
                 "LibTorch must come through CMAKE_PREFIX_PATH")
endif()
# The linker follows the wheels' libraries' own dependencies (libtorch_cpu.so needs libcudart.so.13).
foreach(dir IN LISTS LUATUNE_TORCH_RPATH)
  add_link_options("LINKER:-rpath-link,${dir}")
endforeach()

# LibTorch's CMake enables CUDA itself and then turns CMAKE_CUDA_ARCHITECTURES OFF (it wants
# TORCH_CUDA_ARCH_LIST): the architectures for luatune's own kernels are kept aside first. sm_80
# (A100) and sm_90 (H100/H200) as SASS unless -DCMAKE_CUDA_ARCHITECTURES says otherwise; CUDA 13
# accepts nothing below sm_75 (nvcc --list-gpu-arch).
if(NOT DEFINED LUATUNE_CUDA_ARCHS)
  if(DEFINED CMAKE_CUDA_ARCHITECTURES AND CMAKE_CUDA_ARCHITECTURES)
    set(LUATUNE_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")
  elseif(DEFINED ENV{CUDAARCHS} AND NOT "$ENV{CUDAARCHS}" STREQUAL "")
    set(LUATUNE_CUDA_ARCHS "$ENV{CUDAARCHS}")
  else()
    set(LUATUNE_CUDA_ARCHS 80 90)
  endif()
endif()
set(LUATUNE_CUDA_ARCHS "${LUATUNE_CUDA_ARCHS}" CACHE STRING "CUDA architectures of luatune's kernels (e.g. 80;90)")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  # The same list in LibTorch's spelling, so its CMake neither probes for a GPU nor lists eleven.
  set(_archs "")
  foreach(a IN LISTS LUATUNE_CUDA_ARCHS)
    string(REGEX REPLACE "^([0-9]+)([0-9])(.*)$" "\\1.\\2\\3" a "${a}")
    list(APPEND _archs "${a}")
  endforeach()
  set(TORCH_CUDA_ARCH_LIST "${_archs}")
endif()
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
    # NCCL: the toolkit's, or the nvidia-nccl wheel's (which has only libnccl.so.2).
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} "${LUATUNE_VENV_SITE}/nvidia/nccl/include")
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
                 HINTS ${CUDAToolkit_LIBRARY_DIR} "${LUATUNE_VENV_SITE}/nvidia/nccl/lib")
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(LUATUNE_NCCL ON)
      add_library(luatune_nccl UNKNOWN IMPORTED)
      set_target_properties(luatune_nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    endif()
  endif()
endif()
message(STATUS "luatune: CUDA ${LUATUNE_CUDA}, NCCL ${LUATUNE_NCCL}")
