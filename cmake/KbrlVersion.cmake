# Writes kbrl/version.hpp (from libkbrl/version.hpp.in): the project version and `git describe`
# of the source tree. Run as a script at every build (cmake -P, see libkbrl/CMakeLists.txt), so the
# description follows commits and edits; configure_file leaves the header untouched when nothing
# changed, and only the files that include it recompile when something did.
# Input variables: SOURCE_DIR, INPUT, OUTPUT, GIT_EXECUTABLE (may be empty), PROJECT_VERSION,
# PROJECT_VERSION_MAJOR, PROJECT_VERSION_MINOR, PROJECT_VERSION_PATCH.
set(KBRL_GIT_DESCRIBE "")
if(GIT_EXECUTABLE AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" describe --tags --always --dirty
                  OUTPUT_VARIABLE _kbrl_describe RESULT_VARIABLE _kbrl_rc ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_kbrl_rc EQUAL 0)
    set(KBRL_GIT_DESCRIBE "${_kbrl_describe}")
  endif()
endif()
configure_file("${INPUT}" "${OUTPUT}" @ONLY)
