# Third-party packages. Everything comes from the system (Debian 12 / Ubuntu 24.04) except
# libtorch, which is the one inside the torch wheel of KBRL_PYTHON, so that the development
# machine, CI and the GPU machine all build against the same torch.

find_package(fmt 9 REQUIRED)
# Here, not in libkbrl/: imported targets are seen only below the folder that found them, and
# the pkg-config writer (cmake/KbrlInstall.cmake) walks libkbrl's link interface from the top.
find_package(Threads REQUIRED)

# Boost.JSON: the compiled library where it is installed (Debian: libboost-json1.81-dev),
# otherwise its header-only form, compiled once inside libkbrl (see src/core/boost_json.cpp).
find_package(Boost 1.81 CONFIG QUIET COMPONENTS json)
if(Boost_FOUND AND TARGET Boost::json)
  set(KBRL_BOOST_JSON_COMPILED ON)
else()
  find_package(Boost 1.81 REQUIRED CONFIG)
  set(KBRL_BOOST_JSON_COMPILED OFF)
endif()
message(STATUS "kbrl: Boost ${Boost_VERSION}, Boost.JSON compiled library: ${KBRL_BOOST_JSON_COMPILED}")

# OpenSSL 3 (libssl-dev): TLS for the net module's HTTP server and client (Boost.Asio's ssl).
find_package(OpenSSL 3 REQUIRED)
message(STATUS "kbrl: OpenSSL ${OPENSSL_VERSION}")

# PCRE2 (8-bit, with Unicode and JIT) for the tokenizer's pre-tokenizer patterns: the backtracking
# engine closest to the Oniguruma that Hugging Face tokenizers uses.
include(${CMAKE_CURRENT_LIST_DIR}/KbrlFindPcre2.cmake)
if(NOT TARGET PkgConfig::PCRE2)
  message(FATAL_ERROR "kbrl: PCRE2 not found (pkg-config module libpcre2-8); the tokenizer needs it. "
                      "Install it with 'apt-get install libpcre2-dev' (or run scripts/deps.sh), or, where "
                      "only the runtime library is installed, pass -DKBRL_PCRE2_INCLUDE_DIR=<dir with pcre2.h>.")
endif()
message(STATUS "kbrl: PCRE2 ${PCRE2_VERSION}")

# yaml-cpp reads kbrl-train's configuration files.
include(${CMAKE_CURRENT_LIST_DIR}/KbrlFindYamlCpp.cmake)
if(NOT TARGET kbrl::yaml_cpp)
  message(FATAL_ERROR "kbrl: yaml-cpp not found; kbrl-train's configuration needs it. Install it with "
                      "'apt-get install libyaml-cpp-dev' (or run scripts/deps.sh), or put its headers and "
                      "library under .deps/yaml-cpp/{include,lib} (docs/building.md).")
endif()

# CLI11 parses the programs' command lines (header-only; the apps alone use it).
include(${CMAKE_CURRENT_LIST_DIR}/KbrlFindCLI11.cmake)
if(NOT TARGET kbrl::cli11)
  message(FATAL_ERROR "kbrl: CLI11 not found; the programs' command lines need it. Install it with "
                      "'apt-get install libcli11-dev' (or run scripts/deps.sh), or unpack its package under "
                      ".deps/cli11 ('dpkg -x libcli11-dev_*.deb .deps/cli11') or -DKBRL_CLI11_ROOT=<prefix> "
                      "(docs/building.md).")
endif()
message(STATUS "kbrl: CLI11 ${KBRL_CLI11_VERSION}")

