# tr_check_cases(CASES <case>... SOURCES <file>...): fail the configure step
# unless the cases registered with ctest are exactly the cmocka cases written
# in the sources (cmocka_unit_test*(NAME ...)). A case written but not
# registered never runs; one registered but not written fails at run time
# (tr_test_main), and is caught here already. Shared by every unit suite.
include_guard(GLOBAL)

function(tr_check_cases)
  cmake_parse_arguments(PARSE_ARGV 0 C "" "" "CASES;SOURCES")
  set(_written)
  foreach(_src ${C_SOURCES})
    if(NOT IS_ABSOLUTE ${_src})
      set(_src ${CMAKE_CURRENT_SOURCE_DIR}/${_src})
    endif()
    file(READ ${_src} _text)
    string(REGEX MATCHALL "cmocka_unit_test[a-z_]*\\([ \t\n]*[A-Za-z0-9_]+" _hits "${_text}")
    # A shorthand such as `#define T(name) cmocka_unit_test_setup_teardown(name, ...)`.
    string(REGEX MATCHALL "#define [A-Za-z_]+\\(name\\) cmocka_unit_test" _macros "${_text}")
    foreach(_m ${_macros})
      string(REGEX REPLACE "#define ([A-Za-z_]+)\\(.*" "\\1" _m "${_m}")
      string(REGEX MATCHALL "[^A-Za-z0-9_]${_m}\\([A-Za-z0-9_]+\\)" _more "${_text}")
      list(APPEND _hits ${_more})
    endforeach()
    foreach(_h ${_hits})
      string(REGEX REPLACE ".*\\([ \t\n]*([A-Za-z0-9_]+).*" "\\1" _name "${_h}")
      if(NOT _name STREQUAL "name")
        list(APPEND _written ${_name})
      endif()
    endforeach()
  endforeach()
  set(_missing ${_written})
  list(REMOVE_ITEM _missing ${C_CASES})
  set(_extra ${C_CASES})
  list(REMOVE_ITEM _extra ${_written})
  if(_missing OR _extra)
    message(FATAL_ERROR "${CMAKE_CURRENT_LIST_FILE}: cases written but not registered: [${_missing}]; "
                        "registered but not written: [${_extra}] (sources: ${C_SOURCES})")
  endif()
endfunction()
