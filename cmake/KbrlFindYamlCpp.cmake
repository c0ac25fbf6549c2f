# Defines kbrl::yaml_cpp (yaml-cpp, for kbrl-train's configuration files): yaml-cpp's own CMake
# package where libyaml-cpp-dev is installed; otherwise a copy of the headers and shared library
# in the source tree's .deps/yaml-cpp/{include,lib} (ignored by git; for machines that have
# neither the package nor a network, see docs/building.md).
if(NOT TARGET kbrl::yaml_cpp)
  find_package(yaml-cpp CONFIG QUIET)
  if(TARGET yaml-cpp::yaml-cpp)
    add_library(kbrl::yaml_cpp INTERFACE IMPORTED)
    set_target_properties(kbrl::yaml_cpp PROPERTIES INTERFACE_LINK_LIBRARIES yaml-cpp::yaml-cpp)
  elseif(TARGET yaml-cpp)
    add_library(kbrl::yaml_cpp INTERFACE IMPORTED)
    set_target_properties(kbrl::yaml_cpp PROPERTIES INTERFACE_LINK_LIBRARIES yaml-cpp)
  else()
    find_path(KBRL_YAML_CPP_INCLUDE_DIR yaml-cpp/yaml.h HINTS "${CMAKE_CURRENT_LIST_DIR}/../.deps/yaml-cpp/include")
    find_library(KBRL_YAML_CPP_LIBRARY NAMES yaml-cpp libyaml-cpp.so.0.8 libyaml-cpp.so.0.7
                 HINTS "${CMAKE_CURRENT_LIST_DIR}/../.deps/yaml-cpp/lib")
    if(KBRL_YAML_CPP_INCLUDE_DIR AND KBRL_YAML_CPP_LIBRARY)
      add_library(kbrl::yaml_cpp INTERFACE IMPORTED)
      set_target_properties(kbrl::yaml_cpp PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${KBRL_YAML_CPP_INCLUDE_DIR}"
                                                      INTERFACE_LINK_LIBRARIES "${KBRL_YAML_CPP_LIBRARY}")
    endif()
  endif()
endif()
