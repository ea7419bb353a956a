# tr_integration_suite(NAME [ENV k=v ...]): one ctest per *.sh in the calling
# folder, named integration.NAME.<script>, label integration, with TROUPE_BIN
# pointing at the build tree (tests/integration/lib.sh reads it) and
# TROUPE_TEST_DEADLINE_S 20 s under the TIMEOUT (lib.sh's watchdog then says
# what a hung test waited on before ctest would kill it without a word). Skipped, with
# a warning, where jq is missing (scripts/setup.sh installs it).
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
    set_tests_properties(${_test} PROPERTIES LABELS integration TIMEOUT 180
      ENVIRONMENT "TROUPE_BIN=${PROJECT_BINARY_DIR};TROUPE_TEST_DEADLINE_S=160;${S_ENV}")
  endforeach()
endfunction()
