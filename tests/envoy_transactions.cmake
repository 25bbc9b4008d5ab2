# Envoy ShouldRateLimit: store transactions per request, and the policy on random plans.
ratelimit_test(envoy_transactions_test envoy_transactions_test.cc LIBS ratelimit_server)
