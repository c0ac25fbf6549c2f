# cmake -P script: install, configure the consumer against the install prefix, build, run.
# EXECUTABLE and EXPECT name the program the project builds and what it must print.
if(NOT EXECUTABLE)
  set(EXECUTABLE kbrl_consumer)
endif()
if(NOT EXPECT)
  set(EXPECT "kbrl consumer ok")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: '${ARGN}' failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step(${CMAKE_COMMAND} --install "${KBRL_BUILD_DIR}" --prefix "${prefix}")
step(${CMAKE_COMMAND} -S "${PROJECT_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
     "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}")
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${WORK_DIR}/build/${EXECUTABLE}")
if(NOT step_output MATCHES "${EXPECT}")
  message(FATAL_ERROR "consumer test: unexpected output:\n${step_output}")
endif()
message(STATUS "${step_output}")
# Passed: the prefix (a full install, hundreds of MB) and the build go; a failure keeps them.
file(REMOVE_RECURSE "${WORK_DIR}")
