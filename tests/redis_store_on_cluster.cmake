# The Redis store over the production client, on a standalone server and on a Redis Cluster: the
# store contract and the differential property test run on it (store_apply_contract_test,
# property_test), plus the Redis-only behaviour (redis_cluster_store_test) and the server on Redis
# (redis_server_process_test).
add_library(ratelimit_redis_store_test_support STATIC support/redis_test_store.cc)
target_link_libraries(ratelimit_redis_store_test_support
  PUBLIC ratelimit_storage_redis ratelimit_redis_test_support ratelimit_test_support)
target_link_libraries(store_apply_contract_test PRIVATE ratelimit_redis_store_test_support)
target_link_libraries(property_test PRIVATE ratelimit_redis_store_test_support)
ratelimit_test(redis_cluster_store_test redis_cluster_store_test.cc
  LIBS ratelimit_redis_store_test_support)
ratelimit_test(redis_server_process_test redis_server_process_test.cc
  LIBS ratelimit_redis_store_test_support ratelimit_client)
add_dependencies(redis_server_process_test ratelimit-server)
