# Settle, receipts and idempotent retries (request_id).
ratelimit_test(settle_algebra_test settle_algebra_test.cc)
ratelimit_test(settle_store_test settle_store_test.cc LIBS RocksDB::rocksdb)
ratelimit_test(settle_service_test settle_service_test.cc
               LIBS ratelimit_server ratelimit_client PkgConfig::HTTPLIB)
ratelimit_test(settle_process_test settle_process_test.cc LIBS ratelimit_client)
add_dependencies(settle_process_test ratelimit-server)
ratelimit_test(receipt_test receipt_test.cc LIBS ratelimit_server OpenSSL::Crypto)
ratelimit_test(hmac_sha256_test hmac_sha256_test.cc LIBS ratelimit_server OpenSSL::Crypto)
