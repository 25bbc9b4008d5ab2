# Core service tests (issue: the core service).
ratelimit_test(algebra_test algebra_test.cc)
ratelimit_test(state_store_test state_store_test.cc LIBS RocksDB::rocksdb)
ratelimit_test(limiter_test limiter_test.cc)
ratelimit_test(property_test property_test.cc)
ratelimit_test(concurrency_test concurrency_test.cc)
