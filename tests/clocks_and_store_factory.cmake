# Injected clocks: telemetry latencies and span times, the Envoy evaluator's time.
ratelimit_test(telemetry_clock_test telemetry_clock_test.cc LIBS ratelimit_server)
ratelimit_test(state_store_factory_test state_store_factory_test.cc)
