# The Python client (client/python): installed into a fresh virtual environment and tested with
# pytest against the real server. Not in the sanitizer build.
if(NOT RATELIMIT_SANITIZE)
  add_test(NAME client_python_test
           COMMAND ${PROJECT_SOURCE_DIR}/client/python/run-tests.sh)
  set_tests_properties(client_python_test PROPERTIES
    ENVIRONMENT "RATELIMIT_SERVER=$<TARGET_FILE:ratelimit-server>"
    TIMEOUT 300)
endif()
