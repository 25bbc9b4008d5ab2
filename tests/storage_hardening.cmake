# The store under a full disk, a corrupted WAL, file permissions and idle garbage; the server's
# health and garbage collection on top of it (in-process); the files of a real server process.
ratelimit_test(store_hardening_test store_hardening_test.cc LIBS RocksDB::rocksdb)
ratelimit_test(rocksdb_info_log_test rocksdb_info_log_test.cc LIBS RocksDB::rocksdb)
ratelimit_test(store_health_server_test store_health_server_test.cc
               LIBS ratelimit_server ratelimit_client PkgConfig::HTTPLIB RocksDB::rocksdb)
ratelimit_test(store_process_test store_process_test.cc LIBS ratelimit_client)
add_dependencies(store_process_test ratelimit-server)
# The WAL written through a shared memory mapping: appends, crash images, a full disk.
ratelimit_test(mapped_wal_test mapped_wal_test.cc LIBS RocksDB::rocksdb)
ratelimit_test(rocksdb_batch_test rocksdb_batch_test.cc LIBS RocksDB::rocksdb)
