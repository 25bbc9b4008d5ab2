# Observability tests (traces, metrics, health, logs).
ratelimit_test(observability_test observability_test.cc LIBS ratelimit_server_observability)
ratelimit_test(telemetry_test telemetry_test.cc LIBS ratelimit_server_observability)
ratelimit_test(health_test health_test.cc LIBS ratelimit_server_observability)
ratelimit_test(repeated_log_test repeated_log_test.cc LIBS ratelimit_server_observability)
# The same, seen from outside an in-process server, and from outside a real server process.
ratelimit_test(server_observability_test server_observability_test.cc
               LIBS ratelimit_server ratelimit_client PkgConfig::HTTPLIB)
ratelimit_test(observability_process_test observability_process_test.cc LIBS ratelimit_client)
add_dependencies(observability_process_test ratelimit-server)

# The deploy/ examples must stay valid for the Prometheus they target.
find_program(PROMTOOL promtool REQUIRED)
add_test(NAME deploy.PrometheusConfigIsValid
         COMMAND ${PROMTOOL} check config ${PROJECT_SOURCE_DIR}/deploy/prometheus/prometheus.yml)
add_test(NAME deploy.PrometheusAlertRulesAreValid
         COMMAND ${PROMTOOL} check rules
                 ${PROJECT_SOURCE_DIR}/deploy/prometheus/ratelimit-alerts.yml)
ratelimit_test(protowire_test protowire_test.cc LIBS ratelimit_server_observability protobuf::libprotobuf)
