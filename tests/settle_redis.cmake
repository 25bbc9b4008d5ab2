# Settle, receipts and request_id on the Redis store: the record/settle store tests run on Redis
# (settle_store_test), the cluster's slot rules for records, and two servers sharing one cluster.
target_link_libraries(settle_store_test PRIVATE ratelimit_redis_store_test_support)
ratelimit_test(settle_redis_test settle_redis_test.cc
  LIBS ratelimit_redis_store_test_support ratelimit_client)
add_dependencies(settle_redis_test ratelimit-server)
# Settle and request_id across the slots of a Redis Cluster (RedisStateStore::ApplyRecorded).
ratelimit_test(settle_cross_slot_test settle_cross_slot_test.cc
  LIBS ratelimit_redis_store_test_support)
