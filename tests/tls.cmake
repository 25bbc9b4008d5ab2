# TLS and mTLS (gRPC listener, client, CLI, OTLP exporter, metrics endpoint) with certificates
# made at test time by openssl; the systemd unit.
add_library(ratelimit_tls_test_support STATIC support/test_pki.cc)
target_link_libraries(ratelimit_tls_test_support PUBLIC ratelimit_test_support absl::strings)
ratelimit_test(tls_test tls_test.cc LIBS ratelimit_server ratelimit_client ratelimit_tls_test_support)
ratelimit_test(tls_process_test tls_process_test.cc LIBS ratelimit_tls_test_support)
add_dependencies(tls_process_test ratelimit-server ratelimit)
ratelimit_test(tls_observability_test tls_observability_test.cc
               LIBS ratelimit_server ratelimit_client ratelimit_tls_test_support PkgConfig::HTTPLIB)
# The systemd unit (systemd-analyze comes with the systemd package; scripts/setup.sh installs it).
ratelimit_test(systemd_unit_test systemd_unit_test.cc)
target_compile_definitions(systemd_unit_test PRIVATE RATELIMIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(systemd_unit_test ratelimit-server)
