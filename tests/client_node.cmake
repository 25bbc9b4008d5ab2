# The TypeScript client (client/node): npm ci, the ESM and CommonJS builds, and its node:test
# suite against the ratelimit-server built here, as one test.
if(NOT RATELIMIT_SANITIZE)
  add_test(NAME client_node_test COMMAND ${PROJECT_SOURCE_DIR}/client/node/run-tests.sh)
  set_tests_properties(client_node_test PROPERTIES
    ENVIRONMENT "RATELIMIT_SERVER=$<TARGET_FILE:ratelimit-server>"
    TIMEOUT 900)
endif()
