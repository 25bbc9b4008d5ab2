# The Redis store during a live slot migration (ASK, MOVED) under load, and its client metrics.
ratelimit_test(redis_migration_test redis_migration_test.cc
  LIBS ratelimit_redis_store_test_support)
