# The Redis Cluster client, against real redis-server processes (standalone and a 3×1 cluster).
target_sources(ratelimit_test_support PRIVATE support/redis_process.cc)
ratelimit_test(redis_slot_test redis_slot_test.cc LIBS ratelimit_storage_redis_cluster)
ratelimit_test(redis_command_format_test redis_command_format_test.cc LIBS ratelimit_storage_redis_cluster)
ratelimit_test(redis_cluster_client_test redis_cluster_client_test.cc
  LIBS ratelimit_storage_redis_cluster absl::cleanup)
