# tr_unit_suite(<module> <target> <source> LIBS <lib>... CASES <case>...)
#
# Builds one cmocka executable per module and registers each case as its own
# ctest test, unit.<module>.<case>, label unit, 60 s timeout. The executable
# runs the case named by its first argument (tests/unit/test_helpers.h).
# Shared by tests/unit/{common,server,node}.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/../cases.cmake)

function(tr_unit_suite module target source)
  cmake_parse_arguments(PARSE_ARGV 3 S "" "" "LIBS;CASES")
  tr_check_cases(CASES ${S_CASES} SOURCES ${source})
  add_executable(${target} ${source})
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/..)
  target_link_libraries(${target} PRIVATE ${S_LIBS} PkgConfig::CMOCKA)
  foreach(_case ${S_CASES})
    add_test(NAME unit.${module}.${_case} COMMAND ${target} ${_case})
    set_tests_properties(unit.${module}.${_case} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 60)
  endforeach()
endfunction()
