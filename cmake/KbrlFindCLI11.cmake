# Defines kbrl::cli11 (CLI11, header-only: the programs' command lines): CLI11's own CMake package
# where libcli11-dev is installed; otherwise a copy of the package unpacked under a prefix,
# KBRL_CLI11_ROOT (default <source>/.deps/cli11), as `dpkg -x libcli11-dev_*.deb <prefix>` leaves
# it (<prefix>/usr/include/CLI/CLI.hpp, <prefix>/usr/share/cmake/CLI11/), or the headers alone
# under <prefix>/include or <prefix>/usr/include. For machines without the package or a network
# (the GPU machines), see docs/building.md.
if(NOT TARGET kbrl::cli11)
  set(KBRL_CLI11_ROOT "${CMAKE_CURRENT_LIST_DIR}/../.deps/cli11" CACHE PATH
      "Prefix of an unpacked CLI11 when its package is not installed (dpkg -x libcli11-dev_*.deb <prefix>)")
  find_package(CLI11 CONFIG QUIET HINTS "${KBRL_CLI11_ROOT}/usr" "${KBRL_CLI11_ROOT}")
  if(TARGET CLI11::CLI11)
    add_library(kbrl::cli11 INTERFACE IMPORTED)
    set_target_properties(kbrl::cli11 PROPERTIES INTERFACE_LINK_LIBRARIES CLI11::CLI11)
    set(KBRL_CLI11_VERSION "${CLI11_VERSION}")
  else()
    find_path(KBRL_CLI11_INCLUDE_DIR CLI/CLI.hpp HINTS "${KBRL_CLI11_ROOT}/usr/include" "${KBRL_CLI11_ROOT}/include")
    if(KBRL_CLI11_INCLUDE_DIR)
      add_library(kbrl::cli11 INTERFACE IMPORTED)
      set_target_properties(kbrl::cli11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${KBRL_CLI11_INCLUDE_DIR}")
      set(KBRL_CLI11_VERSION "(headers in ${KBRL_CLI11_INCLUDE_DIR})")
    endif()
  endif()
endif()
