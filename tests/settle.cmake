# Settle, receipts and idempotent retries (request_id).
ratelimit_test(settle_algebra_test settle_algebra_test.cc)
ratelimit_test(settle_store_test settle_store_test.cc LIBS RocksDB::rocksdb)
