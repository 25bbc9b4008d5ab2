# libFuzzer targets (tests/fuzz), built when RATELIMIT_FUZZ is on (clang; on by default with
# RATELIMIT_SANITIZE). Each gets two CTest tests, labelled "fuzz":
#   fuzz.<target>.corpus  replays its checked-in corpus tests/fuzz/corpus/<target> (-runs=0), so
#                         every reproducer there runs;
#   fuzz.<target>.fuzz    fuzzes for RATELIMIT_FUZZ_SECONDS starting from that corpus; new inputs
#                         go to <build>/fuzz/<target>/corpus, crashes to <build>/fuzz/<target>/.
if(NOT RATELIMIT_FUZZ)
  return()
endif()

set(RATELIMIT_FUZZ_SECONDS 30 CACHE STRING "Seconds each fuzz target runs in its CTest test")

# ratelimit_fuzz_target(<name> LIBS <libs...>): tests/fuzz/<name>_fuzz.cc, corpus
# tests/fuzz/corpus/<name>.
function(ratelimit_fuzz_target name)
  cmake_parse_arguments(F "" "" "LIBS" ${ARGN})
  set(target ${name}_fuzz)
  add_executable(${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}_fuzz.cc)
  target_compile_options(${target} PRIVATE -fsanitize=fuzzer)
  target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${target} PRIVATE ${F_LIBS})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})

  set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  set(work ${PROJECT_BINARY_DIR}/fuzz/${name})
  file(MAKE_DIRECTORY ${work}/corpus)
  add_test(NAME fuzz.${name}.corpus COMMAND ${target} -runs=0 ${corpus})
  add_test(NAME fuzz.${name}.fuzz
           COMMAND ${target} -seed=1 -max_total_time=${RATELIMIT_FUZZ_SECONDS} -timeout=10
                   -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=${work}/
                   ${work}/corpus ${corpus})
  set_tests_properties(fuzz.${name}.corpus fuzz.${name}.fuzz PROPERTIES LABELS fuzz)
  set_tests_properties(fuzz.${name}.fuzz PROPERTIES DEPENDS fuzz.${name}.corpus)
endfunction()

ratelimit_fuzz_target(limits_yaml LIBS ratelimit_server)
ratelimit_fuzz_target(envoy_yaml LIBS ratelimit_server)
ratelimit_fuzz_target(decide LIBS ratelimit_server ratelimit_test_support)
ratelimit_fuzz_target(envoy_plan LIBS ratelimit_server)
ratelimit_fuzz_target(trace_context LIBS ratelimit_observability)
