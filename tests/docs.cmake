# The docs against the code: the flag reference (docs/configuration.md) is each program's --help
# in both directions and every other flag the docs name exists, every relative link between the
# Markdown files resolves, one licence everywhere, and every install command a README shows runs
# as written in a fresh copy of the repository. Script tests: tests/docs/*.py.
find_program(DOCS_PYTHON3 python3 HINTS /usr/bin REQUIRED)
set(DOCS_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/docs)

set(DOCS_OTHER_BINARIES)
if(RATELIMIT_BUILD_BENCH)
  foreach(tool ratelimit_loadgen ratelimit_disk_usage ratelimit_null_server ratelimit_wake_probe
               ratelimit_store_bench ratelimit_scale_bench)
    list(APPEND DOCS_OTHER_BINARIES $<TARGET_FILE:${tool}>)
  endforeach()
endif()
add_test(NAME docs.FlagsInTheDocsAreTheProgramsFlags
         COMMAND ${DOCS_PYTHON3} ${DOCS_TESTS}/flags_doc_test.py ${PROJECT_SOURCE_DIR}
                 $<TARGET_FILE:ratelimit-server> $<TARGET_FILE:ratelimit> ${DOCS_OTHER_BINARIES})

add_test(NAME docs.RelativeLinksResolve
         COMMAND ${DOCS_PYTHON3} ${DOCS_TESTS}/links_test.py ${PROJECT_SOURCE_DIR})

add_test(NAME docs.OneLicenceEverywhere
         COMMAND ${DOCS_PYTHON3} ${DOCS_TESTS}/licence_test.py ${PROJECT_SOURCE_DIR})

# One test per README, so that they run side by side. Release builds only (they build nothing
# of ours that a sanitizer would check).
if(NOT RATELIMIT_SANITIZE)
  foreach(readme client/python/README.md client/node/README.md client/go/README.md)
    string(REPLACE "/" "_" test_name ${readme})
    add_test(NAME docs.InstallCommandsRunAsWritten.${test_name}
             COMMAND ${DOCS_PYTHON3} ${DOCS_TESTS}/readme_commands_test.py ${PROJECT_SOURCE_DIR}
                     ${readme})
    set_tests_properties(docs.InstallCommandsRunAsWritten.${test_name} PROPERTIES TIMEOUT 900)
  endforeach()
endif()
