# Envoy RLS v3 API tests (issue: Envoy integration).
ratelimit_test(envoy_config_test envoy_config_test.cc LIBS ratelimit_server)
target_compile_definitions(envoy_config_test PRIVATE RATELIMIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
ratelimit_test(envoy_registry_test envoy_registry_test.cc LIBS ratelimit_server)
ratelimit_test(envoy_convert_test envoy_convert_test.cc LIBS ratelimit_server)
ratelimit_test(envoy_service_test envoy_service_test.cc LIBS ratelimit_server)
ratelimit_test(envoy_server_test envoy_server_test.cc LIBS ratelimit_server ratelimit_client)
ratelimit_test(envoy_extensions_test envoy_extensions_test.cc LIBS ratelimit_server)
