# tr_integration_suite(NAME [ENV k=v ...]): one ctest per *.sh in the calling
# folder, named integration.NAME.<script>, label integration, with TROUPE_BIN
# pointing at the build tree (tests/integration/lib.sh reads it). Exit 77 is
# a skip (a test that cannot run here says why; never counted as passed).
# TROUPE_TEST_DEADLINE_S is lib.sh's watchdog: at that many seconds times the
# load's slowdown (1 to 4) it says what a hung test waited on and kills all of
# it; the TIMEOUT lies above the longest such deadline, for ctest kills only
# the test's process tree, and would do so without a word. Not registered,
# with a warning, where jq is missing (scripts/setup.sh installs it).
function(tr_integration_suite name)
  cmake_parse_arguments(S "" "" "ENV" ${ARGN})
  find_program(JQ jq)
  if(NOT JQ)
    message(WARNING "jq not found: integration.${name} tests are skipped (scripts/setup.sh installs it)")
    return()
  endif()
  file(GLOB _its RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*.sh)
  foreach(_it ${_its})
    get_filename_component(_script ${_it} NAME_WE)
    set(_test integration.${name}.${_script})
    add_test(NAME ${_test} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${_it})
    set_tests_properties(${_test} PROPERTIES LABELS integration SKIP_RETURN_CODE 77 TIMEOUT 700
      ENVIRONMENT "TROUPE_BIN=${PROJECT_BINARY_DIR};TROUPE_TEST_DEADLINE_S=160;${S_ENV}")
  endforeach()
endfunction()
