# Shared server components, each tested on its own.
ratelimit_test(watched_config_test watched_config_test.cc LIBS ratelimit_server_config ratelimit_server_serving)
ratelimit_test(envoy_evaluator_test envoy_evaluator_test.cc LIBS ratelimit_server_envoy)
