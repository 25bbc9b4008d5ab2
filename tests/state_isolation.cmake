# State namespaces per source of limits, the v1 -> v2 store upgrade, and the algebra's
# arithmetic at the edges of its ranges.
ratelimit_test(algebra_magnitude_test algebra_magnitude_test.cc)
ratelimit_test(state_isolation_test state_isolation_test.cc LIBS ratelimit_server ratelimit_client)
ratelimit_test(state_upgrade_test state_upgrade_test.cc LIBS RocksDB::rocksdb)
add_dependencies(state_isolation_test ratelimit)
