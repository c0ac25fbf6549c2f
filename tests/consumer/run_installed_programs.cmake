# cmake -P script: install into a fresh prefix (not the configured one), then run the installed
# programs as a user would, with no LD_LIBRARY_PATH and no KBRL_WORKER_SCRIPT: they must find
# libtorch and any carried library through their run paths, and kbrl-eval its installed worker.
#   kbrl-eval --help and --version, kbrl-train --help, --version and keys (when built with torch),
#   then kbrl-eval kernel on PROBLEM / KERNEL (a correct CPU candidate), whose JSON result must
#   say correct; then the same with the installed worker replaced by one that fails with a
#   marker, which must show in the result or the worker log it names: the evaluation ran the
#   installed worker, not the source tree's. Where PYTHON_INSTALL_DIR is given: the installed Python
#   module imports from the prefix and picks the installed worker.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(run ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH --unset=KBRL_WORKER_SCRIPT --unset=KBRL_WORK_DIR)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "installed programs: '${ARGN}' failed (${rc}):\n${out}${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

function(expect text what)
  string(FIND "${step_output}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "installed programs: ${what} does not print '${text}':\n${step_output}")
  endif()
endfunction()

step(${CMAKE_COMMAND} --install "${KBRL_BUILD_DIR}" --prefix "${prefix}")
set(bin "${prefix}/${BINDIR}")
set(worker "${prefix}/${DATADIR}/kbrl/kbrl_worker.py")
if(NOT EXISTS "${worker}")
  message(FATAL_ERROR "installed programs: no worker at ${worker}")
endif()

step(${run} "${bin}/kbrl-eval" --help)
expect("kernel" "kbrl-eval --help")
step(${run} "${bin}/kbrl-eval" --version)
expect("kbrl-eval ${KBRL_VERSION}" "kbrl-eval --version")
if(WITH_TORCH)
  step(${run} "${bin}/kbrl-train" --help)
  expect("keys" "kbrl-train --help")
  step(${run} "${bin}/kbrl-train" --version)
  expect("kbrl-train ${KBRL_VERSION}" "kbrl-train --version")
  step(${run} "${bin}/kbrl-train" keys)
  expect("model.path" "kbrl-train keys")
endif()

set(eval_command ${run} "${bin}/kbrl-eval" kernel --problem "${PROBLEM}" --kernel "${KERNEL}" --device cpu)
step(${eval_command} --work-dir "${WORK_DIR}/eval-work")
string(JSON correct ERROR_VARIABLE json_error GET "${step_output}" correctness)
if(json_error OR NOT correct)
  message(FATAL_ERROR "installed programs: kbrl-eval kernel did not find ${KERNEL} correct "
                      "(${json_error}):\n${step_output}")
endif()
message(STATUS "installed kbrl-eval kernel: correct")

# The same run (in a fresh work folder: nothing cached) on an installed worker that fails at
# once: if kbrl-eval used another worker (the source tree's), the candidate would come out
# correct again.
file(RENAME "${worker}" "${worker}.real")
file(WRITE "${worker}" "import sys\nsys.exit('kbrl consumer test: the installed worker ran')\n")
execute_process(COMMAND ${eval_command} --work-dir "${WORK_DIR}/eval-work-stub" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(RENAME "${worker}.real" "${worker}")
string(JSON correct ERROR_VARIABLE json_error GET "${out}" correctness)
# The worker's words are in the log that the result's message names.
set(log "")
if(out MATCHES "see ([^ \"]+\\.log)")
  file(READ "${CMAKE_MATCH_1}" log)
endif()
string(FIND "${out}${err}${log}" "the installed worker ran" marker)
if(correct OR marker EQUAL -1)
  message(FATAL_ERROR "installed programs: with the installed worker replaced, kbrl-eval kernel did not "
                      "report it (exit ${rc}): it did not run ${worker}\n${out}${err}")
endif()
message(STATUS "installed kbrl-eval ran its installed worker")

# The Python module, where the build made one: imported from the prefix with nothing but
# PYTHONPATH, it must load (its run path) and pick the installed worker, found relative to the
# module itself (the interpreter is not an installed program of ours). The code is in lines, not
# ';'-separated: a ';' would split the argument into a CMake list.
if(PYTHON_INSTALL_DIR)
  set(site "${prefix}/${PYTHON_INSTALL_DIR}")
  step(${run} "PYTHONPATH=${site}" "${PYTHON}" -c
       "import kbrl, os\nev = kbrl.LocalEvaluator(device='cpu', work_dir='${WORK_DIR}/py-work')\nprint(kbrl.__file__)\nprint(os.path.realpath(ev.worker_script))")
  file(REAL_PATH "${worker}" real_worker)
  file(REAL_PATH "${site}" real_site)
  expect("${real_site}/kbrl." "the installed Python module's location")
  expect("${real_worker}" "the installed Python module's worker")
  message(STATUS "installed Python module: loads, and uses the installed worker")
endif()
# Passed: the prefix (a full install, hundreds of MB) and the build go; a failure keeps them.
file(REMOVE_RECURSE "${WORK_DIR}")
