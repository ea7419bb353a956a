# tr_fuzz_target(NAME SOURCES <file>... [LIBS <lib>...] [INCLUDES <dir>...]
#                [DICT <file>] [MAX_LEN <n>] [DEFINES <d>...])
# builds fuzz_NAME with libFuzzer, ASan and UBSan (the code under test is
# listed in SOURCES so it carries coverage instrumentation) and registers
# fuzz.NAME (label fuzz): 20 s over the committed seeds in corpus/ next to the
# caller, new inputs kept in the build tree. Callers return early unless
# TROUPE_FUZZ is on and the compiler is clang (tr_fuzz_enabled).
include_guard(GLOBAL)

macro(tr_fuzz_enabled out)
  set(${out} OFF)
  if(TROUPE_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(${out} ON)
  endif()
endmacro()

function(tr_fuzz_target name)
  cmake_parse_arguments(PARSE_ARGV 1 F "" "DICT;MAX_LEN" "SOURCES;LIBS;INCLUDES;DEFINES")
  set(_flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  set(_run ${CMAKE_CURRENT_BINARY_DIR}/${name}-corpus)
  set(_artifacts ${CMAKE_CURRENT_BINARY_DIR}/${name}-artifacts)
  file(MAKE_DIRECTORY ${_run} ${_artifacts})
  add_executable(fuzz_${name} ${F_SOURCES})
  target_include_directories(fuzz_${name} PRIVATE ${F_INCLUDES})
  target_compile_definitions(fuzz_${name} PRIVATE ${F_DEFINES})
  target_compile_options(fuzz_${name} PRIVATE ${_flags})
  target_link_options(fuzz_${name} PRIVATE ${_flags})
  target_link_libraries(fuzz_${name} PRIVATE ${F_LIBS})
  set(_dict)
  if(F_DICT)
    set(_dict -dict=${F_DICT})
  endif()
  if(NOT F_MAX_LEN)
    set(F_MAX_LEN 4096)
  endif()
  add_test(NAME fuzz.${name}
    COMMAND fuzz_${name} -max_total_time=20 -timeout=10 -rss_limit_mb=2048 -max_len=${F_MAX_LEN} ${_dict}
            -artifact_prefix=${_artifacts}/ -print_final_stats=1 ${_run} ${CMAKE_CURRENT_SOURCE_DIR}/corpus)
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77 TIMEOUT 120)
endfunction()