# FAISS (libfaiss-dev) for dense retrieval (rag::DenseIndex). Optional: the GPU machines'
# Ubuntu may lack it, and everything else builds without it (DenseIndex then says it needs FAISS).
# AUTO uses it where found; ON requires it; OFF leaves it out.
set(KBRL_WITH_FAISS AUTO CACHE STRING "Dense retrieval with FAISS: AUTO (where found), ON (required), OFF")
set_property(CACHE KBRL_WITH_FAISS PROPERTY STRINGS AUTO ON OFF)
if(NOT KBRL_WITH_FAISS MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KBRL_WITH_FAISS must be AUTO, ON or OFF (got '${KBRL_WITH_FAISS}')")
endif()
set(KBRL_BUILD_FAISS OFF)
if(NOT KBRL_WITH_FAISS STREQUAL "OFF")
  include(${CMAKE_CURRENT_LIST_DIR}/KbrlFindFaiss.cmake)
  if(TARGET kbrl::faiss)
    set(KBRL_BUILD_FAISS ON)
    message(STATUS "kbrl: dense retrieval with ${KBRL_FAISS_DESCRIPTION}")
  elseif(KBRL_WITH_FAISS STREQUAL "ON")
    message(FATAL_ERROR "kbrl: KBRL_WITH_FAISS is ON but FAISS was not found (faiss/IndexFlat.h and libfaiss); "
                        "install it with 'apt-get install libfaiss-dev' (or run scripts/deps.sh)")
  else()
    message(STATUS "kbrl: FAISS not found: dense retrieval not built (apt-get install libfaiss-dev)")
  endif()
endif()

if(NOT KBRL_DEVICE MATCHES "^(cpu|cuda|hip)$")
  message(FATAL_ERROR "KBRL_DEVICE must be cpu, cuda or hip (got '${KBRL_DEVICE}')")
endif()

if(NOT KBRL_PYTHON)
  if(EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python")
    set(KBRL_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python")
  else()
    find_program(KBRL_PYTHON_FOUND NAMES python3 REQUIRED)
    set(KBRL_PYTHON "${KBRL_PYTHON_FOUND}")
  endif()
endif()
message(STATUS "kbrl: Python interpreter ${KBRL_PYTHON}")

if(KBRL_WITH_TORCH)
  execute_process(
    COMMAND "${KBRL_PYTHON}" -c "import torch;print(torch.utils.cmake_prefix_path);print(torch.__version__)"
    OUTPUT_VARIABLE _kbrl_torch_out ERROR_VARIABLE _kbrl_torch_err RESULT_VARIABLE _kbrl_torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _kbrl_torch_rc EQUAL 0)
    message(FATAL_ERROR "kbrl: KBRL_WITH_TORCH is ON but '${KBRL_PYTHON}' cannot import torch "
                        "(run scripts/deps.sh, or pass -DKBRL_PYTHON=...):\n${_kbrl_torch_err}")
  endif()
  string(REPLACE "\n" ";" _kbrl_torch_out "${_kbrl_torch_out}")
  list(GET _kbrl_torch_out 0 KBRL_TORCH_PREFIX)
  list(GET _kbrl_torch_out 1 KBRL_TORCH_PY_VERSION)
  list(APPEND CMAKE_PREFIX_PATH "${KBRL_TORCH_PREFIX}")
  # The PyPI wheel is a CUDA build, and its CMake package compiles a probe for the installed
  # GPUs unless it is told the architectures; a machine without a GPU has none to probe.
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT DEFINED TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for libtorch's CMake package")
  endif()
  find_package(Torch REQUIRED CONFIG)
  message(STATUS "kbrl: libtorch from ${KBRL_TORCH_PREFIX} (python torch ${KBRL_TORCH_PY_VERSION})")
endif()

# The Python module (python/): Python's development headers of KBRL_PYTHON's interpreter (found
# through FindPython3, so the same lines work for a pyenv interpreter, a venv and a system one)
# and pybind11's headers (the pybind11 package where installed, else the copy the torch wheel
# ships). AUTO builds it where both are found; ON requires them.
set(KBRL_PYTHON_MODULE AUTO CACHE STRING
    "Build the Python module 'kbrl' (python/): AUTO (where Python's and pybind11's headers are found), ON, OFF")
set_property(CACHE KBRL_PYTHON_MODULE PROPERTY STRINGS AUTO ON OFF)
set(KBRL_PYBIND11_INCLUDE_DIR "" CACHE PATH
    "Folder holding pybind11/pybind11.h (default: pybind11.get_include(), else the torch wheel's include/)")
set(KBRL_BUILD_PYTHON_MODULE OFF)
if(NOT KBRL_PYTHON_MODULE MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KBRL_PYTHON_MODULE must be AUTO, ON or OFF (got '${KBRL_PYTHON_MODULE}')")
endif()
if(KBRL_PYTHON_MODULE STREQUAL "AUTO" AND CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  # An instrumented extension cannot be loaded into an uninstrumented interpreter.
  message(STATUS "kbrl: Python module not built (sanitizer flags; set KBRL_PYTHON_MODULE=ON to force)")
elseif(NOT KBRL_PYTHON_MODULE STREQUAL "OFF")
  if(NOT DEFINED Python3_EXECUTABLE)
    set(Python3_EXECUTABLE "${KBRL_PYTHON}")
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  if(NOT KBRL_PYBIND11_INCLUDE_DIR AND Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c [=[
import importlib.util, os
spec = importlib.util.find_spec("pybind11")
if spec is not None:
    import pybind11
    print(pybind11.get_include())
else:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        print(os.path.join(list(spec.submodule_search_locations)[0], "include"))
]=]
      OUTPUT_VARIABLE _kbrl_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_kbrl_pybind11_dir AND EXISTS "${_kbrl_pybind11_dir}/pybind11/pybind11.h")
      set(KBRL_PYBIND11_INCLUDE_DIR "${_kbrl_pybind11_dir}" CACHE PATH
          "Folder holding pybind11/pybind11.h (default: pybind11.get_include(), else the torch wheel's include/)" FORCE)
    endif()
  endif()
  if(Python3_Development.Module_FOUND AND KBRL_PYBIND11_INCLUDE_DIR
     AND EXISTS "${KBRL_PYBIND11_INCLUDE_DIR}/pybind11/pybind11.h")
    set(KBRL_BUILD_PYTHON_MODULE ON)
    message(STATUS "kbrl: Python module for Python ${Python3_VERSION} (${Python3_INCLUDE_DIRS}), "
                   "pybind11 from ${KBRL_PYBIND11_INCLUDE_DIR}")
  elseif(KBRL_PYTHON_MODULE STREQUAL "ON")
    message(FATAL_ERROR "kbrl: KBRL_PYTHON_MODULE is ON but Python's development headers (found: "
                        "${Python3_Development.Module_FOUND}, interpreter ${Python3_EXECUTABLE}) or pybind11's "
                        "(KBRL_PYBIND11_INCLUDE_DIR='${KBRL_PYBIND11_INCLUDE_DIR}') are missing; install python3-dev, "
                        "or pass -DKBRL_PYBIND11_INCLUDE_DIR=<folder with pybind11/pybind11.h>")
  else()
    message(STATUS "kbrl: Python module not built: Python's development headers (${Python3_Development.Module_FOUND}) "
                   "or pybind11's headers ('${KBRL_PYBIND11_INCLUDE_DIR}') not found")
  endif()
endif()

if(KBRL_DEVICE STREQUAL "cuda")
  find_package(CUDAToolkit REQUIRED)
elseif(KBRL_DEVICE STREQUAL "hip")
  find_package(hip CONFIG QUIET)
  if(NOT hip_FOUND)
    message(FATAL_ERROR "kbrl: KBRL_DEVICE=hip needs ROCm's CMake package 'hip' "
                        "(install ROCm, or pass -DCMAKE_PREFIX_PATH=/opt/rocm)")
  endif()
endif()

function(kbrl_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Woverloaded-virtual -Wimplicit-fallthrough)
  if(KBRL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
