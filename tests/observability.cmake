# Observability tests (traces, metrics, health, logs).
ratelimit_test(observability_test observability_test.cc LIBS ratelimit_observability)
ratelimit_test(telemetry_server_test telemetry_server_test.cc
               LIBS ratelimit_server ratelimit_client PkgConfig::HTTPLIB)
add_dependencies(telemetry_server_test ratelimit-server)

# The deploy/ examples must stay valid for the Prometheus they target.
find_program(PROMTOOL promtool REQUIRED)
add_test(NAME deploy.PrometheusConfigIsValid
         COMMAND ${PROMTOOL} check config ${PROJECT_SOURCE_DIR}/deploy/prometheus/prometheus.yml)
add_test(NAME deploy.PrometheusAlertRulesAreValid
         COMMAND ${PROMTOOL} check rules
                 ${PROJECT_SOURCE_DIR}/deploy/prometheus/ratelimit-alerts.yml)
