# The RocksDB store's group commit (shared WAL writes, a failed write, kill -9 of a server under
# many concurrent callers) and its cache of hot states (bound, eviction, a property test).
ratelimit_test(group_commit_test group_commit_test.cc LIBS ratelimit_client RocksDB::rocksdb)
add_dependencies(group_commit_test ratelimit-server)
ratelimit_test(state_cache_test state_cache_test.cc LIBS RocksDB::rocksdb)
# Coalescing of a group write: each key's last entry only.
ratelimit_test(write_coalesce_test write_coalesce_test.cc LIBS ratelimit_storage_rocksdb RocksDB::rocksdb)
# The group commit queue alone: completion order, each group's entries, a failed group.
ratelimit_test(group_commit_queue_test group_commit_queue_test.cc LIBS ratelimit_storage_rocksdb RocksDB::rocksdb)
