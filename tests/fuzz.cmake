# libFuzzer targets (tests/fuzz), built when RATELIMIT_FUZZ is on (clang; on by default with
# RATELIMIT_SANITIZE). Each gets two CTest tests, labelled "fuzz":
#   fuzz.<target>.corpus  replays its checked-in corpus tests/fuzz/corpus/<target> (-runs=0), so
#                         every reproducer there runs;
#   fuzz.<target>.fuzz    fuzzes from that corpus for a fixed number of inputs (RUNS, about 30 s
#                         on a 2-core machine) with a fixed seed, from the checked-in corpus
#                         alone: CI repeats the run made before the commit, not a run as long as
#                         the machine's speed allows (hash-table order can still steer the
#                         mutations a little). RATELIMIT_FUZZ_SECONDS caps the time (a
#                         slow machine stops early); 0 skips fuzzing (corpus replay only). New
#                         inputs go to <build>/fuzz/<target>/corpus, crashes to
#                         <build>/fuzz/<target>/. Fuzz for longer by hand with a random seed:
#                         bin/<target>_fuzz -max_total_time=600 <build>/fuzz/<target>/corpus
#                         tests/fuzz/corpus/<target>
if(NOT RATELIMIT_FUZZ)
  return()
endif()

set(RATELIMIT_FUZZ_SECONDS 120 CACHE STRING "Most seconds each fuzz target runs in its CTest test")

# ratelimit_fuzz_target(<name> RUNS <inputs> LIBS <libs...>): tests/fuzz/<name>_fuzz.cc, corpus
# tests/fuzz/corpus/<name>.
function(ratelimit_fuzz_target name)
  cmake_parse_arguments(F "" "RUNS" "LIBS" ${ARGN})
  set(target ${name}_fuzz)
  add_executable(${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}_fuzz.cc)
  target_compile_options(${target} PRIVATE -fsanitize=fuzzer)
  target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${target} PRIVATE ${F_LIBS})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})

  set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  set(work ${PROJECT_BINARY_DIR}/fuzz/${name})
  file(MAKE_DIRECTORY ${work})
  add_test(NAME fuzz.${name}.corpus COMMAND ${target} -runs=0 ${corpus})
  # Each run starts from the checked-in corpus alone, as it does on a clean clone.
  add_test(NAME fuzz.${name}.fuzz
           COMMAND sh -c "rm -rf \"$1/corpus\" && mkdir -p \"$1/corpus\" && shift && exec \"$@\""
                   fuzz ${work} $<TARGET_FILE:${target}> -seed=1 -runs=${F_RUNS}
                   -max_total_time=${RATELIMIT_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                   -print_final_stats=1 -artifact_prefix=${work}/ ${work}/corpus ${corpus})
  set_tests_properties(fuzz.${name}.corpus fuzz.${name}.fuzz PROPERTIES LABELS fuzz)
  set_tests_properties(fuzz.${name}.fuzz PROPERTIES DEPENDS fuzz.${name}.corpus)
endfunction()

ratelimit_fuzz_target(limits_yaml RUNS 120000 LIBS ratelimit_server)
ratelimit_fuzz_target(envoy_yaml RUNS 75000 LIBS ratelimit_server)
ratelimit_fuzz_target(decide RUNS 70000 LIBS ratelimit_server ratelimit_test_support)
ratelimit_fuzz_target(envoy_plan RUNS 170000 LIBS ratelimit_server)
ratelimit_fuzz_target(trace_context RUNS 2500000 LIBS ratelimit_server_observability)
