# The store under a full disk, a corrupted WAL, file permissions and idle garbage, and the
# server's health and garbage collection on top of it.
ratelimit_test(store_hardening_test store_hardening_test.cc LIBS RocksDB::rocksdb)
ratelimit_test(store_health_server_test store_health_server_test.cc
               LIBS ratelimit_server ratelimit_client PkgConfig::HTTPLIB RocksDB::rocksdb)
add_dependencies(store_health_server_test ratelimit-server)
