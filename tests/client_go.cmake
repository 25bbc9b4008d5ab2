# The Go client (client/go): its whole `go test` run against the real server, built offline from
# Debian's Go packages (client/go/run-tests.sh). Release builds only: a sanitizer build adds
# nothing to a Go client's test.
if(NOT RATELIMIT_SANITIZE)
  find_program(RATELIMIT_GO go REQUIRED)
  add_test(NAME client_go_test
           COMMAND ${PROJECT_SOURCE_DIR}/client/go/run-tests.sh)
  set_tests_properties(client_go_test PROPERTIES
    ENVIRONMENT "RATELIMIT_SERVER=$<TARGET_FILE:ratelimit-server>"
    TIMEOUT 600)  # a cold Go build cache compiles gRPC first (about 2 min here)
endif()
