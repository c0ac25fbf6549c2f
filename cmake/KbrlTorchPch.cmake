# Precompiled <ATen/ATen.h> for kbrl_torch and every target that links it (or libtorch) directly.
#
# Parsing ATen/ATen.h is most of a libtorch translation unit's compile time (30 of the decoder's
# 38 s on two cores; with the header precompiled, 12 s). GCC uses a precompiled header only where
# it was built the same way: -fPIC or -fPIE, the same -std and -Wpedantic (which drops
# __cpp_runtime_arrays), and no macro defined then that is not defined now. So two object
# libraries compile it, for libraries and modules (-fPIC) and for programs and tests (-fPIE), with
# kbrl_torch's public usage requirements only and the project's warning flags; the targets reuse
# theirs. GCC checks each use (-Winvalid-pch, on wherever CMake precompiles) and parses the plain
# header when one does not fit: a warning, never an error (a slower build is not a broken one).
#
# kbrl_use_torch_pch() runs once every target exists (a deferred call from the top-level
# CMakeLists.txt) and walks the build's directories; KBRL_TORCH_PCH=OFF turns it off.
option(KBRL_TORCH_PCH "Precompile <ATen/ATen.h> for the targets that link kbrl::torch or libtorch" ON)

# An object library that compiles the header, with -fPIC (pic ON) or -fPIE.
function(_kbrl_torch_pch_host name pic)
  set(source ${PROJECT_BINARY_DIR}/generated/${name}.cpp)
  file(CONFIGURE OUTPUT ${source} CONTENT "// compiles a precompiled ATen/ATen.h (cmake/KbrlTorchPch.cmake)\n")
  add_library(${name} OBJECT ${source})
  # kbrl_torch's usage requirements, not the target itself: kbrl_torch builds after its header.
  target_link_libraries(${name} PRIVATE kbrl torch)
  if(pic)
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  else()
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE -fPIE)
  endif()
  kbrl_set_warnings(${name})
  target_compile_options(${name} PRIVATE -Wno-error=invalid-pch)
  target_precompile_headers(${name} PRIVATE <ATen/ATen.h>)
endfunction()

function(kbrl_use_torch_pch)
  if(NOT KBRL_TORCH_PCH OR NOT TARGET kbrl_torch)
    return()
  endif()
  _kbrl_torch_pch_host(kbrl_torch_pch_pic ON)
  _kbrl_torch_pch_host(kbrl_torch_pch_pie OFF)
  target_precompile_headers(kbrl_torch REUSE_FROM kbrl_torch_pch_pic)
  target_compile_options(kbrl_torch PRIVATE -Wno-error=invalid-pch)

  kbrl_targets_under(${PROJECT_SOURCE_DIR} targets)  # cmake/KbrlInstall.cmake
  foreach(target IN LISTS targets)
    if(target MATCHES "^kbrl_torch(_pch_pic|_pch_pie)?$")
      continue()
    endif()
    get_target_property(links ${target} LINK_LIBRARIES)
    if(NOT links OR NOT ("kbrl::torch" IN_LIST links OR "kbrl_torch" IN_LIST links OR "torch" IN_LIST links))
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_precompile_headers(${target} REUSE_FROM kbrl_torch_pch_pie)
    elseif(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      target_precompile_headers(${target} REUSE_FROM kbrl_torch_pch_pic)
    else()
      continue()
    endif()
    target_compile_options(${target} PRIVATE -Wno-error=invalid-pch)
  endforeach()
endfunction()
