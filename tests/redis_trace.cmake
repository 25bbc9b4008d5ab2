# Traces of the Redis store: one CLIENT span per Redis round trip, under the store span.
ratelimit_test(redis_trace_test redis_trace_test.cc
  LIBS ratelimit_server ratelimit_client ratelimit_redis_store_test_support)
