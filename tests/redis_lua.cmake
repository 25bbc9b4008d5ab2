# The declarative store operation (every backend) and the Redis function library, proven against
# the C++ algebra on a real redis-server (redis-server is required: scripts/setup.sh installs it).

find_path(HIREDIS_INCLUDE_DIR hiredis/hiredis.h REQUIRED)
find_library(HIREDIS_LIBRARY hiredis REQUIRED)
add_library(ratelimit_redis_test_support STATIC support/redis_standalone.cc)
target_include_directories(ratelimit_redis_test_support PUBLIC ${PROJECT_SOURCE_DIR}
                                                               ${HIREDIS_INCLUDE_DIR})
target_link_libraries(ratelimit_redis_test_support
  PUBLIC ratelimit_storage_redis ratelimit_test_support ${HIREDIS_LIBRARY} absl::statusor absl::time absl::strings)
ratelimit_test(redis_lua_test redis_lua_test.cc LIBS ratelimit_storage_redis ratelimit_redis_test_support)
ratelimit_test(store_apply_contract_test store_apply_contract_test.cc
  LIBS RocksDB::rocksdb ratelimit_storage_redis ratelimit_redis_test_support)
ratelimit_test(redis_state_store_test redis_state_store_test.cc
  LIBS ratelimit_storage_redis ratelimit_redis_test_support)
